//! `rill_named_subscription`: a durable (named) subscription of the data
//! directory and the process holding it, handed to a callback by the
//! broker's `rill_named_subscription_list`.

use std::ffi::{c_char, c_void};

use crate::broker::rill_broker;
use crate::error::{boundary, rill_status};
use crate::util::{callback, reference};

/// A durable (named) subscription and the process holding its name, as
/// `rill_named_subscription_list` hands it to its callback (borrowed for
/// that call only, `name` included; later versions may append fields).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_named_subscription {
    /// Its name.
    pub name: *const c_char,
    /// True while a live process's subscription holds the name (this
    /// process's included); false once its holder closed it or died, when
    /// its positions wait for the next subscriber of the name.
    pub held: bool,
    /// The pid of the holder's process when `held`; 0 when not held, and
    /// also when the holder runs in a PID namespace this process cannot see
    /// (the kernel shows such a holder as pid 0), which is why `held` is a
    /// field of its own.
    pub holder_pid: u32,
}

/// What `rill_named_subscription_list` calls with each durable name
/// (borrowed for the call, `name` included).
pub type rill_named_subscription_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, named: *const rill_named_subscription)>;

/// Calls `each(user_data, named)` for every durable (named) subscription,
/// sorted by name, with the process holding it. With
/// `RILL_SHARING_PROCESSES`: every name any process of the data directory
/// has taken, held now or not, read without taking any lock (from the
/// kernel's list of locks, Linux only: elsewhere no name reads as held), so
/// asking never makes a subscriber of the name fail. Otherwise this
/// broker's live ones, each held by this process. A snapshot, taken before
/// the first call; the callback may call any rill function.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_named_subscription_list(
    b: *mut rill_broker,
    each: rill_named_subscription_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = callback(each, "each")?;
        for n in b.broker.named_subscriptions()? {
            let name = crate::text::c_string(&n.name);
            let c = rill_named_subscription {
                name: name.as_ptr(),
                held: n.holder_pid.is_some(),
                holder_pid: n.holder_pid.unwrap_or(0),
            };
            // SAFETY: the caller's callback, safe to call with `user_data`
            // by its promise; `name` outlives the call.
            unsafe { each(user_data, &c) };
        }
        Ok(())
    })
}
