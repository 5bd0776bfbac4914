//! `rill_directory_subscription`: a live push subscription of the data
//! directory, in any process, with the pid of its process and its
//! counters, handed to a callback by the broker's
//! `rill_directory_subscription_list`.

use std::ffi::c_void;

use crate::broker::rill_broker;
use crate::error::{boundary, rill_status};
use crate::subscription_stats::rill_subscription_stats;
use crate::util::{callback, reference};

/// A live push subscription of the data directory and the process it lives
/// in, as `rill_directory_subscription_list` hands it to its callback
/// (borrowed for that call only, `stats` and its strings included; later
/// versions may append fields).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_directory_subscription {
    /// The pid of the process whose broker has it (0 if that process runs
    /// in a PID namespace this process cannot see).
    pub pid: u32,
    /// True if it is this broker's.
    pub this_broker: bool,
    /// A durable (named, not shared) subscription.
    pub durable: bool,
    /// A member of a shared subscription.
    pub shared: bool,
    /// Its statistics, `name` and `pattern` set. Another broker's are what
    /// that broker published at the end of the subscription's last drain
    /// round: counters, state and `lag` as that round left them;
    /// `partitions` is 0, `last_error` NULL and the queue-wait figures 0
    /// (they stay with its own process's `rill_subscription_get_stats`).
    pub stats: *const rill_subscription_stats,
}

/// What `rill_directory_subscription_list` calls with each subscription
/// (borrowed for the call, `stats` and its strings included).
pub type rill_directory_subscription_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, sub: *const rill_directory_subscription)>;

/// Calls `each(user_data, sub)` for every live push subscription of the
/// data directory, sorted by (pid, name). With `RILL_SHARING_PROCESSES`:
/// every process's (this broker's as `rill_subscription_list` gives them,
/// the others' from what their brokers published: see
/// `rill_directory_subscription.stats`); a process that died is left out
/// at once, and nothing another process waits on is locked to read them
/// (Linux only for other processes: elsewhere, this broker's). Otherwise
/// this broker's, as `rill_subscription_list`. A snapshot, taken before the
/// first call; the callback may call any rill function.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_directory_subscription_list(
    b: *mut rill_broker,
    each: rill_directory_subscription_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = callback(each, "each")?;
        for sub in b.broker.directory_subscriptions()? {
            let st = &sub.stats;
            let name = crate::text::c_string(&st.name);
            let pattern = crate::text::c_string(&st.pattern);
            let last_error = st.last_error.as_deref().map(crate::text::c_string);
            let mut stats = rill_subscription_stats::counters(st);
            stats.name = name.as_ptr();
            stats.pattern = pattern.as_ptr();
            stats.last_error = last_error.as_ref().map_or(std::ptr::null(), |e| e.as_ptr());
            let c = rill_directory_subscription {
                pid: sub.pid,
                this_broker: sub.this_broker,
                durable: sub.durable,
                shared: sub.shared,
                stats: &stats,
            };
            // SAFETY: the caller's callback, safe to call with `user_data`
            // by its promise; `stats` and its strings outlive the call.
            unsafe { each(user_data, &c) };
        }
        Ok(())
    })
}
