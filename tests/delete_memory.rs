//! Deleting a large topic gives its memory back (issue 13). Alone in its
//! test binary: it reads the process's resident memory, which other tests
//! running in parallel threads would disturb.

mod common;

use rill::{Ack, Record, TopicOptions};

use common::{WAIT, broker, earliest};

/// The process's resident set, in bytes (Linux).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc_page_size() };
    pages * page
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
fn deleting_a_large_topic_releases_its_memory() {
    const TOTAL: usize = 96 << 20;
    const PAYLOAD: usize = 64 << 10;
    let b = broker();
    let options = TopicOptions { retention_bytes: None, ..TopicOptions::with_partitions(2) };
    b.create_topic("big/one", &options).unwrap();
    b.create_topic("big/other", &TopicOptions::default()).unwrap();
    // A wildcard subscription that read it all, a literal one, and a
    // publisher that lives on after the delete: none may keep it alive.
    let wildcard = b.subscribe("big/*", earliest(), |_| Ack::Success).unwrap();
    let literal = b.subscribe("big/one", earliest(), |_| Ack::Success).unwrap();
    let publisher = b.publisher("big/one").unwrap();
    let payload = vec![7u8; PAYLOAD];
    for _ in 0..TOTAL / PAYLOAD {
        publisher.publish(&Record::new(&payload)).unwrap();
    }
    assert!(wildcard.wait_idle(WAIT).unwrap() && literal.wait_idle(WAIT).unwrap());
    let retained = b.topic_stats("big/one").unwrap().retained_bytes;
    assert!(retained >= TOTAL as u64, "{retained}");
    let before = resident_bytes();

    b.delete_topic("big/one").unwrap();
    // The wildcard subscription lets go of it at its next round.
    assert!(wildcard.wait_idle(WAIT).unwrap());
    // A publisher still holding the topic fails, and is what holds its
    // memory now; the subscriptions (the literal one closed) hold nothing.
    assert!(publisher.publish(&Record::new(b"late")).is_err());
    drop(publisher);
    let after = resident_bytes();
    let freed = before.saturating_sub(after);
    assert!(
        freed >= (TOTAL as u64) * 3 / 4,
        "deleting a topic of {retained} retained bytes freed only {freed} resident bytes ({before} -> {after})"
    );
    // The subscriptions' handles are still usable.
    assert!(literal.is_closed());
    b.publish("big/other", &Record::new(b"x")).unwrap();
    assert!(wildcard.wait_idle(WAIT).unwrap());
}
