//! The one error type of rill's public API.
//!
//! Each variant says what was wrong in words a user can act on; the C ABI maps
//! each one to a `rill_status` code and keeps the text for `rill_last_error`.

use thiserror::Error as ThisError;

/// Everything that can go wrong in a call into rill.
#[derive(Debug, Clone, PartialEq, Eq, ThisError)]
#[non_exhaustive]
pub enum Error {
    /// An argument was out of its allowed range or malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A topic name broke the naming rules.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic {
        /// The name as given (lossily decoded if it was not UTF-8).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A subscription pattern broke the pattern rules.
    #[error("invalid pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A filter expression did not parse.
    #[error("invalid filter at byte {position}: {reason}")]
    InvalidFilter {
        /// Byte offset in the filter text where parsing failed.
        position: usize,
        /// What the parser expected or found.
        reason: String,
    },
    /// Publishing or subscribing named a topic that does not exist.
    #[error("no such topic: {0:?}")]
    NoSuchTopic(String),
    /// Creating a topic that already exists.
    #[error("topic already exists: {0:?}")]
    TopicExists(String),
    /// A message is bigger than the topic accepts.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Encoded size of the message.
        size: usize,
        /// Largest encoded size the topic accepts.
        max: usize,
    },
    /// A subscriber with the `Block` policy is at its lag limit and the
    /// publish did not wait: `try_publish`, or a publish from that
    /// subscriber's own handler (which it would wait for). The text says which.
    #[error("full: {0}")]
    Full(String),
    /// A wait ran out of time.
    #[error("timed out")]
    Timeout,
    /// The broker, subscription or consumer was closed.
    #[error("closed: {0}")]
    Closed(String),
    /// An offset outside the retained range.
    #[error("offset {offset} is out of range: partition {partition} retains offsets {first}..{end}")]
    OutOfRange {
        /// The partition asked about.
        partition: u32,
        /// The offset asked for.
        offset: u64,
        /// First retained offset.
        first: u64,
        /// One past the last assigned offset.
        end: u64,
    },
    /// A subscription name or consumer group is already in use.
    #[error("busy: {0}")]
    Busy(String),
    /// A lookup found nothing (an attribute, a subscription, a partition).
    #[error("not found: {0}")]
    NotFound(String),
    /// The system ran out of a resource rill needed: memory (a log segment
    /// could not be mapped), threads (a worker could not be spawned) or
    /// address space. The text says which, with the operating system's error.
    /// Nothing was half-done: retrying once the resource is available works.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// A storage operation failed: the disk is full, a permission is
    /// missing, a path is not a directory. `path` is the file or directory
    /// the operation was on, `kind` and `message` the operating system's error.
    /// Nothing already acknowledged was lost; retrying once the cause is
    /// fixed (space freed) works.
    #[error("I/O error on {}: {message}", path.display())]
    Io {
        /// The file or directory the failed operation was on.
        path: std::path::PathBuf,
        /// The operating system's error, classified.
        kind: std::io::ErrorKind,
        /// The operating system's error text.
        message: String,
    },
    /// Recovery found damage it will not silently drop: a record in a sealed
    /// segment that fails its checksum or does not parse. Opening with
    /// `repair` truncates the partition there instead.
    #[error("corrupt data in {} at byte {offset}: {reason}", file.display())]
    Corrupt {
        /// The damaged file.
        file: std::path::PathBuf,
        /// Byte offset of the damage in that file.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// A consumer group gave the partition to another member (after a
    /// rebalance, or because this member stopped polling for its session
    /// timeout): this member may no longer commit or move its position.
    #[error("reassigned: {0}")]
    Reassigned(String),
    /// A payload does not fit its topic's schema (`OnInvalid::Reject`):
    /// the validator's message (for a JSON schema, the failing instance
    /// path and keyword; in a batch, the failing record's index first).
    /// Nothing was appended.
    #[error("schema: {0}")]
    Schema(String),
}

/// Which variant an [`Error`] is, without its data. Unlike `Error` it is
/// exhaustive, so code outside this crate that maps errors (the C ABI's
/// status codes) can match it without a wildcard, and stops compiling when
/// a variant is added here until it has decided what the new one means.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgument,
    InvalidTopic,
    InvalidPattern,
    InvalidFilter,
    NoSuchTopic,
    TopicExists,
    MessageTooLarge,
    Full,
    Timeout,
    Closed,
    OutOfRange,
    Busy,
    NotFound,
    ResourceExhausted,
    Io,
    Corrupt,
    Reassigned,
    Schema,
}

impl Error {
    /// The variant of this error; see [`ErrorKind`].
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, ErrorKind};
    ///
    /// assert_eq!(Error::Timeout.kind(), ErrorKind::Timeout);
    /// assert_eq!(Error::NoSuchTopic("orders".into()).kind(), ErrorKind::NoSuchTopic);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::InvalidTopic { .. } => ErrorKind::InvalidTopic,
            Error::InvalidPattern { .. } => ErrorKind::InvalidPattern,
            Error::InvalidFilter { .. } => ErrorKind::InvalidFilter,
            Error::NoSuchTopic(_) => ErrorKind::NoSuchTopic,
            Error::TopicExists(_) => ErrorKind::TopicExists,
            Error::MessageTooLarge { .. } => ErrorKind::MessageTooLarge,
            Error::Full(_) => ErrorKind::Full,
            Error::Timeout => ErrorKind::Timeout,
            Error::Closed(_) => ErrorKind::Closed,
            Error::OutOfRange { .. } => ErrorKind::OutOfRange,
            Error::Busy(_) => ErrorKind::Busy,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::ResourceExhausted(_) => ErrorKind::ResourceExhausted,
            Error::Io { .. } => ErrorKind::Io,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Reassigned(_) => ErrorKind::Reassigned,
            Error::Schema(_) => ErrorKind::Schema,
        }
    }

    /// An [`Error::Io`] for the operation on `path` that failed with `error`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io;
    /// use rill::Error;
    ///
    /// let error = Error::io("/data/orders", &io::Error::from(io::ErrorKind::PermissionDenied));
    /// assert!(matches!(&error, Error::Io { kind: io::ErrorKind::PermissionDenied, .. }));
    /// assert!(error.to_string().starts_with("I/O error on /data/orders"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn io(path: impl Into<std::path::PathBuf>, error: &std::io::Error) -> Error {
        Error::Io { path: path.into(), kind: error.kind(), message: error.to_string() }
    }
}

/// rill's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed publish, as the single-record publish path passes it up: the
/// full [`Error`], boxed, so that it is one word.
///
/// Why it exists: `Error` is 72 bytes, so a `Result<u64, Error>` is returned
/// through memory and copied at every layer of a publish (the publisher,
/// the partition, the log's append), and it kept `Publisher::publish` from
/// inlining into the C ABI's wrapper. `Result<u64, PublishFailure>` is
/// returned in two registers (a tag and the offset or the pointer); the
/// success path builds nothing and moves no more than that. The error is
/// built where the failure is found, out of line (`#[cold]`), exactly as
/// before, so every caller gets the same variant and text; `Error::from`
/// unboxes it at the public API's edge, and the C ABI maps it to its
/// status and last-error text, only on a failure.
///
/// Why not a code (a small enum naming the failure, the text built at the
/// edge): a `Result<u64, E>` is returned in registers only if `E` is one
/// scalar (a pointer, a non-zero integer); a fieldless enum, or one with a
/// code and a box, goes through memory again (checked with rustc 1.95). A
/// code and a box in one word would take a hand-written tagged pointer
/// (`unsafe`, with its own `Drop`), for no saving: both edges need the full
/// error on every failure anyway (the Rust API returns it, the C ABI sets
/// the last-error text), and some failures (a segment allocation's or a
/// sync's operating-system error, the sizes of a record too large) carry
/// data only the failing layer has.
#[doc(hidden)]
#[derive(Debug)]
pub struct PublishFailure(Box<Error>);

impl Error {
    /// The error of a call on a closed broker, built out of line: for
    /// `check_open` and for the publish path's [`PublishFailure::closed`].
    #[cold]
    #[inline(never)]
    pub(crate) fn broker_closed() -> Error {
        Error::Closed("the broker is closed".into())
    }
}

impl PublishFailure {
    /// The failure of a publish on a closed broker (out of line).
    #[cold]
    #[inline(never)]
    pub(crate) fn closed() -> PublishFailure {
        PublishFailure(Box::new(Error::broker_closed()))
    }

    /// The error it carries.
    pub(crate) fn error(&self) -> &Error {
        &self.0
    }
}

impl From<Error> for PublishFailure {
    /// Boxes `e`, out of line: a `?` on an `Error` leaves a test and a call
    /// on the publish path, nothing more.
    #[cold]
    #[inline(never)]
    fn from(e: Error) -> PublishFailure {
        PublishFailure(Box::new(e))
    }
}

impl From<PublishFailure> for Error {
    /// The error a publish reports for `f`: the one its layer built.
    #[cold]
    #[inline(never)]
    fn from(f: PublishFailure) -> Error {
        *f.0
    }
}

/// The message of a caught panic's payload (`panic!` with a literal or a
/// formatted message), for reporting it: a handler's panic becomes a retry
/// reason, and the C ABI's panic boundary puts it in `rill_last_error`.
///
/// # Examples
///
/// ```
/// use rill::panic_message;
///
/// let literal = std::panic::catch_unwind(|| panic!("stuck")).unwrap_err();
/// assert_eq!(panic_message(&*literal), "stuck");
/// let formatted = std::panic::catch_unwind(|| panic!("order {} failed", 42)).unwrap_err();
/// assert_eq!(panic_message(&*formatted), "order 42 failed");
/// # Ok::<(), rill::Error>(())
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
