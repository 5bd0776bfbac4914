//! What the core logs through the `log` facade, and the `on_dead_letter`
//! alert (issue 13). Its own test binary: a logger is installed once per
//! process.

mod common;

use std::sync::{Arc, Mutex};

use rill::{Ack, Record, SubscriptionOptions, TopicOptions};

use common::{WAIT, broker, earliest, publish};

/// Every record logged, as (level, target, text).
static SEEN: Mutex<Vec<(log::Level, String, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        SEEN.lock().unwrap().push((r.level(), r.target().to_string(), r.args().to_string()));
    }
    fn flush(&self) {}
}

/// One `on_dead_letter` call: offset, payload, reason.
type Alert = (u64, Vec<u8>, String);

fn logged(level: log::Level, needle: &str) -> bool {
    SEEN.lock().unwrap().iter().any(|(l, t, m)| *l == level && t.starts_with("rill") && m.contains(needle))
}

#[test]
fn rare_events_are_logged_and_dead_letters_raise_the_alert() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
    let b = broker();
    let options = TopicOptions { segment_bytes: Some(rill::log::MIN_SEGMENT_BYTES), ..TopicOptions::default() };
    b.create_topic("jobs", &options).unwrap();

    let alerts: Arc<Mutex<Vec<Alert>>> = Arc::default();
    let sink = alerts.clone();
    let options = SubscriptionOptions {
        name: Some("worker".into()),
        max_attempts: Some(1),
        on_dead_letter: Some(Arc::new(move |m, why| {
            sink.lock().unwrap().push((m.offset(), m.payload().to_vec(), why.to_string()));
        })),
        ..earliest()
    };
    let sub = b
        .subscribe("jobs", options, |m| match m.payload() {
            b"poison" => {
                m.set_reason("cannot parse");
                Ack::DeadLetter
            }
            b"boom" => panic!("exploded"),
            _ => Ack::Success,
        })
        .unwrap();
    publish(&b, "jobs", b"poison");
    publish(&b, "jobs", b"boom");
    publish(&b, "jobs", b"fine");
    assert!(sub.wait_idle(WAIT).unwrap());

    // The alert: once per dead letter, with the message and the reason.
    let alerts = alerts.lock().unwrap().clone();
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    assert_eq!((alerts[0].0, alerts[0].1.as_slice(), alerts[0].2.as_str()), (0, &b"poison"[..], "cannot parse"));
    assert_eq!((alerts[1].0, alerts[1].1.as_slice()), (1, &b"boom"[..]));
    assert!(alerts[1].2.contains("handler panicked: exploded"), "{}", alerts[1].2);
    assert!(logged(log::Level::Warn, "dead-lettered jobs partition 0 offset 0: cannot parse"));
    assert!(logged(log::Level::Warn, "panicked on jobs partition 0 offset 1: exploded"));

    // Rollovers (once per segment, not per message).
    let before = SEEN.lock().unwrap().len();
    for _ in 0..200 {
        b.publish("jobs", &Record::new(&[0u8; 100])).unwrap();
    }
    let rolls = SEEN.lock().unwrap()[before..].iter().filter(|(_, _, m)| m.contains("rolled over")).count();
    let segments = b.topic_stats("jobs").unwrap().retained_bytes / rill::log::MIN_SEGMENT_BYTES as u64;
    assert!(rolls >= 1 && rolls as u64 <= segments, "{rolls} rollovers logged for {segments} segments");
    assert!(SEEN.lock().unwrap().len() - before < 200, "nothing is logged per message");

    // Deleting a topic, and the subscription it closes.
    b.delete_topic("jobs").unwrap();
    assert!(logged(log::Level::Info, "deleted topic \"jobs\""));
    assert!(logged(log::Level::Info, "closing subscription \"worker\": topic deleted"));
}
