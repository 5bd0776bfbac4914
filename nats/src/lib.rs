//! A bridge between rill topics and NATS JetStream streams.
//!
//! rill is an in-process engine. When producers and consumers live in other
//! processes or machines, or the data must be replicated, this crate carries
//! rill messages through a JetStream stream, which does the networking,
//! storage and replication, without the application leaving rill's API.
//!
//! ```no_run
//! # fn main() -> Result<(), rill_nats::Error> {
//! use rill_nats::{Bridge, BridgeConfig, ExportConfig};
//! let broker = rill::Broker::new(rill::BrokerConfig::default())?;
//! let config = BridgeConfig {
//!     url: "nats://127.0.0.1:4222".into(),
//!     export: Some(ExportConfig::new("orders/*", "ORDERS", "rill.orders")),
//!     ..BridgeConfig::default()
//! };
//! let bridge = Bridge::start(&broker, config)?;
//! // ... publish to orders/eu: it is stored on subject rill.orders.orders.eu
//! println!("{:?}", bridge.stats());
//! bridge.stop();
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! The bridge owns a small Tokio runtime (two worker threads) on which the
//! async-nats client runs; the rill side stays synchronous and the core
//! crate never sees Tokio.
//!
//! **Export** is a durable rill subscription (named by
//! [`ExportConfig::subscription`]) on a pattern, drained on a thread of its
//! own. Each batch of messages it is handed (up to 64, of one partition) is
//! published to JetStream at once, every publish in flight together, and the
//! batch is acknowledged to rill only when JetStream has acknowledged every
//! message of it: a message leaves rill's log only once it is stored in the
//! stream. The subject is the prefix, then the topic's segments (see
//! [`topic_to_subject`]); the key travels in the `Rill-Key` header and each
//! attribute in a `Rill-Attr` header, escaped so any bytes survive. Every
//! publish carries `Nats-Msg-Id` = `broker id:subject:partition:offset`, so a
//! message published again (after a lost ack) is dropped by the stream's
//! duplicate window; a message with a rill id (the `rill.id` attribute)
//! carries `subject:id` instead, the same from every broker and process
//! that publishes it.
//!
//! **Import** is a JetStream durable pull consumer (explicit acks) on a
//! stream and subject filter, read by a thread of its own. Each message is
//! published into the rill topic its subject maps to (see
//! [`subject_to_topic`]), with its key and attributes restored and the
//! stream sequence as the `nats.seq` attribute; it is acknowledged to
//! JetStream only after rill's publish returned. Its `rill.id` attribute
//! (set by a rill that published it) or else its `Nats-Msg-Id` (if 1 to 128
//! bytes) is its rill id, so the topic's dedupe window (issue 41) drops a
//! message that crosses twice.
//!
//! # Faults, and what they cost
//!
//! * **The server goes away.** async-nats reconnects with the backoff of
//!   [`BridgeConfig::reconnect_delay`]. Meanwhile export's publishes fail or
//!   time out, so it acknowledges nothing: messages wait in rill's log (its
//!   retention and overflow policy apply; the subscription's lag shows them)
//!   and the batch is published again, with the same ids, until it is
//!   stored. Import's pull requests fail and are renewed; unacknowledged
//!   messages are redelivered by the server from the consumer's ack floor.
//! * **Nothing is lost**: a rill message is acknowledged only after it is in
//!   the stream, a JetStream message only after it is in rill.
//! * **Duplicates are bounded.** Export: a message published twice is
//!   dropped by the stream if the two publishes fall within its duplicate
//!   window (`duplicate_window`, 2 minutes by default); past it (a server down
//!   for longer) it is stored twice. Import: a redelivered message whose
//!   sequence is among the last [`IMPORT_DEDUP_WINDOW`] this bridge
//!   published is acknowledged without publishing it again; a bridge that
//!   stops with acks unsent (at most the consumer's ack-pending messages) sees
//!   those again when it starts, and publishes them again.
//! * **Order.** Messages of one partition (so of one key) are stored and
//!   imported in the order rill holds them while nothing fails. A fault can
//!   reorder them within a bounded span: export publishes a batch (at most
//!   64 messages of one partition) at once, so when it fails half-way a
//!   later message may be stored before an earlier one stored on the retry;
//!   on import, a message whose delivery was lost with the connection is
//!   redelivered after the consumer's ack wait, after later ones.
//! * **Bad configuration** is an error from [`Bridge::start`]: a malformed
//!   URL, a server that cannot be reached or refuses the credentials, a
//!   stream that does not exist (or, for export, does not capture the
//!   subjects), a malformed prefix or filter.
//! * A message that can never cross (larger than the server's max payload; a
//!   subject that maps to no valid topic; a topic rill refuses) is not
//!   retried for ever: export dead-letters it in rill, import terminates it
//!   in JetStream (it stays in the stream); both count it as `rejected` and
//!   record it as `last_error`.
//!
//! # The broker id
//!
//! A rill broker has no identity that survives its process, and its offsets
//! start again at 0 in a new process, so the message id needs a broker id
//! that tells incarnations apart. [`BridgeConfig::broker_id`] defaults to
//! one made at each start from the process id, the clock and a count of
//! starts (never the same twice, so two brokers never drop each other's
//! messages as duplicates). The cost: the batch in flight when a bridge stops
//! (at most 64 messages per partition) is published again under the new id
//! on the next start, so stored twice. An application whose log outlives
//! its process, or that stops and starts bridges, should set a stable id of
//! its own, unique per broker: then those messages are recognised as
//! duplicates too.
//!
//! A bridge holds its broker open until it stops; closing the broker stops
//! the bridge (what export had in flight stays in rill's log, as on stop).
//!
//! Export and import on one broker must not overlap (imported topics that
//! export's pattern matches would be exported again, for ever): imported
//! messages carry `nats.seq`, and export skips messages that carry it.

mod bridge;
mod config;
mod conn;
mod error;
mod export;
mod import;
mod shared;
mod subject;

pub use bridge::{Bridge, BridgeStats};
pub use config::{
    ATTRIBUTE_HEADER, BridgeConfig, ExportConfig, IMPORT_DEDUP_WINDOW, ImportConfig, KEY_HEADER, SEQUENCE_ATTRIBUTE,
};
pub use error::{Error, Result};
pub use subject::{subject_to_topic, topic_to_subject};
