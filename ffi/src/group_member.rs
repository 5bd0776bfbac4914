//! `rill_group_member`: a live member of a consumer group on one topic,
//! with its process and the partitions it owns, handed to a callback by
//! `rill_group_member_list`.

use std::ffi::{c_char, c_void};

use crate::broker::rill_broker;
use crate::error::{boundary, rill_status};
use crate::util::{callback, cstr, reference};

/// A live member of a consumer group on one topic, as
/// `rill_group_member_list` hands it to its callback (borrowed for that
/// call only, `partitions` included; later versions may append fields).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_group_member {
    /// The pid of the member's process.
    pub pid: u32,
    /// The member's id, unique in its process.
    pub id: u64,
    /// The partitions it owns, ascending: `partition_count` of them (NULL
    /// when it owns none). Across processes, ownership is known per
    /// process: when one process has several members of the group, each
    /// lists every partition their process owns.
    pub partitions: *const u32,
    /// How many `partitions` holds.
    pub partition_count: usize,
}

/// What `rill_group_member_list` calls with each live member (borrowed for
/// the call, `partitions` included).
pub type rill_group_member_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, member: *const rill_group_member)>;

/// Calls `each(user_data, member)` for every live member of consumer group
/// `group` on `topic`, sorted by (pid, id), each with its process's pid and
/// the partitions it owns; no call if none is live. `RILL_ERR_NO_SUCH_TOPIC`
/// if there is no such topic. With `RILL_SHARING_PROCESSES`: the members of
/// every process of the data directory, read without taking any lock (from
/// the group's member files and the kernel's list of locks, Linux only:
/// elsewhere no member reads as live), so asking never makes a member
/// fail; a member whose process died is gone at once. Otherwise this
/// broker's consumers of the group. A snapshot, taken before the first
/// call; the callback may call any rill function.
///
/// # Safety
///
/// `b` is a live broker; `group` and `topic` NUL-terminated strings; `each`
/// a function safe to call with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_group_member_list(
    b: *mut rill_broker,
    group: *const c_char,
    topic: *const c_char,
    each: rill_group_member_callback,
    user_data: *mut c_void,
) -> rill_status {
    boundary(|| {
        // SAFETY: the caller's promises, checked for NULL inside.
        let (b, group, topic) = unsafe { (reference(b, "broker")?, cstr(group, "group")?, cstr(topic, "topic")?) };
        let each = callback(each, "each")?;
        for m in b.broker.group_members(group, topic)? {
            let c = rill_group_member {
                pid: m.pid,
                id: m.id,
                partitions: if m.partitions.is_empty() { std::ptr::null() } else { m.partitions.as_ptr() },
                partition_count: m.partitions.len(),
            };
            // SAFETY: the caller's callback, safe to call with `user_data`
            // by its promise; `m.partitions` outlives the call.
            unsafe { each(user_data, &c) };
        }
        Ok(())
    })
}
