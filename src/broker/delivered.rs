//! The delivered message: one type for what a push subscription hands its
//! handler and what a pull consumer's `poll` returns.
//!
//! Both read the same thing, a record borrowed from a partition's log plus
//! where it was read (topic and partition), so both hand out a
//! [`Delivered`], and every accessor of a delivered message is written once,
//! here. A consumer's `poll` returns them as they are (`Polled` is their old
//! name). A handler is given a [`Message`](crate::Message), which wraps a
//! `Delivered` with what only a push delivery has, which attempt this is and
//! a reason the handler can give for its ack, and reaches the accessors
//! here through `Deref`. Keeping that context out of `Delivered` keeps it
//! `Copy` and keeps a pulled message from offering an attempt count or a
//! reason that nothing reads (a consumer nacks by offset instead).

use std::fmt;

use super::schema::SCHEMA_ATTRIBUTE;
use crate::log::RecordView;
use crate::sync::Name;

/// A message as the broker delivers it, borrowed from the log: returned by
/// [`Consumer::poll`](crate::Consumer::poll) (valid until the consumer's
/// next call that moves it), and inside every [`Message`](crate::Message) a
/// handler is given (valid for the call). The record's own accessors
/// (`payload()`, `key()`, `offset()`, ...) come through `Deref` to
/// [`RecordView`].
#[derive(Clone, Copy)]
pub struct Delivered<'a> {
    /// The topic's name as the reader holds it (see [`Delivered::topic_name`]).
    topic: &'a Name,
    partition: u32,
    record: RecordView<'a>,
}

impl<'a> Delivered<'a> {
    /// The message read from `partition` of the topic named `topic`.
    #[inline]
    pub(crate) fn new(topic: &'a Name, partition: u32, record: RecordView<'a>) -> Delivered<'a> {
        Delivered { topic, partition, record }
    }

    /// The version of the topic's schema the record was checked against
    /// when it was published (see `Broker::set_schema`); 0 if it was
    /// checked by none: the topic had no schema then, or its schema was a
    /// validator function another process's broker runs (the reserved
    /// attribute `rill.schema` is absent or not a number).
    ///
    /// # Examples
    ///
    /// Pushed to a handler:
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use rill::{Ack, OnInvalid, Record, Schema, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let versions = Arc::new(Mutex::new(Vec::new()));
    /// let sink = versions.clone();
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), move |m| {
    ///     sink.lock().unwrap().push(m.schema_version());
    ///     Ack::Success
    /// })?;
    /// broker.publish("orders", &Record::new(b"before"))?;
    /// broker.set_schema("orders", Schema::Json(r#"{"type":"object"}"#.into()), OnInvalid::Reject)?;
    /// broker.publish("orders", &Record::new(br#"{"id":1}"#))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*versions.lock().unwrap(), [0, 1]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    ///
    /// Polled:
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, OnInvalid, Record, Schema};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish("orders", &Record::new(b"before"))?;
    /// broker.set_schema("orders", Schema::Json(r#"{"type":"object"}"#.into()), OnInvalid::Reject)?;
    /// broker.publish("orders", &Record::new(br#"{"id":1}"#))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// assert_eq!(batch.iter().map(|m| m.schema_version()).collect::<Vec<_>>(), [0, 1]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn schema_version(&self) -> u64 {
        self.record.attribute(SCHEMA_ATTRIBUTE).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// The topic it was published to.
    ///
    /// # Examples
    ///
    /// Pushed to a handler of a pattern:
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("shop/orders", &TopicOptions::default())?;
    /// # broker.create_topic("shop/refunds", &TopicOptions::default())?;
    ///
    /// let topics = Arc::new(Mutex::new(Vec::new()));
    /// let sink = topics.clone();
    /// let sub = broker.subscribe("shop/**", SubscriptionOptions::default(), move |m| {
    ///     sink.lock().unwrap().push(m.topic().to_owned());
    ///     Ack::Success
    /// })?;
    /// broker.publish("shop/refunds", &Record::new(b"r-1"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*topics.lock().unwrap(), ["shop/refunds"]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    ///
    /// Polled:
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish("orders", &Record::new(b"o-1"))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// assert_eq!(batch[0].topic(), "orders");
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// The topic's name as the broker holds it: one allocation per topic,
    /// shared by every message a subscription or consumer reads from it, for
    /// as long as the topic lives (a topic deleted and created again under
    /// the same name gets a new one). A caller that keeps a clone can
    /// recognise the topic of the next message with
    /// [`std::sync::Arc::ptr_eq`] instead of comparing its bytes (the clone
    /// keeps the address from being reused by another name); the C library
    /// finds its cached C string this way.
    ///
    /// # Examples
    ///
    /// Pushed to a handler:
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let names: Arc<Mutex<Vec<Arc<str>>>> = Arc::default();
    /// let sink = names.clone();
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), move |m| {
    ///     sink.lock().unwrap().push(m.topic_name().clone());
    ///     Ack::Success
    /// })?;
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// let names = names.lock().unwrap();
    /// assert!(Arc::ptr_eq(&names[0], &names[1])); // one allocation for the topic's messages
    /// # Ok::<(), rill::Error>(())
    /// ```
    ///
    /// Polled:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish_batch("orders", &[Record::new(b"o-1"), Record::new(b"o-2")])?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// assert!(Arc::ptr_eq(batch[0].topic_name(), batch[1].topic_name()));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn topic_name(&self) -> &'a std::sync::Arc<str> {
        self.topic
    }

    /// Its partition.
    ///
    /// # Examples
    ///
    /// Pushed to a handler:
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(4))?;
    /// let partitions = Arc::new(Mutex::new(Vec::new()));
    /// let sink = partitions.clone();
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), move |m| {
    ///     sink.lock().unwrap().push(m.partition());
    ///     Ack::Success
    /// })?;
    /// let at = broker.publish("orders", &Record::new(b"o-1").with_key(b"customer-7"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*partitions.lock().unwrap(), [at.partition]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    ///
    /// Polled:
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record, TopicOptions};
    /// # use rill::{Broker, BrokerConfig};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    ///
    /// broker.create_topic("orders", &TopicOptions::with_partitions(4))?;
    /// let at = broker.publish("orders", &Record::new(b"o-1").with_key(b"customer-7"))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// assert_eq!((batch[0].partition(), batch[0].offset()), (at.partition, at.offset));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The underlying record view.
    ///
    /// # Examples
    ///
    /// Pushed to a handler:
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use std::time::Duration;
    /// use rill::{Ack, Record, SubscriptionOptions};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// let sub = broker.subscribe("orders", SubscriptionOptions::default(), move |m| {
    ///     let record = m.record();
    ///     sink.lock().unwrap().push((record.offset(), record.key().map(<[u8]>::to_vec), record.payload().to_vec()));
    ///     Ack::Success
    /// })?;
    /// broker.publish("orders", &Record::new(b"o-1").with_key(b"customer-7"))?;
    /// assert!(sub.wait_idle(Duration::from_secs(5))?);
    /// assert_eq!(*seen.lock().unwrap(), [(0, Some(b"customer-7".to_vec()), b"o-1".to_vec())]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    ///
    /// Polled:
    ///
    /// ```
    /// use std::time::Duration;
    /// use rill::{ConsumerOptions, Record};
    /// # use rill::{Broker, BrokerConfig, TopicOptions};
    /// # let broker = Broker::new(BrokerConfig::default())?;
    /// # broker.create_topic("orders", &TopicOptions::default())?;
    ///
    /// broker.publish("orders", &Record::new(b"o-1").with_attributes(&[("region", "IN")]))?;
    /// let mut consumer = broker.consumer("billing", "orders", ConsumerOptions::default())?;
    /// let batch = consumer.poll(10, Duration::from_secs(5))?;
    /// let record = batch[0].record();
    /// assert_eq!((record.offset(), record.payload()), (0, &b"o-1"[..]));
    /// assert_eq!(record.attribute("region"), Some("IN"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn record(&self) -> RecordView<'a> {
        self.record
    }
}

/// The record's own accessors: `offset()`, `timestamp_ns()`, `key()`,
/// `payload()`, `attributes()`, `attribute(key)`.
impl<'a> std::ops::Deref for Delivered<'a> {
    type Target = RecordView<'a>;

    #[inline]
    fn deref(&self) -> &RecordView<'a> {
        &self.record
    }
}

impl fmt::Debug for Delivered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivered")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset())
            .field("key", &self.key())
            .field("attributes", &self.attributes())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}
