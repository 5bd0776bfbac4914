//! The C ABI of rill: `librill.so` / `librill.a`, described by the generated
//! `include/rill.h`.
//!
//! Conventions (they hold for every function):
//! * Names are `rill_<type>_<verb>`, except the broker-level shorthands
//!   kept from the first ABI (`rill_publish`, `rill_try_publish`,
//!   `rill_publish_batch`, `rill_subscribe`, `rill_subscribe_batch`,
//!   `rill_durable_delete`), the process-wide functions (`rill_version`,
//!   `rill_last_error`, `rill_set_log_level`, `rill_set_log_callback`) and
//!   `rill_ack_reason` (of the message being handled); handles are opaque,
//!   created by `_new` (or `rill_subscribe`) and released by `_free`;
//!   `_free(NULL)` is a no-op.
//! * Fallible functions return a `rill_status`; on error the calling thread's
//!   `rill_last_error` says what went wrong. Out-parameters are written only
//!   on success.
//! * NULL where a pointer is required is `RILL_ERR_NULL_ARGUMENT`; strings must
//!   be NUL-terminated UTF-8 (else `RILL_ERR_INVALID_ARGUMENT`); enum-like
//!   values coming from C are plain integers and are checked.
//! * Every function body runs inside a panic boundary: a panic in rill
//!   becomes `RILL_ERR_PANIC` and never unwinds into C.
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
mod error;
mod lag;
mod legacy;
mod logging;
mod message;
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
pub use error::rill_status;
pub use lag::*;
pub use logging::*;
pub use message::*;
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
