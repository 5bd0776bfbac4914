//! Several processes, one data directory (issues 39 and 42): a JSON schema
//! set, replaced or removed through one process's broker checks the
//! publishes of every process, from the moment each process's doorbell has
//! seen the change (which a test waits for on `Broker::schema_version`).
//!
//! The other process is this test binary run again with [`procs::ROLE`]
//! set and only the one test selected (see `tests/common/procs.rs`).
//! Parent and child hand over through marker files in the data directory,
//! waited for with a deadline.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::procs::{self, TempDir, check_then_release, child_role, expect_success, mark, spawn, wait_child_mark};
use common::wait_for;
use rill::{Broker, BrokerConfig, Error, OnInvalid, Record, Schema, Sharing, TopicOptions};

fn config(dir: &Path) -> BrokerConfig {
    procs::config(dir, Sharing::Processes)
}

const NEEDS_ID: &str = r#"{"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}}"#;
const NEEDS_NAME: &str = r#"{"type":"object","required":["name"]}"#;

/// Waits until `broker` has the schema version `v` in force for `topic`.
fn wait_version(broker: &Broker, topic: &str, v: u64) {
    wait_for(&format!("schema version {v}"), || broker.schema_version(topic).unwrap() == v);
}

fn refused(broker: &Broker, topic: &str, payload: &[u8]) -> bool {
    matches!(broker.publish(topic, &Record::new(payload)), Err(Error::Schema(_)))
}

/// Waits for the child's marker `name`, failing with its output if it
/// exited first.
fn step(dir: &Path, name: &str, child: &mut std::process::Child) {
    assert!(wait_child_mark(dir, name, child), "the setting process exited before {name:?}");
}

#[test]
fn a_schema_set_replaced_and_removed_in_one_process_checks_another_s_publishes() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "set");
        let broker = Broker::new(config(&dir)).unwrap();
        let go = |n: &str| procs::wait_mark(&dir, n);
        assert_eq!(broker.set_schema("orders", Schema::Json(NEEDS_ID.into()), OnInvalid::Reject).unwrap(), 1);
        mark(&dir, "set");
        go("set-seen");
        assert_eq!(broker.set_schema("orders", Schema::Json(NEEDS_NAME.into()), OnInvalid::Reject).unwrap(), 2);
        mark(&dir, "replaced");
        go("replaced-seen");
        broker.remove_schema("orders").unwrap();
        mark(&dir, "removed");
        go("removed-seen");
        // The other process's change reaches this one too, with the
        // directory's next number.
        wait_version(&broker, "orders", 4);
        assert!(refused(&broker, "orders", br#"{"id":1}"#));
        broker.publish("orders", &Record::new(br#"{"id":1,"name":"x"}"#)).unwrap();
        return;
    }
    let dir = TempDir::new("set");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("orders", &TopicOptions::default()).unwrap();
    broker.publish("orders", &Record::new(b"not json")).unwrap();
    let mut child = spawn("a_schema_set_replaced_and_removed_in_one_process_checks_another_s_publishes", "set", &dir.0);
    check_then_release(
        || {
            step(&dir.0, "set", &mut child);
            wait_version(&broker, "orders", 1);
            assert!(refused(&broker, "orders", b"not json"));
            assert!(refused(&broker, "orders", br#"{"id":"seven"}"#));
            broker.publish("orders", &Record::new(br#"{"id":7}"#)).unwrap();
            mark(&dir.0, "set-seen");

            step(&dir.0, "replaced", &mut child);
            wait_version(&broker, "orders", 2);
            assert!(refused(&broker, "orders", br#"{"id":7}"#), "checked by the new schema");
            broker.publish("orders", &Record::new(br#"{"name":"n"}"#)).unwrap();
            mark(&dir.0, "replaced-seen");

            step(&dir.0, "removed", &mut child);
            wait_version(&broker, "orders", 0);
            broker.publish("orders", &Record::new(b"anything at all")).unwrap();
            // The next number is the directory's: 3 went to the removal.
            assert_eq!(broker.set_schema("orders", Schema::Json(NEEDS_NAME.into()), OnInvalid::Reject).unwrap(), 4);
        },
        // Whatever failed, the child is let go (it then fails on its own).
        || ["set-seen", "replaced-seen", "removed-seen"].into_iter().for_each(|m| mark(&dir.0, m)),
    );
    expect_success(child, "the setting process");
    // What each record carried: none, 1, 2, none, and the child's 4.
    let (tx, rx) = std::sync::mpsc::channel();
    let _sub = broker
        .subscribe(
            "orders",
            rill::SubscriptionOptions { start: rill::StartPosition::Earliest, ..Default::default() },
            {
                move |m| {
                    tx.send(m.schema_version()).unwrap();
                    rill::Ack::Success
                }
            },
        )
        .unwrap();
    let got: Vec<u64> = (0..5).map(|_| rx.recv_timeout(common::WAIT).unwrap()).collect();
    assert_eq!(got, [0, 1, 2, 0, 4]);
}

#[test]
fn dead_letter_mode_set_in_another_process_routes_this_one_s_invalid_records() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "set");
        let broker = Broker::new(config(&dir)).unwrap();
        broker.set_schema("events", Schema::Json(NEEDS_ID.into()), OnInvalid::DeadLetter).unwrap();
        mark(&dir, "set");
        return;
    }
    let dir = TempDir::new("dlq");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("events", &TopicOptions::default()).unwrap();
    let mut child = spawn("dead_letter_mode_set_in_another_process_routes_this_one_s_invalid_records", "set", &dir.0);
    step(&dir.0, "set", &mut child);
    expect_success(child, "the setting process");
    wait_version(&broker, "events", 1);
    let at = broker.publish_outcome("events", &Record::new(b"{}")).unwrap();
    assert!(at.dead_lettered, "routed to the dead-letter topic");
    assert!(!broker.publish_outcome("events", &Record::new(br#"{"id":1}"#)).unwrap().dead_lettered);
    assert_eq!(broker.topic_stats("events").unwrap().publish_count, 1);
}

#[test]
fn a_validator_checks_only_its_own_process_and_clears_the_json_schema_elsewhere() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "set");
        let broker = Broker::new(config(&dir)).unwrap();
        let short: rill::broker::ValidatorFn =
            Arc::new(|p| if p.len() <= 4 { Ok(()) } else { Err(format!("{} bytes", p.len())) });
        assert_eq!(broker.set_schema("t", Schema::Validator(short.clone()), OnInvalid::Reject).unwrap(), 2);
        assert!(refused(&broker, "t", b"too long"));
        // On a topic without a schema: its first version.
        assert_eq!(broker.set_schema("u", Schema::Validator(short), OnInvalid::Reject).unwrap(), 1);
        mark(&dir, "validator");
        procs::wait_mark(&dir, "validator-seen");
        // The other process's change wins here too.
        wait_version(&broker, "t", 3);
        broker.publish("t", &Record::new(b"too long, but JSON? no")).unwrap_err();
        return;
    }
    let dir = TempDir::new("validator");
    let broker = Broker::new(config(&dir.0)).unwrap();
    broker.create_topic("t", &TopicOptions::default()).unwrap();
    broker.set_schema("t", Schema::Json(NEEDS_ID.into()), OnInvalid::Reject).unwrap();
    broker.create_topic("u", &TopicOptions::default()).unwrap();
    let mut child =
        spawn("a_validator_checks_only_its_own_process_and_clears_the_json_schema_elsewhere", "set", &dir.0);
    check_then_release(
        || {
            step(&dir.0, "validator", &mut child);
            // The function replaced the JSON schema; only its process runs
            // it. This one checks nothing, yet reads the function's number
            // (the directory's), which is what it waits on.
            wait_version(&broker, "t", 2);
            broker.publish("t", &Record::new(b"not json, and long")).unwrap();
            // Its record, the topic's only one, was checked by no schema.
            let (tx, rx) = std::sync::mpsc::channel();
            let options = rill::SubscriptionOptions { start: rill::StartPosition::Earliest, ..Default::default() };
            let sub = broker
                .subscribe("t", options, move |m| {
                    tx.send(m.schema_version()).unwrap();
                    rill::Ack::Success
                })
                .unwrap();
            assert_eq!(rx.recv_timeout(common::WAIT).unwrap(), 0);
            sub.close();
            assert_eq!(broker.set_schema("t", Schema::Json(NEEDS_ID.into()), OnInvalid::Reject).unwrap(), 3);
            // From no schema to the other process's function: 0, then 1.
            wait_version(&broker, "u", 1);
            broker.publish("u", &Record::new(b"longer than four")).unwrap();
        },
        || mark(&dir.0, "validator-seen"),
    );
    expect_success(child, "the setting process");
    // Every process gone, the function went with its broker: the first to
    // open the directory again reads no schema (nor does one joining it).
    drop(broker);
    let first = Broker::new(config(&dir.0)).unwrap();
    assert_eq!(first.schema_version("u").unwrap(), 0);
    assert_eq!(Broker::new(config(&dir.0)).unwrap().schema_version("u").unwrap(), 0);
    assert_eq!(first.schema_version("t").unwrap(), 3);
}

#[test]
fn a_topic_joined_from_another_process_comes_with_its_schema() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "create");
        let broker = Broker::new(config(&dir)).unwrap();
        broker.create_topic("late", &TopicOptions::default()).unwrap();
        broker.set_schema("late", Schema::Json(NEEDS_ID.into()), OnInvalid::Reject).unwrap();
        return;
    }
    let dir = TempDir::new("join");
    // Opened before the topic exists: it joins the topic when its doorbell
    // is rung for the creation, or when it publishes to it by name. A join
    // after the schema was set (the child has exited) comes with it, so a
    // topic not joined yet must be checked from its first publish, which
    // joins it (or races the doorbell's join, which reads the schema too).
    // One joined by the doorbell between the creation and the schema follows
    // the schema as a change, seen once the version reads 1 (what a process
    // that must know waits for: README, "Schemas" across processes).
    let broker = Broker::new(config(&dir.0)).unwrap();
    let child = spawn("a_topic_joined_from_another_process_comes_with_its_schema", "create", &dir.0);
    expect_success(child, "the creating process");
    match broker.schema_version("late") {
        Err(Error::NoSuchTopic(_)) => {}
        Ok(_) => wait_version(&broker, "late", 1),
        Err(e) => panic!("{e}"),
    }
    assert!(refused(&broker, "late", b"{}"), "checked from the join on");
    broker.publish("late", &Record::new(br#"{"id":1}"#)).unwrap();
}
