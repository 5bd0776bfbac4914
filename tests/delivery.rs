//! Delivery guarantees and flow control, as failure stories: poison messages,
//! backoff, dead letters, durable subscribers that come back, slow
//! consumers under each overflow policy, and pull consumers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, ConsumerStart, Error, Message, Overflow, Record, RetryBackoff,
    StartPosition, Subscription, SubscriptionOptions, TopicOptions,
};

mod common;
use common::{WAIT, broker, wait_for};

fn fast_backoff() -> RetryBackoff {
    RetryBackoff { initial: Duration::from_millis(1), max: Duration::from_millis(5), multiplier: 2.0 }
}

/// (payload, attempt) pairs a handler saw.
type Attempts = Arc<Mutex<Vec<(Vec<u8>, u32)>>>;

/// A DLQ message as (payload, key, attributes).
type Dead = (Vec<u8>, Option<Vec<u8>>, HashMap<String, String>);

fn drain_dlq(b: &Broker, topic: &str) -> Vec<Dead> {
    let mut c = b.consumer("dlq-reader", topic, ConsumerOptions::default()).unwrap();
    let got = c
        .poll(1000, Duration::from_millis(100))
        .unwrap()
        .iter()
        .map(|m| {
            let attrs = m.attributes().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
            (m.payload().to_vec(), m.key().map(<[u8]>::to_vec), attrs)
        })
        .collect();
    c.close();
    got
}

#[test]
fn a_poison_message_is_tried_max_attempts_times_then_dead_lettered_and_the_rest_flow_on() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    let log: Attempts = Arc::default();
    let l = log.clone();
    let sub = b
        .subscribe(
            "orders",
            SubscriptionOptions {
                name: Some("billing".into()),
                max_attempts: Some(4),
                backoff: fast_backoff(),
                ..Default::default()
            },
            move |m: &Message<'_>| {
                l.lock().unwrap().push((m.payload().to_vec(), m.attempt()));
                if m.payload() == b"poison" {
                    m.set_reason(format!("cannot parse (attempt {})", m.attempt()));
                    return Ack::Retry;
                }
                Ack::Success
            },
        )
        .unwrap();
    assert!(b.topics().contains(&"$dlq/billing".to_owned()), "the dead-letter topic exists from subscribe time");
    b.publish("orders", &Record::new(b"first")).unwrap();
    b.publish("orders", &Record::new(b"poison").with_key(b"k-9").with_attributes(&[("region", "IN")])).unwrap();
    b.publish("orders", &Record::new(b"after-1")).unwrap();
    b.publish("orders", &Record::new(b"after-2")).unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());

    let expected: Vec<(Vec<u8>, u32)> =
        [("first", 1), ("poison", 1), ("poison", 2), ("poison", 3), ("poison", 4), ("after-1", 1), ("after-2", 1)]
            .iter()
            .map(|(p, a)| (p.as_bytes().to_vec(), *a))
            .collect();
    assert_eq!(*log.lock().unwrap(), expected, "exactly max_attempts tries, then the rest in order");

    let dead = drain_dlq(&b, "$dlq/billing");
    assert_eq!(dead.len(), 1);
    let (payload, key, attrs) = &dead[0];
    assert_eq!(payload, b"poison");
    assert_eq!(key.as_deref(), Some(&b"k-9"[..]));
    assert_eq!(attrs["region"], "IN");
    assert_eq!(attrs["rill.dlq.reason"], "cannot parse (attempt 4)");
    assert_eq!(attrs["rill.dlq.topic"], "orders");
    assert_eq!(attrs["rill.dlq.partition"], "0");
    assert_eq!(attrs["rill.dlq.offset"], "1");
    assert_eq!(attrs["rill.dlq.attempts"], "4");
    assert_eq!(attrs["rill.dlq.subscription"], "billing");
    let st = sub.stats();
    assert_eq!((st.delivered, st.retried, st.dead_lettered, st.acked), (7, 3, 1, 3));
}

#[test]
fn backoff_spacing_is_at_least_the_configured_delay() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let times: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let t = times.clone();
    let backoff = RetryBackoff { initial: Duration::from_millis(20), max: Duration::from_millis(50), multiplier: 2.0 };
    let sub = b
        .subscribe(
            "t",
            SubscriptionOptions { max_attempts: Some(4), backoff, ..Default::default() },
            move |_: &Message<'_>| {
                t.lock().unwrap().push(Instant::now());
                Ack::Retry
            },
        )
        .unwrap();
    b.publish("t", &Record::new(b"x")).unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    let times = times.lock().unwrap();
    assert_eq!(times.len(), 4);
    // 20 ms, then 40 ms, then 50 ms (capped). No upper bound: the machine is noisy.
    for (k, want) in [20u64, 40, 50].iter().enumerate() {
        let gap = times[k + 1] - times[k];
        assert!(gap >= Duration::from_millis(*want), "gap {k} was {gap:?}, want >= {want} ms");
    }
    assert_eq!(backoff.delay(1), Duration::from_millis(20));
    assert_eq!(backoff.delay(2), Duration::from_millis(40));
    assert_eq!(backoff.delay(9), Duration::from_millis(50));
}

#[test]
fn dead_letter_acks_and_panics_carry_their_reason_to_a_custom_topic() {
    let b = broker();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    let sub = b
        .subscribe(
            "jobs",
            SubscriptionOptions {
                dead_letter_topic: Some("failed/jobs".into()),
                max_attempts: Some(2),
                backoff: fast_backoff(),
                ..Default::default()
            },
            |m: &Message<'_>| match m.payload() {
                b"reject" => {
                    m.set_reason("schema v1 is not supported");
                    Ack::DeadLetter
                }
                b"crash" => panic!("index out of bounds"),
                _ => Ack::Success,
            },
        )
        .unwrap();
    for p in [&b"reject"[..], b"crash", b"ok"] {
        b.publish("jobs", &Record::new(p)).unwrap();
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    let dead = drain_dlq(&b, "failed/jobs");
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].2["rill.dlq.reason"], "schema v1 is not supported");
    assert_eq!(dead[0].2["rill.dlq.attempts"], "1");
    assert!(dead[1].2["rill.dlq.reason"].contains("index out of bounds"), "{:?}", dead[1].2);
    assert_eq!(dead[1].2["rill.dlq.attempts"], "2");
    assert!(dead[0].2["rill.dlq.subscription"].starts_with("anon-"));
    assert_eq!(sub.stats().dead_letter_topic.as_deref(), Some("failed/jobs"));
}

#[test]
fn a_reason_given_with_a_success_does_not_follow_the_next_message() {
    // The drain leaves the reason cell alone while it stays empty; one a
    // handler filled must still be emptied before the next message.
    let b = broker();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    let sub = b
        .subscribe(
            "jobs",
            SubscriptionOptions { dead_letter_topic: Some("failed/jobs".into()), ..Default::default() },
            move |m: &Message<'_>| match m.payload() {
                b"noted" => {
                    m.set_reason("fine, but noted");
                    Ack::Success
                }
                b"reject" => Ack::DeadLetter,
                _ => Ack::Success,
            },
        )
        .unwrap();
    for p in [&b"noted"[..], b"reject", b"noted", b"ok"] {
        b.publish("jobs", &Record::new(p)).unwrap();
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    let dead = drain_dlq(&b, "failed/jobs");
    assert_eq!(dead.len(), 1);
    assert_ne!(dead[0].2["rill.dlq.reason"], "fine, but noted", "the reason of the message before leaked");
}

fn counting_sub(b: &Broker, name: &str, seen: Arc<Mutex<Vec<u64>>>) -> Subscription {
    b.subscribe(
        "events",
        SubscriptionOptions { name: Some(name.into()), start: StartPosition::Earliest, ..Default::default() },
        move |m: &Message<'_>| {
            seen.lock().unwrap().push(u64::from_le_bytes(m.payload().try_into().unwrap()));
            Ack::Success
        },
    )
    .unwrap()
}

#[test]
fn a_durable_subscriber_that_went_away_gets_everything_it_missed_in_order() {
    let b = broker();
    b.create_topic("events", &TopicOptions::default()).unwrap();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sub = counting_sub(&b, "audit", seen.clone());
    for i in 0..100u64 {
        b.publish("events", &Record::new(&i.to_le_bytes())).unwrap();
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    // A second live subscription with the same name is refused.
    let dup = b.subscribe(
        "events",
        SubscriptionOptions { name: Some("audit".into()), ..Default::default() },
        |_: &Message<'_>| Ack::Success,
    );
    assert!(matches!(dup, Err(Error::Busy(_))), "{dup:?}");
    sub.close();
    for i in 100..1_100u64 {
        b.publish("events", &Record::new(&i.to_le_bytes())).unwrap();
    }
    let back = counting_sub(&b, "audit", seen.clone());
    assert!(back.wait_idle(WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), (0..1_100).collect::<Vec<u64>>(), "all 1,000 missed messages, in order, once");
}

/// A handler call held open until the test lets it go, and a close from
/// another thread while it is held.
#[derive(Clone, Default)]
struct HeldCall {
    entered: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl HeldCall {
    /// In the handler: says it is in the call, and waits to be let go.
    fn hold(&self) {
        self.entered.store(true, Ordering::SeqCst);
        while !self.release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Closes `sub` from another thread while its handler is held, and
    /// checks the close waits for that call.
    fn close_during(&self, sub: &Subscription) {
        wait_for("the handler to start", || self.entered.load(Ordering::SeqCst));
        std::thread::scope(|s| {
            let closer = s.spawn(|| sub.close());
            // `close` marks the subscription closed before it waits for the
            // call in flight; the handler is still held, so the closer must
            // be waiting.
            wait_for("close to begin", || sub.is_closed());
            assert!(!closer.is_finished(), "close returned while the handler was still running");
            self.release.store(true, Ordering::SeqCst);
            closer.join().unwrap();
        });
    }
}

/// A durable subscription "held" whose handler is held in its call on the
/// first message (of 0..3) and then returns `ack`; it is closed from
/// outside meanwhile. Returns what the next subscriber of the name gets.
fn what_comes_after_a_close_during_a_call(ack: Ack) -> Vec<u64> {
    let b = broker();
    b.create_topic("events", &TopicOptions::default()).unwrap();
    let held = HeldCall::default();
    let h = held.clone();
    let first = b
        .subscribe(
            "events",
            SubscriptionOptions { name: Some("held".into()), ..Default::default() },
            move |_: &Message<'_>| {
                h.hold();
                ack
            },
        )
        .unwrap();
    for i in 0..3u64 {
        b.publish("events", &Record::new(&i.to_le_bytes())).unwrap();
    }
    held.close_during(&first);
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let again = counting_sub(&b, "held", seen.clone());
    assert!(again.wait_idle(WAIT).unwrap());
    seen.lock().unwrap().clone()
}

#[test]
fn a_success_returned_while_a_close_waited_for_the_call_counts() {
    assert_eq!(what_comes_after_a_close_during_a_call(Ack::Success), vec![1, 2], "the acked message never comes again");
}

#[test]
fn a_retry_returned_while_a_close_waited_for_the_call_comes_again_on_resume() {
    assert_eq!(what_comes_after_a_close_during_a_call(Ack::Retry), vec![0, 1, 2]);
}

#[test]
fn a_batch_closed_during_its_call_keeps_the_acks_before_its_first_retry() {
    let b = broker();
    b.create_topic("events", &TopicOptions::default()).unwrap();
    for i in 0..6u64 {
        b.publish("events", &Record::new(&i.to_le_bytes())).unwrap();
    }
    let held = HeldCall::default();
    let h = held.clone();
    let first = b
        .subscribe_batch(
            "events",
            SubscriptionOptions {
                name: Some("held".into()),
                start: StartPosition::Earliest,
                // A thread of its own reads the six in one run.
                dedicated_thread: true,
                ..Default::default()
            },
            move |msgs: &[Message<'_>], acks: &mut [Ack]| {
                h.hold();
                assert_eq!(msgs.len(), 6, "one run of all six");
                // 0 and 1 acked, 2 retried, 3 acked; 4 and 5 not handled.
                acks[2] = Ack::Retry;
                4
            },
        )
        .unwrap();
    held.close_during(&first);
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let again = counting_sub(&b, "held", seen.clone());
    assert!(again.wait_idle(WAIT).unwrap());
    // Everything from the first message not acked comes again, in order.
    assert_eq!(*seen.lock().unwrap(), vec![2, 3, 4, 5]);
}

/// A handler that blocks on a gate for the first message it sees.
fn gated(
    entered: &Arc<AtomicBool>,
    gate: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Vec<u64>>>,
) -> impl FnMut(&Message<'_>) -> Ack + Send + 'static {
    let (e, g, s) = (entered.clone(), gate.clone(), seen.clone());
    move |m: &Message<'_>| {
        e.store(true, Ordering::SeqCst);
        while !g.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        s.lock().unwrap().push(u64::from_le_bytes(m.payload().try_into().unwrap()));
        Ack::Success
    }
}

#[test]
fn drop_oldest_keeps_the_newest_lag_limit_messages_and_counts_exactly_what_it_skipped() {
    let b = broker();
    b.create_topic("ticks", &TopicOptions::default()).unwrap();
    let (entered, gate, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::default());
    let sub = b
        .subscribe(
            "ticks",
            SubscriptionOptions { overflow: Overflow::DropOldest, lag_limit: Some(10), ..Default::default() },
            gated(&entered, &gate, &seen),
        )
        .unwrap();
    b.publish("ticks", &Record::new(&0u64.to_le_bytes())).unwrap();
    wait_for("the first delivery", || entered.load(Ordering::SeqCst));
    for i in 1..=100u64 {
        b.publish("ticks", &Record::new(&i.to_le_bytes())).unwrap();
    }
    gate.store(true, Ordering::SeqCst);
    assert!(sub.wait_idle(WAIT).unwrap());
    let mut expect = vec![0u64];
    expect.extend(91..=100);
    assert_eq!(*seen.lock().unwrap(), expect);
    assert_eq!(sub.stats().dropped, 90, "100 waiting, limit 10: exactly 90 skipped");
}

#[test]
fn block_makes_publishers_wait_and_loses_nothing() {
    let b = Broker::new(BrokerConfig { publish_timeout: Some(Duration::from_secs(60)), ..Default::default() }).unwrap();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    let slow_seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let s = slow_seen.clone();
    let sub = b
        .subscribe(
            "jobs",
            SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(8), ..Default::default() },
            move |m: &Message<'_>| {
                std::thread::sleep(Duration::from_micros(300));
                s.lock().unwrap().push(u64::from_le_bytes(m.payload().try_into().unwrap()));
                Ack::Success
            },
        )
        .unwrap();
    for i in 0..500u64 {
        b.publish("jobs", &Record::new(&i.to_le_bytes())).unwrap();
        // A publish returns only once the message fits under the limit.
        let lag = sub.stats().lag;
        assert!(lag <= 8, "lag {lag} after publishing {i}");
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(*slow_seen.lock().unwrap(), (0..500).collect::<Vec<u64>>(), "nothing lost, in order");

    // try_publish says Full at once when the subscriber is at its limit.
    let gate = Arc::new(AtomicBool::new(false));
    let entered = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    b.create_topic("gated", &TopicOptions::default()).unwrap();
    let blocked = b
        .subscribe(
            "gated",
            SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(3), ..Default::default() },
            gated(&entered, &gate, &seen),
        )
        .unwrap();
    b.publish("gated", &Record::new(&0u64.to_le_bytes())).unwrap();
    wait_for("the first delivery", || entered.load(Ordering::SeqCst));
    let mut accepted = 1;
    let full = loop {
        match b.try_publish("gated", &Record::new(&(accepted as u64).to_le_bytes())) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 100, "try_publish never reported Full");
    };
    assert!(matches!(full, Error::Full(_)), "{full:?}");
    assert!(accepted <= 4, "at most lag_limit behind: {accepted}");
    let timeout = b.publish_timeout("gated", &Record::new(b"late"), Duration::from_millis(20));
    assert_eq!(timeout, Err(Error::Timeout));
    gate.store(true, Ordering::SeqCst);
    assert!(blocked.wait_idle(WAIT).unwrap());
    assert_eq!(seen.lock().unwrap().len(), accepted);
    // Once the subscriber is gone, publishers no longer wait.
    drop(blocked);
    for _ in 0..10 {
        b.try_publish("gated", &Record::new(b"free")).unwrap();
    }
}

#[test]
fn block_keeps_retention_from_trimming_unread_messages() {
    let b = broker();
    let small = TopicOptions { retention_bytes: Some(8 << 10), ..TopicOptions::default() };
    b.create_topic("audit", &small).unwrap();
    let (entered, gate, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::default());
    let sub = b
        .subscribe(
            "audit",
            SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(5_000), ..Default::default() },
            gated(&entered, &gate, &seen),
        )
        .unwrap();
    let payload = [0u8; 92];
    for i in 0..2_000u64 {
        let mut p = payload;
        p[..8].copy_from_slice(&i.to_le_bytes());
        b.publish("audit", &Record::new(&p[..8])).unwrap();
    }
    let st = b.topic_stats("audit").unwrap();
    assert!(st.retained_bytes > 8 << 10, "retention held back by the unread messages: {st:?}");
    assert_eq!(st.partitions[0].first_offset, 0);
    gate.store(true, Ordering::SeqCst);
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), (0..2_000).collect::<Vec<u64>>());
    assert_eq!(sub.stats().missed, 0);
}

#[test]
fn disconnect_closes_a_subscriber_that_falls_too_far_behind_and_a_durable_one_can_resume() {
    let b = broker();
    b.create_topic("events", &TopicOptions::default()).unwrap();
    let (entered, gate, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::default());
    let sub = b
        .subscribe(
            "events",
            SubscriptionOptions {
                name: Some("lagger".into()),
                overflow: Overflow::Disconnect,
                lag_limit: Some(5),
                ..Default::default()
            },
            gated(&entered, &gate, &seen),
        )
        .unwrap();
    b.publish("events", &Record::new(&0u64.to_le_bytes())).unwrap();
    wait_for("the first delivery", || entered.load(Ordering::SeqCst));
    for i in 1..=20u64 {
        b.publish("events", &Record::new(&i.to_le_bytes())).unwrap();
    }
    gate.store(true, Ordering::SeqCst);
    wait_for("the disconnect", || sub.is_closed());
    let reason = sub.stats().closed_reason.unwrap();
    assert!(reason.contains("lag 20") && reason.contains("limit 5"), "{reason}");
    assert_eq!(*seen.lock().unwrap(), vec![0]);
    // It kept its position: resuming (without the limit) delivers the rest.
    let rest: Arc<Mutex<Vec<u64>>> = Arc::default();
    let r = rest.clone();
    let back = b
        .subscribe(
            "events",
            SubscriptionOptions { name: Some("lagger".into()), ..Default::default() },
            move |m: &Message<'_>| {
                r.lock().unwrap().push(u64::from_le_bytes(m.payload().try_into().unwrap()));
                Ack::Success
            },
        )
        .unwrap();
    assert!(back.wait_idle(WAIT).unwrap());
    assert_eq!(*rest.lock().unwrap(), (1..=20).collect::<Vec<u64>>());
}

#[test]
fn a_subscriber_overtaken_by_retention_is_told_how_many_it_missed() {
    let b = broker();
    let reported = Arc::new(AtomicU64::new(0));
    let rep = reported.clone();
    let (sub, gate, seen) = overtaken(
        &b,
        Arc::new(move |topic: &str, partition: u32, missed: u64| {
            assert_eq!((topic, partition), ("firehose", 0));
            rep.fetch_add(missed, Ordering::SeqCst);
        }),
    );
    let n = 5_000u64;
    gate.store(true, Ordering::SeqCst);
    assert!(sub.wait_idle(WAIT).unwrap());
    let st = sub.stats();
    let delivered = seen.lock().unwrap().len() as u64;
    assert!(st.missed > 0);
    assert_eq!(st.missed, reported.load(Ordering::SeqCst), "the callback heard every miss");
    assert_eq!(delivered + st.missed, n, "every message was either delivered or reported missed");
    let seen = seen.lock().unwrap();
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_pull_consumer_polls_commits_rolls_back_and_replays() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    for i in 0..10u8 {
        b.publish("orders", &Record::new(&[i])).unwrap();
    }
    let mut c = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    let first: Vec<u8> = c.poll(4, Duration::ZERO).unwrap().iter().map(|m| m.payload()[0]).collect();
    assert_eq!(first, vec![0, 1, 2, 3]);
    c.commit().unwrap();
    assert_eq!(c.committed(0).unwrap(), 4);
    let second: Vec<u8> = c.poll(3, Duration::ZERO).unwrap().iter().map(|m| m.payload()[0]).collect();
    assert_eq!(second, vec![4, 5, 6]);
    assert_eq!(c.position(0).unwrap(), 7);
    // Not committed: roll back and the same batch comes again.
    c.rollback().unwrap();
    assert_eq!(c.position(0).unwrap(), 4);
    let replay: Vec<u8> = c.poll(3, Duration::ZERO).unwrap().iter().map(|m| m.payload()[0]).collect();
    assert_eq!(replay, second);
    // Seek anywhere retained; outside is a clear error.
    c.seek(0, 1).unwrap();
    assert_eq!(c.poll(1, Duration::ZERO).unwrap()[0].payload(), &[1]);
    assert!(matches!(c.seek(0, 11), Err(Error::OutOfRange { partition: 0, offset: 11, first: 0, end: 10 })));
    assert!(matches!(c.seek(3, 0), Err(Error::NotFound(_))));
    c.seek_to_end().unwrap();
    assert!(c.poll(10, Duration::ZERO).unwrap().is_empty());
    c.seek_to_beginning().unwrap();
    assert_eq!(c.poll(100, Duration::ZERO).unwrap().len(), 10);
    c.commit_offset(0, 9).unwrap();
    assert!(matches!(c.commit_offset(0, 42), Err(Error::OutOfRange { .. })));
    let st = c.stats();
    assert_eq!((st.partitions[0].committed, st.lag), (Some(9), 1));
}

#[test]
fn a_new_consumer_of_a_group_resumes_where_the_group_committed_and_groups_are_independent() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    for i in 0..20u8 {
        b.publish("orders", &Record::new(&[i])).unwrap();
    }
    let mut c = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    let got = c.poll(8, Duration::ZERO).unwrap().len();
    assert_eq!(got, 8);
    c.commit().unwrap();
    drop(c);
    let mut again = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    let rest = again.poll(100, Duration::ZERO).unwrap().len();
    assert_eq!(rest, 12, "the group resumes after its committed offsets");
    let mut other = b.consumer("shipping", "orders", ConsumerOptions::default()).unwrap();
    let mut all: Vec<u8> = other.poll(100, Duration::ZERO).unwrap().iter().map(|m| m.payload()[0]).collect();
    all.sort_unstable();
    assert_eq!(all, (0..20).collect::<Vec<u8>>(), "another group sees everything");
    let gs = b.group_stats("billing", "orders").unwrap();
    assert_eq!(gs.lag, 12);
    assert!(matches!(b.group_stats("nobody", "orders"), Err(Error::NotFound(_))));
    let mut latest =
        b.consumer("late", "orders", ConsumerOptions { start: ConsumerStart::Latest, ..Default::default() }).unwrap();
    assert!(latest.poll(10, Duration::ZERO).unwrap().is_empty());
}

#[test]
fn poll_parks_until_a_message_arrives_and_returns_empty_on_timeout() {
    let b = broker();
    b.create_topic("q", &TopicOptions::default()).unwrap();
    let mut c = b.consumer("g", "q", ConsumerOptions::default()).unwrap();
    let started = Instant::now();
    assert!(c.poll(10, Duration::from_millis(30)).unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(30));
    let b2 = b.clone();
    let publisher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        b2.publish("q", &Record::new(b"wake")).unwrap();
    });
    let got: Vec<Vec<u8>> = c.poll(10, WAIT).unwrap().iter().map(|m| m.payload().to_vec()).collect();
    assert_eq!(got, vec![b"wake".to_vec()]);
    publisher.join().unwrap();
    // Closing the broker wakes a blocked poll with Closed: a unit test
    // (`closing_the_broker_wakes_a_poll_that_is_blocked` in
    // src/broker/tests.rs) closes only once the poll is seen waiting.
}

#[test]
fn at_least_once_costs_redeliveries_only_for_failures() {
    // Every success is delivered once; only retried messages come again.
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let sub = b
        .subscribe(
            "t",
            SubscriptionOptions { backoff: fast_backoff(), ..Default::default() },
            move |m: &Message<'_>| {
                c.fetch_add(1, Ordering::SeqCst);
                if m.payload()[0].is_multiple_of(10) && m.attempt() == 1 { Ack::Retry } else { Ack::Success }
            },
        )
        .unwrap();
    for i in 0..100u8 {
        b.publish("t", &Record::new(&[i])).unwrap();
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 110);
    let st = sub.stats();
    assert_eq!((st.acked, st.retried, st.delivered), (100, 10, 110));
}

#[test]
fn a_batch_handler_gets_runs_of_messages_and_partial_progress_is_redelivered() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let payloads: [&[u8]; 8] = [b"a", b"half", b"b", b"skip", b"retry", b"c", b"dead", b"d"];
    let records: Vec<Record<'_>> = payloads
        .iter()
        .map(|p| if *p == b"skip" { Record::new(p).with_attributes(&[("skip", "1")]) } else { Record::new(p) })
        .collect();
    // Published before subscribing (from the start), so the first read sees
    // the whole batch committed rather than racing the publisher.
    b.publish_batch("t", &records).unwrap();
    // Per call: the (offset, attempt) of each message it was given.
    type Calls = Arc<Mutex<Vec<Vec<(u64, u32)>>>>;
    let calls: Calls = Arc::default();
    let c = calls.clone();
    let mut stopped_early = false;
    let sub = b
        .subscribe_batch(
            "t",
            SubscriptionOptions {
                start: StartPosition::Earliest,
                backoff: fast_backoff(),
                filter: Some("NOT attributes:skip".into()),
                // A thread of its own always reads runs of up to 64; on the
                // pool, run lengths follow the handler's timing (see
                // a_slow_handler_on_a_single_worker_... in tests/broker.rs).
                dedicated_thread: true,
                ..Default::default()
            },
            move |msgs: &[Message<'_>], acks: &mut [Ack]| {
                c.lock().unwrap().push(msgs.iter().map(|m| (m.offset(), m.attempt())).collect());
                for (k, m) in msgs.iter().enumerate() {
                    match m.payload() {
                        b"half" if !stopped_early => {
                            // Stop early, once: the rest come again in the next call.
                            stopped_early = true;
                            return k;
                        }
                        b"retry" if m.attempt() == 1 => {
                            m.set_reason("not yet");
                            acks[k] = Ack::Retry;
                            return k + 1;
                        }
                        b"dead" => acks[k] = Ack::DeadLetter,
                        _ => {}
                    }
                }
                msgs.len()
            },
        )
        .unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    let calls = calls.lock().unwrap();
    // Every call sees consecutive unfiltered offsets; the first sees them all.
    assert_eq!(calls[0], vec![(0, 1), (1, 1), (2, 1), (4, 1), (5, 1), (6, 1), (7, 1)]);
    // It stopped at "half" (offset 1): everything from there comes again.
    assert_eq!(calls[1][0], (1, 1));
    // "retry" came back as attempt 2 after a backoff, with what followed it.
    assert!(calls.iter().any(|c| c.first() == Some(&(4, 2))), "{calls:?}");
    let st = sub.stats();
    assert_eq!((st.acked, st.retried, st.dead_lettered, st.filtered), (6, 1, 1, 1), "{st:?}");
    let dead = drain_dlq(&b, &st.dead_letter_topic.unwrap());
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, b"dead");
}

#[test]
fn a_panicking_batch_handler_retries_its_first_message() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
    let a = attempts.clone();
    let sub = b
        .subscribe_batch(
            "t",
            SubscriptionOptions { backoff: fast_backoff(), ..Default::default() },
            move |msgs: &[Message<'_>], _acks: &mut [Ack]| {
                a.lock().unwrap().push(msgs[0].attempt());
                if msgs[0].attempt() == 1 {
                    panic!("batch boom");
                }
                msgs.len()
            },
        )
        .unwrap();
    b.publish("t", &Record::new(b"x")).unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(*attempts.lock().unwrap(), vec![1, 2]);
    assert_eq!(sub.stats().retried, 1);
}

/// A subscription to `firehose` (16 KiB retention) whose handler holds the
/// first message until it is let go, while 5,000 more are published: it is
/// overtaken by retention, so `on_lagged` runs once it moves on.
fn overtaken(b: &Broker, on_lagged: rill::LagCallback) -> (Subscription, Arc<AtomicBool>, Arc<Mutex<Vec<u64>>>) {
    b.create_topic("firehose", &TopicOptions { retention_bytes: Some(16 << 10), ..TopicOptions::default() }).unwrap();
    let (entered, gate, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::default());
    let options = SubscriptionOptions { on_lagged: Some(on_lagged), ..Default::default() };
    let sub = b.subscribe("firehose", options, gated(&entered, &gate, &seen)).unwrap();
    b.publish("firehose", &Record::new(&0u64.to_le_bytes())).unwrap();
    wait_for("the first delivery", || entered.load(Ordering::SeqCst));
    for i in 1..5_000u64 {
        b.publish("firehose", &Record::new(&i.to_le_bytes())).unwrap();
    }
    (sub, gate, seen)
}

#[test]
fn a_panicking_lag_callback_neither_kills_a_worker_nor_stops_its_subscription() {
    let b = Broker::new(BrokerConfig { worker_threads: Some(1), ..Default::default() }).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let (sub, gate, _) = overtaken(
        &b,
        Arc::new(move |_: &str, _: u32, _: u64| {
            c.fetch_add(1, Ordering::SeqCst);
            panic!("the lag callback fails");
        }),
    );
    gate.store(true, Ordering::SeqCst);
    assert!(sub.wait_idle(WAIT).unwrap(), "the subscription went on past the panic");
    assert!(calls.load(Ordering::SeqCst) >= 1 && sub.stats().missed > 0);
    // The only worker is still alive: another subscription gets its message.
    b.create_topic("other", &TopicOptions::default()).unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let g = got.clone();
    let other = b
        .subscribe("other", SubscriptionOptions::default(), move |_: &Message<'_>| {
            g.fetch_add(1, Ordering::SeqCst);
            Ack::Success
        })
        .unwrap();
    b.publish("other", &Record::new(b"x")).unwrap();
    assert!(other.wait_idle(WAIT).unwrap());
    assert_eq!(got.load(Ordering::SeqCst), 1);
}

#[test]
fn a_lag_callback_may_close_its_own_subscription() {
    let b = broker();
    let slot: Arc<std::sync::OnceLock<Subscription>> = Arc::default();
    let s = slot.clone();
    let (sub, gate, _) = overtaken(
        &b,
        Arc::new(move |_: &str, _: u32, _: u64| {
            if let Some(sub) = s.get() {
                sub.close();
            }
        }),
    );
    assert!(slot.set(sub).is_ok());
    gate.store(true, Ordering::SeqCst);
    let sub = slot.get().unwrap();
    wait_for("the lag callback to close it", || sub.is_closed());
    assert!(matches!(sub.wait_idle(WAIT), Err(Error::Closed(_))));
    // And the broker goes on.
    b.publish("firehose", &Record::new(&1u64.to_le_bytes())).unwrap();
}

#[test]
fn a_retried_message_comes_back_under_a_wildcard_and_order_is_kept() {
    // A wildcard subscription drains through its ready set; a retried
    // message must come back after its backoff although no publisher flags
    // its partition again, ahead of the message behind it.
    let b = broker();
    for t in ["jobs/a", "jobs/b"] {
        b.create_topic(t, &TopicOptions::default()).unwrap();
    }
    // (topic, payload, attempt) per delivery.
    type Deliveries = Vec<(String, Vec<u8>, u32)>;
    let seen: Arc<Mutex<Deliveries>> = Arc::default();
    let s = seen.clone();
    let sub = b
        .subscribe(
            "jobs/*",
            SubscriptionOptions { backoff: fast_backoff(), ..Default::default() },
            move |m: &Message<'_>| {
                s.lock().unwrap().push((m.topic().to_owned(), m.payload().to_vec(), m.attempt()));
                if m.payload() == b"flaky" && m.attempt() < 3 { Ack::Retry } else { Ack::Success }
            },
        )
        .unwrap();
    b.publish("jobs/a", &Record::new(b"flaky")).unwrap();
    b.publish("jobs/a", &Record::new(b"after")).unwrap();
    b.publish("jobs/b", &Record::new(b"other")).unwrap();
    wait_for("the retries and the rest", || seen.lock().unwrap().len() == 5);
    assert!(sub.wait_idle(WAIT).unwrap());
    let seen = seen.lock().unwrap();
    let on_a: Vec<(&[u8], u32)> =
        seen.iter().filter(|(t, _, _)| t == "jobs/a").map(|(_, p, a)| (p.as_slice(), *a)).collect();
    assert_eq!(on_a, vec![(&b"flaky"[..], 1), (&b"flaky"[..], 2), (&b"flaky"[..], 3), (&b"after"[..], 1)]);
    assert!(seen.iter().any(|(t, p, _)| t == "jobs/b" && p == b"other"));
    assert_eq!(sub.stats().retried, 2);
}

/// How long a test waits for a call that used to hang: past it, the call is
/// taken to hang and the test fails instead of hanging with it.
const WATCHDOG: Duration = Duration::from_secs(20);

/// The next result from a handler, or a failed test if none comes within
/// [`WATCHDOG`]. On failure the broker is leaked, not closed: closing would
/// wait for the hung handler call and hang the test after all.
fn within_watchdog<T>(rx: &std::sync::mpsc::Receiver<T>, b: &Broker, what: &str) -> T {
    rx.recv_timeout(WATCHDOG).unwrap_or_else(|_| {
        std::mem::forget(b.clone());
        panic!("{what}: no answer in {WATCHDOG:?}, it hangs")
    })
}

#[test]
fn wait_idle_from_its_own_handler_fails_at_once_instead_of_waiting_for_itself() {
    let b = broker();
    b.create_topic("selfwait", &TopicOptions::default()).unwrap();
    let slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let s = slot.clone();
    let sub = b
        .subscribe("selfwait", SubscriptionOptions::default(), move |_: &Message<'_>| {
            let guard = s.lock().unwrap();
            let me = guard.as_ref().expect("stored before the publish");
            // No limit (a Duration too long to add to now), then a short one:
            // both would wait for this very call.
            for timeout in [Duration::MAX, Duration::from_millis(50)] {
                tx.send(me.wait_idle(timeout)).unwrap();
            }
            Ack::Success
        })
        .unwrap();
    *slot.lock().unwrap() = Some(sub);
    b.publish("selfwait", &Record::new(b"x")).unwrap();
    for _ in 0..2 {
        let got = within_watchdog(&rx, &b, "wait_idle from the own handler");
        match got {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("own handler"), "{why}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    // Outside the handler it works as before.
    let sub = slot.lock().unwrap().take().unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(sub.stats().acked, 1);
}

#[test]
fn a_block_subscribers_handler_publishing_into_its_own_full_topic_fails_fast_with_full() {
    // No publish timeout: before the fix the handler waited for itself for ever.
    let b = Broker::new(BrokerConfig { publish_timeout: None, ..Default::default() }).unwrap();
    b.create_topic("echo", &TopicOptions::default()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let publisher = b.clone();
    let sub = b
        .subscribe(
            "echo",
            SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(2), ..Default::default() },
            move |m: &Message<'_>| {
                if m.payload() == b"seed" {
                    // Publish into its own topic until it refuses: room for
                    // one more beside the message in hand, then it is full.
                    let mut accepted = 0u32;
                    let err = loop {
                        match publisher.publish("echo", &Record::new(b"echo")) {
                            Ok(_) => accepted += 1,
                            Err(e) => break e,
                        }
                        assert!(accepted < 100, "never refused");
                    };
                    // The batch path is guarded the same way.
                    let batch = publisher.publish_batch("echo", &[Record::new(b"echo")]);
                    tx.send((accepted, err, batch)).unwrap();
                }
                Ack::Success
            },
        )
        .unwrap();
    b.publish("echo", &Record::new(b"seed")).unwrap();
    let (accepted, err, batch) = within_watchdog(&rx, &b, "publishing into the own full topic");
    assert_eq!(accepted, 1, "room for lag_limit messages counting the one in hand");
    match err {
        Error::Full(why) => assert!(why.contains("handler"), "{why}"),
        other => panic!("expected Full, got {other:?}"),
    }
    assert!(matches!(batch, Err(Error::Full(_))), "{batch:?}");
    // Once the handler returned, everything accepted is delivered.
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(sub.stats().acked, 2);
}

#[test]
fn a_handler_publishing_where_another_block_subscriber_lags_still_waits_for_it() {
    // Two workers whatever the machine: the relay's handler holds one while
    // it waits, and `slow` needs another to make room (with one worker this
    // is a deadlock by design: a handler that blocks holds its worker).
    let config = BrokerConfig { publish_timeout: None, worker_threads: Some(2), ..Default::default() };
    let b = Broker::new(config).unwrap();
    b.create_topic("in", &TopicOptions::default()).unwrap();
    b.create_topic("out", &TopicOptions::default()).unwrap();
    let (entered, gate, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::default());
    let block = |limit| SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(limit), ..Default::default() };
    let slow = b.subscribe("out", block(1), gated(&entered, &gate, &seen)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let publisher = b.clone();
    // A Block subscriber itself (of another topic), so its handler is marked.
    let relay = b
        .subscribe("in", block(8), move |_: &Message<'_>| {
            for i in 0..5u64 {
                tx.send(publisher.publish("out", &Record::new(&i.to_le_bytes())).map(drop)).unwrap();
            }
            Ack::Success
        })
        .unwrap();
    b.publish("in", &Record::new(b"go")).unwrap();
    // The first fits; `slow` takes it and holds it, so the rest must wait for
    // `slow`, which is not the relay: they wait, and do not fail.
    within_watchdog(&rx, &b, "the relay's first publish").unwrap();
    wait_for("the slow subscriber to hold a message", || entered.load(Ordering::SeqCst));
    gate.store(true, Ordering::SeqCst);
    for _ in 1..5 {
        within_watchdog(&rx, &b, "the relay's publish").expect("waited and published");
    }
    assert!(relay.wait_idle(WAIT).unwrap());
    assert!(slow.wait_idle(WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), (0..5).collect::<Vec<u64>>());
}

#[test]
fn a_dead_letter_topic_the_own_pattern_matches_is_refused_at_subscribe() {
    let b = broker();
    b.create_topic("orders/new", &TopicOptions::default()).unwrap();
    let looping = |pattern: &str, name: Option<&str>, dlq: Option<&str>| {
        let options = SubscriptionOptions {
            name: name.map(str::to_owned),
            dead_letter_topic: dlq.map(str::to_owned),
            ..Default::default()
        };
        b.subscribe(pattern, options, |_: &Message<'_>| Ack::DeadLetter)
    };
    for (pattern, name, dlq, shown) in [
        ("orders/**", None, Some("orders/dead"), "orders/dead"),
        ("orders/new", None, Some("orders/new"), "orders/new"),
        // The default `$dlq/<name>`, seen by a pattern that spells `$dlq`.
        ("$dlq/*", Some("watcher"), None, "$dlq/watcher"),
        ("$dlq/**", None, None, "$dlq/anon-"),
    ] {
        match looping(pattern, name, dlq) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains(shown) && why.contains(pattern), "{pattern}: {why}");
            }
            other => panic!("{pattern} with dead letters to {dlq:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(!b.topics().contains(&"orders/dead".to_owned()), "a refused subscribe creates nothing");
    assert!(!b.topics().contains(&"$dlq/watcher".to_owned()), "a refused subscribe creates nothing");
    // Leading wildcards do not see `$` topics, so the default is fine for
    // them; a `$dlq` watcher with its dead letters elsewhere is fine; and
    // the refused name is free to use.
    let all = looping("**", None, None).unwrap();
    let watcher = looping("$dlq/*", Some("watcher"), Some("dead-watchers")).unwrap();
    let orders = looping("orders/**", None, Some("dead/orders")).unwrap();
    b.publish("orders/new", &Record::new(b"poison")).unwrap();
    assert!(orders.wait_idle(WAIT).unwrap());
    assert!(all.wait_idle(WAIT).unwrap());
    assert_eq!(orders.stats().dead_lettered, 1);
    assert_eq!(orders.stats().delivered, 1, "delivered once, not again through its dead letters");
    drop((all, watcher));
}

/// The idle hook, as an event loop uses it instead of blocking in
/// `wait_idle`: a `wait_idle` that found the subscription busy arms it, and
/// the delivery going idle rings it once; a `wait_idle` that finds it idle
/// disarms it. A ring that never came would time out the wait below.
#[test]
fn an_idle_hook_rings_when_a_busy_subscription_goes_idle() {
    let b = broker();
    common::topic(&b, "t", 1);
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let entered = Arc::new(AtomicUsize::new(0));
    let e = entered.clone();
    let sub = b
        .subscribe("t", SubscriptionOptions::default(), move |_m: &Message<'_>| {
            e.fetch_add(1, Ordering::SeqCst);
            gate.lock().unwrap().recv_timeout(WAIT).expect("released");
            Ack::Success
        })
        .unwrap();
    let rings = Arc::new(AtomicUsize::new(0));
    let r = rings.clone();
    sub.set_idle_hook(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    for round in 1..=3 {
        common::publish(&b, "t", b"m");
        wait_for("the handler to hold the message", || entered.load(Ordering::SeqCst) == round);
        let before = rings.load(Ordering::SeqCst);
        assert!(!sub.wait_idle(Duration::ZERO).unwrap(), "busy: armed");
        release.send(()).unwrap();
        wait_for("the idle hook", || rings.load(Ordering::SeqCst) > before);
        assert!(sub.wait_idle(Duration::ZERO).unwrap());
    }
    sub.close();
    assert!(matches!(sub.wait_idle(Duration::ZERO), Err(Error::Closed(_))));
}

/// A dead letter is its message plus `rill.dlq.*` attributes: one of a
/// message at its topic's size limit did not fit a `$dlq/<name>` of the
/// same limit, and the message was dropped (logged). The broker makes its
/// dead-letter topics with room for the attributes, for subscriptions and
/// consumer groups alike.
#[test]
fn a_message_at_the_size_limit_is_dead_lettered_whole() {
    let b = broker();
    // The default limit: that of a dead-letter topic made with the defaults.
    let limit = rill::log::DEFAULT_MAX_RECORD_BYTES;
    b.create_topic("big", &TopicOptions::default()).unwrap();
    let len = (0..=limit).rev().find(|&l| Record::new(&vec![7; l]).encoded_len().unwrap() <= limit).unwrap();
    b.publish("big", &Record::new(&vec![7; len])).unwrap();
    let options = SubscriptionOptions {
        name: Some("refuses".into()),
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    let sub = b.subscribe("big", options, |_| Ack::DeadLetter).unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    let s = sub.stats();
    assert_eq!((s.dead_lettered, s.dropped), (1, 0), "{s:?}");
    sub.close();
    let mut group = b.consumer("g", "big", ConsumerOptions { max_attempts: 1, ..ConsumerOptions::default() }).unwrap();
    let m = &group.poll(1, WAIT).unwrap()[0];
    let (partition, offset) = (m.partition(), m.offset());
    assert!(group.nack(partition, offset).unwrap(), "dead-lettered at its only attempt");
    for dlq in ["$dlq/refuses", "$dlq/g"] {
        let mut reader = b.consumer("reader", dlq, ConsumerOptions::default()).unwrap();
        let got = reader.poll(10, WAIT).unwrap();
        assert_eq!((got.len(), got[0].record().payload().len()), (1, len), "{dlq}");
    }
}
