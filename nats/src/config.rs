//! The bridge's settings and the names it puts on messages crossing it.

use std::time::Duration;

/// How many recently imported stream sequences import remembers, to
/// acknowledge a redelivery without publishing it into rill again.
pub const IMPORT_DEDUP_WINDOW: usize = 65_536;

/// The attribute import sets to the JetStream stream sequence.
pub const SEQUENCE_ATTRIBUTE: &str = "nats.seq";

/// The header that carries a message's key.
pub const KEY_HEADER: &str = "Rill-Key";

/// The header that carries one attribute, as `name=value`.
pub const ATTRIBUTE_HEADER: &str = "Rill-Attr";

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
            subject_filter: crate::subject::all_under(subject_prefix),
            subject_prefix: subject_prefix.into(),
            topic_prefix: String::new(),
            batch: 256,
            ack_wait: Duration::from_secs(10),
        }
    }
}
