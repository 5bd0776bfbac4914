//! The values a subscriber chooses and sees: options, acknowledgements,
//! handlers and the message a handler is given.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use crate::broker::delivered::Delivered;
use crate::sync::Arc;

/// What a handler says about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Done: the subscription moves past the message.
    Success,
    /// Failed: deliver it again after a backoff (or dead-letter it once the
    /// attempts run out).
    Retry,
    /// Failed for good: publish it to the dead-letter topic and move on.
    DeadLetter,
}

/// Where a subscription starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// Only messages published after subscribing.
    #[default]
    Latest,
    /// The oldest retained message.
    Earliest,
    /// This offset in every partition (must be retained).
    Offset(u64),
    /// In every partition, the first message published at or after this
    /// time, in nanoseconds since the Unix epoch (see
    /// [`Log::offset_at_time`](crate::log::Log::offset_at_time) for what
    /// "first" means when publishers on several threads stamp messages out
    /// of order). A time before every retained message is the oldest one; a
    /// time after all of them is the end.
    Time(u64),
}

/// When a message counts as handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// The position moves past a message only after `Success` (or after it
    /// was dead-lettered): a message is delivered at least once.
    #[default]
    AtLeastOnce,
    /// The position moves past a message before the handler runs: a message
    /// is delivered at most once, and failures are not retried.
    AtMostOnce,
}

/// What a subscription does when its lag reaches `lag_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Skip ahead to keep at most `lag_limit` messages behind, counting what
    /// was skipped.
    #[default]
    DropOldest,
    /// Make publishers to the topic wait (and keep retention from trimming
    /// what this subscription has not read).
    Block,
    /// Close the subscription, recording why.
    Disconnect,
}

/// Exponential backoff between redeliveries of a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBackoff {
    /// Wait before the second attempt.
    pub initial: Duration,
    /// Longest wait.
    pub max: Duration,
    /// Growth factor per attempt (at least 1).
    pub multiplier: f64,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff { initial: Duration::from_millis(10), max: Duration::from_secs(10), multiplier: 2.0 }
    }
}

impl RetryBackoff {
    /// The wait after delivery attempt `attempt` (1-based) failed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::RetryBackoff;
    ///
    /// let ms = Duration::from_millis;
    /// let backoff = RetryBackoff { initial: ms(10), max: ms(50), multiplier: 2.0 };
    /// let waits: Vec<Duration> = (1..=4).map(|attempt| backoff.delay(attempt)).collect();
    /// assert_eq!(waits, [ms(10), ms(20), ms(40), ms(50)]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.saturating_sub(1).min(64) as i32);
        let secs = (self.initial.as_secs_f64() * factor).min(self.max.as_secs_f64());
        Duration::from_secs_f64(secs.max(0.0)).max(self.initial.min(self.max))
    }
}

/// How a subscription behaves. `Default` gives an anonymous, at-least-once
/// subscription from the latest message.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use rill::{Ack, DeliveryMode, Record, StartPosition, SubscriptionOptions};
/// # use rill::{Broker, BrokerConfig, TopicOptions};
/// # let broker = Broker::new(BrokerConfig::default())?;
/// # broker.create_topic("orders", &TopicOptions::default())?;
///
/// broker.publish("orders", &Record::new(b"before"))?;
/// let options = SubscriptionOptions {
///     name: Some("audit".into()),
///     start: StartPosition::Earliest,
///     delivery: DeliveryMode::AtMostOnce,
///     ..SubscriptionOptions::default()
/// };
/// let sub = broker.subscribe("orders", options, |_| Ack::Success)?;
/// assert!(sub.wait_idle(Duration::from_secs(5))?);
/// assert_eq!(sub.stats().delivered, 1); // it started at the oldest message
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct SubscriptionOptions {
    /// A durable name; `None` for an anonymous subscription.
    pub name: Option<String>,
    /// An attribute filter (Pub/Sub syntax); `None` delivers everything.
    pub filter: Option<String>,
    /// Where to start in each partition.
    pub start: StartPosition,
    /// At-least-once (default) or at-most-once.
    pub delivery: DeliveryMode,
    /// Deliveries of one message before it is dead-lettered (default 5).
    pub max_attempts: Option<u32>,
    /// Backoff between redeliveries (default 10 ms doubling to 10 s).
    pub backoff: RetryBackoff,
    /// Dead-letter topic (default `$dlq/<name>`), created at subscribe if
    /// missing. An anonymous subscription's default one (`$dlq/anon-N`) is
    /// created when its first message is dead-lettered instead, and deleted
    /// with the subscription if it is empty. It must not match the
    /// subscription's own pattern (its dead letters would come back to it for
    /// ever): `subscribe` refuses that with `InvalidArgument`.
    pub dead_letter_topic: Option<String>,
    /// What happens at `lag_limit`.
    pub overflow: Overflow,
    /// Lag (messages published but not handled, per partition) that triggers
    /// `overflow`; `None`: only retention bounds the lag.
    pub lag_limit: Option<u64>,
    /// Drain on a thread of its own instead of the shared pool.
    pub dedicated_thread: bool,
    /// With `dedicated_thread`: how long the thread keeps polling for new
    /// messages, spinning, before it parks. `None` (the default) spins
    /// briefly, then yields, then parks; but while the awake dedicated
    /// threads (of all brokers in the process) are at least as many as the
    /// cores, it sleeps instead, in naps of about 50 µs, looking for messages
    /// after each, and parks after two naps that found none (or at once,
    /// when its last park outlasted two naps: messages that far apart are
    /// not worth napping for). So threads without work give the cores back
    /// to the publishers (a message that arrives during a nap waits for its
    /// end: the nap and the timer's slack).
    /// For the lowest latency give it a core and a budget longer than the
    /// gap between messages: a parked subscriber costs each message a
    /// wake-up (rill-bench's `one-to-one-dedicated` scenario measures it).
    pub idle_spin: Option<Duration>,
    /// Called (on the draining thread) when retention trimmed messages this
    /// subscription had not read: topic, partition, and how many were missed.
    pub on_lagged: Option<LagCallback>,
    /// Called (on the draining thread) when a message is dead-lettered, with
    /// the message and the reason: the alert that something failed for
    /// good. Called once per dead letter, after its publish to the
    /// dead-letter topic (also if that publish failed; `last_error` in the
    /// stats then says why).
    pub on_dead_letter: Option<DeadLetterCallback>,
    /// A shared (competing) member: live subscriptions with the same `name`,
    /// all shared and on the same one-topic pattern, form one subscription
    /// whose partitions are divided among them (see `Broker::subscribe`).
    /// Needs a `name` and a pattern without wildcards.
    pub shared: bool,
    /// The ack deadline: a handler call that runs longer than this is a
    /// stall. A shared member whose handler stalls gives its partitions to
    /// the other live members, which resume each from the last acked offset
    /// (so the stuck message is delivered again, once, to another member);
    /// the late call's ack is discarded, and the member holds no partitions
    /// until a later join or leave of the subscription gives it some back
    /// (another member's stall does not). With no other member to take
    /// over (a subscription that is not shared, a shared one alone, or all
    /// the others stalled, or any shared member under
    /// `Sharing::Processes`, whose members split the partitions through the
    /// data directory), or when the stuck message is one that already
    /// came again after a stall, nothing moves: the stall is only reported
    /// and the late ack counts. Either way it counts in `ack_timeouts` of the stats and is
    /// logged (`log::warn!`). A batch handler's call is one call: the
    /// deadline is for its whole batch, and a stall hands the whole batch
    /// over. `None` (the default): no deadline. Zero is refused with
    /// `InvalidArgument`. See `broker/subscription/deadline.rs`.
    pub ack_timeout: Option<Duration>,
    /// Its priority in the shared worker pool, 0 to 7, higher runs first;
    /// out of range is refused with `InvalidArgument`. `None` (the default):
    /// the topic's `priority` if the pattern names one topic that has one,
    /// else [`DEFAULT_PRIORITY`](crate::DEFAULT_PRIORITY) (4).
    ///
    /// When more subscriptions are ready than the pool has workers, the
    /// workers take ready subscriptions of higher priority first, with
    /// aging: a ready subscription waits at most
    /// [`PRIORITY_AGING_TAKES`](crate::PRIORITY_AGING_TAKES) (32) turns of
    /// other subscriptions more than it would with no priorities (where it
    /// waits for those ready before it). Priority reorders, it never starves.
    /// A running drain is not interrupted mid-batch, but one of lower
    /// priority ends its turn at its next batch while a higher one waits.
    /// A subscription with a `dedicated_thread`, and pull consumers, have
    /// threads of their own and ignore it. The wait shows in the stats
    /// (`queue_wait_p50`, `queue_wait_p99`).
    pub priority: Option<u8>,
}

impl fmt::Debug for SubscriptionOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriptionOptions")
            .field("name", &self.name)
            .field("filter", &self.filter)
            .field("start", &self.start)
            .field("delivery", &self.delivery)
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("overflow", &self.overflow)
            .field("lag_limit", &self.lag_limit)
            .field("dedicated_thread", &self.dedicated_thread)
            .field("idle_spin", &self.idle_spin)
            .field("on_lagged", &self.on_lagged.is_some())
            .field("on_dead_letter", &self.on_dead_letter.is_some())
            .field("shared", &self.shared)
            .field("ack_timeout", &self.ack_timeout)
            .field("priority", &self.priority)
            .finish()
    }
}

/// A callback told how many messages retention trimmed before a subscription
/// read them: `(topic, partition, missed)`.
pub type LagCallback = Arc<dyn Fn(&str, u32, u64) + Send + Sync>;

/// A callback told about each dead letter: the message and the reason.
pub type DeadLetterCallback = Arc<dyn Fn(&Message<'_>, &str) + Send + Sync>;

/// Default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// A message as a handler sees it: a [`Delivered`] message (borrowed from the
/// log, valid for the call) with what only a push delivery has, which
/// attempt this is and a reason the handler can give for its ack.
/// `Delivered`'s accessors (`topic()`, `partition()`, `schema_version()`,
/// ...) and the record's (`payload()`, `key()`, `offset()`, ...) come
/// through `Deref`.
pub struct Message<'a> {
    /// What was delivered: where it was read, and the record.
    pub(super) delivered: Delivered<'a>,
    pub(super) attempt: u32,
    /// The reason the handler gives (`set_reason`), or the one given last time.
    pub(super) reason: &'a RefCell<Option<String>>,
}

impl<'a> Message<'a> {
    /// Which delivery this is: 1 the first time, 2 on the first redelivery, ...
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use std::time::Duration;
    /// use rill::{Ack, Record, RetryBackoff, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let quick = RetryBackoff { initial: Duration::from_millis(1), max: Duration::from_millis(1), multiplier: 1.0 };
    /// let options = SubscriptionOptions { backoff: quick, ..SubscriptionOptions::default() };
    /// let attempts = Arc::new(Mutex::new(Vec::new()));
    /// let sink = attempts.clone();
    /// let sub = broker.subscribe("orders", options, move |m| {
    ///     sink.lock().unwrap().push(m.attempt());
    ///     if m.attempt() == 1 { Ack::Retry } else { Ack::Success }
    /// })?;
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*attempts.lock().unwrap(), [1, 2]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Explains a `Retry` or `DeadLetter` ack; the last reason given becomes the
    /// `rill.dlq.reason` attribute if the message is dead-lettered.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use std::time::Duration;
    /// use rill::{Ack, ConsumerOptions, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let options = SubscriptionOptions { name: Some("billing".into()), ..SubscriptionOptions::default() };
    /// let sub = broker.subscribe("orders", options, |m| {
    ///     m.set_reason("unknown customer");
    ///     Ack::DeadLetter
    /// })?;
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    ///
    /// let mut dead = broker.consumer("ops", "$dlq/billing", ConsumerOptions::default())?;
    /// let letters = dead.poll(10, Duration::from_secs(5))?;
    /// assert_eq!(letters[0].payload(), b"o-1");
    /// assert_eq!(letters[0].attribute("rill.dlq.reason"), Some("unknown customer"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn set_reason(&self, reason: impl Into<String>) {
        *self.reason.borrow_mut() = Some(reason.into());
    }
}

/// The delivered message's accessors, and through it the record's.
impl<'a> std::ops::Deref for Message<'a> {
    type Target = Delivered<'a>;

    #[inline]
    fn deref(&self) -> &Delivered<'a> {
        &self.delivered
    }
}

impl fmt::Debug for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("topic", &self.topic())
            .field("partition", &self.partition())
            .field("offset", &self.offset())
            .field("attempt", &self.attempt)
            .field("key", &self.key())
            .field("attributes", &self.attributes())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// The handler a subscription calls, one message at a time.
pub type Handler = Box<dyn FnMut(&Message<'_>) -> Ack + Send>;

/// A handler that takes consecutive messages of one partition at once. It
/// fills `acks[k]` for message `k` (pre-set to `Success`) and returns how
/// many messages, from the front, it handled; the rest are delivered again
/// in a later call. Processing stops at the first `Retry`: handled messages
/// after it are delivered again too (at least once).
pub type BatchHandler = Box<dyn FnMut(&[Message<'_>], &mut [Ack]) -> usize + Send>;
