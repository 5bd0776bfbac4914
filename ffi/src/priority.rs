//! Priorities of push subscriptions in the worker pool, as C gives them
//! (`rill_subscription_options.priority`, `rill_topic_options.priority`).

use crate::error::FfiError;

/// `priority` not set: the topic's, else `RILL_PRIORITY_DEFAULT`.
pub const RILL_PRIORITY_UNSET: i32 = -1;
/// The lowest priority.
pub const RILL_PRIORITY_MIN: i32 = 0;
/// The highest priority.
pub const RILL_PRIORITY_MAX: i32 = 7;
/// The priority of a subscription that sets none, on a topic that sets none.
pub const RILL_PRIORITY_DEFAULT: i32 = 4;
/// The aging bound: a ready subscription waits at most this many turns of
/// other subscriptions more than a plain first-come-first-served queue
/// would make it wait.
pub const RILL_PRIORITY_AGING_TAKES: u32 = 32;

// The header's figures are literals (cbindgen evaluates no paths): the
// build fails if they leave the library's.
const _: () = assert!(
    RILL_PRIORITY_MAX == rill::MAX_PRIORITY as i32
        && RILL_PRIORITY_DEFAULT == rill::DEFAULT_PRIORITY as i32
        && RILL_PRIORITY_AGING_TAKES as u64 == rill::PRIORITY_AGING_TAKES
);

/// A `priority` field from C: `RILL_PRIORITY_UNSET` is `None`; `what` names
/// the field for the error.
pub(crate) fn priority_from_c(p: i32, what: &str) -> Result<Option<u8>, FfiError> {
    match p {
        RILL_PRIORITY_UNSET => Ok(None),
        RILL_PRIORITY_MIN..=RILL_PRIORITY_MAX => Ok(Some(p as u8)),
        _ => Err(FfiError::invalid(format!(
            "{what} must be {RILL_PRIORITY_MIN} to {RILL_PRIORITY_MAX} (higher runs first), or \
             RILL_PRIORITY_UNSET ({RILL_PRIORITY_UNSET}), not {p}"
        ))),
    }
}
