//! What an idle topic costs in memory (issue 43): a single-partition,
//! in-memory topic holding one small message keeps at most a page of
//! resident memory beyond the message itself. Alone in its test binary, as
//! `delete_memory.rs` is: it reads the process's resident memory, which
//! other tests running in parallel threads would disturb.
//!
//! Before issue 43 such a topic touched two pages of its own (the first
//! segment's region and, in a mapping of its own, its offset index) besides
//! its structures on the heap: about 9.5 KiB.

mod common;

use rill::{Record, TopicOptions};

use common::broker;

/// Topics created: enough that the heap's and the map's own growth steps
/// are spread thin over them.
const TOPICS: usize = 10_000;
/// Payload of the one message each holds.
const PAYLOAD: usize = 64;
/// The bound: resident bytes per idle topic beyond its message.
const BOUND: u64 = 4 << 10;

/// The process's resident set, in bytes (Linux).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: a plain libc call with a constant argument.
    pages * unsafe { libc_page_size() }
}

unsafe extern "C" {
    fn sysconf(name: i32) -> i64;
}

/// `sysconf(_SC_PAGESIZE)`; `_SC_PAGESIZE` is 30 on Linux.
unsafe fn libc_page_size() -> u64 {
    // SAFETY: a plain libc call with a constant argument.
    unsafe { sysconf(30) as u64 }
}

#[test]
fn an_idle_topic_holding_one_message_costs_at_most_a_page() {
    let b = broker();
    let options = TopicOptions::default();
    let body = [0x5au8; PAYLOAD];
    // First-use costs (the broker's threads, the map's first nodes) outside
    // the measurement.
    for i in 0..100 {
        let name = format!("warm/{i}");
        b.create_topic(&name, &options).unwrap();
        b.publish(&name, &Record::new(&body)).unwrap();
    }
    let names: Vec<String> = (0..TOPICS).map(|i| format!("idle/{}/{i}", i % 100)).collect();
    let before = resident_bytes();
    for name in &names {
        b.create_topic(name, &options).unwrap();
        assert_eq!(b.publish(name, &Record::new(&body)).unwrap().offset, 0);
    }
    let per_topic = resident_bytes().saturating_sub(before) / TOPICS as u64;
    assert!(
        per_topic <= BOUND + PAYLOAD as u64,
        "an idle topic holding one {PAYLOAD}-byte message keeps {per_topic} resident bytes, more than \
         {BOUND} beyond its message"
    );
    // Each still holds its message, and takes more.
    for name in names.iter().step_by(997) {
        assert_eq!(b.topic_stats(name).unwrap().partitions[0].next_offset, 1, "{name}");
        assert_eq!(b.publish(name, &Record::new(&[1u8; 2000])).unwrap().offset, 1);
    }
}
