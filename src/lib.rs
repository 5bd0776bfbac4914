//! rill: a lock-free, in-process publish/subscribe engine.
//!
//! The heart of rill is [`log::Log`], a segmented append-only log per topic
//! partition: publishers on any number of threads append to it without locks
//! (one fetch-add reserves a record, one Release store commits it), and
//! every reader moves through it with its own [`log::Cursor`], borrowing
//! records in place. The broker's publish around the append may take a lock:
//! the partition's sync lock under `Fsync::Always`, the spare pool when a
//! segment rolls, a ready set or the worker pool's queue when it wakes an
//! idle subscription, a shard of the topic's dedupe window for a record with
//! an id, and the waiters' lock when a `Block` subscriber makes it wait.
//!
//! ```
//! use rill::log::{Log, LogConfig, Record};
//!
//! let log = Log::new(&LogConfig::default())?;
//! let attrs = [("region", "IN")];
//! let offset = log.append(&Record::new(b"hello").with_key(b"k").with_attributes(&attrs))?;
//! assert_eq!(offset, 0);
//!
//! let mut cursor = log.cursor_from_first();
//! let record = cursor.read().expect("nothing was trimmed").expect("record 0 is committed");
//! assert_eq!(record.payload(), b"hello");
//! assert_eq!(record.attribute("region"), Some("IN"));
//! # Ok::<(), rill::Error>(())
//! ```

#![warn(missing_docs)]
// std's locks, cells and sleeps only through `sync` (see clippy.toml).
#![warn(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod broker;
pub mod clock;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod log;
pub(crate) mod sync;

pub use self::log::{Fsync, Record, Sharing};

/// The README's Rust blocks, each a whole program, compiled and run as doc
/// tests: a snippet that no longer builds or runs fails `cargo test --doc`.
/// (`.ci/readme-snippets` checks the other faces' blocks, and that this
/// include is here.)
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeSnippets;
pub use broker::{
    Ack, Broker, BrokerConfig, Cleanup, Consumer, ConsumerOptions, ConsumerStart, ConsumerStats,
    DEFAULT_DELETE_RETENTION_MS, DEFAULT_PRIORITY, DEFAULT_SESSION_TIMEOUT, DeadLetterCallback, Delivered,
    DeliveryMode, DirectoryConsumer, DirectorySubscription, Filter, GroupMember, GroupStats, LagCallback, MAX_PRIORITY,
    MAX_SUBSCRIPTION_NAME_LEN, Message, NamedSubscription, OnInvalid, Overflow, PRIORITY_AGING_TAKES, Pattern, Polled,
    Position, Published, Publisher, RetryBackoff, Schema, StartPosition, Subscription, SubscriptionOptions,
    SubscriptionState, SubscriptionStats, TopicOptions, TopicStats,
};
pub use error::{Error, ErrorKind, PublishFailure, Result, panic_message};
