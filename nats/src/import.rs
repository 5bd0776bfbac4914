//! JetStream -> rill: a durable pull consumer read on a thread of its own;
//! each message is published into rill, then acknowledged to JetStream.
//!
//! The thread waits on the bridge's runtime for the next message and calls
//! rill synchronously (a rill publish may wait for room, which must not
//! stall the runtime). Pull requests that fail (server away) are renewed
//! after a backoff; messages whose ack was lost come back from the
//! consumer's ack floor after its ack wait, and those this bridge already
//! published (their sequence is in the window of recent ones) are only
//! acknowledged again. Beside that window, each message is published with
//! an id (`rill.id`: its own, or its `Nats-Msg-Id`), so the topic's dedupe
//! window drops one that reaches rill twice under two sequences.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer, consumer::pull};
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::config::{ATTRIBUTE_HEADER, IMPORT_DEDUP_WINDOW, ImportConfig, KEY_HEADER, SEQUENCE_ATTRIBUTE};
use crate::error::{Error, Result};
use crate::shared::{Shared, stopped, stream_error};
use crate::subject::{subject_to_topic, unescape_attribute, unescape_key};

/// How long one pull request stays open on the server.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// The server's idle heartbeat on an open pull request: two missed ones end
/// the request, so a dead connection is noticed within a few seconds.
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);

/// The sequences most recently published into rill, at most
/// [`IMPORT_DEDUP_WINDOW`].
struct Recent {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl Recent {
    fn contains(&self, seq: u64) -> bool {
        self.set.contains(&seq)
    }

    fn insert(&mut self, seq: u64) {
        if self.set.insert(seq) {
            self.order.push_back(seq);
            if self.order.len() > IMPORT_DEDUP_WINDOW
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }
}

/// What became of one message.
enum Step {
    /// Acknowledge it.
    Ack,
    /// Terminate it: it can never be published into rill.
    Term(String),
    /// Leave it unacknowledged: the bridge is stopping (or rill closed).
    Leave,
}

pub(crate) struct Importer {
    consumer: PullConsumer,
    broker: rill::Broker,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    config: ImportConfig,
    recent: Recent,
}

impl Importer {
    /// Finds the stream and finds or creates the durable consumer; checks an
    /// existing consumer reads what the configuration says.
    pub(crate) async fn prepare(
        js: &jetstream::Context,
        config: &ImportConfig,
        broker: &rill::Broker,
        shared: Arc<Shared>,
    ) -> Result<Importer> {
        let stream = js.get_stream(&config.stream).await.map_err(|e| stream_error(&config.stream, e))?;
        let wanted = pull::Config {
            durable_name: Some(config.consumer.clone()),
            filter_subject: config.subject_filter.clone(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: config.ack_wait,
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        };
        let consumer: PullConsumer = stream.get_or_create_consumer(&config.consumer, wanted).await.map_err(|e| {
            Error::JetStream(format!("consumer {:?} on stream {:?}: {e}", config.consumer, config.stream))
        })?;
        let existing = &consumer.cached_info().config;
        if existing.filter_subject != config.subject_filter {
            return Err(Error::InvalidConfig(format!(
                "consumer {:?} on stream {:?} exists with the subject filter {:?}, not {:?}",
                config.consumer, config.stream, existing.filter_subject, config.subject_filter
            )));
        }
        if existing.ack_policy != jetstream::consumer::AckPolicy::Explicit {
            return Err(Error::InvalidConfig(format!(
                "consumer {:?} on stream {:?} exists without explicit acks",
                config.consumer, config.stream
            )));
        }
        Ok(Importer {
            consumer,
            broker: broker.clone(),
            stop: shared.stop_signal(),
            shared,
            config: config.clone(),
            recent: Recent { order: VecDeque::new(), set: HashSet::new() },
        })
    }

    /// The import thread: pulls until the bridge stops.
    pub(crate) fn run(mut self, runtime: &tokio::runtime::Handle) {
        // Dropping a pull request's subscription tells the client on the
        // runtime; so does everything dropped on this thread.
        let _entered = runtime.enter();
        let mut failures = 0;
        loop {
            let mut stop = self.stop.clone();
            let opened = runtime.block_on(async {
                let open = self
                    .consumer
                    .stream()
                    .max_messages_per_batch(self.config.batch)
                    .expires(PULL_EXPIRES)
                    .heartbeat(PULL_HEARTBEAT)
                    .messages();
                tokio::select! {
                    r = open => Some(r),
                    () = stopped(&mut stop) => None,
                }
            });
            let mut messages = match opened {
                None => return,
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    self.shared.record_error(format!("import: cannot pull: {e}"));
                    failures += 1;
                    if self.pause(runtime, failures) {
                        return;
                    }
                    continue;
                }
            };
            loop {
                let next = runtime.block_on(async {
                    tokio::select! {
                        m = messages.next() => Some(m),
                        () = stopped(&mut stop) => None,
                    }
                });
                let msg = match next {
                    None => return,
                    // The pull ended (a dead connection, missed heartbeats):
                    // open a new one.
                    Some(None) => break,
                    Some(Some(Err(e))) => {
                        self.shared.record_error(format!("import: {e}"));
                        break;
                    }
                    Some(Some(Ok(msg))) => msg,
                };
                failures = 0;
                // Relaxed: a gauge.
                self.shared.in_flight.fetch_add(1, Ordering::Relaxed);
                let step = self.publish(&msg, runtime);
                self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
                let kind = match step {
                    Step::Ack => AckKind::Ack,
                    Step::Term(why) => {
                        self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                        self.shared.record_error(format!("import of {:?} refused: {why}", msg.subject.as_str()));
                        AckKind::Term
                    }
                    Step::Leave => return,
                };
                // A lost ack is a redelivery later, which `recent` catches.
                if let Err(e) = runtime.block_on(msg.ack_with(kind)) {
                    self.shared.record_error(format!("import: ack: {e}"));
                }
            }
            failures += 1;
            if self.pause(runtime, failures) {
                return;
            }
        }
    }

    /// Waits out the backoff after `failures` failures; true if the bridge
    /// stopped meanwhile.
    fn pause(&self, runtime: &tokio::runtime::Handle, failures: u32) -> bool {
        let delay = self.shared.retry_after(failures);
        let mut stop = self.stop.clone();
        runtime.block_on(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => false,
                () = stopped(&mut stop) => true,
            }
        })
    }

    /// Publishes one message into rill, waiting (with backoff) while rill has
    /// no room.
    fn publish(&mut self, msg: &jetstream::Message, runtime: &tokio::runtime::Handle) -> Step {
        let seq = match msg.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => return Step::Term(format!("no JetStream metadata: {e}")),
        };
        if self.recent.contains(seq) {
            return Step::Ack;
        }
        let topic = match subject_to_topic(msg.subject.as_str(), &self.config.subject_prefix, &self.config.topic_prefix)
        {
            Ok(t) => t,
            Err(e) => return Step::Term(e.to_string()),
        };
        let mut key = None;
        let mut attributes = Vec::new();
        if let Some(headers) = &msg.headers {
            if let Some(k) = headers.get(KEY_HEADER) {
                match unescape_key(k.as_str()) {
                    Ok(k) => key = Some(k),
                    Err(e) => return Step::Term(e.to_string()),
                }
            }
            for v in headers.get_all(ATTRIBUTE_HEADER) {
                match unescape_attribute(v.as_str()) {
                    Ok(pair) => attributes.push(pair),
                    Err(e) => return Step::Term(e.to_string()),
                }
            }
        }
        let seq_text = seq.to_string();
        let mut pairs: Vec<(&str, &str)> =
            attributes.iter().filter(|(n, _)| n != SEQUENCE_ATTRIBUTE).map(|(n, v)| (n.as_str(), v.as_str())).collect();
        pairs.push((SEQUENCE_ATTRIBUTE, &seq_text));
        // The message's id for rill's dedupe window (issue 41): its own
        // `rill.id` attribute if it carries one (it came from rill), else its
        // `Nats-Msg-Id` if that fits a rill id. A message that crosses from
        // JetStream twice (stored twice, or redelivered after this bridge
        // restarted and forgot its recent sequences) then lands once.
        let msg_id = msg.headers.as_ref().and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID));
        if !pairs.iter().any(|(n, _)| *n == rill::log::ID_ATTRIBUTE)
            && let Some(id) = msg_id.map(|v| v.as_str()).filter(|id| (1..=rill::log::MAX_ID_LEN).contains(&id.len()))
        {
            pairs.push((rill::log::ID_ATTRIBUTE, id));
        }
        let mut record = rill::Record::new(&msg.payload).with_attributes(&pairs);
        if let Some(k) = &key {
            record = record.with_key(k);
        }
        let mut attempt = 0;
        loop {
            match self.broker.publish(&topic, &record) {
                Ok(_) => {
                    self.recent.insert(seq);
                    // Relaxed: statistics.
                    self.shared.imported.fetch_add(1, Ordering::Relaxed);
                    return Step::Ack;
                }
                Err(e) => match e.kind() {
                    rill::ErrorKind::Closed => {
                        self.shared.record_error(format!("import: the broker is closed: {e}"));
                        return Step::Leave;
                    }
                    rill::ErrorKind::Full | rill::ErrorKind::Timeout | rill::ErrorKind::ResourceExhausted => {
                        self.shared.record_error(format!("import: rill has no room on {topic:?}: {e}"));
                        attempt += 1;
                        if self.pause(runtime, attempt) {
                            return Step::Leave;
                        }
                    }
                    _ => return Step::Term(format!("rill refused {topic:?}: {e}")),
                },
            }
        }
    }
}
