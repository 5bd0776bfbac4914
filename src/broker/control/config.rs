//! [`BrokerConfig`]: how a broker runs.

use std::path::PathBuf;
use std::time::Duration;

use crate::broker::topic::TopicOptions;
use crate::log::{Fsync, Sharing};

/// How a broker runs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use rill::{Broker, BrokerConfig, Record};
///
/// let config = BrokerConfig {
///     worker_threads: Some(2),
///     auto_create_topics: true,
///     publish_timeout: Some(Duration::from_secs(1)),
///     ..BrokerConfig::default()
/// };
/// let broker = Broker::new(config)?;
/// broker.publish("orders", &Record::new(b"o-1"))?; // created on first publish
/// assert_eq!(broker.topics(), ["orders"]);
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Threads in the shared pool that drains subscriptions; `None` uses one
    /// per CPU core.
    pub worker_threads: Option<usize>,
    /// Create a topic (with `default_topic` options) on first publish or
    /// literal subscribe instead of failing with `NoSuchTopic`. Off by default.
    pub auto_create_topics: bool,
    /// Options of auto-created topics and dead-letter topics.
    pub default_topic: TopicOptions,
    /// Longest a `publish` waits for a `Block` subscriber to make room
    /// before failing with `Timeout`; `None` waits indefinitely. Default 10 s.
    pub publish_timeout: Option<Duration>,
    /// Where the broker keeps its topics, messages, group commits and durable
    /// subscription positions across restarts (created if missing; one broker
    /// at a time, others get `Busy`, unless `sharing` says otherwise). `None`,
    /// the default: in memory only.
    pub data_dir: Option<PathBuf>,
    /// Who else may open `data_dir` meanwhile: no one (`Exclusive`, the
    /// default), or any number of brokers in this and other processes
    /// opened with `Processes` (which needs a `data_dir`; see "Several
    /// processes" in the README for what they share so far).
    pub sharing: Sharing,
    /// When messages and offsets reach stable storage (with a `data_dir`).
    /// Default: every 100 ms. See the promises table in the README.
    pub fsync: Fsync,
    /// On opening a `data_dir`: truncate a partition at damage found inside
    /// an older (sealed) segment, and report it, instead of failing the open
    /// with `Corrupt`. Off by default.
    pub repair: bool,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            worker_threads: None,
            auto_create_topics: false,
            default_topic: TopicOptions::default(),
            publish_timeout: Some(Duration::from_secs(10)),
            data_dir: None,
            sharing: Sharing::Exclusive,
            fsync: Fsync::default(),
            repair: false,
        }
    }
}
