//! Operating a broker (issue 13): listing and describing topics,
//! subscriptions and consumer groups; deleting them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rill::{Ack, ConsumerOptions, Error, Record, SubscriptionOptions, SubscriptionState};

use common::{WAIT, broker, earliest, publish, topic};

#[test]
fn topics_subscriptions_and_groups_are_listed_with_their_stats() {
    let b = broker();
    topic(&b, "orders/eu", 2);
    topic(&b, "orders/us", 1);
    topic(&b, "audit", 1);
    assert_eq!(b.topics(), vec!["audit", "orders/eu", "orders/us"]);

    let named = SubscriptionOptions { name: Some("billing".into()), ..earliest() };
    let billing = b.subscribe("orders/*", named, |_| Ack::Success).unwrap();
    let audit = b.subscribe("audit", earliest(), |_| Ack::Success).unwrap();
    for i in 0..5u8 {
        publish(&b, "orders/us", &[i]);
    }
    assert!(billing.wait_idle(WAIT).unwrap());
    assert!(audit.wait_idle(WAIT).unwrap());

    let subs = b.subscriptions();
    assert_eq!(subs.len(), 2, "{subs:?}");
    let names: Vec<&str> = subs.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"billing") && names.contains(&audit.name()), "{names:?}");
    let s = subs.iter().find(|s| s.name == "billing").unwrap();
    assert_eq!(
        (s.pattern.as_str(), s.state, s.delivered, s.acked, s.lag),
        ("orders/*", SubscriptionState::Idle, 5, 5, 0)
    );
    // One entry per partition of every matched topic, each with its lag.
    assert_eq!(s.partitions.len(), 3);
    assert_eq!(s.partitions.iter().find(|p| p.topic == "orders/us").unwrap().position, 5);
    // A closed subscription is no longer listed.
    drop(audit);
    assert_eq!(b.subscriptions().iter().map(|s| s.name.clone()).collect::<Vec<_>>(), vec!["billing".to_string()]);

    assert!(b.groups().is_empty());
    let mut c = b.consumer("reports", "orders/us", ConsumerOptions::default()).unwrap();
    let got = c.poll(3, WAIT).unwrap().len();
    assert_eq!(got, 3);
    c.commit().unwrap();
    drop(c);
    let _other = b.consumer("archive", "audit", ConsumerOptions::default()).unwrap();
    assert_eq!(
        b.groups(),
        vec![("archive".to_string(), "audit".to_string()), ("reports".to_string(), "orders/us".to_string())]
    );
    // The group's lag per partition, with no live consumer.
    let g = b.group_stats("reports", "orders/us").unwrap();
    assert_eq!((g.lag, g.partitions[0].committed, g.partitions[0].end), (2, Some(3), 5));
    assert!(matches!(b.group_stats("nobody", "orders/us"), Err(Error::NotFound(_))));
    assert!(matches!(b.group_stats("reports", "gone"), Err(Error::NoSuchTopic(_))));
}

#[test]
fn the_last_handler_error_is_kept_in_the_stats() {
    let b = broker();
    topic(&b, "jobs", 1);
    let options = SubscriptionOptions { max_attempts: Some(1), ..earliest() };
    let sub = b
        .subscribe("jobs", options, |m| {
            if m.payload() == b"bad" {
                m.set_reason("cannot parse the job");
                Ack::Retry
            } else if m.payload() == b"boom" {
                panic!("the job blew up");
            } else {
                Ack::Success
            }
        })
        .unwrap();
    publish(&b, "jobs", b"fine");
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(sub.stats().last_error, None, "a success is not an error");
    publish(&b, "jobs", b"bad");
    assert!(sub.wait_idle(WAIT).unwrap());
    let e = sub.stats().last_error.expect("the failure is recorded");
    assert!(e.contains("cannot parse the job") && e.contains("offset 1"), "{e}");
    publish(&b, "jobs", b"boom");
    assert!(sub.wait_idle(WAIT).unwrap());
    let e = sub.stats().last_error.expect("the panic is recorded");
    assert!(e.contains("handler panicked: the job blew up") && e.contains("offset 2"), "{e}");
    // The listing carries the same text.
    assert_eq!(b.subscriptions()[0].last_error.as_deref(), Some(e.as_str()));
}

#[test]
fn deleting_a_topic_closes_literal_subscriptions_and_fails_its_handles() {
    let b = broker();
    topic(&b, "orders/eu", 2);
    topic(&b, "orders/us", 1);
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let wildcard = b
        .subscribe("orders/*", earliest(), move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ack::Success
        })
        .unwrap();
    let durable = SubscriptionOptions { name: Some("eu-audit".into()), ..earliest() };
    let literal = b.subscribe("orders/eu", durable, |_| Ack::Success).unwrap();
    let publisher = b.publisher("orders/eu").unwrap();
    publisher.publish(&Record::new(b"one")).unwrap();
    let mut consumer = b.consumer("reports", "orders/eu", ConsumerOptions::default()).unwrap();
    assert_eq!(consumer.poll(10, WAIT).unwrap().len(), 1);
    consumer.commit().unwrap();
    assert!(wildcard.wait_idle(WAIT).unwrap() && literal.wait_idle(WAIT).unwrap());

    b.delete_topic("orders/eu").unwrap();
    assert_eq!(b.topics(), vec!["$dlq/eu-audit", "orders/us"]);
    // The literal subscription is closed, and says why.
    assert!(literal.is_closed());
    assert_eq!(literal.stats().closed_reason.as_deref(), Some("topic deleted"));
    // Handles still holding it get NoSuchTopic, whatever they call.
    assert!(matches!(publisher.publish(&Record::new(b"two")), Err(Error::NoSuchTopic(t)) if t == "orders/eu"));
    assert!(matches!(publisher.publish_batch(&[Record::new(b"x")]), Err(Error::NoSuchTopic(_))));
    assert!(matches!(consumer.poll(10, WAIT), Err(Error::NoSuchTopic(_))));
    assert!(matches!(consumer.commit(), Err(Error::NoSuchTopic(_))));
    assert!(matches!(b.publish("orders/eu", &Record::new(b"x")), Err(Error::NoSuchTopic(_))));
    assert!(matches!(b.delete_topic("orders/eu"), Err(Error::NoSuchTopic(_))));
    assert!(matches!(b.topic_stats("orders/eu"), Err(Error::NoSuchTopic(_))));
    // The group's offsets went with it.
    assert!(matches!(b.group_stats("reports", "orders/eu"), Err(Error::NoSuchTopic(_))));
    assert!(b.groups().is_empty());

    // The wildcard subscription goes on with its other topics, and no
    // longer lists the deleted one.
    b.publish("orders/us", &Record::new(b"us")).unwrap();
    assert!(wildcard.wait_idle(WAIT).unwrap());
    assert_eq!(seen.load(Ordering::Relaxed), 2);
    let parts = wildcard.stats().partitions;
    assert!(parts.iter().all(|p| p.topic == "orders/us"), "{parts:?}");

    // Created again, the topic starts at offset 0 and the wildcard
    // subscription reads it; the old group and durable position are gone.
    topic(&b, "orders/eu", 1);
    assert_eq!(b.publish("orders/eu", &Record::new(b"new")).unwrap().offset, 0);
    assert!(wildcard.wait_idle(WAIT).unwrap());
    assert_eq!(seen.load(Ordering::Relaxed), 3);
    let mut again = b.consumer("reports", "orders/eu", ConsumerOptions::default()).unwrap();
    let polled: Vec<Vec<u8>> = again.poll(10, WAIT).unwrap().iter().map(|m| m.payload().to_vec()).collect();
    assert_eq!(polled, vec![b"new".to_vec()]);
    drop(consumer);
    drop(again);
    // The old consumer's close did not free or overwrite the new group.
    assert_eq!(b.groups(), vec![("reports".to_string(), "orders/eu".to_string())]);
}

#[test]
fn deleting_durable_positions_and_groups_refuses_live_ones_and_unknown_ones() {
    let b = broker();
    topic(&b, "t", 1);
    let named = || SubscriptionOptions { name: Some("keeper".into()), ..earliest() };
    let sub = b.subscribe("t", named(), |_| Ack::Success).unwrap();
    publish(&b, "t", b"a");
    assert!(sub.wait_idle(WAIT).unwrap());
    assert!(matches!(b.delete_durable("keeper"), Err(Error::Busy(_))));
    drop(sub);
    assert!(matches!(b.delete_durable("nobody"), Err(Error::NotFound(_))));
    assert!(matches!(b.delete_durable(""), Err(Error::InvalidArgument(_))));
    // Forgotten: the name starts afresh (from `earliest` again, not after "a").
    b.delete_durable("keeper").unwrap();
    assert!(matches!(b.delete_durable("keeper"), Err(Error::NotFound(_))));
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let sub = b
        .subscribe("t", named(), move |_| {
            c.fetch_add(1, Ordering::Relaxed);
            Ack::Success
        })
        .unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(count.load(Ordering::Relaxed), 1);

    let mut consumer = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    assert_eq!(consumer.poll(10, WAIT).unwrap().len(), 1);
    consumer.commit().unwrap();
    assert!(matches!(b.delete_group("g", "t"), Err(Error::Busy(_))));
    drop(consumer);
    assert!(matches!(b.delete_group("g", "other"), Err(Error::NotFound(_))));
    assert!(matches!(b.delete_group("nobody", "t"), Err(Error::NotFound(_))));
    b.delete_group("g", "t").unwrap();
    assert!(matches!(b.group_stats("g", "t"), Err(Error::NotFound(_))));
    // The group starts afresh.
    let mut consumer = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    assert_eq!(consumer.poll(10, WAIT).unwrap().len(), 1);
}

#[test]
fn deleting_a_topic_under_load_neither_crashes_nor_hangs() {
    let b = broker();
    topic(&b, "busy/a", 2);
    topic(&b, "busy/b", 1);
    let stop = Arc::new(AtomicBool::new(false));
    let wildcard = b.subscribe("busy/*", earliest(), |_| Ack::Success).unwrap();
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (publisher, stop) = (b.publisher("busy/a").unwrap(), stop.clone());
        threads.push(std::thread::spawn(move || {
            // Publishes until the topic is gone; the error is NoSuchTopic.
            loop {
                match publisher.publish(&Record::new(b"m")) {
                    Ok(_) => {}
                    Err(Error::NoSuchTopic(_)) => return true,
                    Err(e) => panic!("unexpected {e:?}"),
                }
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
            }
        }));
    }
    let mut consumer = b.consumer("puller", "busy/a", ConsumerOptions::default()).unwrap();
    let puller = std::thread::spawn(move || {
        loop {
            match consumer.poll(100, WAIT) {
                Ok(_) => {}
                Err(Error::NoSuchTopic(_)) => return,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    });
    common::wait_for("some messages", || b.topic_stats("busy/a").unwrap().publish_count > 1000);
    b.delete_topic("busy/a").unwrap();
    puller.join().unwrap();
    for t in threads {
        assert!(t.join().unwrap(), "every publisher saw NoSuchTopic");
    }
    stop.store(true, Ordering::Relaxed);
    b.publish("busy/b", &Record::new(b"after")).unwrap();
    assert!(wildcard.wait_idle(WAIT).unwrap());
    assert!(!wildcard.is_closed());
    assert!(wildcard.stats().partitions.iter().all(|p| p.topic == "busy/b"));
}

#[test]
fn an_anonymous_dead_letter_topic_made_but_left_empty_goes_with_its_subscription() {
    let b = broker();
    // Messages too large for a dead-letter topic made for a wildcard
    // subscription (the default limit, 1 MiB, and room for the dead-letter
    // attributes: a pattern names no topic whose limit it could take):
    // dead-lettering one makes the topic, then fails to publish to it.
    let big = rill::TopicOptions {
        max_message_bytes: Some(4 << 20),
        segment_bytes: Some(8 << 20),
        ..rill::TopicOptions::default()
    };
    b.create_topic("big/x", &big).unwrap();
    let before = b.topics();
    let s = b.subscribe("big/*", earliest(), |_| Ack::DeadLetter).unwrap();
    let dlq = s.stats().dead_letter_topic.unwrap();
    b.publish("big/x", &Record::new(&vec![0u8; 2 << 20])).unwrap();
    assert!(s.wait_idle(WAIT).unwrap());
    let st = s.stats();
    assert_eq!((st.dead_lettered, st.dropped), (0, 1));
    assert!(st.last_error.unwrap().contains("dead-lettering offset 0 failed"));
    assert!(b.topics().contains(&dlq), "made on the first dead letter");
    s.close();
    assert_eq!(b.topics(), before, "the empty dead-letter topic went with its subscription");
}

/// Publishes `n` messages to `topic` one at a time from this thread, then
/// returns every retained (offset, timestamp) read back by a consumer.
fn stamped(b: &rill::Broker, topic: &str, n: usize) -> Vec<(u64, u64)> {
    for i in 0..n {
        b.publish(topic, &Record::new(format!("m{i}").as_bytes())).unwrap();
    }
    let mut c = b.consumer("stamps", topic, ConsumerOptions::default()).unwrap();
    let mut out = Vec::new();
    loop {
        let batch = c.poll(512, std::time::Duration::ZERO).unwrap();
        if batch.is_empty() {
            break;
        }
        out.extend(batch.iter().map(|m| (m.offset(), m.timestamp_ns())));
    }
    out
}

#[test]
fn seek_to_time_finds_the_first_message_at_or_after_a_time() {
    let b = broker();
    // Small segments, so the search crosses many of them; retention trims
    // the oldest, so the log does not start at 0.
    let options = rill::TopicOptions {
        segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES),
        retention_messages: Some(1500),
        ..rill::TopicOptions::default()
    };
    b.create_topic("timed", &options).unwrap();
    let records = stamped(&b, "timed", 3000);
    let (first, end) = (records[0].0, records.last().unwrap().0 + 1);
    assert!(first > 0, "retention trimmed the head");
    // From one thread, stamps never go backwards.
    assert!(records.windows(2).all(|w| w[0].1 <= w[1].1));
    let mut c = b.consumer("seeker", "timed", ConsumerOptions::default()).unwrap();
    let mut check = |t: u64, want: u64| {
        c.seek_to_time(0, t).unwrap();
        assert_eq!(c.position(0).unwrap(), want, "seek to {t}");
    };
    for &(offset, ts) in records.iter().step_by(97) {
        // The first record stamped at or after `ts` (several may share it).
        let want = records.iter().find(|r| r.1 >= ts).unwrap().0;
        assert!(want <= offset);
        check(ts, want);
        let after = records.iter().find(|r| r.1 > ts).map_or(end, |r| r.0);
        check(ts + 1, after);
    }
    check(0, first);
    check(records.last().unwrap().1 + 1, end);
    check(u64::MAX, end);
    assert!(matches!(c.seek_to_time(7, 0), Err(Error::NotFound(_))));

    // Subscriptions and consumers can start at a time.
    let (_, t) = records[records.len() / 2];
    let want = records.iter().find(|r| r.1 >= t).unwrap().0;
    let mut from_time = b
        .consumer(
            "from-time",
            "timed",
            ConsumerOptions { start: rill::StartPosition::Time(t), ..ConsumerOptions::default() },
        )
        .unwrap();
    assert_eq!(from_time.position(0).unwrap(), want);
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let options = SubscriptionOptions { start: rill::StartPosition::Time(t), ..Default::default() };
    let sub = b
        .subscribe("timed", options, move |m| {
            sink.lock().unwrap().push(m.offset());
            Ack::Success
        })
        .unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    let got = got.lock().unwrap().clone();
    assert_eq!(got.first(), Some(&want));
    assert_eq!(got.len() as u64, end - want);
    assert_eq!(from_time.poll(1, WAIT).unwrap()[0].offset(), want);
}

#[test]
fn retention_by_age_trims_whole_segments_also_on_a_quiet_topic() {
    let b = broker();
    let options = rill::TopicOptions {
        segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES),
        retention_ms: Some(40),
        ..rill::TopicOptions::default()
    };
    b.create_topic("aging", &options).unwrap();
    b.create_topic("kept", &rill::TopicOptions::default()).unwrap();
    for i in 0..500 {
        b.publish("aging", &Record::new(format!("old-{i}").as_bytes())).unwrap();
        b.publish("kept", &Record::new(b"x")).unwrap();
    }
    let stats = b.topic_stats("aging").unwrap();
    assert!(stats.partitions[0].first_offset < 500, "nothing has expired yet: {stats:?}");
    // Nobody publishes: the timer alone trims every expired segment (the
    // active one is sealed early so that it can go too).
    common::wait_for("the quiet topic to age out", || {
        let p = &b.topic_stats("aging").unwrap().partitions[0];
        p.first_offset == p.next_offset
    });
    // The topic still works, from where it was; a topic without an age
    // limit keeps everything.
    assert_eq!(b.publish("aging", &Record::new(b"new")).unwrap().offset, 500);
    assert_eq!(b.topic_stats("kept").unwrap().partitions[0].first_offset, 0);
    let mut c = b.consumer("late", "aging", ConsumerOptions::default()).unwrap();
    let got: Vec<Vec<u8>> = c.poll(10, WAIT).unwrap().iter().map(|m| m.payload().to_vec()).collect();
    assert_eq!(got, vec![b"new".to_vec()]);
    // Zero is no limit.
    let zero = rill::TopicOptions { retention_ms: Some(0), ..rill::TopicOptions::default() };
    b.create_topic("forever", &zero).unwrap();
}

#[test]
fn a_reader_that_holds_retention_also_holds_back_the_age_limit() {
    let b = broker();
    let options = rill::TopicOptions {
        segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES),
        retention_ms: Some(20),
        ..rill::TopicOptions::default()
    };
    b.create_topic("held", &options).unwrap();
    // A Block subscriber that has handled nothing holds every segment.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Mutex::new(rx);
    let block = SubscriptionOptions { overflow: rill::Overflow::Block, lag_limit: Some(10_000), ..earliest() };
    let sub = b
        .subscribe("held", block, move |_| {
            let _ = rx.lock().unwrap().recv();
            Ack::Success
        })
        .unwrap();
    for _ in 0..300 {
        publish(&b, "held", b"m");
    }
    let segments_before = b.topic_stats("held").unwrap().retained_bytes;
    // Time passing is what is tested here: ten times the age limit, about
    // forty expiry rounds. Nothing is trimmed, and no round adds a segment.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let p = &b.topic_stats("held").unwrap().partitions[0];
    assert_eq!(p.first_offset, 0);
    assert_eq!(b.topic_stats("held").unwrap().retained_bytes, segments_before);
    // Let it go: handled messages age out.
    for _ in 0..300 {
        tx.send(()).unwrap();
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    common::wait_for("handled messages to age out", || {
        let p = &b.topic_stats("held").unwrap().partitions[0];
        p.first_offset == p.next_offset
    });
}

#[test]
fn a_roll_trims_segments_past_the_age_limit_without_any_timer() {
    use rill::log::{Log, LogConfig, MIN_SEGMENT_BYTES};
    // A bare log: no broker, so no timer; only rolls apply the limit.
    let config = LogConfig { segment_bytes: Some(MIN_SEGMENT_BYTES), retention_ms: Some(30), ..LogConfig::default() };
    let log = Log::new(&config).unwrap();
    let payload = [1u8; 100];
    for _ in 0..100 {
        log.append(&Record::new(&payload)).unwrap();
    }
    let before = log.stats();
    assert_eq!(before.first_offset, 0);
    assert!(before.segments > 2);
    // Time passing is what is tested: past the limit, then publish until
    // the next roll.
    std::thread::sleep(std::time::Duration::from_millis(60));
    let segments = log.stats().trimmed_segments;
    while log.stats().trimmed_segments == segments {
        log.append(&Record::new(&payload)).unwrap();
    }
    let after = log.stats();
    assert!(after.first_offset >= 100 - (MIN_SEGMENT_BYTES / 128) as u64, "{after:?}");
    // Only whole segments go, and only expired ones: what was appended after
    // the pause is all still there.
    assert!(after.first_offset <= 100);
}
