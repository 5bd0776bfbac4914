//! The broker as users drive it: topics, routing, filters, push
//! subscriptions, delivery modes, re-entrancy and lifecycle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, DeliveryMode, Error, Message, Record, StartPosition, Subscription, SubscriptionOptions,
    SubscriptionState, TopicOptions,
};

mod common;
use common::{WAIT, broker, earliest, publish, topic, wait_for};

/// What a recording handler saw: (topic, partition, offset, payload, attempt).
type Seen = Arc<Mutex<Vec<(String, u32, u64, Vec<u8>, u32)>>>;

fn recorder() -> (Seen, impl FnMut(&Message<'_>) -> Ack + Send + 'static) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    (seen, move |m: &Message<'_>| {
        s.lock().unwrap().push((m.topic().to_owned(), m.partition(), m.offset(), m.payload().to_vec(), m.attempt()));
        Ack::Success
    })
}

fn payloads(seen: &Seen) -> Vec<Vec<u8>> {
    seen.lock().unwrap().iter().map(|s| s.3.clone()).collect()
}

fn sub_with(b: &Broker, pattern: &str, options: SubscriptionOptions) -> (Subscription, Seen) {
    let (seen, h) = recorder();
    (b.subscribe(pattern, options, h).unwrap(), seen)
}

#[test]
fn earliest_sees_the_past_and_latest_does_not() {
    let b = broker();
    topic(&b, "orders", 1);
    publish(&b, "orders", b"before-1");
    publish(&b, "orders", b"before-2");
    let (early, early_seen) = sub_with(&b, "orders", earliest());
    let (late, late_seen) = sub_with(&b, "orders", SubscriptionOptions::default());
    publish(&b, "orders", b"after");
    assert!(early.wait_idle(WAIT).unwrap());
    assert!(late.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&early_seen), vec![b"before-1".to_vec(), b"before-2".to_vec(), b"after".to_vec()]);
    assert_eq!(payloads(&late_seen), vec![b"after".to_vec()]);
}

#[test]
fn a_subscription_can_start_at_an_explicit_offset() {
    let b = broker();
    topic(&b, "t", 1);
    for i in 0..10u8 {
        publish(&b, "t", &[i]);
    }
    let (s, seen) = sub_with(&b, "t", SubscriptionOptions { start: StartPosition::Offset(7), ..Default::default() });
    assert!(s.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&seen), vec![vec![7], vec![8], vec![9]]);
    let err = b.subscribe(
        "t",
        SubscriptionOptions { start: StartPosition::Offset(11), ..Default::default() },
        |_: &Message<'_>| Ack::Success,
    );
    assert!(matches!(err, Err(Error::OutOfRange { offset: 11, first: 0, end: 10, .. })), "{err:?}");
}

#[test]
fn unknown_topics_and_bad_names_are_clear_errors() {
    let b = broker();
    assert_eq!(b.publish("nope", &Record::new(b"x")), Err(Error::NoSuchTopic("nope".into())));
    for bad in ["", "a//b", "a/*", "/a", "a\0b"] {
        assert!(matches!(b.publish(bad, &Record::new(b"x")), Err(Error::InvalidTopic { .. })), "{bad:?}");
        assert!(matches!(b.create_topic(bad, &TopicOptions::default()), Err(Error::InvalidTopic { .. })), "{bad:?}");
    }
    let err = b.create_topic("$dlq/mine", &TopicOptions::default()).unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
    topic(&b, "t", 1);
    assert_eq!(b.create_topic("t", &TopicOptions::default()), Err(Error::TopicExists("t".into())));
    assert!(matches!(b.create_topic("z", &TopicOptions::with_partitions(0)), Err(Error::InvalidArgument(_))));
    // A literal subscription to a missing topic is an error too.
    let err = b.subscribe("missing", SubscriptionOptions::default(), |_: &Message<'_>| Ack::Success).unwrap_err();
    assert_eq!(err, Error::NoSuchTopic("missing".into()));
    assert!(matches!(
        b.subscribe("a/b*", SubscriptionOptions::default(), |_: &Message<'_>| Ack::Success),
        Err(Error::InvalidPattern { .. })
    ));
    // Oversized messages are refused and nothing is published.
    let big = vec![0u8; 2 << 20];
    assert!(matches!(b.publish("t", &Record::new(&big)), Err(Error::MessageTooLarge { .. })));
    assert_eq!(b.topic_stats("t").unwrap().publish_count, 0);
}

/// Issue 14 #14: a bad durable name used to come back as an error about the
/// topic `$dlq/<name>`, which the caller never named. Each name is checked
/// where it is given, and the error says which argument is wrong.
#[test]
fn bad_subscription_group_and_dead_letter_names_say_which_argument() {
    let b = broker();
    topic(&b, "t", 1);
    let long = "x".repeat(rill::MAX_SUBSCRIPTION_NAME_LEN + 1);
    for (bad, says) in [
        ("a//b", "segment 2 is empty"),
        ("", "must not be empty"),
        ("a*", "'*'"),
        ("n\0ul", "NUL"),
        (&long, "at most 250"),
    ] {
        let options = SubscriptionOptions { name: Some(bad.to_string()), ..Default::default() };
        let err = b.subscribe("t", options, |_: &Message<'_>| Ack::Success).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
        assert!(text.contains("subscription name") && text.contains(says), "{bad:?}: {text}");
        assert!(!text.contains("$dlq"), "{bad:?}: {text}");
        // Also when the pattern names a topic that does not exist: the name is
        // checked first.
        let options = SubscriptionOptions { name: Some(bad.to_string()), ..Default::default() };
        let err = b.subscribe("missing", options, |_: &Message<'_>| Ack::Success).unwrap_err();
        assert!(err.to_string().contains("subscription name"), "{bad:?}: {err}");
    }
    // The longest name whose dead-letter topic fits is fine.
    let ok = "y".repeat(rill::MAX_SUBSCRIPTION_NAME_LEN);
    let sub = b
        .subscribe("t", SubscriptionOptions { name: Some(ok.clone()), ..Default::default() }, |_: &Message<'_>| {
            Ack::Success
        })
        .unwrap();
    assert_eq!(sub.stats().dead_letter_topic, Some(format!("$dlq/{ok}")));
    drop(sub);
    for bad in ["a//b", "x/*", ""] {
        let options = SubscriptionOptions { dead_letter_topic: Some(bad.into()), ..Default::default() };
        let err = b.subscribe("t", options, |_: &Message<'_>| Ack::Success).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("dead_letter_topic")), "{bad:?}: {err}");
    }
    for bad in ["", "g//h", "g\0"] {
        let err = b.consumer(bad, "t", rill::ConsumerOptions::default()).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("consumer group name")), "{bad:?}: {err}");
    }
}

#[test]
fn auto_created_topics_appear_on_first_publish() {
    let b = Broker::new(BrokerConfig { auto_create_topics: true, ..Default::default() }).unwrap();
    let (s, seen) = sub_with(&b, "metrics/**", earliest());
    let pos = b.publish("metrics/cpu", &Record::new(b"42")).unwrap();
    assert_eq!((pos.partition, pos.offset), (0, 0));
    assert!(b.topics().contains(&"metrics/cpu".to_owned()));
    assert!(s.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&seen), vec![b"42".to_vec()]);
    assert!(
        matches!(b.publish("$dlq/x", &Record::new(b"x")), Err(Error::NoSuchTopic(_))),
        "reserved names are never auto-created"
    );
}

#[test]
fn keys_pick_stable_partitions_and_keep_per_key_order() {
    let b = broker();
    topic(&b, "users", 8);
    let (s, seen) = sub_with(&b, "users", earliest());
    let mut partition_of: HashMap<String, u32> = HashMap::new();
    for i in 0..400u32 {
        let key = format!("user-{}", i % 20);
        let pos = b.publish("users", &Record::new(&i.to_le_bytes()).with_key(key.as_bytes())).unwrap();
        assert_eq!(pos.partition, rill::broker::partition_for_key(key.as_bytes(), 8));
        let p = partition_of.entry(key).or_insert(pos.partition);
        assert_eq!(*p, pos.partition, "a key always lands on one partition");
    }
    assert!(s.wait_idle(WAIT).unwrap());
    // Per key, messages arrive in publish order.
    let mut last: HashMap<u32, u32> = HashMap::new();
    for (_, _, _, payload, _) in seen.lock().unwrap().iter() {
        let i = u32::from_le_bytes(payload[..4].try_into().unwrap());
        if let Some(prev) = last.insert(i % 20, i) {
            assert!(prev < i);
        }
    }
    assert_eq!(seen.lock().unwrap().len(), 400);
}

#[test]
fn unkeyed_messages_spread_over_partitions() {
    let b = broker();
    topic(&b, "spread", 4);
    let mut counts = [0u32; 4];
    for _ in 0..400 {
        counts[b.publish("spread", &Record::new(b"x")).unwrap().partition as usize] += 1;
    }
    assert_eq!(counts, [100; 4]);
}

#[test]
fn concurrent_publishers_keep_their_order_at_every_subscriber() {
    let b = broker();
    topic(&b, "events", 1);
    let subs: Vec<(Subscription, Seen)> = (0..3).map(|_| sub_with(&b, "events", earliest())).collect();
    let per = 5_000u32;
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for p in 0..4u32 {
            let (b, barrier) = (&b, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..per {
                    let mut payload = p.to_le_bytes().to_vec();
                    payload.extend_from_slice(&i.to_le_bytes());
                    b.publish("events", &Record::new(&payload)).unwrap();
                }
            });
        }
    });
    for (s, seen) in &subs {
        assert!(s.wait_idle(WAIT).unwrap());
        let mut next = [0u32; 4];
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4 * per as usize);
        for (i, (_, _, offset, payload, _)) in seen.iter().enumerate() {
            assert_eq!(*offset, i as u64, "log order");
            let p = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
            let n = u32::from_le_bytes(payload[4..8].try_into().unwrap());
            assert_eq!(n, next[p], "publisher {p}'s order");
            next[p] += 1;
        }
    }
}

#[test]
fn wildcard_subscriptions_route_by_pattern_including_topics_created_later() {
    let b = broker();
    for t in ["sports", "sports/cricket", "sports/cricket/live", "news/sports", "a/z", "a/b/c/z"] {
        topic(&b, t, 1);
    }
    let patterns = ["sports/**", "sports/*", "a/**/z", "**", "*/sports", "news/none/*"];
    let subs: Vec<(Subscription, Seen)> =
        patterns.iter().map(|p| sub_with(&b, p, SubscriptionOptions::default())).collect();
    topic(&b, "sports/tennis", 1); // created after subscribing
    let topics = ["sports", "sports/cricket", "sports/cricket/live", "news/sports", "a/z", "a/b/c/z", "sports/tennis"];
    for t in topics {
        publish(&b, t, t.as_bytes());
    }
    let expect: [&[&str]; 6] = [
        &["sports", "sports/cricket", "sports/cricket/live", "sports/tennis"],
        &["sports/cricket", "sports/tennis"],
        &["a/z", "a/b/c/z"],
        &topics,
        &["news/sports"],
        &[],
    ];
    for ((s, seen), want) in subs.iter().zip(expect) {
        assert!(s.wait_idle(WAIT).unwrap());
        let mut got: Vec<String> = seen.lock().unwrap().iter().map(|x| x.0.clone()).collect();
        got.sort();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(got, want, "{}", s.stats().pattern);
    }
}

#[test]
fn a_leading_wildcard_does_not_see_dead_letter_topics() {
    let b = broker();
    topic(&b, "jobs", 1);
    let (all, all_seen) = sub_with(&b, "**", SubscriptionOptions::default());
    // Its own dead letters go elsewhere: `$dlq/<its name>` would match it.
    let outside = SubscriptionOptions { dead_letter_topic: Some("dead-watchers".into()), ..Default::default() };
    let (dlq, dlq_seen) = sub_with(&b, "$dlq/*", outside);
    let failing = b
        .subscribe(
            "jobs",
            SubscriptionOptions { name: Some("worker".into()), ..Default::default() },
            |_: &Message<'_>| Ack::DeadLetter,
        )
        .unwrap();
    publish(&b, "jobs", b"bad");
    assert!(failing.wait_idle(WAIT).unwrap());
    assert!(all.wait_idle(WAIT).unwrap());
    assert!(dlq.wait_idle(WAIT).unwrap());
    assert_eq!(all_seen.lock().unwrap().iter().map(|x| x.0.clone()).collect::<Vec<_>>(), vec!["jobs".to_owned()]);
    assert_eq!(
        dlq_seen.lock().unwrap().iter().map(|x| x.0.clone()).collect::<Vec<_>>(),
        vec!["$dlq/worker".to_owned()]
    );
}

#[test]
fn filters_deliver_only_matching_messages_and_count_the_rest() {
    let b = broker();
    topic(&b, "orders", 1);
    let opts =
        |f: &str| SubscriptionOptions { filter: Some(f.into()), start: StartPosition::Earliest, ..Default::default() };
    let (india, india_seen) = sub_with(&b, "orders", opts(r#"attributes.region = "IN""#));
    let (eu, eu_seen) = sub_with(&b, "orders", opts(r#"hasPrefix(attributes.region, "eu-") AND NOT attributes:test"#));
    type Row<'a> = (&'a [(&'a str, &'a str)], &'a [u8]);
    let rows: [Row<'_>; 5] = [
        (&[("region", "IN")], b"1"),
        (&[("region", "eu-west")], b"2"),
        (&[("region", "eu-west"), ("test", "yes")], b"3"),
        (&[], b"4"),
        (&[("region", "IN"), ("x", "y")], b"5"),
    ];
    for (attrs, payload) in rows {
        b.publish("orders", &Record::new(payload).with_attributes(attrs)).unwrap();
    }
    assert!(india.wait_idle(WAIT).unwrap() && eu.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&india_seen), vec![b"1".to_vec(), b"5".to_vec()]);
    assert_eq!(payloads(&eu_seen), vec![b"2".to_vec()]);
    let st = india.stats();
    assert_eq!((st.delivered, st.filtered, st.acked, st.lag), (2, 3, 2, 0));
    assert_eq!(st.partitions[0].position, 5, "filtered messages advance the cursor");

    let err = b
        .subscribe("orders", opts(r#"attributes.a = "1" AND attributes.b = "2" OR attributes:c"#), |_: &Message<'_>| {
            Ack::Success
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidFilter { position: 42, .. }), "{err}");
}

#[test]
fn fan_out_reaches_every_subscriber() {
    let b = broker();
    topic(&b, "fan", 1);
    let subs: Vec<(Subscription, Seen)> =
        (0..64).map(|_| sub_with(&b, "fan", SubscriptionOptions::default())).collect();
    let records: Vec<Vec<u8>> = (0..500u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let batch: Vec<Record<'_>> = records.iter().map(|r| Record::new(r)).collect();
    let positions = b.publish_batch("fan", &batch).unwrap();
    assert_eq!(positions.iter().map(|p| p.offset).collect::<Vec<_>>(), (0..500).collect::<Vec<u64>>());
    for (s, seen) in &subs {
        assert!(s.wait_idle(WAIT).unwrap());
        assert_eq!(payloads(seen), records);
    }
}

#[test]
fn many_topics_with_many_subscriptions() {
    let b = broker();
    for region in 0..10 {
        for kind in 0..20 {
            topic(&b, &format!("r{region}/k{kind}"), 2);
        }
    }
    // One subscription per region, one per kind, and some literal ones.
    let by_region: Vec<(Subscription, Seen)> =
        (0..10).map(|r| sub_with(&b, &format!("r{r}/*"), SubscriptionOptions::default())).collect();
    let by_kind: Vec<(Subscription, Seen)> =
        (0..20).map(|k| sub_with(&b, &format!("*/k{k}"), SubscriptionOptions::default())).collect();
    let literal: Vec<(Subscription, Seen)> =
        (0..50).map(|i| sub_with(&b, &format!("r{}/k{}", i % 10, i % 20), SubscriptionOptions::default())).collect();
    for region in 0..10 {
        for kind in 0..20 {
            let t = format!("r{region}/k{kind}");
            for n in 0..3u8 {
                publish(&b, &t, &[region as u8, kind as u8, n]);
            }
        }
    }
    for (s, seen) in by_region.iter().chain(&by_kind).chain(&literal) {
        assert!(s.wait_idle(WAIT).unwrap());
        let n = seen.lock().unwrap().len();
        let pattern = s.stats().pattern;
        let expect = if pattern.ends_with("/*") {
            60
        } else if pattern.starts_with("*/") {
            30
        } else {
            3
        };
        assert_eq!(n, expect, "{pattern}");
    }
}

#[test]
fn a_panicking_handler_is_retried_with_its_attempt_number() {
    let b = broker();
    topic(&b, "t", 1);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let c = calls.clone();
    let s = b
        .subscribe(
            "t",
            SubscriptionOptions {
                backoff: rill::RetryBackoff { initial: Duration::from_millis(1), ..Default::default() },
                ..Default::default()
            },
            move |m: &Message<'_>| {
                c.lock().unwrap().push((m.payload().to_vec(), m.attempt()));
                if m.payload() == b"boom" && m.attempt() == 1 {
                    panic!("first try always fails");
                }
                Ack::Success
            },
        )
        .unwrap();
    publish(&b, "t", b"boom");
    publish(&b, "t", b"after");
    assert!(s.wait_idle(WAIT).unwrap());
    assert_eq!(
        *calls.lock().unwrap(),
        vec![(b"boom".to_vec(), 1), (b"boom".to_vec(), 2), (b"after".to_vec(), 1)],
        "redelivered, in order, before the next message"
    );
    let st = s.stats();
    assert_eq!((st.delivered, st.retried, st.acked), (3, 1, 2));
}

#[test]
fn a_panic_mid_batch_costs_only_its_message_and_the_handler_stays_marked() {
    // Ten messages waiting before the subscription starts: its first read
    // takes them as one batch, and the handler panics twice inside it.
    let b = broker();
    topic(&b, "t", 1);
    for n in 0..10u8 {
        publish(&b, "t", &[n]);
    }
    let calls = Arc::new(Mutex::new(Vec::new()));
    let c = calls.clone();
    let gate = Arc::new(Barrier::new(2));
    let g = gate.clone();
    let own: Arc<std::sync::OnceLock<Subscription>> = Arc::default();
    let own2 = own.clone();
    let options = SubscriptionOptions { delivery: DeliveryMode::AtMostOnce, ..earliest() };
    let s = b
        .subscribe("t", options, move |m: &Message<'_>| {
            let n = m.payload()[0];
            c.lock().unwrap().push(n);
            if n == 0 {
                // Until the test has stored the handle that message 8 closes.
                g.wait();
            }
            if n == 3 || n == 6 {
                panic!("fails on {n}");
            }
            if n == 8 {
                // Still marked as inside its own handler after two caught
                // panics: closing itself returns instead of waiting for the
                // round it runs in (which would never end).
                own2.get().expect("stored before message 0 returned").close();
            }
            Ack::Success
        })
        .unwrap();
    assert!(own.set(s).is_ok());
    gate.wait();
    let s = own.get().unwrap();
    wait_for("the handler to close its subscription", || s.is_closed());
    // From here (no handler): waits for the round to wind up.
    s.close();
    assert_eq!(*calls.lock().unwrap(), (0..=8u8).collect::<Vec<_>>(), "each once, in order, none after the close");
    let st = s.stats();
    // The panics count as retries, which at-most-once drops; message 8's
    // handler closed its subscription and returned `Success`, which counts.
    assert_eq!((st.delivered, st.dropped, st.acked), (9, 2, 7));
}

#[test]
fn at_most_once_never_redelivers() {
    let b = broker();
    topic(&b, "t", 1);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let s = b
        .subscribe(
            "t",
            SubscriptionOptions { delivery: DeliveryMode::AtMostOnce, ..Default::default() },
            move |_: &Message<'_>| {
                c.fetch_add(1, Ordering::SeqCst);
                Ack::Retry
            },
        )
        .unwrap();
    for _ in 0..5 {
        publish(&b, "t", b"x");
    }
    assert!(s.wait_idle(WAIT).unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let st = s.stats();
    assert_eq!((st.delivered, st.retried, st.dropped), (5, 0, 5));
}

#[test]
fn a_handler_may_publish_subscribe_and_unsubscribe_itself() {
    let b = broker();
    topic(&b, "ping", 1);
    topic(&b, "pong", 1);
    // Re-entrant publish, to another topic and to its own.
    let b2 = b.clone();
    let pinger = b
        .subscribe("ping", SubscriptionOptions::default(), move |m: &Message<'_>| {
            let n = m.payload()[0];
            b2.publish("pong", &Record::new(&[n])).unwrap();
            if n < 5 {
                b2.publish("ping", &Record::new(&[n + 1])).unwrap();
            }
            Ack::Success
        })
        .unwrap();
    let (pong, pong_seen) = sub_with(&b, "pong", SubscriptionOptions::default());
    publish(&b, "ping", &[0]);
    assert!(pinger.wait_idle(WAIT).unwrap());
    assert!(pong.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&pong_seen), (0..=5u8).map(|n| vec![n]).collect::<Vec<_>>());

    // Re-entrant subscribe, and a handler that unsubscribes itself.
    let b3 = b.clone();
    let spawned: Arc<Mutex<Vec<Subscription>>> = Arc::default();
    let sp = spawned.clone();
    let own: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let own2 = own.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let quitter = b
        .subscribe("ping", SubscriptionOptions::default(), move |_: &Message<'_>| {
            c.fetch_add(1, Ordering::SeqCst);
            let (seen, h) = recorder();
            drop(seen);
            sp.lock().unwrap().push(b3.subscribe("pong", SubscriptionOptions::default(), h).unwrap());
            // Unsubscribe ourselves from inside our own handler: no deadlock.
            if let Some(me) = own2.lock().unwrap().take() {
                me.close();
            }
            Ack::Success
        })
        .unwrap();
    *own.lock().unwrap() = Some(quitter);
    publish(&b, "ping", &[9]);
    wait_for("the handler to run and close itself", || own.lock().unwrap().is_none());
    publish(&b, "ping", &[10]);
    assert!(pinger.wait_idle(WAIT).unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no call after it unsubscribed");
    assert_eq!(spawned.lock().unwrap().len(), 1);
}

#[test]
fn unsubscribe_from_another_thread_waits_for_the_handler_in_flight() {
    let b = broker();
    topic(&b, "t", 1);
    let in_flight = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (f, c) = (in_flight.clone(), calls.clone());
    let s = b
        .subscribe("t", SubscriptionOptions::default(), move |_: &Message<'_>| {
            f.store(true, Ordering::SeqCst);
            c.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            f.store(false, Ordering::SeqCst);
            Ack::Success
        })
        .unwrap();
    for _ in 0..100 {
        publish(&b, "t", b"x");
    }
    while !in_flight.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    s.close();
    assert!(!in_flight.load(Ordering::SeqCst), "close returned while a handler call was running");
    let after = calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(calls.load(Ordering::SeqCst), after, "no calls after close");
    assert!(after < 100);
    assert!(s.is_closed());
    assert_eq!(s.stats().state, SubscriptionState::Closed);
    assert!(matches!(s.wait_idle(WAIT), Err(Error::Closed(_))));
}

#[test]
fn a_slow_subscriber_never_holds_back_a_fast_one_or_the_publisher() {
    let b = Broker::new(BrokerConfig { worker_threads: Some(2), ..Default::default() }).unwrap();
    topic(&b, "t", 1);
    let slow_count = Arc::new(AtomicU64::new(0));
    let sc = slow_count.clone();
    let slow = b
        .subscribe("t", SubscriptionOptions::default(), move |_: &Message<'_>| {
            sc.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            Ack::Success
        })
        .unwrap();
    let (fast, fast_seen) = sub_with(&b, "t", SubscriptionOptions::default());
    for i in 0..2_000u32 {
        b.publish("t", &Record::new(&i.to_le_bytes())).unwrap();
    }
    // The publisher is done, and the fast subscriber catches up, while the
    // slow one has handled only a handful.
    assert!(fast.wait_idle(WAIT).unwrap());
    assert_eq!(fast_seen.lock().unwrap().len(), 2_000);
    let slow_done = slow_count.load(Ordering::SeqCst);
    assert!(slow_done < 1_000, "slow subscriber handled {slow_done}");
    assert!(slow.stats().lag > 1_000);
}

#[test]
fn one_busy_subscription_does_not_starve_others_on_a_single_worker() {
    let b = Broker::new(BrokerConfig { worker_threads: Some(1), ..Default::default() }).unwrap();
    topic(&b, "flood", 1);
    topic(&b, "ping", 1);
    let flood_count = Arc::new(AtomicU64::new(0));
    let fc = flood_count.clone();
    let _flood = b
        .subscribe("flood", SubscriptionOptions::default(), move |_: &Message<'_>| {
            fc.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(200));
            Ack::Success
        })
        .unwrap();
    let (ping, ping_seen) = sub_with(&b, "ping", SubscriptionOptions::default());
    let records: Vec<Record<'_>> = (0..5_000).map(|_| Record::new(b"f")).collect();
    b.publish_batch("flood", &records).unwrap();
    publish(&b, "ping", b"hello");
    assert!(ping.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&ping_seen), vec![b"hello".to_vec()]);
    assert!(flood_count.load(Ordering::SeqCst) < 5_000, "ping was served while the flood was still draining");
}

#[test]
fn dedicated_thread_subscriptions_deliver_too() {
    let b = broker();
    topic(&b, "t", 2);
    let (s, seen) = sub_with(&b, "t", SubscriptionOptions { dedicated_thread: true, ..Default::default() });
    // One that keeps polling for 200 µs before it parks.
    let spin = SubscriptionOptions {
        dedicated_thread: true,
        idle_spin: Some(Duration::from_micros(200)),
        ..Default::default()
    };
    let (spinning, spun) = sub_with(&b, "t", spin);
    for i in 0..1_000u32 {
        b.publish("t", &Record::new(&i.to_le_bytes())).unwrap();
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_millis(1)); // let both go idle now and then
        }
    }
    assert!(s.wait_idle(WAIT).unwrap() && spinning.wait_idle(WAIT).unwrap());
    assert_eq!(seen.lock().unwrap().len(), 1_000);
    // Two partitions: order is per partition, so compare as sets.
    let (mut a, mut b2) = (payloads(&spun), payloads(&seen));
    a.sort();
    b2.sort();
    assert!(a == b2, "both subscriptions saw the same 1,000 messages");
    drop(s);
    spinning.close();
}

#[test]
fn dedicated_threads_that_outnumber_the_cores_deliver_everything_in_order_and_close() {
    // More dedicated threads than cores: with the default idle policy they
    // nap between batches instead of polling (drain.rs, `nap_for_work`).
    // Every message must still arrive, in order, with publishers held back by
    // a lag limit while the threads nap, and a close must end a nap.
    let b = broker();
    topic(&b, "t", 1);
    let n = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
    let options = || SubscriptionOptions {
        dedicated_thread: true,
        overflow: rill::Overflow::Block,
        lag_limit: Some(64),
        ..Default::default()
    };
    let subs: Vec<(Subscription, Seen)> = (0..n).map(|_| sub_with(&b, "t", options())).collect();
    let mut expected = Vec::new();
    for burst in 0..20u32 {
        for i in 0..500u32 {
            let v = (burst * 500 + i).to_le_bytes().to_vec();
            b.publish("t", &Record::new(&v)).unwrap();
            expected.push(v);
        }
        if burst % 5 == 4 {
            // Caught up: the threads nap, find nothing, and park.
            for (s, _) in &subs {
                assert!(s.wait_idle(WAIT).unwrap());
            }
        }
    }
    // Messages far apart: a pause (a pacing, not a synchronisation) longer
    // than the naps, so each thread parks for longer than they would last
    // and takes none before its next park; then a burst brings them back.
    for i in 0..5u32 {
        for (s, _) in &subs {
            assert!(s.wait_idle(WAIT).unwrap());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        let v = (10_000 + i).to_le_bytes().to_vec();
        b.publish("t", &Record::new(&v)).unwrap();
        expected.push(v);
    }
    for i in 0..2_000u32 {
        let v = (20_000 + i).to_le_bytes().to_vec();
        b.publish("t", &Record::new(&v)).unwrap();
        expected.push(v);
    }
    for (s, seen) in &subs {
        assert!(s.wait_idle(WAIT).unwrap());
        assert!(payloads(seen) == expected, "a subscriber saw every message once, in order");
    }
    // Close while they are busy or napping: each close joins its thread.
    for i in 0..1_000u32 {
        b.publish("t", &Record::new(&i.to_le_bytes())).unwrap();
    }
    for (s, _) in subs {
        s.close();
        assert!(s.is_closed());
    }
}

#[test]
fn closing_the_broker_stops_everything_and_later_calls_say_closed() {
    let b = broker();
    topic(&b, "t", 1);
    let (s, seen) = sub_with(&b, "t", SubscriptionOptions::default());
    let (d, _) = sub_with(&b, "t", SubscriptionOptions { dedicated_thread: true, ..Default::default() });
    publish(&b, "t", b"x");
    assert!(s.wait_idle(WAIT).unwrap());
    let clone = b.clone();
    b.close();
    assert!(clone.is_closed());
    assert!(matches!(clone.publish("t", &Record::new(b"y")), Err(Error::Closed(_))));
    assert!(matches!(clone.create_topic("u", &TopicOptions::default()), Err(Error::Closed(_))));
    assert!(matches!(
        clone.subscribe("t", SubscriptionOptions::default(), |_: &Message<'_>| Ack::Success),
        Err(Error::Closed(_))
    ));
    assert!(matches!(s.wait_idle(WAIT), Err(Error::Closed(_))));
    assert!(s.is_closed() && d.is_closed());
    assert_eq!(s.stats().closed_reason.as_deref(), Some("the broker was closed"));
    assert_eq!(payloads(&seen), vec![b"x".to_vec()]);
    b.close(); // idempotent
}

#[test]
fn dropping_the_last_handle_closes_the_broker() {
    let b = broker();
    topic(&b, "t", 1);
    let (s, _) = sub_with(&b, "t", SubscriptionOptions::default());
    drop(b);
    assert!(s.is_closed());
}

#[test]
fn a_handler_may_close_the_whole_broker() {
    let b = broker();
    topic(&b, "t", 1);
    let b2 = Mutex::new(Some(b.clone()));
    let s = b
        .subscribe("t", SubscriptionOptions::default(), move |_: &Message<'_>| {
            if let Some(b) = b2.lock().unwrap().take() {
                b.close();
            }
            Ack::Success
        })
        .unwrap();
    publish(&b, "t", b"x");
    wait_for("the handler to close the broker", || b.is_closed());
    assert!(s.is_closed());
}

#[test]
fn stats_report_counters_lag_and_topic_sizes() {
    let b = broker();
    topic(&b, "t", 2);
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let s = b
        .subscribe("t", earliest(), move |_: &Message<'_>| {
            while !g.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ack::Success
        })
        .unwrap();
    for _ in 0..10 {
        publish(&b, "t", b"x");
    }
    let ts = b.topic_stats("t").unwrap();
    assert_eq!(ts.publish_count, 10);
    assert_eq!(ts.partitions.len(), 2);
    assert_eq!(ts.partitions.iter().map(|p| p.next_offset).sum::<u64>(), 10);
    assert!(ts.partitions.iter().all(|p| p.listeners == 1 && p.first_offset == 0));
    assert!(s.stats().lag > 0);
    gate.store(true, Ordering::SeqCst);
    assert!(s.wait_idle(WAIT).unwrap());
    let st = s.stats();
    assert_eq!((st.delivered, st.acked, st.lag), (10, 10, 0));
    assert_eq!(st.partitions.len(), 2);
    assert_eq!(st.state, SubscriptionState::Idle);
    assert!(st.name.starts_with("anon-"));
    assert_eq!(st.dead_letter_topic, Some(format!("$dlq/{}", st.name)));
    assert!(matches!(b.topic_stats("nope"), Err(Error::NoSuchTopic(_))));
}

#[test]
fn a_slow_handler_on_a_single_worker_yields_it_to_a_fast_subscription_of_the_same_topic() {
    let b = Broker::new(BrokerConfig { worker_threads: Some(1), ..Default::default() }).unwrap();
    topic(&b, "t", 1);
    let slow_count = Arc::new(AtomicU64::new(0));
    let sc = slow_count.clone();
    let _slow = b
        .subscribe_batch("t", SubscriptionOptions::default(), move |msgs: &[Message<'_>], _acks: &mut [Ack]| {
            for _ in msgs {
                std::thread::sleep(Duration::from_millis(10));
                sc.fetch_add(1, Ordering::SeqCst);
            }
            msgs.len()
        })
        .unwrap();
    let (fast, fast_seen) = sub_with(&b, "t", SubscriptionOptions::default());
    let records: Vec<Record<'_>> = (0..300).map(|_| Record::new(b"x")).collect();
    b.publish_batch("t", &records).unwrap();
    assert!(fast.wait_idle(WAIT).unwrap());
    assert_eq!(fast_seen.lock().unwrap().len(), 300);
    // The slow handler's batches shrink to one message once timed, and its
    // round ends after about a millisecond: the fast subscription gets the
    // worker after a few slow calls, not after a round budget's worth (256).
    let slow_done = slow_count.load(Ordering::SeqCst);
    assert!(slow_done < 64, "the fast subscription waited for {slow_done} slow messages");
}

/// Subscribes `name` to topic `t<name>` with a handler that, on its first
/// message, waits at `barrier` and then closes the subscription in `other`.
fn closer(
    b: &Broker,
    name: &str,
    barrier: Option<Arc<Barrier>>,
    other: Arc<std::sync::OnceLock<Subscription>>,
    done: std::sync::mpsc::Sender<&'static str>,
    label: &'static str,
    dedicated_thread: bool,
) -> Subscription {
    let mut first = true;
    let options = SubscriptionOptions { name: Some(name.into()), dedicated_thread, ..Default::default() };
    b.subscribe(&format!("t{name}"), options, move |_: &Message<'_>| {
        if std::mem::take(&mut first) {
            if let Some(barrier) = &barrier {
                barrier.wait();
            }
            other.get().expect("set before publishing").close();
            let _ = done.send(label);
        }
        Ack::Success
    })
    .unwrap()
}

#[test]
fn two_handlers_that_close_each_other_at_once_both_return_and_both_close() {
    mutual_close(false);
}

#[test]
fn two_dedicated_handlers_that_close_each_other_at_once_both_return_and_both_close() {
    mutual_close(true);
}

fn mutual_close(dedicated: bool) {
    let b = Broker::new(BrokerConfig { worker_threads: Some(2), ..Default::default() }).unwrap();
    topic(&b, "ta", 1);
    topic(&b, "tb", 1);
    // Both handlers are in flight (the barrier), then each closes the other:
    // neither may wait for the other's handler call to end.
    let barrier = Arc::new(Barrier::new(2));
    let (a_slot, b_slot) = (Arc::new(std::sync::OnceLock::new()), Arc::new(std::sync::OnceLock::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let a = closer(&b, "a", Some(barrier.clone()), b_slot.clone(), tx.clone(), "a closed b", dedicated);
    let bb = closer(&b, "b", Some(barrier), a_slot.clone(), tx, "b closed a", dedicated);
    let (a_core, b_core) = (a_slot.set(a).ok().map(|_| ()), b_slot.set(bb).ok().map(|_| ()));
    assert!(a_core.is_some() && b_core.is_some());
    publish(&b, "ta", b"go");
    publish(&b, "tb", b"go");
    let got: Vec<_> = (0..2).map(|_| rx.recv_timeout(WAIT)).collect();
    if got.iter().any(Result::is_err) {
        // Closing the broker would wait for the stuck handlers too: fail
        // instead of hanging.
        std::mem::forget(b);
        panic!("a handler is stuck in close: {got:?}");
    }
    let mut said: Vec<&str> = got.into_iter().map(Result::unwrap).collect();
    said.sort();
    assert_eq!(said, ["a closed b", "b closed a"]);
    // Both finished closing: their names are free again, which happens only
    // once a subscription has been fully wound up.
    wait_for_names_free(&b, &["a", "b"]);
}

/// Two brokers, each with a subscription whose handler closes the other
/// broker while both handlers are in flight: neither close may wait for
/// the other's handler call (the mutual case of closing a subscription,
/// above, one level up). A close from inside a handler does not wait for
/// the closed broker's threads; they end behind it.
#[test]
fn two_handlers_that_close_each_others_broker_at_once_both_return() {
    for dedicated in [false, true] {
        let brokers = [broker(), broker()];
        for b in &brokers {
            topic(b, "t", 1);
        }
        let barrier = Arc::new(Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel();
        let subs: Vec<Subscription> = (0..2)
            .map(|i| {
                let other = Mutex::new(Some(brokers[1 - i].clone()));
                let (barrier, tx) = (barrier.clone(), tx.clone());
                let options = SubscriptionOptions { dedicated_thread: dedicated, ..Default::default() };
                brokers[i]
                    .subscribe("t", options, move |_: &Message<'_>| {
                        if let Some(other) = other.lock().unwrap().take() {
                            barrier.wait();
                            other.close();
                            let _ = tx.send(i);
                        }
                        Ack::Success
                    })
                    .unwrap()
            })
            .collect();
        for b in &brokers {
            publish(b, "t", b"go");
        }
        let got: Vec<_> = (0..2).map(|_| rx.recv_timeout(WAIT)).collect();
        if got.iter().any(Result::is_err) {
            // Dropping them would wait for the stuck handlers: fail instead.
            std::mem::forget((brokers, subs));
            panic!("a handler is stuck closing the other broker (dedicated threads: {dedicated}): {got:?}");
        }
        assert!(brokers.iter().all(Broker::is_closed) && subs.iter().all(Subscription::is_closed));
        assert!(matches!(brokers[0].publish("t", &Record::new(b"late")), Err(Error::Closed(_))));
    }
}

#[test]
fn a_handler_can_close_an_idle_subscription_and_it_winds_up() {
    let b = broker();
    topic(&b, "ta", 1);
    topic(&b, "tb", 1);
    let slot = Arc::new(std::sync::OnceLock::new());
    let (tx, rx) = std::sync::mpsc::channel();
    let _a = closer(&b, "a", None, slot.clone(), tx, "a closed b", false);
    let (idle, _) = sub_with(&b, "tb", SubscriptionOptions { name: Some("b".into()), ..Default::default() });
    assert!(slot.set(idle).is_ok());
    publish(&b, "ta", b"go");
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "a closed b");
    assert!(slot.get().unwrap().is_closed());
    wait_for_names_free(&b, &["b"]);
}

/// Waits until a subscription can be made under each of `names` (a live one
/// holding a name makes that `Busy`).
fn wait_for_names_free(b: &Broker, names: &[&str]) {
    let deadline = Instant::now() + WAIT;
    for name in names {
        loop {
            let options = SubscriptionOptions { name: Some((*name).into()), ..Default::default() };
            match b.subscribe("**", options, |_: &Message<'_>| Ack::Success) {
                Ok(s) => {
                    s.close();
                    break;
                }
                Err(Error::Busy(_)) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("{name} is still taken: {e}"),
            }
        }
    }
}

/// Offsets delivered, per (topic, partition).
type Offsets = HashMap<(String, u32), Vec<u64>>;

#[test]
fn a_wildcard_subscription_over_many_topics_gets_every_message_once_in_order() {
    // Wildcard subscriptions drain only the partitions publishers flagged
    // (the ready set): four publishers spread over 200 topics of 2 partitions
    // each, on the pool and on a dedicated thread.
    for dedicated in [false, true] {
        let b = Broker::new(BrokerConfig { worker_threads: Some(2), ..Default::default() }).unwrap();
        let topics: Vec<String> = (0..200).map(|t| format!("many/{t}")).collect();
        for t in &topics {
            topic(&b, t, 2);
        }
        let seen: Arc<Mutex<Offsets>> = Arc::default();
        let s = seen.clone();
        let options = SubscriptionOptions { dedicated_thread: dedicated, ..Default::default() };
        let sub = b
            .subscribe("many/**", options, move |m: &Message<'_>| {
                s.lock().unwrap().entry((m.topic().to_owned(), m.partition())).or_default().push(m.offset());
                Ack::Success
            })
            .unwrap();
        let per_thread = 5_000u64;
        std::thread::scope(|scope| {
            for p in 0..4u64 {
                let (b, topics) = (&b, &topics);
                scope.spawn(move || {
                    for i in 0..per_thread {
                        // A cheap spread that differs per thread.
                        let t = &topics[((i * 7919 + p * 104_729) % topics.len() as u64) as usize];
                        b.publish(t, &Record::new(&i.to_le_bytes())).unwrap();
                        if i % 1000 == 0 {
                            std::thread::yield_now();
                        }
                    }
                });
            }
        });
        assert!(sub.wait_idle(WAIT).unwrap());
        let seen = seen.lock().unwrap();
        let total: usize = seen.values().map(Vec::len).sum();
        assert_eq!(total as u64, 4 * per_thread, "dedicated: {dedicated}");
        for ((t, p), offsets) in seen.iter() {
            let expect: Vec<u64> = (0..offsets.len() as u64).collect();
            assert_eq!(offsets, &expect, "{t}[{p}]: every offset once, in order (dedicated: {dedicated})");
        }
    }
}

#[test]
fn anonymous_subscriptions_leave_no_dead_letter_topic_behind() {
    let b = broker();
    topic(&b, "t", 1);
    let before = b.topics();
    for i in 0..500u32 {
        let (s, _seen) = sub_with(&b, "t", SubscriptionOptions::default());
        if i % 50 == 0 {
            // Some with a delivery behind them, none dead-lettered.
            publish(&b, "t", b"m");
            assert!(s.wait_idle(WAIT).unwrap());
        }
        s.close();
    }
    assert_eq!(b.topics(), before, "500 anonymous subscribe/close cycles left no topic behind");

    // One that dead-letters still gets its topic, made on the first dead
    // letter, and the topic stays while it holds messages.
    let s = b.subscribe("t", SubscriptionOptions::default(), |_: &Message<'_>| Ack::DeadLetter).unwrap();
    let dlq = s.stats().dead_letter_topic.expect("a dead-letter topic name");
    assert!(dlq.starts_with("$dlq/anon-"), "{dlq}");
    assert!(!b.topics().contains(&dlq), "not made at subscribe");
    publish(&b, "t", b"poison");
    assert!(s.wait_idle(WAIT).unwrap());
    assert_eq!(s.stats().dead_lettered, 1);
    s.close();
    assert!(b.topics().contains(&dlq), "a dead-letter topic holding messages outlives its subscription");
    let (reader, seen) = sub_with(&b, &dlq, earliest());
    assert!(reader.wait_idle(WAIT).unwrap());
    assert_eq!(payloads(&seen), vec![b"poison".to_vec()]);
}

/// Sets its flag when dropped (with the handler that owns it): the end of
/// the subscription's wind-up as user code sees it.
struct DroppedFlag(Arc<AtomicBool>);

impl Drop for DroppedFlag {
    fn drop(&mut self) {
        // A destructor with some work in it widens the window in which a
        // close that did not wait for the wind-up would return.
        for _ in 0..50 {
            std::thread::yield_now();
        }
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn close_returns_after_the_wind_up_so_the_name_can_be_reused_at_once() {
    let b = broker();
    topic(&b, "t", 1);
    for dedicated in [false, true] {
        for i in 0..200u32 {
            let dropped = Arc::new(AtomicBool::new(false));
            let flag = DroppedFlag(dropped.clone());
            let (entered, in_round) = std::sync::mpsc::sync_channel::<()>(1);
            let options =
                SubscriptionOptions { name: Some("reused".into()), dedicated_thread: dedicated, ..earliest() };
            // The same durable name right after the last close: never Busy.
            let s = b
                .subscribe("t", options, move |_: &Message<'_>| {
                    let _owned = &flag;
                    let _ = entered.try_send(());
                    // A slow handler: the close meets its round in progress,
                    // and the drainer, seeing CLOSED after it, may win the
                    // wind-up.
                    for _ in 0..200 {
                        std::thread::yield_now();
                    }
                    Ack::Success
                })
                .unwrap_or_else(|e| panic!("iteration {i} (dedicated {dedicated}): {e}"));
            for _ in 0..5 {
                publish(&b, "t", b"m");
            }
            in_round.recv_timeout(WAIT).expect("the handler runs");
            s.close();
            assert!(dropped.load(Ordering::SeqCst), "iteration {i}: close returned before the handler was dropped");
            drop(s);
        }
    }
}

#[test]
fn an_outside_close_after_the_handler_closed_its_own_subscription_still_waits_for_the_wind_up() {
    let b = broker();
    topic(&b, "t", 1);
    for dedicated in [false, true] {
        for i in 0..100u32 {
            let dropped = Arc::new(AtomicBool::new(false));
            let flag = DroppedFlag(dropped.clone());
            let slot: Arc<std::sync::OnceLock<Subscription>> = Arc::default();
            let (closed_itself, closed) = std::sync::mpsc::sync_channel::<()>(1);
            let own = slot.clone();
            let options = SubscriptionOptions { dedicated_thread: dedicated, ..earliest() };
            let s = b
                .subscribe("t", options, move |_: &Message<'_>| {
                    let _owned = &flag;
                    if let Some(me) = own.get() {
                        // From its own handler: returns at once; the round
                        // winds the subscription up after this call.
                        me.close();
                        let _ = closed_itself.try_send(());
                    }
                    Ack::Success
                })
                .unwrap();
            assert!(slot.set(s).is_ok());
            publish(&b, "t", b"m");
            closed.recv_timeout(WAIT).expect("the handler closes its own subscription");
            // The subscription is already closed; the user's close must still
            // return only once the handler (and what it owns) is dropped.
            slot.get().unwrap().close();
            assert!(
                dropped.load(Ordering::SeqCst),
                "iteration {i} (dedicated {dedicated}): close returned before the wind-up"
            );
        }
    }
}

/// A batch larger than a `Block` subscriber's lag limit goes in parts,
/// each waiting for room: every record lands once, in order, and the
/// positions returned are the offsets they got, whether the batch went in
/// one part or several.
#[test]
fn a_batch_past_a_block_limit_goes_in_parts_with_its_positions_in_order() {
    let b = broker();
    topic(&b, "t", 1);
    let options = SubscriptionOptions { overflow: rill::Overflow::Block, lag_limit: Some(4), ..Default::default() };
    let (sub, seen) = sub_with(&b, "t", options);
    let records: Vec<Vec<u8>> = (0..10u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let batch: Vec<Record<'_>> = records.iter().map(|v| Record::new(v)).collect();
    let positions = b.publish_batch("t", &batch).unwrap();
    assert_eq!(positions.iter().map(|p| p.offset).collect::<Vec<_>>(), (0..10).collect::<Vec<u64>>());
    // And one within the limit, in one part, after them.
    let positions = b.publish_batch("t", &batch[..3]).unwrap();
    assert_eq!(positions.iter().map(|p| p.offset).collect::<Vec<_>>(), vec![10, 11, 12]);
    assert!(sub.wait_idle(WAIT).unwrap());
    let got: Vec<Vec<u8>> = seen.lock().unwrap().iter().map(|m| m.3.clone()).collect();
    let mut want = records.clone();
    want.extend_from_slice(&records[..3]);
    assert_eq!(got, want);
}
