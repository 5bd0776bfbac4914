//! The library's log as C sees it: `rill_set_log_callback` and
//! `rill_set_log_level`.
//!
//! The core logs rare events through the `log` facade. This module installs
//! (once, on the first `rill_set_log_callback`) a logger that hands each
//! record to the C callback, if one is set and the record's level is at or
//! below the chosen maximum. Without a callback nothing is formatted, let
//! alone printed.
//!
//! # Replacing the callback while records are logged
//!
//! The callback and its `user_data` live behind a read-write lock. Logging
//! takes the read side for the length of the call, so any number of threads
//! log at once; setting takes the write side, so it waits for calls of the
//! old callback in flight. When `rill_set_log_callback` returns, the old
//! callback is never called again and its `user_data` may be freed.
//!
//! A callback that logged through rill again (by calling a rill function
//! that logs) would take the read side twice on one thread, which can
//! deadlock behind a waiting writer; and one that set the callback would
//! wait for itself. A thread-local mark of "inside the callback" prevents
//! both: records logged inside the callback are dropped, and setting the
//! callback from inside it is refused.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Once, RwLock};

use crate::error::{FfiError, boundary, rill_status};

/// Receives one log record: its level (a `RILL_LOG_*` value), its target
/// (the part of rill it comes from, e.g. `"rill::subscription"`) and its
/// text, both borrowed for the call only. It runs on the thread that logged,
/// which may be a publisher in the middle of a rollover or a subscription's
/// drainer: keep it quick, and do not call rill functions from it (records
/// logged inside it are dropped; setting the callback from it is refused).
pub type rill_log_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, level: i32, target: *const c_char, message: *const c_char)>;

/// No records (a level for `rill_set_log_level` only).
pub const RILL_LOG_OFF: i32 = 0;
/// Something failed that the library could not hide (a log segment that
/// could not be allocated, a dead letter that could not be published).
pub const RILL_LOG_ERROR: i32 = 1;
/// Something an operator should know: a dead letter, a handler that
/// crashed, a subscription disconnected for lagging.
pub const RILL_LOG_WARN: i32 = 2;
/// Lifecycle: a topic deleted, a subscription the library closed.
pub const RILL_LOG_INFO: i32 = 3;
/// Rare internals: segment rollovers and retention trims, handler retries,
/// messages dropped for the lag limit.
pub const RILL_LOG_DEBUG: i32 = 4;
/// The most detailed level.
pub const RILL_LOG_TRACE: i32 = 5;

/// The callback and the pointer it is called with.
#[derive(Clone, Copy)]
struct Sink {
    callback: unsafe extern "C" fn(*mut c_void, i32, *const c_char, *const c_char),
    user_data: *mut c_void,
}

// SAFETY: `rill_set_log_callback`'s contract makes the caller promise the
// callback may be called with `user_data` from any thread, at once.
unsafe impl Send for Sink {}
// SAFETY: as above; the pointer itself is only copied, never written.
unsafe impl Sync for Sink {}

static SINK: RwLock<Option<Sink>> = RwLock::new(None);
/// The chosen maximum level, applied while a callback is set.
static LEVEL: AtomicI32 = AtomicI32::new(RILL_LOG_INFO);
static INSTALL: Once = Once::new();

thread_local! {
    /// Set while this thread runs the callback.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

fn to_level(level: log::Level) -> i32 {
    match level {
        log::Level::Error => RILL_LOG_ERROR,
        log::Level::Warn => RILL_LOG_WARN,
        log::Level::Info => RILL_LOG_INFO,
        log::Level::Debug => RILL_LOG_DEBUG,
        log::Level::Trace => RILL_LOG_TRACE,
    }
}

fn to_filter(level: i32) -> log::LevelFilter {
    match level {
        RILL_LOG_ERROR => log::LevelFilter::Error,
        RILL_LOG_WARN => log::LevelFilter::Warn,
        RILL_LOG_INFO => log::LevelFilter::Info,
        RILL_LOG_DEBUG => log::LevelFilter::Debug,
        RILL_LOG_TRACE => log::LevelFilter::Trace,
        _ => log::LevelFilter::Off,
    }
}

/// Makes the facade's maximum level the chosen one while a callback is set,
/// and `Off` otherwise (so disabled records cost one load and a compare).
fn apply_level(has_sink: bool) {
    // Relaxed: a setting; a record racing with a change may be logged or not.
    let level = if has_sink { LEVEL.load(Ordering::Relaxed) } else { RILL_LOG_OFF };
    log::set_max_level(to_filter(level));
}

struct CLogger;

impl log::Log for CLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) || IN_CALLBACK.with(Cell::get) {
            return;
        }
        // A poisoned lock only means a setter panicked; the sink is intact.
        let sink = SINK.read().unwrap_or_else(|e| e.into_inner());
        let Some(s) = *sink else { return };
        let target = crate::text::c_string(record.target());
        let message = crate::text::c_string(&record.args().to_string());
        IN_CALLBACK.with(|c| c.set(true));
        // SAFETY: the callback and pointer the caller set, called as
        // `rill_log_callback`'s contract says; both strings outlive the call.
        unsafe { (s.callback)(s.user_data, to_level(record.level()), target.as_ptr(), message.as_ptr()) };
        IN_CALLBACK.with(|c| c.set(false));
        drop(sink);
    }

    fn flush(&self) {}
}

static LOGGER: CLogger = CLogger;

/// Sends the library's log records to `callback` (called with `user_data`,
/// from any thread, concurrently), or stops sending them (`callback` NULL).
/// By default there is no callback and nothing is logged anywhere. Records
/// up to the level set with `rill_set_log_level` (default `RILL_LOG_INFO`)
/// are passed. When the call returns, a replaced callback is never called
/// again (calls of it in flight have finished), so its `user_data` may be
/// freed. Returns `RILL_ERR_INVALID_ARGUMENT` when called from inside the
/// callback, and `RILL_ERR_BUSY` if the process already has a logger for
/// Rust's `log` facade (a Rust program linking rill logs through its own).
///
/// # Safety
///
/// `callback` is NULL or a function safe to call with `user_data` from any
/// thread at any time until it is replaced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_set_log_callback(callback: rill_log_callback, user_data: *mut c_void) -> rill_status {
    boundary(|| {
        if IN_CALLBACK.with(Cell::get) {
            return Err(FfiError::invalid("rill_set_log_callback was called from inside the log callback"));
        }
        let mut installed = true;
        INSTALL.call_once(|| installed = log::set_logger(&LOGGER).is_ok());
        if !installed || !std::ptr::addr_eq(log::logger(), &LOGGER) {
            return Err(FfiError::new(
                rill_status::RILL_ERR_BUSY,
                "another logger is installed for Rust's log facade in this process; rill logs through it",
            ));
        }
        let mut sink = SINK.write().unwrap_or_else(|e| e.into_inner());
        *sink = callback.map(|callback| Sink { callback, user_data });
        apply_level(sink.is_some());
        Ok(())
    })
}

/// Sets the most detailed level passed to the log callback:
/// `RILL_LOG_OFF` (0) passes nothing, `RILL_LOG_ERROR` (1) .. `RILL_LOG_TRACE`
/// (5); other values are `RILL_ERR_INVALID_ARGUMENT`. May be called at any
/// time, before or after `rill_set_log_callback`.
#[unsafe(no_mangle)]
pub extern "C" fn rill_set_log_level(level: i32) -> rill_status {
    boundary(|| {
        if !(RILL_LOG_OFF..=RILL_LOG_TRACE).contains(&level) {
            return Err(FfiError::invalid(format!("log level {level} is not a RILL_LOG_* value")));
        }
        // Relaxed: a setting (see `apply_level`); the lock below orders it
        // with callback changes.
        LEVEL.store(level, Ordering::Relaxed);
        let sink = SINK.read().unwrap_or_else(|e| e.into_inner());
        if std::ptr::addr_eq(log::logger(), &LOGGER) {
            apply_level(sink.is_some());
        }
        Ok(())
    })
}
