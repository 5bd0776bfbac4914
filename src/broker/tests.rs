//! Broker-level tests of failure paths that need the crate's test seams.

use super::*;
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
    let topic = broker.inner().topics.load().get("t").cloned().unwrap();
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
