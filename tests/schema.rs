//! Topic schemas (issue 42): JSON Schema and validator functions, checked on
//! publish; invalid records refused or dead-lettered.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, Error, OnInvalid, Position, Record, Schema, SubscriptionOptions,
    TopicOptions,
};

const WAIT: Duration = Duration::from_secs(30);

fn broker() -> Broker {
    let b = Broker::new(BrokerConfig::default()).unwrap();
    b.create_topic("orders", &TopicOptions::default()).unwrap();
    b
}

fn json(doc: &str) -> Schema {
    Schema::Json(doc.to_owned())
}

/// One record as a reader sees it.
#[derive(Debug, Clone, PartialEq)]
struct Read {
    position: Position,
    payload: Vec<u8>,
    key: Option<Vec<u8>>,
    attributes: Vec<(String, String)>,
}

impl Read {
    fn attribute(&self, k: &str) -> Option<&str> {
        self.attributes.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }
}

/// Every record of `topic`, read by a consumer.
fn read_all(b: &Broker, topic: &str) -> Vec<Read> {
    let expected = b.topic_stats(topic).unwrap().publish_count as usize;
    let mut c = b.consumer("reader", topic, ConsumerOptions::default()).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while out.len() < expected {
        assert!(Instant::now() < deadline, "read {} of {expected} records", out.len());
        for m in c.poll(1024, Duration::from_millis(100)).unwrap() {
            let r = m.record();
            out.push(Read {
                position: Position { partition: m.partition(), offset: r.offset() },
                payload: r.payload().to_vec(),
                key: r.key().map(<[u8]>::to_vec),
                attributes: r.attributes().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
            });
        }
    }
    drop(c);
    b.delete_group("reader", topic).unwrap();
    out.sort_by_key(|r| r.position);
    out
}

fn schema_error(r: rill::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::Schema(m)) => m,
        other => panic!("expected a schema error, got {other:?}"),
    }
}

const ORDER: &str = r#"{
    "type": "object",
    "required": ["id", "status", "lines"],
    "properties": {
        "id": {"type": "integer"},
        "status": {"enum": ["new", "paid", "shipped"]},
        "lines": {"type": "array", "items": {
            "type": "object",
            "required": ["sku", "qty"],
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}
        }}
    }
}"#;

#[test]
fn json_payloads_are_checked_against_several_schemas() {
    let b = broker();
    assert_eq!(b.set_schema("orders", json(ORDER), OnInvalid::Reject).unwrap(), 1);
    let good = br#"{"id": 7, "status": "paid", "lines": [{"sku": "a", "qty": 2}]}"#;
    b.publish("orders", &Record::new(good)).unwrap();
    // (payload, what the reason must name: the instance path and the keyword)
    let bad: [(&[u8], &[&str]); 5] = [
        (br#"{"id": "7", "status": "paid", "lines": []}"#, &["\"/id\"", "\"type\""]),
        (br#"{"id": 7, "lines": []}"#, &["\"/\"", "\"required\"", "status"]),
        (br#"{"id": 7, "status": "lost", "lines": []}"#, &["\"/status\"", "\"enum\""]),
        (
            br#"{"id": 7, "status": "new", "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 0}]}"#,
            &["\"/lines/1/qty\"", "\"minimum\""],
        ),
        (b"[1, 2]", &["\"type\""]),
    ];
    for (payload, names) in bad {
        let m = schema_error(b.publish("orders", &Record::new(payload)));
        for n in names {
            assert!(m.contains(n), "{m:?} does not name {n}");
        }
    }
    // Other schemas on other topics: a type alone, and `true` (anything JSON).
    b.create_topic("counts", &TopicOptions::default()).unwrap();
    b.set_schema("counts", json(r#"{"type": "integer", "maximum": 10}"#), OnInvalid::Reject).unwrap();
    b.publish("counts", &Record::new(b"3")).unwrap();
    assert!(schema_error(b.publish("counts", &Record::new(b"11"))).contains("maximum"));
    assert!(schema_error(b.publish("counts", &Record::new(b"\"3\""))).contains("type"));
    b.create_topic("any", &TopicOptions::default()).unwrap();
    b.set_schema("any", json("true"), OnInvalid::Reject).unwrap();
    b.publish("any", &Record::new(b"null")).unwrap();
    // A payload that is not JSON is invalid, with a clear reason.
    for payload in [&b"not json"[..], b"", b"{\"id\": 1", &[0xff, 0xfe]] {
        let m = schema_error(b.publish("any", &Record::new(payload)));
        assert!(m.contains("not JSON"), "{m:?}");
    }
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 1);
    assert_eq!(b.topic_stats("counts").unwrap().publish_count, 1);
    assert_eq!(b.topic_stats("any").unwrap().publish_count, 1);
}

#[test]
fn reject_appends_nothing_through_every_publish_call() {
    let b = broker();
    b.set_schema("orders", json(r#"{"type": "object"}"#), OnInvalid::Reject).unwrap();
    let bad = Record::new(b"[]");
    let p = b.publisher("orders").unwrap();
    schema_error(b.publish("orders", &bad));
    schema_error(b.try_publish("orders", &bad));
    schema_error(b.publish_timeout("orders", &bad, Duration::from_secs(1)));
    schema_error(b.publish_outcome("orders", &bad));
    schema_error(b.publish("orders", &bad.with_id("x")));
    schema_error(p.publish(&bad));
    schema_error(p.try_publish(&bad));
    schema_error(p.publish_outcome(&bad));
    schema_error(p.publish_batch(&[bad]));
    schema_error(b.publish_batch_outcome("orders", &[bad]));
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 0);
    assert!(b.topic_stats("$dlq/orders").is_err(), "reject creates no dead-letter topic");
    // Valid ones go through every call, each stamped with the version.
    let good = Record::new(b"{}");
    b.publish("orders", &good).unwrap();
    p.publish(&good).unwrap();
    p.publish_outcome(&good).unwrap();
    b.publish_batch("orders", &[good, good]).unwrap();
    let read = read_all(&b, "orders");
    assert_eq!(read.len(), 5);
    assert!(read.iter().all(|r| r.attribute("rill.schema") == Some("1")), "{read:?}");
}

#[test]
fn dead_letter_mode_sends_the_record_to_the_dead_letter_topic() {
    let b = broker();
    b.set_schema("orders", json(ORDER), OnInvalid::DeadLetter).unwrap();
    let bad = Record::new(br#"{"id": 7, "status": "lost", "lines": []}"#)
        .with_key(b"customer-1")
        .with_attributes(&[("region", "EU"), ("rill.schema", "99")]);
    let out = b.publish_outcome("orders", &bad).unwrap();
    assert!(out.dead_lettered && !out.duplicate);
    assert_eq!(out.position, Position { partition: 0, offset: 0 });
    // The plain calls return the position in the dead-letter topic too.
    assert_eq!(b.publish("orders", &bad).unwrap().offset, 1);
    assert_eq!(b.publisher("orders").unwrap().publish(&bad).unwrap().offset, 2);
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 0);
    let dead = read_all(&b, "$dlq/orders");
    assert_eq!(dead.len(), 3);
    let d = &dead[0];
    assert_eq!(d.payload, bad.payload);
    assert_eq!(d.key.as_deref(), Some(&b"customer-1"[..]));
    assert_eq!(d.attribute("region"), Some("EU"));
    assert_eq!(d.attribute("rill.dlq.topic"), Some("orders"));
    assert_eq!(d.attribute("rill.schema"), None, "a dead letter carries no schema version");
    let reason = d.attribute("rill.dlq.reason").unwrap();
    assert!(reason.contains("\"/status\"") && reason.contains("enum"), "{reason:?}");
    // A valid record is appended to the topic, not dead-lettered.
    let ok = b.publish_outcome("orders", &Record::new(br#"{"id": 1, "status": "new", "lines": []}"#)).unwrap();
    assert!(!ok.dead_lettered);
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 1);
}

/// Found from outside: a dead letter is its record plus `rill.dlq.*`
/// attributes, so an invalid record at the topic's size limit did not fit
/// a `$dlq/<topic>` of the same limit and its publish failed with
/// `MessageTooLarge` (naming a size the caller never sent). The broker
/// makes its dead-letter topics with room for the attributes.
#[test]
fn an_invalid_record_at_the_size_limit_is_dead_lettered_whole() {
    let b = Broker::new(BrokerConfig::default()).unwrap();
    b.create_topic("big", &TopicOptions { max_message_bytes: Some(2 << 20), ..TopicOptions::default() }).unwrap();
    b.set_schema("big", json(r#"{"type":"object"}"#), OnInvalid::DeadLetter).unwrap();
    // The largest payload the topic takes with a one-byte key.
    let fits = |len: usize| Record::new(&vec![b'x'; len]).with_key(b"k").encoded_len().unwrap() <= 2 << 20;
    let len = (0..=2 << 20).rev().find(|&len| fits(len)).unwrap();
    let payload = vec![b'x'; len];
    let out = b.publish_outcome("big", &Record::new(&payload).with_key(b"k")).unwrap();
    assert!(out.dead_lettered, "{out:?}");
    let dead = read_all(&b, "$dlq/big");
    assert_eq!((dead.len(), dead[0].payload.len()), (1, payload.len()));
    // A reason as long as a validator may give is cut, not refused.
    let long = "why ".repeat(1000);
    b.set_schema("big", Schema::Validator(Arc::new(move |_: &[u8]| Err(long.clone()))), OnInvalid::DeadLetter).unwrap();
    assert!(b.publish_outcome("big", &Record::new(&payload).with_key(b"k")).unwrap().dead_lettered);
    let dead = read_all(&b, "$dlq/big");
    assert!(dead[1].attribute("rill.dlq.reason").is_some_and(|r| r.len() <= 1024 && r.starts_with("why why")));
}

/// Found from outside: `OnInvalid::DeadLetter` on a topic whose name is
/// longer than 250 bytes was accepted, and every invalid publish then
/// failed naming a `$dlq/...` topic the caller never used. It is refused
/// where it is set.
#[test]
fn dead_letter_mode_needs_a_name_its_dead_letter_topic_can_extend() {
    let b = Broker::new(BrokerConfig::default()).unwrap();
    for len in [250, 251, 255] {
        let name = "t".repeat(len);
        b.create_topic(&name, &TopicOptions::default()).unwrap();
        let set = b.set_schema(&name, json(r#"{"type":"object"}"#), OnInvalid::DeadLetter);
        if len <= rill::MAX_SUBSCRIPTION_NAME_LEN {
            set.unwrap();
            assert!(b.publish_outcome(&name, &Record::new(b"not json")).unwrap().dead_lettered);
        } else {
            assert!(matches!(&set, Err(Error::InvalidArgument(m)) if m.contains("dead-letter")), "{set:?}");
            // Rejecting needs no dead-letter topic.
            b.set_schema(&name, json(r#"{"type":"object"}"#), OnInvalid::Reject).unwrap();
        }
    }
}

#[test]
fn a_batch_with_one_bad_record() {
    let b = broker();
    b.set_schema("orders", json(r#"{"type": "object", "required": ["id"]}"#), OnInvalid::Reject).unwrap();
    let batch = [Record::new(br#"{"id": 1}"#), Record::new(br#"{"id": 2}"#), Record::new(b"{}"), Record::new(b"{}")];
    let m = schema_error(b.publish_batch("orders", &batch));
    assert!(m.starts_with("record 2 of the batch") && m.contains("required"), "{m:?}");
    schema_error(b.publisher("orders").unwrap().publish_batch_outcome(&batch));
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 0, "nothing of the batch was appended");

    // Dead-letter mode: the invalid ones go to `$dlq/orders`, the valid ones
    // are appended, in input order; the results are in input order.
    b.set_schema("orders", json(r#"{"type": "object", "required": ["id"]}"#), OnInvalid::DeadLetter).unwrap();
    let done = b.publish_batch_outcome("orders", &batch).unwrap();
    let flags: Vec<(bool, u64)> = done.iter().map(|p| (p.dead_lettered, p.position.offset)).collect();
    assert_eq!(flags, [(false, 0), (false, 1), (true, 0), (true, 1)]);
    let positions = b.publish_batch("orders", &batch).unwrap();
    assert_eq!(positions.iter().map(|p| p.offset).collect::<Vec<_>>(), [2, 3, 2, 3]);
    let read: Vec<Vec<u8>> = read_all(&b, "orders").into_iter().map(|r| r.payload).collect();
    assert_eq!(read, [&br#"{"id": 1}"#[..], br#"{"id": 2}"#, br#"{"id": 1}"#, br#"{"id": 2}"#]);
    assert_eq!(read_all(&b, "$dlq/orders").len(), 4);
}

#[test]
fn a_schema_replaced_while_publishers_run_checks_every_record() {
    // Two schemas that accept disjoint payloads: odd versions take only
    // {"v":"a"}, even ones only {"v":"b"}. Four publishers send both; each
    // appended record must fit the schema whose version it carries.
    let schema_of = |version: u64| {
        let v = if version % 2 == 1 { "a" } else { "b" };
        json(&format!(r#"{{"type": "object", "required": ["v"], "properties": {{"v": {{"const": "{v}"}}}}}}"#))
    };
    let b = Broker::new(BrokerConfig::default()).unwrap();
    b.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    assert_eq!(b.set_schema("orders", schema_of(1), OnInvalid::Reject).unwrap(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..4)
        .map(|i| {
            let (b, stop) = (b.clone(), stop.clone());
            thread::spawn(move || {
                let (mut appended, mut refused) = (0u64, 0u64);
                let p = b.publisher("orders").unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 100 {
                    let payload: &[u8] = if (n + i).is_multiple_of(2) { br#"{"v":"a"}"# } else { br#"{"v":"b"}"# };
                    let r = Record::new(payload);
                    let out = match n % 3 {
                        0 => p.publish(&r),
                        1 => b.publish("orders", &r),
                        _ => b.publish_batch("orders", &[r, r]).map(|v| v[0]),
                    };
                    match out {
                        Ok(_) => appended += 1,
                        Err(Error::Schema(_)) => refused += 1,
                        Err(e) => panic!("{e}"),
                    }
                    n += 1;
                }
                (appended, refused)
            })
        })
        .collect();
    for version in 2..=40 {
        assert_eq!(b.set_schema("orders", schema_of(version), OnInvalid::Reject).unwrap(), version);
        thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let (mut appended, mut refused) = (0, 0);
    for t in publishers {
        let (a, r) = t.join().unwrap();
        appended += a;
        refused += r;
    }
    assert!(appended > 0 && refused > 0, "{appended} appended, {refused} refused");
    let read = read_all(&b, "orders");
    for r in &read {
        let version: u64 = r.attribute("rill.schema").expect("every record carries its version").parse().unwrap();
        let want: &[u8] = if version % 2 == 1 { br#"{"v":"a"}"# } else { br#"{"v":"b"}"# };
        assert_eq!(r.payload, want, "a record carrying version {version}");
    }
}

#[test]
fn a_panicking_validator_makes_the_record_invalid() {
    let b = broker();
    let validator: rill::broker::ValidatorFn = Arc::new(|p: &[u8]| {
        if p == b"boom" {
            panic!("cannot parse {}", p.len());
        }
        if p.len() > 8 { Err(format!("{} bytes; at most 8", p.len())) } else { Ok(()) }
    });
    b.set_schema("orders", Schema::Validator(validator.clone()), OnInvalid::Reject).unwrap();
    assert_eq!(schema_error(b.publish("orders", &Record::new(b"boom"))), "validator panicked: cannot parse 4");
    assert_eq!(schema_error(b.publish("orders", &Record::new(b"123456789"))), "9 bytes; at most 8");
    b.publish("orders", &Record::new(b"fine")).unwrap();
    b.set_schema("orders", Schema::Validator(validator), OnInvalid::DeadLetter).unwrap();
    assert!(b.publisher("orders").unwrap().publish_outcome(&Record::new(b"boom")).unwrap().dead_lettered);
    let dead = read_all(&b, "$dlq/orders");
    assert_eq!(dead[0].attribute("rill.dlq.reason"), Some("validator panicked: cannot parse 4"));
    // The publisher and the broker go on.
    b.publish("orders", &Record::new(b"fine")).unwrap();
    assert_eq!(b.topic_stats("orders").unwrap().publish_count, 2);
}

#[test]
fn a_bad_schema_document_is_refused() {
    let b = broker();
    for doc in [r#"{"type": 5}"#, r#"{"minimum": "x"}"#, "{not json", r#"{"$ref": "http://example.com/s.json"}"#] {
        match b.set_schema("orders", json(doc), OnInvalid::Reject) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("JSON schema"), "{m:?}"),
            other => panic!("{doc}: {other:?}"),
        }
    }
    assert_eq!(b.schema_version("orders").unwrap(), 0);
    b.publish("orders", &Record::new(b"anything")).unwrap();
    assert!(matches!(b.set_schema("nope", json("true"), OnInvalid::Reject), Err(Error::NoSuchTopic(_))));
}

#[test]
fn versions_count_changes_and_messages_carry_theirs() {
    let b = broker();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let sub = b
        .subscribe("orders", SubscriptionOptions::default(), move |m| {
            sink.lock().unwrap().push(m.schema_version());
            Ack::Success
        })
        .unwrap();
    // Claimed versions are not believed: without a schema none is stamped.
    b.publish("orders", &Record::new(b"0").with_attributes(&[("rill.schema", "5")])).unwrap();
    b.publish_batch("orders", &[Record::new(b"0").with_attributes(&[("rill.schema", "5")])]).unwrap();
    assert_eq!(b.set_schema("orders", json("true"), OnInvalid::Reject).unwrap(), 1);
    b.publish("orders", &Record::new(b"1").with_attributes(&[("rill.schema", "5")])).unwrap();
    assert_eq!(b.set_schema("orders", json(r#"{"type":"integer"}"#), OnInvalid::Reject).unwrap(), 2);
    b.publish("orders", &Record::new(b"2")).unwrap();
    b.remove_schema("orders").unwrap();
    b.remove_schema("orders").unwrap(); // nothing to remove: no change
    assert_eq!(b.schema_version("orders").unwrap(), 0);
    b.publish("orders", &Record::new(b"not json")).unwrap();
    assert_eq!(b.set_schema("orders", json("true"), OnInvalid::Reject).unwrap(), 4);
    b.publish("orders", &Record::new(b"4")).unwrap();
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), [0, 0, 1, 2, 0, 4]);
}

/// A fresh, empty directory under the system's temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let p = std::env::temp_dir().join(format!("rill-schema-{tag}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn open(dir: &Path) -> Broker {
    Broker::new(BrokerConfig { data_dir: Some(dir.to_owned()), ..BrokerConfig::default() }).unwrap()
}

#[test]
fn a_durable_topics_json_schema_survives_a_restart() {
    let dir = temp_dir("restart");
    {
        let b = open(&dir);
        b.create_topic("orders", &TopicOptions::default()).unwrap();
        b.create_topic("sized", &TopicOptions::default()).unwrap();
        b.publish("orders", &Record::new(b"before")).unwrap();
        b.set_schema("orders", json(r#"{"type": "object"}"#), OnInvalid::Reject).unwrap();
        assert_eq!(b.set_schema("orders", json(ORDER), OnInvalid::DeadLetter).unwrap(), 2);
        b.set_schema("sized", Schema::Validator(Arc::new(|_: &[u8]| Err("never".into()))), OnInvalid::Reject).unwrap();
    }
    {
        let b = open(&dir);
        assert_eq!(b.schema_version("orders").unwrap(), 2);
        let out = b.publish_outcome("orders", &Record::new(b"{}")).unwrap();
        assert!(out.dead_lettered);
        let good = b.publish_outcome("orders", &Record::new(br#"{"id": 1, "status": "new", "lines": []}"#)).unwrap();
        assert!(!good.dead_lettered);
        // A validator function lives with the broker handle only.
        assert_eq!(b.schema_version("sized").unwrap(), 0);
        b.publish("sized", &Record::new(b"x")).unwrap();
        // The record published before the schema is not checked again.
        let read = read_all(&b, "orders");
        assert_eq!(read.iter().map(|r| r.attribute("rill.schema")).collect::<Vec<_>>(), [None, Some("2")]);
        // The next version follows the stored one; removing is stored too.
        assert_eq!(b.set_schema("orders", json(r#"{"type": "object"}"#), OnInvalid::Reject).unwrap(), 3);
        b.remove_schema("orders").unwrap();
    }
    {
        let b = open(&dir);
        assert_eq!(b.schema_version("orders").unwrap(), 0);
        b.publish("orders", &Record::new(b"not json")).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_replacement_returns_only_after_the_old_validator_is_done() {
    // A validator that blocks until released; once set_schema has swapped in
    // the new schema (its version shows), the old one is still running: the
    // call must not return until it has finished, since C frees the old
    // validator's user data then.
    use std::sync::mpsc;
    let b = broker();
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let entered_tx = Mutex::new(entered_tx);
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let old: rill::broker::ValidatorFn = Arc::new(move |_: &[u8]| {
        entered_tx.lock().unwrap().send(()).unwrap();
        release_rx.lock().unwrap().recv().unwrap();
        done.store(true, Ordering::SeqCst);
        Ok(())
    });
    b.set_schema("orders", Schema::Validator(old), OnInvalid::Reject).unwrap();
    let publisher = {
        let b = b.clone();
        thread::spawn(move || b.publish("orders", &Record::new(b"x")).unwrap())
    };
    entered.recv_timeout(WAIT).unwrap();
    let setter = {
        let (b, finished) = (b.clone(), finished.clone());
        thread::spawn(move || {
            b.set_schema("orders", json("true"), OnInvalid::Reject).unwrap();
            finished.load(Ordering::SeqCst)
        })
    };
    let deadline = Instant::now() + WAIT;
    while b.schema_version("orders").unwrap() != 2 {
        assert!(Instant::now() < deadline, "the new schema never took effect");
        thread::yield_now();
    }
    release.send(()).unwrap();
    assert!(setter.join().unwrap(), "set_schema returned while the old validator ran");
    publisher.join().unwrap();
}

/// How long a test below waits for an answer before it calls the broker
/// hung.
const WATCHDOG: Duration = Duration::from_secs(20);

/// Runs `scenario` on a thread of its own and returns its `answers`
/// answers, or fails the test if they do not all come within
/// [`WATCHDOG`]: a hang fails with `what`, instead of running the suite
/// out of its time. The hung thread (and its broker) is left behind.
fn within_watchdog<T: Send + 'static>(
    what: &str,
    answers: usize,
    scenario: impl FnOnce(mpsc::Sender<T>) + Send + 'static,
) -> Vec<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || scenario(tx));
    (0..answers)
        .map(|_| rx.recv_timeout(WATCHDOG).unwrap_or_else(|_| panic!("{what}: no answer in {WATCHDOG:?}, it hangs")))
        .collect()
}

/// A validator function, as `Schema::Validator` holds it.
type ValidatorFn = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Raises its flag when dropped: tells when rill let go of a validator.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_validator_removing_the_schema_whose_call_it_runs_inside_returns_without_waiting_for_it() {
    // Topic A's validator publishes to B; B's validator removes A's schema,
    // whose call in flight is its own caller: it must not wait for it.
    let answers = within_watchdog("remove_schema(A) from inside A's validator call", 1, |tx| {
        let b = Broker::new(BrokerConfig::default()).unwrap();
        b.create_topic("A", &TopicOptions::default()).unwrap();
        b.create_topic("B", &TopicOptions::default()).unwrap();
        let a_dropped = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(None));
        let (inner, flag) = (b.clone(), DropFlag(a_dropped.clone()));
        let a: ValidatorFn = Arc::new(move |_: &[u8]| {
            let _owned = &flag;
            inner.publish("B", &Record::new(b"inner")).map(|_| ()).map_err(|e| e.to_string())
        });
        let (inner, dropped, s) = (b.clone(), a_dropped.clone(), seen.clone());
        let bv: ValidatorFn = Arc::new(move |_: &[u8]| {
            let removed = inner.remove_schema("A");
            // A's validator is still running (it called this one): not dropped yet.
            *s.lock().unwrap() = Some((removed.is_ok(), dropped.load(Ordering::SeqCst), inner.schema_version("A")));
            Ok(())
        });
        b.set_schema("A", Schema::Validator(a), OnInvalid::Reject).unwrap();
        b.set_schema("B", Schema::Validator(bv), OnInvalid::Reject).unwrap();
        let outer = b.publish("A", &Record::new(b"outer")).map(|_| ());
        let inside = seen.lock().unwrap().take();
        tx.send((outer, inside, a_dropped.load(Ordering::SeqCst))).unwrap();
    });
    let (outer, inside, dropped_after) = answers.into_iter().next().unwrap();
    outer.unwrap();
    assert_eq!(inside, Some((true, false, Ok(0))), "removed, A's validator still alive, no schema on A");
    assert!(dropped_after, "the last call in flight let go of A's validator");
}

#[test]
fn a_validator_may_remove_its_own_topics_schema() {
    let answers = within_watchdog("remove_schema of its own topic from its validator", 1, |tx| {
        let b = broker();
        let inner = b.clone();
        let v: ValidatorFn = Arc::new(move |_: &[u8]| inner.remove_schema("orders").map_err(|e| e.to_string()));
        b.set_schema("orders", Schema::Validator(v), OnInvalid::Reject).unwrap();
        let first = b.publish("orders", &Record::new(b"x")).map(|_| ());
        tx.send((first, b.schema_version("orders").unwrap())).unwrap();
    });
    let (first, version) = answers.into_iter().next().unwrap();
    first.unwrap();
    assert_eq!(version, 0);
}

#[test]
fn validators_on_two_threads_removing_each_others_schema_do_not_deadlock() {
    // A's validator removes B's schema while B's, on another thread, removes
    // A's: each waiting for the other's call would wait for ever.
    let answers = within_watchdog("validators removing each other's schema", 1, |tx| {
        let b = Broker::new(BrokerConfig::default()).unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let dropped: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
        for (me, other) in [("A", "B"), ("B", "A")] {
            b.create_topic(me, &TopicOptions::default()).unwrap();
            let (inner, inside) = (b.clone(), inside.clone());
            let flag = DropFlag(dropped[usize::from(me == "B")].clone());
            let v: ValidatorFn = Arc::new(move |_: &[u8]| {
                let _owned = &flag;
                // Both calls in flight before either removes (bounded, so a
                // lost race cannot hang the test by itself).
                inside.fetch_add(1, Ordering::SeqCst);
                let start = Instant::now();
                while inside.load(Ordering::SeqCst) < 2 && start.elapsed() < Duration::from_secs(5) {
                    thread::yield_now();
                }
                inner.remove_schema(other).map_err(|e| e.to_string())
            });
            b.set_schema(me, Schema::Validator(v), OnInvalid::Reject).unwrap();
        }
        let publishers: Vec<_> = ["A", "B"]
            .into_iter()
            .map(|t| {
                let b = b.clone();
                thread::spawn(move || b.publish(t, &Record::new(b"x")).map(|_| ()))
            })
            .collect();
        let outcomes: Vec<_> = publishers.into_iter().map(|p| p.join().unwrap()).collect();
        let versions = (b.schema_version("A").unwrap(), b.schema_version("B").unwrap());
        tx.send((outcomes, versions, dropped.iter().all(|d| d.load(Ordering::SeqCst)))).unwrap();
    });
    let (outcomes, versions, all_dropped) = answers.into_iter().next().unwrap();
    for outcome in outcomes {
        outcome.unwrap();
    }
    assert_eq!(versions, (0, 0), "each removed the other's schema");
    assert!(all_dropped, "both validators let go once their calls ended");
}
