//! Broker-level tests of failure paths that need the crate's test seams.

use super::*;
use crate::log::Fsync;
use crate::sync::spawn_fault;

/// Runs the calling test again alone, in a child process with `CHILD_ENV`
/// set, and checks that it passed there. For tests that count the process's
/// threads, which other tests running in parallel would disturb.
fn in_child_process(test: &str) -> bool {
    const CHILD_ENV: &str = "RILL_TEST_CHILD";
    if std::env::var_os(CHILD_ENV).is_some() {
        return true;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, "1")
        .status()
        .unwrap();
    assert!(status.success(), "{test} failed in its child process: {status}");
    false
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits until the process is back to `n` threads. A joined thread leaves
/// `/proc/self/task` a moment after `join` returns, so this polls, with a
/// bound: threads left sleeping for ever never go.
fn wait_for_thread_count(n: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = thread_count();
        if now == n || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::yield_now();
    }
}

/// Issue 14 #11: a broker whose fourth worker cannot be started used to leave
/// the three already started sleeping for ever, and to report the failure as
/// an invalid argument.
#[test]
fn a_failed_broker_start_stops_its_workers_and_says_resource_exhausted() {
    if !in_child_process("broker::tests::a_failed_broker_start_stops_its_workers_and_says_resource_exhausted") {
        return;
    }
    let before = thread_count();
    for succeed in [0, 3, 8] {
        // 8 workers start; the timer is the 9th thread.
        spawn_fault::fail_after(Some(succeed));
        let err = Broker::new(BrokerConfig { worker_threads: Some(8), ..BrokerConfig::default() }).unwrap_err();
        spawn_fault::fail_after(None);
        assert!(matches!(&err, Error::ResourceExhausted(m) if m.contains("cannot start thread")), "{err}");
        assert_eq!(wait_for_thread_count(before), before, "after {succeed} started: {err}");
    }
    let broker = Broker::new(BrokerConfig { worker_threads: Some(2), ..BrokerConfig::default() }).unwrap();
    broker.close();
    drop(broker);
    assert_eq!(wait_for_thread_count(before), before);
}

/// A dedicated subscription thread that cannot be started is a
/// ResourceExhausted error too, and the subscription is not half-made: the
/// same durable name subscribes fine once threads are available.
#[test]
fn a_dedicated_thread_that_cannot_start_is_resource_exhausted() {
    let broker = Broker::new(BrokerConfig { worker_threads: Some(1), ..BrokerConfig::default() }).unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    let options = || SubscriptionOptions {
        dedicated_thread: true,
        name: Some("durable".into()),
        ..SubscriptionOptions::default()
    };
    spawn_fault::fail_after(Some(0));
    let err = broker.subscribe("t", options(), |_| Ack::Success).unwrap_err();
    spawn_fault::fail_after(None);
    assert!(matches!(&err, Error::ResourceExhausted(m) if m.contains("rill-sub-durable")), "{err}");
    let sub = broker.subscribe("t", options(), |_| Ack::Success).unwrap();
    broker.publish("t", &Record::new(b"x")).unwrap();
    assert!(sub.wait_idle(Duration::from_secs(10)).unwrap());
    assert_eq!(sub.stats().delivered, 1);
    broker.close();
}

/// Issue 14 #3 through the broker: a publish whose partition cannot map its
/// next segment fails with ResourceExhausted (it used to panic and leave the
/// partition spinning); the subscriber still gets every message that was
/// published, and publishing works again once memory is back.
#[test]
fn a_partition_out_of_memory_fails_the_publish_and_recovers() {
    let broker = Broker::new(BrokerConfig { worker_threads: Some(1), ..BrokerConfig::default() }).unwrap();
    let options = TopicOptions { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..TopicOptions::default() };
    broker.create_topic("t", &options).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let sub = broker
        .subscribe("t", SubscriptionOptions::default(), move |m| {
            s.lock().push(m.offset());
            Ack::Success
        })
        .unwrap();
    let topic = broker.inner().topic("t").unwrap();
    topic.partitions[0].log.fail_next_segment_allocations(1);
    let mut published = Vec::new();
    let err = loop {
        match broker.publish("t", &Record::new(&[7; 200])) {
            Ok(p) => published.push(p.offset),
            Err(e) => break e,
        }
    };
    assert!(matches!(&err, Error::ResourceExhausted(m) if m.contains("out of memory")), "{err}");
    published.push(broker.publish("t", &Record::new(b"after")).unwrap().offset);
    let batch = broker.publish_batch("t", &[Record::new(b"b1"), Record::new(b"b2")]).unwrap();
    published.extend(batch.iter().map(|p| p.offset));
    assert!(sub.wait_idle(Duration::from_secs(10)).unwrap());
    assert_eq!(*seen.lock(), published, "every published message, in order");
    broker.close();
}

fn data_dir(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("rill-btest-{tag}-{}-{}", std::process::id(), crate::sync::unique_id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn on_disk(root: &std::path::Path) -> super::store::Offsets {
    super::store::read_offsets(root, false).unwrap().0
}

/// Issue 11, "Always: a durable subscription's ack position is durable":
/// the acks of a drain round are written and synced before the subscription
/// goes idle (the flusher does not run under `Always`, so nothing else could
/// have written them), with one write for the whole round, not one per ack.
#[test]
fn under_always_durable_acks_are_synced_before_idle_with_one_write_per_round() {
    let root = data_dir("acks");
    let config = BrokerConfig { data_dir: Some(root.clone()), fsync: Fsync::Always, ..BrokerConfig::default() };
    let broker = Broker::new(config).unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    let records: Vec<Record<'_>> = (0..100).map(|_| Record::new(b"m")).collect();
    broker.publish_batch("t", &records).unwrap();
    let store = broker.inner().store().unwrap();
    assert_eq!(store.offsets_writes(), 0);
    // A dedicated thread's rounds are not cut by time: all 100 in one round.
    let options = || SubscriptionOptions {
        name: Some("d".into()),
        dedicated_thread: true,
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    let sub = broker.subscribe("t", options(), |_| Ack::Success).unwrap();
    assert!(sub.wait_idle(Duration::from_secs(30)).unwrap());
    assert_eq!(on_disk(&root).durable, vec![("d".to_string(), vec![("t".to_string(), 0, 100)])]);
    assert_eq!(store.offsets_writes(), 1, "one write (and fsync) for the round's 100 acks");
    broker.publish("t", &Record::new(b"one more")).unwrap();
    assert!(sub.wait_idle(Duration::from_secs(30)).unwrap());
    assert_eq!(on_disk(&root).durable[0].1, vec![("t".to_string(), 0, 101)]);
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 11: a commit under `Always` waits for its fsync without holding the
/// broker's control mutex: while its write is held in flight, subscribing,
/// closing a subscription and another member's commit all go through, and
/// the commits made meanwhile share the next write.
#[test]
fn a_commit_waiting_for_its_fsync_blocks_no_other_broker_call() {
    let root = data_dir("nolock");
    let config = BrokerConfig { data_dir: Some(root.clone()), fsync: Fsync::Always, ..BrokerConfig::default() };
    let broker = Broker::new(config).unwrap();
    broker.create_topic("t", &TopicOptions { partitions: 2, ..TopicOptions::default() }).unwrap();
    broker.publish_batch("t", &[Record::new(b"a"), Record::new(b"b")]).unwrap();
    let store = broker.inner().store().unwrap();
    let mut c1 = broker.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let mut c2 = broker.consumer("g2", "t", ConsumerOptions::default()).unwrap();
    store.offsets.gate.close();
    let first = crate::sync::spawn_named("commit".into(), move || {
        let r = c1.commit_offset(0, 0);
        (c1, r)
    })
    .unwrap();
    assert!(store.offsets.gate.wait_held(1, Duration::from_secs(30)), "the commit never reached its write");
    // Everything below takes the control mutex; run it on a thread so a
    // regression fails the test (after a bound) instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let b = broker.clone();
    let others = crate::sync::spawn_named("others".into(), move || {
        let sub = b.subscribe("t", SubscriptionOptions::default(), |_| Ack::Success).unwrap();
        sub.close();
        let stats = b.group_stats("g2", "t").map(drop);
        let second = crate::sync::spawn_named("commit2".into(), move || c2.commit_offset(1, 0)).unwrap();
        let _ = tx.send(stats);
        second
    })
    .unwrap();
    let done = rx.recv_timeout(Duration::from_secs(30));
    store.offsets.gate.open();
    assert!(done.is_ok(), "subscribe/close/stats waited behind a commit's write");
    let (_c1, r) = first.join().unwrap();
    r.unwrap();
    others.join().unwrap().join().unwrap().unwrap();
    let groups = on_disk(&root).groups;
    assert!(groups.contains(&("g".to_string(), "t".to_string(), vec![Some(0), None])), "{groups:?}");
    assert!(groups.contains(&("g2".to_string(), "t".to_string(), vec![None, Some(0)])), "{groups:?}");
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 11: a failing `fdatasync` under `Fsync::Always` is `Io` to the
/// publisher whose record it was to make durable; everything acknowledged
/// before it survives a reopen, and the next publish works once the disk
/// does again.
#[test]
fn a_failed_fdatasync_is_io_to_an_always_publisher_and_loses_nothing_acknowledged() {
    let dir = std::env::temp_dir().join(format!("rill-broker-syncfail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let open = || {
        Broker::new(BrokerConfig {
            worker_threads: Some(1),
            data_dir: Some(dir.clone()),
            fsync: crate::Fsync::Always,
            ..BrokerConfig::default()
        })
        .unwrap()
    };
    let broker = open();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    let mut acked = Vec::new();
    for i in 0..5u8 {
        acked.push((broker.publish("t", &Record::new(&[i])).unwrap().offset, vec![i]));
    }
    let topic = broker.inner().topic("t").unwrap();
    topic.partitions[0].log.fail_next_syncs(1);
    let err = broker.publish("t", &Record::new(b"unsynced")).unwrap_err();
    assert!(matches!(&err, Error::Io { message, .. } if message.contains("os error 5")), "{err}");
    acked.push((broker.publish("t", &Record::new(b"after")).unwrap().offset, b"after".to_vec()));
    drop(topic);
    broker.close();
    drop(broker);

    let broker = open();
    let topic = broker.inner().topic("t").unwrap();
    let mut cursor = topic.partitions[0].log.cursor_from_first();
    let mut back = Vec::new();
    while let Some(r) = cursor.read().unwrap() {
        back.push((r.offset(), r.payload().to_vec()));
    }
    for a in &acked {
        assert!(back.contains(a), "acknowledged {a:?} lost after reopen: {back:?}");
    }
    assert_eq!(back.len(), 7, "offsets stay dense: {back:?}");
    drop(cursor);
    drop(topic);
    broker.close();
    drop(broker);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn closing_the_broker_wakes_a_poll_that_is_blocked() {
    let broker = Broker::new(BrokerConfig { worker_threads: Some(1), ..BrokerConfig::default() }).unwrap();
    broker.create_topic("q", &TopicOptions::default()).unwrap();
    let mut c = broker.consumer("g", "q", ConsumerOptions::default()).unwrap();
    let waiters = c.waiters();
    std::thread::scope(|s| {
        s.spawn(|| {
            // Close only once the poll below has registered to wait, i.e.
            // has found nothing and is blocking (or about to: the
            // register / fence / re-check protocol of waiters.rs covers that
            // moment).
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while waiters.registered() == 0 {
                assert!(std::time::Instant::now() < deadline, "the poll never blocked");
                std::thread::yield_now();
            }
            broker.close();
        });
        let r = c.poll(10, Duration::from_secs(30));
        assert!(matches!(r, Err(Error::Closed(_))), "{r:?}");
    });
    assert!(matches!(c.commit(), Err(Error::Closed(_))));
}

/// Every failure of the single-record publish path, which passes its error
/// up as a one-word `PublishFailure`, reaches callers with the variant and
/// the text it had: through `Publisher::publish` (and `try_publish`),
/// `Broker::publish`, and `Publisher::publish_unboxed` (what the C ABI
/// calls; `Error::from` is what its status and last-error text are made
/// from).
#[test]
fn every_publish_failure_reaches_the_caller_with_its_variant_and_text() {
    use std::sync::mpsc;
    /// Publishing `r` fails with `want`, whose text is `text`, each way it can be published.
    fn check(name: &str, p: &Publisher, b: Option<(&Broker, &str)>, r: &Record<'_>, want: &Error, text: &str) {
        assert_eq!(want.to_string(), text, "{name}: the expected error's own text");
        let e = p.publish(r).expect_err(name);
        assert_eq!((&e, e.to_string().as_str()), (want, text), "{name}: Publisher::publish");
        let e = Error::from(p.publish_unboxed(r).expect_err(name));
        assert_eq!((&e, e.to_string().as_str()), (want, text), "{name}: Publisher::publish_unboxed");
        if let Some((broker, topic)) = b {
            let e = broker.publish(topic, r).expect_err(name);
            assert_eq!((&e, e.to_string().as_str()), (want, text), "{name}: Broker::publish");
        }
    }

    let broker = Broker::new(BrokerConfig {
        worker_threads: Some(1),
        publish_timeout: Some(Duration::from_millis(20)),
        ..BrokerConfig::default()
    })
    .unwrap();
    let small = TopicOptions { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..TopicOptions::default() };
    broker.create_topic("t", &small).unwrap();
    let p = broker.publisher("t").unwrap();

    // Too large, and a record that cannot be encoded.
    let max = broker.inner().topic("t").unwrap().partitions[0].log.max_record_bytes();
    let big = vec![0u8; max + 1];
    let r = Record::new(&big);
    let size = r.encoded_len().unwrap();
    let text = format!("message of {size} bytes exceeds the limit of {max} bytes");
    check("too large", &p, Some((&broker, "t")), &r, &Error::MessageTooLarge { size, max }, &text);
    let long_key = "k".repeat(crate::log::MAX_ATTRIBUTE_KEY_LEN + 1);
    let attrs = [(long_key.as_str(), "v")];
    let r = Record::new(b"x").with_attributes(&attrs);
    let why = format!("attribute key of {} bytes is longer than {}", long_key.len(), crate::log::MAX_ATTRIBUTE_KEY_LEN);
    check(
        "invalid",
        &p,
        Some((&broker, "t")),
        &r,
        &Error::InvalidArgument(why.clone()),
        &format!("invalid argument: {why}"),
    );

    // Out of memory at a segment roll: the publish that rolls fails.
    let topic = broker.inner().topic("t").unwrap();
    topic.partitions[0].log.fail_next_segment_allocations(1);
    let failed =
        (0..100_000).find_map(|_| p.publish(&Record::new(&[7; 200])).err()).expect("a roll within 100,000 publishes");
    assert!(matches!(&failed, Error::ResourceExhausted(m) if m.contains("out of memory")), "{failed}");
    assert!(failed.to_string().starts_with("resource exhausted: "), "{failed}");
    topic.partitions[0].log.fail_next_segment_allocations(1);
    let e = (0..100_000)
        .find_map(|_| p.publish_unboxed(&Record::new(&[7; 200])).err())
        .map(Error::from)
        .expect("a roll within 100,000 publishes");
    assert_eq!((&e, e.to_string()), (&failed, failed.to_string()), "the same failure through publish_unboxed");
    drop(topic);

    // A Block subscriber at its limit: `try_publish` is Full, a publish that
    // waits times out, and a publish from that subscriber's own handler is
    // Full naming its partition.
    broker.create_topic("block", &TopicOptions::default()).unwrap();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let (own_tx, own) = mpsc::channel();
    let from_handler = broker.publisher("block").unwrap();
    let options =
        SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(1), ..SubscriptionOptions::default() };
    let sub = broker
        .subscribe("block", options, move |m| {
            if m.offset() == 0 {
                let errs =
                    (from_handler.publish(&Record::new(b"own")), from_handler.publish_unboxed(&Record::new(b"own")));
                own_tx.send((errs.0.err(), errs.1.err().map(Error::from))).unwrap();
                entered_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            }
            Ack::Success
        })
        .unwrap();
    let b = broker.publisher("block").unwrap();
    b.publish(&Record::new(b"first")).unwrap();
    entered.recv().unwrap();
    let own_text = "full: partition 0 is at the lag limit of the Block subscription whose handler is publishing: \
                    waiting would wait for that handler itself, so it does not wait (return from the handler to \
                    make room)";
    let (e1, e2) = own.recv().unwrap();
    for e in [e1, e2] {
        let e = e.expect("a publish from the handler at its own limit fails");
        assert!(matches!(e, Error::Full(_)), "{e}");
        assert_eq!(e.to_string(), own_text);
    }
    // The handler holds offset 0; the limit of 1 leaves no room.
    let full = "a subscriber with the Block policy is at its lag limit";
    let e = b.try_publish(&Record::new(b"m")).unwrap_err();
    assert_eq!((&e, e.to_string()), (&Error::Full(full.into()), format!("full: {full}")), "Publisher::try_publish");
    let e = broker.try_publish("block", &Record::new(b"m")).unwrap_err();
    assert_eq!((&e, e.to_string()), (&Error::Full(full.into()), format!("full: {full}")), "Broker::try_publish");
    check("timeout", &b, Some((&broker, "block")), &Record::new(b"m"), &Error::Timeout, "timed out");
    release.send(()).unwrap();
    assert!(sub.wait_idle(Duration::from_secs(10)).unwrap());
    drop(sub);

    // A deleted topic, then a closed broker.
    broker.create_topic("gone", &TopicOptions::default()).unwrap();
    let g = broker.publisher("gone").unwrap();
    broker.delete_topic("gone").unwrap();
    check("deleted", &g, None, &Record::new(b"m"), &Error::NoSuchTopic("gone".into()), "no such topic: \"gone\"");
    broker.close();
    let closed = Error::Closed("the broker is closed".into());
    check("closed", &p, Some((&broker, "t")), &Record::new(b"m"), &closed, "closed: the broker is closed");
}

/// A failed sync of an `Always` log reaches a `Publisher` caller as the
/// `Io` error the log built, path and text, through `publish` and
/// `publish_unboxed` alike.
#[test]
fn a_failed_sync_reaches_a_publisher_as_its_io_error() {
    let dir = data_dir("pubio");
    let broker = Broker::new(BrokerConfig {
        worker_threads: Some(1),
        data_dir: Some(dir.clone()),
        fsync: Fsync::Always,
        ..BrokerConfig::default()
    })
    .unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    let p = broker.publisher("t").unwrap();
    p.publish(&Record::new(b"synced")).unwrap();
    let topic = broker.inner().topic("t").unwrap();
    topic.partitions[0].log.fail_next_syncs(1);
    let e = p.publish(&Record::new(b"unsynced")).unwrap_err();
    assert!(matches!(&e, Error::Io { message, .. } if message.contains("os error 5")), "{e}");
    assert!(e.to_string().starts_with("I/O error on "), "{e}");
    topic.partitions[0].log.fail_next_syncs(1);
    let e2 = Error::from(p.publish_unboxed(&Record::new(b"unsynced")).unwrap_err());
    assert_eq!((&e2, e2.to_string()), (&e, e.to_string()), "the same failure through publish_unboxed");
    p.publish(&Record::new(b"after")).unwrap();
    drop(topic);
    broker.close();
    drop(broker);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Copies a data directory (files and the directories under it) as a
/// killed process leaves it: what it wrote is in the page cache.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Issue 40, item 1: a record a crash left unwritten between acknowledged
/// ones becomes a skip record, which neither a subscription nor a consumer
/// is handed; both see every acknowledged message at its offset, and the
/// subscription's counts and lag agree.
#[test]
fn a_hole_left_by_a_crash_reaches_no_subscription_and_no_consumer() {
    let root = data_dir("holes");
    let config = |dir: &std::path::Path| BrokerConfig {
        data_dir: Some(dir.to_owned()),
        fsync: Fsync::Never,
        ..BrokerConfig::default()
    };
    let broker = Broker::new(config(&root)).unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    for i in 0..5u8 {
        broker.publish("t", &Record::new(&[i; 40])).unwrap();
    }
    let topic = broker.inner().topic_for_publish("t").unwrap();
    assert_eq!(topic.partitions[0].log.leave_hole(64), 5);
    for i in 6..11u8 {
        assert_eq!(broker.publish("t", &Record::new(&[i; 40])).unwrap().offset, u64::from(i));
    }
    drop(topic);
    let crashed = data_dir("holes-copy");
    copy_tree(&root, &crashed);
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();

    let broker = Broker::new(config(&crashed)).unwrap();
    let want: Vec<(u64, Vec<u8>)> = (0..5u8).chain(6..11).map(|i| (u64::from(i), vec![i; 40])).collect();
    assert_eq!(broker.topic_stats("t").unwrap().partitions[0].next_offset, 11);
    let seen = Arc::new(crate::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let options = SubscriptionOptions { start: StartPosition::Earliest, ..SubscriptionOptions::default() };
    let sub = broker
        .subscribe("t", options, move |m| {
            log.lock().push((m.offset(), m.payload().to_vec()));
            Ack::Success
        })
        .unwrap();
    assert!(sub.wait_idle(Duration::from_secs(30)).unwrap());
    assert_eq!(*seen.lock(), want, "the subscription passes over the hole");
    assert_eq!(sub.stats().delivered, 10);
    let mut consumer = broker.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let mut polled = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while consumer.position(0).map_or(true, |p| p < 11) {
        assert!(std::time::Instant::now() < deadline, "the consumer got stuck at {:?}", consumer.position(0));
        for m in consumer.poll(3, Duration::from_millis(50)).unwrap() {
            polled.push((m.offset(), m.payload().to_vec()));
        }
    }
    assert_eq!(polled, want, "the consumer passes over the hole");
    assert_eq!(consumer.stats().delivered, 10);
    // New messages continue after the hole's neighbours, at offset 11.
    assert_eq!(broker.publish("t", &Record::new(b"next")).unwrap().offset, 11);
    drop(consumer);
    sub.close();
    broker.close();
    std::fs::remove_dir_all(&crashed).unwrap();
}

/// A broker of `Sharing::Processes` on `root`, unsynced (these tests
/// crash nothing).
fn shared_config(root: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(root.to_path_buf()),
        fsync: Fsync::Never,
        sharing: crate::log::Sharing::Processes,
        ..BrokerConfig::default()
    }
}

/// A broker on a directory shared by processes, with topic `t` whose
/// abandon bound is short.
fn shared_topic_with_a_short_abandon_bound(tag: &str) -> (std::path::PathBuf, Broker) {
    let root = data_dir(tag);
    let broker = Broker::new(shared_config(&root)).unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    broker.inner().topic_for_publish("t").unwrap().partitions[0].log.set_abandon_after(Duration::from_millis(100));
    (root, broker)
}

/// [`shared_topic_with_a_short_abandon_bound`], and a subscription to `t`
/// with `options` that sends each offset it gets down the channel returned.
fn shared_with_a_short_abandon_bound(
    tag: &str,
    options: SubscriptionOptions,
) -> (std::path::PathBuf, Broker, Subscription, std::sync::mpsc::Receiver<u64>) {
    let (root, broker) = shared_topic_with_a_short_abandon_bound(tag);
    let (tx, rx) = std::sync::mpsc::channel();
    let sub = broker
        .subscribe("t", options, move |m| {
            let _ = tx.send(m.offset());
            Ack::Success
        })
        .unwrap();
    (root, broker, sub, rx)
}

/// Leaves a hole in topic `t`'s partition 0 as a publisher killed between
/// its reservation and its commit would (the log's seam); its offset.
fn leave_a_hole(broker: &Broker) -> u64 {
    broker.inner().topic_for_publish("t").unwrap().partitions[0].log.leave_hole(64)
}

/// Issue 39: a record reserved and never committed on a directory shared
/// by processes (its publisher killed in between; here a seam leaves the
/// hole) holds up the records after it only for the abandon bound, even
/// when nothing is published after them: the doorbell, which found its
/// cursor waiting on the hole, looks again once the bound has passed, gives
/// the offset up, and wakes the subscriptions, which pass over it.
#[test]
fn records_after_an_abandoned_reservation_are_delivered_with_nothing_published_after_them() {
    let (root, broker, sub, rx) = shared_with_a_short_abandon_bound("abandoned-tail", SubscriptionOptions::default());
    for i in 0..5u8 {
        broker.publish("t", &Record::new(&[i; 40])).unwrap();
    }
    assert_eq!(leave_a_hole(&broker), 5);
    for i in 6..11u8 {
        broker.publish("t", &Record::new(&[i; 40])).unwrap();
    }
    let got: Vec<u64> = (0..10).map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("a record held up")).collect();
    assert_eq!(got, (0..5).chain(6..11).collect::<Vec<u64>>());
    sub.close();
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// The same hole under a subscriber that never sleeps (a dedicated drainer
/// spinning for a minute between records), so that no doorbell looks for
/// it: its cursor polls lightly (`Cursor::poll_lightly`, which leaves the
/// tail word alone while a record is missing), yet finds the reservation
/// itself once it has missed it for a while, and gives it up after the
/// bound.
#[test]
fn a_spinning_subscriber_passes_an_abandoned_reservation_itself() {
    let options = SubscriptionOptions {
        dedicated_thread: true,
        idle_spin: Some(Duration::from_secs(60)),
        ..SubscriptionOptions::default()
    };
    let (root, broker, sub, rx) = shared_with_a_short_abandon_bound("abandoned-spin", options);
    broker.publish("t", &Record::new(b"before")).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), 0, "spinning from here on");
    assert_eq!(leave_a_hole(&broker), 1);
    broker.publish("t", &Record::new(b"after")).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)).expect("the record after the hole"), 2);
    sub.close();
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 39: a pull consumer on a directory shared by processes passes a
/// dead publisher's reservation however its caller polls, its cursor
/// polling lightly (it leaves the tail word alone while its next record is
/// missing): polling without waiting, in a loop, and asleep in a
/// blocking `poll`. Its doorbell gives the offset up once the bound has passed, as
/// it arms for every consumer, asleep or not, and wakes it.
#[test]
fn a_consumer_passes_an_abandoned_reservation_however_it_polls() {
    let (root, broker) = shared_topic_with_a_short_abandon_bound("abandoned-consumer");
    let offsets = |batch: Vec<crate::Delivered<'_>>| batch.iter().map(|m| m.offset()).collect::<Vec<u64>>();
    for i in 0..3u8 {
        broker.publish("t", &Record::new(&[i; 40])).unwrap();
    }
    // First one polling without waiting, in a loop, alone: no consumer
    // sleeps in `poll`.
    let mut spinning = broker.consumer("spinning", "t", ConsumerOptions::default()).unwrap();
    assert_eq!(offsets(spinning.poll(10, Duration::ZERO).unwrap()), [0, 1, 2]);
    // It finds its next record missing before the hole is made.
    assert!(spinning.poll(10, Duration::ZERO).unwrap().is_empty());
    assert_eq!(leave_a_hole(&broker), 3);
    broker.publish("t", &Record::new(b"after")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got = loop {
        assert!(std::time::Instant::now() < deadline, "the spinning consumer is stuck at the hole");
        let got = offsets(spinning.poll(10, Duration::ZERO).unwrap());
        if !got.is_empty() {
            break got;
        }
    };
    assert_eq!(got, [4], "the spinning consumer passes over the hole");

    // Then one asleep in `poll`, at a second hole.
    let mut blocking = broker.consumer("blocking", "t", ConsumerOptions::default()).unwrap();
    assert_eq!(offsets(blocking.poll(10, Duration::from_secs(60)).unwrap()), [0, 1, 2, 4]);
    assert_eq!(leave_a_hole(&broker), 5);
    broker.publish("t", &Record::new(b"after again")).unwrap();
    // It sleeps until its doorbell, having given the offset up, wakes it
    // (the publish's own wake-up finds nothing to read and it sleeps on).
    let got = offsets(blocking.poll(10, Duration::from_secs(60)).unwrap());
    assert_eq!(got, [6], "the blocking consumer passes over the hole");
    drop((blocking, spinning));
    broker.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// A publish waiting for a `Block` subscriber of another broker on the
/// directory (another process's, or here another broker of this one)
/// fails with `Closed` when its own broker closes, as one waiting for its
/// own broker's subscriber does: the close does not close the other's
/// subscriber, which would otherwise hold the publish until its timeout
/// (none here). Found from outside, through Python's `Broker.close`.
#[test]
fn closing_a_broker_ends_a_publish_waiting_for_another_brokers_block_subscriber() {
    let (root, publishing) = shared_topic_with_a_short_abandon_bound("close-blocked");
    let other = Broker::new(shared_config(&root)).unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = crate::sync::Mutex::new(released);
    let options =
        SubscriptionOptions { overflow: Overflow::Block, lag_limit: Some(2), ..SubscriptionOptions::default() };
    // Its handler holds the first message until the end (or a minute, so
    // that a failing test still ends): the lag limit stops the publisher
    // at offset 2.
    let sub = other
        .subscribe("t", options, move |_| {
            let _ = released.lock().recv_timeout(Duration::from_secs(60));
            Ack::Success
        })
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let publisher = publishing.clone();
    let thread = std::thread::spawn(move || {
        for i in 0u32.. {
            if let Err(e) = publisher.publish("t", &Record::new(&i.to_le_bytes())) {
                let _ = tx.send((i, e));
                return;
            }
        }
    });
    // Once it has published what the limit lets through, it waits (the
    // other broker counts what it sees published).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while other.topic_stats("t").unwrap().partitions[0].next_offset < 2 {
        assert!(std::time::Instant::now() < deadline, "the publisher did not reach the lag limit");
        std::thread::yield_now();
    }
    publishing.close();
    let (published, error) = rx.recv_timeout(Duration::from_secs(60)).expect("the publish waiting for room ended");
    assert!(matches!(error, Error::Closed(_)), "{error:?}");
    assert_eq!(published, 2, "the publish that failed is the one past the lag limit");
    thread.join().unwrap();
    drop(release);
    sub.close();
    other.close();
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 39, idle CPU: the flusher of a broker with a data directory runs
/// only when something made work for it. After the rounds the last write
/// asked for, it sleeps with no timeout: no round in an idle stretch of
/// many intervals (a flusher that woke every interval would run one each;
/// one that sleeps runs none, however long the stretch). Then a
/// publish (under `Interval`: its record waits for a sync), a roll to a new
/// segment (under `Never`: the sealed one waits for its completion marker)
/// and a durable subscription's round (its positions wait to be written)
/// each bring a round, which leaves nothing behind, and it sleeps again.
#[test]
fn an_idle_broker_does_not_wake_its_flusher() {
    let interval = Duration::from_millis(1);
    let wait = Duration::from_secs(60);
    for fsync in [Fsync::Interval(interval), Fsync::Never] {
        let root = data_dir("idle-flusher");
        let config = BrokerConfig { data_dir: Some(root.clone()), fsync, ..BrokerConfig::default() };
        let broker = Broker::new(config).unwrap();
        let small = TopicOptions { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..TopicOptions::default() };
        broker.create_topic("t", &small).unwrap();
        broker.publish("t", &Record::new(b"first")).unwrap();
        let inner = broker.inner().clone();
        let log = inner.topics.get("t").unwrap().partitions[0].log.clone();
        let guard = inner.flusher.lock();
        let flusher = guard.as_ref().unwrap();
        // Under `Never` a publish asks for no round (nothing to sync).
        let synced = matches!(fsync, Fsync::Interval(_));
        // The stretch: a hundred intervals, or under `Never` twenty of its
        // rounds' 100 ms pace.
        let stretch = match fsync {
            Fsync::Interval(d) => d * 100,
            _ => Duration::from_secs(2),
        };
        let rounds = flusher.wait_asleep();
        assert!(rounds >= 1, "{fsync:?}: the topic's creation asks for a round");
        assert!(!(synced && log.behind_durable()), "{fsync:?}: asleep with a record not synced");
        assert_eq!(flusher.wait_rounds_past(rounds, stretch), rounds, "{fsync:?}: a round in an idle stretch");

        // What makes work for it: a publish under `Interval`, a roll under
        // `Never` (a publish alone asks for nothing there).
        let segments = log.stats().segments;
        while log.stats().segments == segments {
            broker.publish("t", &Record::new(&[7; 100])).unwrap();
            if synced {
                break;
            }
        }
        let after = flusher.wait_rounds_past(rounds, wait);
        assert!(after > rounds, "{fsync:?}: no round after a write");
        let rounds = flusher.wait_asleep();
        assert!(!(synced && log.behind_durable()), "{fsync:?}: asleep with a record not synced");
        assert_eq!(log.stats().unmarked_segments, 0, "{fsync:?}: asleep with a sealed segment unmarked");

        // A durable subscription's rounds: its positions are written.
        let options = SubscriptionOptions {
            name: Some("d".into()),
            start: StartPosition::Earliest,
            ..SubscriptionOptions::default()
        };
        let sub = broker.subscribe("t", options, |_| Ack::Success).unwrap();
        assert!(sub.wait_idle(wait).unwrap());
        assert!(flusher.wait_rounds_past(rounds, wait) > rounds, "{fsync:?}: no round after a drain round");
        let end = log.end_offset();
        let rounds = flusher.wait_asleep();
        assert_eq!(on_disk(&root).durable, vec![("d".to_string(), vec![("t".to_string(), 0, end)])], "{fsync:?}");
        assert_eq!(flusher.wait_rounds_past(rounds, stretch), rounds, "{fsync:?}: a round in an idle stretch");
        drop(sub);
        drop(guard);
        broker.close();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
