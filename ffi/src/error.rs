//! Status codes, the thread's last error text, and the panic boundary.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rill::Error;

/// The result of every fallible call. `RILL_OK` is 0; every other value is
/// an error whose text `rill_last_error` returns on the same thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum rill_status {
    /// Success.
    RILL_OK = 0,
    /// A required pointer argument was NULL.
    RILL_ERR_NULL_ARGUMENT = 1,
    /// An argument was malformed or out of range (including strings that are
    /// not UTF-8 and option values that are not one of their constants).
    RILL_ERR_INVALID_ARGUMENT = 2,
    /// A topic name broke the naming rules.
    RILL_ERR_INVALID_TOPIC = 3,
    /// A subscription pattern broke the pattern rules.
    RILL_ERR_INVALID_PATTERN = 4,
    /// A filter did not parse; the error text gives the byte position.
    RILL_ERR_INVALID_FILTER = 5,
    /// The topic does not exist (and the broker does not auto-create topics).
    RILL_ERR_NO_SUCH_TOPIC = 6,
    /// The topic already exists.
    RILL_ERR_TOPIC_EXISTS = 7,
    /// The message is larger than the topic accepts.
    RILL_ERR_MESSAGE_TOO_LARGE = 8,
    /// `rill_try_publish`: a `Block` subscriber is at its lag limit.
    RILL_ERR_FULL = 9,
    /// A wait ran out of time.
    RILL_ERR_TIMEOUT = 10,
    /// The broker, subscription or consumer is closed.
    RILL_ERR_CLOSED = 11,
    /// An offset outside the retained range.
    RILL_ERR_OUT_OF_RANGE = 12,
    /// A subscription name or consumer group is already in use.
    RILL_ERR_BUSY = 13,
    /// A lookup found nothing (an attribute, a partition, a committed offset).
    RILL_ERR_NOT_FOUND = 14,
    /// rill panicked; the error text has the panic message. The call had no
    /// effect that can be relied on, but the process can go on.
    RILL_ERR_PANIC = 15,
    /// The system ran out of a resource: memory, threads, address space (a
    /// log segment could not be mapped, a thread could not be started). The
    /// error text names it, with the operating system's error. Nothing was
    /// left half-done: the same call can succeed once the resource is back.
    RILL_ERR_RESOURCE_EXHAUSTED = 16,
}

use rill_status::*;

impl rill_status {
    const ALL: [rill_status; 17] = [
        RILL_OK,
        RILL_ERR_NULL_ARGUMENT,
        RILL_ERR_INVALID_ARGUMENT,
        RILL_ERR_INVALID_TOPIC,
        RILL_ERR_INVALID_PATTERN,
        RILL_ERR_INVALID_FILTER,
        RILL_ERR_NO_SUCH_TOPIC,
        RILL_ERR_TOPIC_EXISTS,
        RILL_ERR_MESSAGE_TOO_LARGE,
        RILL_ERR_FULL,
        RILL_ERR_TIMEOUT,
        RILL_ERR_CLOSED,
        RILL_ERR_OUT_OF_RANGE,
        RILL_ERR_BUSY,
        RILL_ERR_NOT_FOUND,
        RILL_ERR_PANIC,
        RILL_ERR_RESOURCE_EXHAUSTED,
    ];

    /// The status with this number, if there is one.
    pub(crate) fn from_i32(v: i32) -> Option<rill_status> {
        Self::ALL.iter().copied().find(|s| *s as i32 == v)
    }

    /// The constant's name as a NUL-terminated static string.
    pub(crate) fn name(self) -> &'static [u8] {
        match self {
            RILL_OK => b"RILL_OK\0",
            RILL_ERR_NULL_ARGUMENT => b"RILL_ERR_NULL_ARGUMENT\0",
            RILL_ERR_INVALID_ARGUMENT => b"RILL_ERR_INVALID_ARGUMENT\0",
            RILL_ERR_INVALID_TOPIC => b"RILL_ERR_INVALID_TOPIC\0",
            RILL_ERR_INVALID_PATTERN => b"RILL_ERR_INVALID_PATTERN\0",
            RILL_ERR_INVALID_FILTER => b"RILL_ERR_INVALID_FILTER\0",
            RILL_ERR_NO_SUCH_TOPIC => b"RILL_ERR_NO_SUCH_TOPIC\0",
            RILL_ERR_TOPIC_EXISTS => b"RILL_ERR_TOPIC_EXISTS\0",
            RILL_ERR_MESSAGE_TOO_LARGE => b"RILL_ERR_MESSAGE_TOO_LARGE\0",
            RILL_ERR_FULL => b"RILL_ERR_FULL\0",
            RILL_ERR_TIMEOUT => b"RILL_ERR_TIMEOUT\0",
            RILL_ERR_CLOSED => b"RILL_ERR_CLOSED\0",
            RILL_ERR_OUT_OF_RANGE => b"RILL_ERR_OUT_OF_RANGE\0",
            RILL_ERR_BUSY => b"RILL_ERR_BUSY\0",
            RILL_ERR_NOT_FOUND => b"RILL_ERR_NOT_FOUND\0",
            RILL_ERR_PANIC => b"RILL_ERR_PANIC\0",
            RILL_ERR_RESOURCE_EXHAUSTED => b"RILL_ERR_RESOURCE_EXHAUSTED\0",
        }
    }
}

/// An error on its way to C: a status and the text for `rill_last_error`.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub(crate) status: rill_status,
    pub(crate) text: String,
}

impl FfiError {
    pub(crate) fn new(status: rill_status, text: impl Into<String>) -> FfiError {
        FfiError { status, text: text.into() }
    }

    pub(crate) fn null(what: &str) -> FfiError {
        FfiError::new(RILL_ERR_NULL_ARGUMENT, format!("{what} must not be NULL"))
    }

    pub(crate) fn invalid(text: impl Into<String>) -> FfiError {
        FfiError::new(RILL_ERR_INVALID_ARGUMENT, text)
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> FfiError {
        let status = match &e {
            Error::InvalidArgument(_) => RILL_ERR_INVALID_ARGUMENT,
            Error::InvalidTopic { .. } => RILL_ERR_INVALID_TOPIC,
            Error::InvalidPattern { .. } => RILL_ERR_INVALID_PATTERN,
            Error::InvalidFilter { .. } => RILL_ERR_INVALID_FILTER,
            Error::NoSuchTopic(_) => RILL_ERR_NO_SUCH_TOPIC,
            Error::TopicExists(_) => RILL_ERR_TOPIC_EXISTS,
            Error::MessageTooLarge { .. } => RILL_ERR_MESSAGE_TOO_LARGE,
            Error::Full => RILL_ERR_FULL,
            Error::Timeout => RILL_ERR_TIMEOUT,
            Error::Closed(_) => RILL_ERR_CLOSED,
            Error::OutOfRange { .. } => RILL_ERR_OUT_OF_RANGE,
            Error::Busy(_) => RILL_ERR_BUSY,
            Error::NotFound(_) => RILL_ERR_NOT_FOUND,
            Error::ResourceExhausted(_) => RILL_ERR_RESOURCE_EXHAUSTED,
            _ => RILL_ERR_INVALID_ARGUMENT,
        };
        FfiError { status, text: e.to_string() }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `text` as this thread's last error.
pub(crate) fn set_last_error(text: &str) {
    // An interior NUL would truncate the text in C; show it instead.
    let text = text.replace('\0', "\\0");
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Copies this thread's last error into `buf` (truncated, NUL-terminated);
/// returns the full length without the NUL.
pub(crate) fn copy_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    LAST_ERROR.with(|e| crate::util::copy_str(&e.borrow(), buf, buf_len))
}

/// Runs `body` as the body of an exported function: a panic becomes
/// `RILL_ERR_PANIC` with its message as the last error, and an error becomes
/// its status with its text as the last error.
pub(crate) fn boundary(body: impl FnOnce() -> Result<(), FfiError>) -> rill_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => RILL_OK,
        Ok(Err(e)) => {
            set_last_error(&e.text);
            e.status
        }
        Err(panic) => {
            set_last_error(&format!("rill panicked: {}", rill::panic_message(&*panic)));
            RILL_ERR_PANIC
        }
    }
}

/// Like [`boundary`] for functions without a status: a panic is recorded as
/// the last error and `fallback` is returned.
pub(crate) fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(panic) => {
            set_last_error(&format!("rill panicked: {}", rill::panic_message(&*panic)));
            fallback
        }
    }
}
