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
mod export;
mod import;
mod subject;

use std::time::Duration;

pub use bridge::{Bridge, BridgeStats};
pub use subject::{subject_to_topic, topic_to_subject};

/// How many recently imported stream sequences import remembers, to
/// acknowledge a redelivery without publishing it into rill again.
pub const IMPORT_DEDUP_WINDOW: usize = 65_536;

/// The attribute import sets to the JetStream stream sequence.
pub const SEQUENCE_ATTRIBUTE: &str = "nats.seq";

/// The header that carries a message's key.
pub const KEY_HEADER: &str = "Rill-Key";

/// The header that carries one attribute, as `name=value`.
pub const ATTRIBUTE_HEADER: &str = "Rill-Attr";

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A configuration value is malformed.
    #[error("invalid bridge configuration: {0}")]
    InvalidConfig(String),
    /// The server could not be reached, or refused the connection
    /// (credentials).
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// A stream (or consumer) named in the configuration does not exist.
    #[error("not found in JetStream: {0}")]
    NotFound(String),
    /// A JetStream request failed.
    #[error("JetStream: {0}")]
    JetStream(String),
    /// A subject or header does not map to a rill topic, key or attribute.
    #[error("cannot map: {0}")]
    Mapping(String),
    /// rill refused a call.
    #[error(transparent)]
    Rill(#[from] rill::Error),
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The bridge as a whole.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// Server URL(s), comma-separated (`nats://host:4222`); credentials may
    /// be given in the URL (`nats://user:pass@host`).
    pub url: String,
    /// A user name and password, if the server asks for them.
    pub user: Option<String>,
    /// The password that goes with `user`.
    pub password: Option<String>,
    /// A token, if the server asks for one.
    pub token: Option<String>,
    /// The broker's id in message ids (see the crate docs); `None` makes one.
    pub broker_id: Option<String>,
    /// How long `start` waits for the server.
    pub connect_timeout: Duration,
    /// How long a JetStream request (a publish ack included) may take.
    pub request_timeout: Duration,
    /// Delay before reconnect attempt n: `initial * 2^(n-1)`, at most `max`.
    pub reconnect_delay: (Duration, Duration),
    /// rill -> JetStream.
    pub export: Option<ExportConfig>,
    /// JetStream -> rill.
    pub import: Option<ImportConfig>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            url: "nats://127.0.0.1:4222".into(),
            user: None,
            password: None,
            token: None,
            broker_id: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            reconnect_delay: (Duration::from_millis(50), Duration::from_secs(5)),
            export: None,
            import: None,
        }
    }
}

/// rill -> JetStream.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The rill pattern whose topics are exported.
    pub pattern: String,
    /// The stream that must capture the subjects (checked at start).
    pub stream: String,
    /// Subjects are `subject_prefix.<topic segments>`.
    pub subject_prefix: String,
    /// The durable rill subscription's name; its position is where export
    /// resumes after a stop.
    pub subscription: String,
    /// Where that subscription starts the first time.
    pub start: rill::StartPosition,
}

impl ExportConfig {
    /// Exports `pattern` into `stream` under `subject_prefix`, from the
    /// earliest retained message, through the subscription `nats-export`.
    pub fn new(pattern: &str, stream: &str, subject_prefix: &str) -> Self {
        ExportConfig {
            pattern: pattern.into(),
            stream: stream.into(),
            subject_prefix: subject_prefix.into(),
            subscription: "nats-export".into(),
            start: rill::StartPosition::Earliest,
        }
    }
}

/// JetStream -> rill.
#[derive(Debug, Clone)]
pub struct ImportConfig {
    /// The stream to read.
    pub stream: String,
    /// The durable pull consumer's name (created if missing).
    pub consumer: String,
    /// Which subjects of the stream (`>` wildcards allowed); must lie under
    /// `subject_prefix`.
    pub subject_filter: String,
    /// Stripped from each subject before it is mapped to a topic.
    pub subject_prefix: String,
    /// Put before each mapped topic (`""`: none).
    pub topic_prefix: String,
    /// Messages asked for per pull request.
    pub batch: usize,
    /// The consumer's ack wait when this bridge creates it: how long before
    /// an unacknowledged message is redelivered.
    pub ack_wait: Duration,
}

impl ImportConfig {
    /// Imports every subject under `subject_prefix` in `stream` into the
    /// topics they map to, through the consumer `rill-import`.
    pub fn new(stream: &str, subject_prefix: &str) -> Self {
        ImportConfig {
            stream: stream.into(),
            consumer: "rill-import".into(),
            subject_filter: subject::all_under(subject_prefix),
            subject_prefix: subject_prefix.into(),
            topic_prefix: String::new(),
            batch: 256,
            ack_wait: Duration::from_secs(10),
        }
    }
}
