//! `rill_directory_consumer`: a live pull consumer of the data directory,
//! in any process, with the pid of its process and its counters, handed to
//! a callback by the broker's `rill_directory_consumer_list`.

use std::ffi::{c_char, c_void};

use crate::broker::rill_broker;
use crate::error::{boundary, rill_status};
use crate::util::{callback, reference};

/// A live pull consumer (a member of a consumer group) of the data
/// directory and the process it lives in, as `rill_directory_consumer_list`
/// hands it to its callback (borrowed for that call only, its strings
/// included; later versions may append fields).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_directory_consumer {
    /// The pid of the process whose broker has it (0 if that process runs
    /// in a PID namespace this process cannot see).
    pub pid: u32,
    /// True if it is this broker's.
    pub this_broker: bool,
    /// Its id, unique in its process: the `rill_group_member.id` of the
    /// member it is.
    pub id: u64,
    /// Its consumer group.
    pub group: *const c_char,
    /// The topic it reads.
    pub topic: *const c_char,
    /// Messages its polls returned.
    pub delivered: u64,
    /// Messages retention trimmed before it polled them.
    pub missed: u64,
    /// What the partitions it owned held past its position in them, at the
    /// end of its last poll (not the group's lag from its commits, which
    /// `rill_group_get_stats` gives).
    pub lag: u64,
}

/// What `rill_directory_consumer_list` calls with each consumer (borrowed
/// for the call, its strings included).
pub type rill_directory_consumer_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, consumer: *const rill_directory_consumer)>;

/// Calls `each(user_data, consumer)` for every live pull consumer of the
/// data directory, sorted by (pid, id). With `RILL_SHARING_PROCESSES`:
/// every process's (this broker's with the counters their last poll left,
/// the others' as their brokers published them at the end of each poll); a
/// process that died is left out at once, and nothing another process
/// waits on is locked to read them (Linux only for other processes:
/// elsewhere, this broker's). Otherwise this broker's. A snapshot, taken
/// before the first call; the callback may call any rill function.
///
/// # Safety
///
/// `b` is a live broker; `each` a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_directory_consumer_list(
    b: *mut rill_broker,
    each: rill_directory_consumer_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promise, checked for NULL.
        let b = unsafe { reference(b, "broker") }?;
        let each = callback(each, "each")?;
        for c in b.broker.directory_consumers()? {
            let group = crate::text::c_string(&c.group);
            let topic = crate::text::c_string(&c.topic);
            let out = rill_directory_consumer {
                pid: c.pid,
                this_broker: c.this_broker,
                id: c.id,
                group: group.as_ptr(),
                topic: topic.as_ptr(),
                delivered: c.delivered,
                missed: c.missed,
                lag: c.lag,
            };
            // SAFETY: the caller's callback, safe to call with `user_data`
            // by its promise; the strings outlive the call.
            unsafe { each(user_data, &out) };
        }
        Ok(())
    })
}
