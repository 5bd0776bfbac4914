//! The C ABI of rill: `librill.so` / `librill.a`, described by the generated
//! `include/rill.h`.
//!
//! Conventions (they hold for every function):
//! * Names are `rill_<type>_<verb>`: `<type>` is the handle or struct the
//!   call acts on (`rill_consumer_poll`, `rill_topic_create`) or, for
//!   `rill_group_*`, the consumer group, which has no C type of its own. The
//!   exceptions are contracts and stay as they are: the calls named for
//!   their verb alone, which act on a broker, `rill_publish`,
//!   `rill_try_publish` and `rill_publish_batch` (publish by topic name),
//!   `rill_subscribe` and `rill_subscribe_batch` (make a
//!   `rill_subscription`), all five from the first ABI, and the later
//!   `rill_publish_outcome`, `rill_try_publish_outcome` and
//!   `rill_publish_batch_outcome`, named after them; `rill_durable_delete`
//!   (forgets a durable subscription's saved position, which no handle
//!   stands for); the process-wide `rill_version`, `rill_last_error`,
//!   `rill_set_log_level` and `rill_set_log_callback`; and `rill_ack_reason`
//!   (of the message being handled). A `_v1` suffix marks a call that
//!   takes a struct's size, which rill.h's macro of the unsuffixed name
//!   passes (an unsuffixed symbol, where one exists, is the 0.1 call:
//!   legacy.rs). Handles are opaque, created by `_new` (or
//!   `rill_subscribe`) and released by `_free`; `_free(NULL)` is a no-op.
//! * Fallible functions return a `rill_status`; on error the calling thread's
//!   `rill_last_error` says what went wrong. Out-parameters are written only
//!   on success.
//! * NULL where a pointer is required is `RILL_ERR_NULL_ARGUMENT`; strings must
//!   be NUL-terminated UTF-8 (else `RILL_ERR_INVALID_ARGUMENT`); enum-like
//!   values coming from C are plain integers and are checked.
//! * Every function body runs inside a panic boundary: a panic in rill
//!   becomes `RILL_ERR_PANIC` and never unwinds into C.
//!
//! Files: one per C type, named after it, holding the type, the calls named
//! after it, and what only it takes: its options and stats structs, its
//! enum-like values and callback types (broker.rs, publisher.rs,
//! subscription.rs, consumer.rs, message.rs; nats.rs for
//! `rill_nats_bridge`, built with the `nats` feature). A struct gets a file
//! of its own when it is not one handle's, or when its handle's file would
//! otherwise pass ~700 lines:
//! * topic.rs: `rill_topic_options` and `rill_topic_stats` with the
//!   `rill_topic_*` calls (a topic is a name, not a handle);
//! * publish.rs: `rill_record`, `rill_attribute` and `rill_position`, which
//!   every publish takes or gives back, with the broker's publish calls by
//!   topic name;
//! * subscription_options.rs: `rill_subscription_options` (its `rill_start`
//!   values serve `rill_consumer_options` too);
//! * subscription_stats.rs: `rill_subscription_stats`, filled by the
//!   subscription's own call and by the broker's `rill_subscription_list`;
//! * lag.rs: `rill_partition_lag`, handed out by subscriptions and consumers;
//! * named_subscription.rs: `rill_named_subscription` with
//!   `rill_named_subscription_list` (a durable name and its holder's pid,
//!   which no handle stands for);
//! * group_member.rs: `rill_group_member` with `rill_group_member_list` (a
//!   live member of a consumer group, in any process);
//! * directory_subscription.rs: `rill_directory_subscription` with
//!   `rill_directory_subscription_list` (a live push subscription in any
//!   process, with its pid and counters);
//! * directory_consumer.rs: `rill_directory_consumer` with
//!   `rill_directory_consumer_list` (a live pull consumer in any process,
//!   with its pid and counters).
//!
//! A call taking a `rill_broker` lives in the file of what it acts on
//! (`rill_topic_*` in topic.rs, but for the schema calls in schema.rs;
//! `rill_subscribe` in subscription.rs). The calls on what the broker keeps
//! of subscriptions without a handle, `rill_durable_delete` and
//! `rill_subscription_list`, are broker.rs's; the `rill_group_*` calls are
//! consumer.rs's (a group is what consumers share; `rill_group_get_stats`
//! fills `rill_consumer_stats`). The rest are
//! areas, not types: schema.rs (a topic's schema), logging.rs, error.rs
//! (statuses and the panic boundary), legacy.rs (the 0.1 symbols),
//! options.rs (the rule by which option structs grow), notify.rs (eventfds),
//! priority.rs, text.rs and util.rs. No file imports one that imports it,
//! directly or through others (`tests/structure.rs` checks it).
#![allow(non_camel_case_types)]

// cbindgen reads these modules in the order they are declared here, and
// rill.h declares their types and functions in that order: the broker, its
// topics and publishing first, then the rest (alphabetical but for a
// subscription's options, which come before it).
mod broker;
mod topic;

mod publish;
mod publisher;

mod consumer;
mod directory_consumer;
mod directory_subscription;
mod error;
mod group_member;
mod lag;
mod legacy;
mod logging;
mod message;
mod named_subscription;
#[cfg(feature = "nats")]
mod nats;
mod notify;
mod options;
mod priority;
mod schema;
mod subscription_options;

mod subscription;
mod subscription_stats;
mod text;
mod util;

use std::ffi::c_char;

pub use broker::*;
pub use consumer::*;
pub use directory_consumer::*;
pub use directory_subscription::*;
pub use error::rill_status;
pub use group_member::*;
pub use lag::*;
pub use logging::*;
pub use message::*;
pub use named_subscription::*;
#[cfg(feature = "nats")]
pub use nats::*;
pub use priority::*;
pub use publish::*;
pub use publisher::*;
pub use schema::*;
pub use subscription::*;
pub use subscription_options::*;
pub use subscription_stats::*;
pub use topic::*;

/// The library version as a NUL-terminated string, e.g. `"0.2.0"`. Static;
/// never free it.
#[unsafe(no_mangle)]
pub extern "C" fn rill_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The name of a status value as a static NUL-terminated string, e.g.
/// `"RILL_ERR_NO_SUCH_TOPIC"`; `"RILL_STATUS_UNKNOWN"` for a value that is
/// not a `rill_status`. Never free it.
#[unsafe(no_mangle)]
pub extern "C" fn rill_status_name(status: i32) -> *const c_char {
    match rill_status::from_i32(status) {
        Some(s) => s.name().as_ptr(),
        None => c"RILL_STATUS_UNKNOWN".as_ptr(),
    }
}

/// Copies the calling thread's last error text into `buf` (at most
/// `buf_len - 1` bytes, then a NUL) and returns the text's full length, so a
/// caller can size a buffer with `rill_last_error(NULL, 0) + 1`. The text
/// describes the most recent call on this thread that failed.
///
/// # Safety
///
/// `buf` is NULL or writable for `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    error::boundary_value(0, || error::copy_last_error(buf, buf_len))
}

/// For tests of the panic boundary only: panics inside the library, which
/// must return `RILL_ERR_PANIC` with the panic's message as the last error
/// and leave the process running. Built only with the `test-panic` cargo
/// feature (the C tests build the library with it); not declared in rill.h.
#[cfg(feature = "test-panic")]
#[unsafe(no_mangle)]
pub extern "C" fn rill_test_panic() -> rill_status {
    error::boundary(|| panic!("rill_test_panic was called"))
}
