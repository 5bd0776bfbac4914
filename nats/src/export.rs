//! rill -> JetStream: a durable rill subscription whose batches are
//! published together and acknowledged to rill once JetStream stored them.
//!
//! The handler runs on the subscription's own thread and blocks it on the
//! bridge's runtime while a batch is in flight. A batch is done when every
//! message of it is stored (or refused for good); until then the handler
//! publishes the missing ones again after a backoff, with the same message
//! ids, so rill's position never passes a message JetStream has not stored.
//! On stop it returns the stored prefix of the batch as handled: the rest
//! stays in rill's log for the next start.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage as Publish};
use bytes::Bytes;
use futures_util::future::join_all;
use tokio::sync::watch;

use crate::config::{ATTRIBUTE_HEADER, ExportConfig, KEY_HEADER, SEQUENCE_ATTRIBUTE};
use crate::error::Result;
use crate::shared::{Shared, stopped};
use crate::subject::{escape_attribute, escape_key, topic_to_subject};

/// How one publish ended.
enum Outcome {
    /// Stored (or found to be a duplicate of a stored one).
    Stored,
    /// Can never be stored (too large for the server): dead-letter it.
    Refused(String),
    /// Try again (server away, timeout, stream missing for now).
    Failed(String),
}

pub(crate) struct Exporter {
    js: jetstream::Context,
    runtime: tokio::runtime::Handle,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    prefix: String,
    broker_id: String,
}

impl Exporter {
    pub(crate) fn new(
        js: jetstream::Context,
        runtime: tokio::runtime::Handle,
        shared: Arc<Shared>,
        config: &ExportConfig,
        broker_id: &str,
    ) -> Exporter {
        Exporter {
            js,
            runtime,
            stop: shared.stop_signal(),
            shared,
            prefix: config.subject_prefix.clone(),
            broker_id: broker_id.to_owned(),
        }
    }

    /// Starts the durable subscription that feeds JetStream.
    pub(crate) fn subscribe(mut self, broker: &rill::Broker, config: &ExportConfig) -> Result<rill::Subscription> {
        let options = rill::SubscriptionOptions {
            name: Some(config.subscription.clone()),
            start: config.start,
            // A thread of its own: the handler waits on the network, which
            // must not hold a worker other subscriptions need.
            dedicated_thread: true,
            ..Default::default()
        };
        Ok(broker.subscribe_batch(&config.pattern, options, move |msgs, acks| self.export(msgs, acks))?)
    }

    /// The subject and publish of one message.
    fn build(&self, m: &rill::Message<'_>) -> (String, Publish) {
        let subject = topic_to_subject(&self.prefix, m.topic());
        let mut headers = HeaderMap::new();
        if let Some(key) = m.key() {
            headers.insert(KEY_HEADER, escape_key(key).as_str());
        }
        for (name, value) in m.attributes() {
            headers.append(ATTRIBUTE_HEADER, escape_attribute(name, value).as_str());
        }
        // The subject already escapes the topic into printable tokens. A
        // message with a rill id (issue 41) is the same message wherever and
        // however often it is published, so its id, scoped by the subject
        // (JetStream's duplicate window is per stream, rill's per topic), is
        // the one JetStream sees; others are named by where they are.
        let id = match m.attribute(rill::log::ID_ATTRIBUTE) {
            Some(rill_id) => format!("{subject}:{rill_id}"),
            None => format!("{}:{}:{}:{}", self.broker_id, subject, m.partition(), m.offset()),
        };
        let publish = Publish::build().payload(Bytes::copy_from_slice(m.payload())).headers(headers).message_id(id);
        (subject, publish)
    }

    /// The batch handler: returns how many messages from the front are done.
    fn export(&mut self, msgs: &[rill::Message<'_>], acks: &mut [rill::Ack]) -> usize {
        // Indices still to be stored. Imported messages are not exported
        // again (a loop between two bridges).
        let mut todo: Vec<usize> =
            (0..msgs.len()).filter(|&i| msgs[i].attribute(SEQUENCE_ATTRIBUTE).is_none()).collect();
        let mut attempt = 0;
        while !todo.is_empty() {
            let batch: Vec<(String, Publish)> = todo.iter().map(|&i| self.build(&msgs[i])).collect();
            let outcomes = match self.runtime.block_on(publish_all(&self.js, &self.shared, batch, &mut self.stop)) {
                Some(o) => o,
                None => return todo[0],
            };
            let mut failed = Vec::new();
            for (&i, outcome) in todo.iter().zip(outcomes) {
                match outcome {
                    Outcome::Stored => {
                        // Relaxed: statistics.
                        self.shared.exported.fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::Refused(why) => {
                        msgs[i].set_reason(why.clone());
                        acks[i] = rill::Ack::DeadLetter;
                        self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                        self.shared.record_error(format!(
                            "export of {}@{} refused: {why}",
                            msgs[i].topic(),
                            msgs[i].offset()
                        ));
                    }
                    Outcome::Failed(why) => {
                        self.shared.record_error(format!("export: {why}"));
                        failed.push(i);
                    }
                }
            }
            todo = failed;
            if todo.is_empty() {
                break;
            }
            attempt += 1;
            let delay = self.shared.retry_after(attempt);
            let mut stop = self.stop.clone();
            let interrupted = self.runtime.block_on(async move {
                tokio::select! {
                    () = tokio::time::sleep(delay) => false,
                    () = stopped(&mut stop) => true,
                }
            });
            if interrupted {
                return todo[0];
            }
        }
        msgs.len()
    }
}

/// Publishes every message at once, then waits for all the acks; `None` if
/// the bridge stopped meanwhile.
async fn publish_all(
    js: &jetstream::Context,
    shared: &Shared,
    batch: Vec<(String, Publish)>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Vec<Outcome>> {
    let n = batch.len() as u64;
    // Relaxed: a gauge.
    shared.in_flight.fetch_add(n, Ordering::Relaxed);
    let work = async {
        let mut pending = Vec::with_capacity(batch.len());
        for (subject, publish) in batch {
            pending.push(js.send_publish(subject, publish).await);
        }
        join_all(pending.into_iter().map(|sent| async move {
            match sent {
                Ok(ack) => classify(ack.await.map(drop)),
                Err(e) => classify(Err(e)),
            }
        }))
        .await
    };
    let result = tokio::select! {
        outcomes = work => Some(outcomes),
        () = stopped(stop) => None,
    };
    shared.in_flight.fetch_sub(n, Ordering::Relaxed);
    result
}

fn classify(r: Result<(), jetstream::context::PublishError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Stored,
        Err(e) if matches!(e.kind(), PublishErrorKind::MaxPayloadExceeded) => Outcome::Refused(e.to_string()),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}
