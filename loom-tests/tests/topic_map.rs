//! Loom models of the topic map (`src/broker/topic_map.rs`, "What a reader
//! may see"), run on the real map through `rill`'s loom harness: one
//! writer inserts, removes or rebuilds while a reader looks names up. Every
//! name hashes alike, so each lookup reads the names keyed before its own.
//!
//! The values live behind `arc-swap`, whose atomics loom does not see (it
//! runs them as plain sequential code); the orderings the map adds, M1 (a
//! slot's tag after its name) and M2 (the table pointer after the table's
//! slots), are loom's, and `.ci/fence-check` requires a model below to
//! fail with each weakened.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::NameMap;

/// An insert in place (no rebuild) against a lookup of the name being
/// inserted: the lookup finds it whole or not at all. Without M1 the
/// reader can see the new tag and read the name while it is written, which
/// loom reports as a causality violation on the name's cell.
#[test]
fn a_lookup_during_an_insert_reads_a_whole_name() {
    model(|| {
        let map = Arc::new(NameMap::new(8));
        assert!(map.insert("a", 1));
        let writer = {
            let map = map.clone();
            thread::spawn(move || assert!(map.insert("b", 2)))
        };
        let b = map.get("b");
        assert!(b.is_none() || b == Some(2), "{b:?}");
        assert_eq!(map.get("a"), Some(1), "a was there all along");
        writer.join().unwrap();
        assert_eq!(map.get("b"), Some(2));
    });
}

/// An insert that rebuilds the table against a lookup of a name that was
/// there all along: the reader finds it in the old table or the new one.
/// Without M2 the reader can load the new table and read its slots'
/// atomics with nothing ordering their creation before the read, which loom
/// reports as a causality violation. It takes three preemptions to reach
/// (the reader pinned before the writer's rebuild, the pointer loaded after
/// it), so this model is bounded by at least three whatever
/// `LOOM_MAX_PREEMPTIONS` says (it runs in well under a second).
#[test]
fn a_lookup_during_a_resize_finds_every_name_there_all_along() {
    let mut builder = loom_tests::builder(3);
    builder.preemption_bound = Some(builder.preemption_bound.map_or(3, |b| b.max(3)));
    builder.check(|| {
        let map = Arc::new(NameMap::new(2));
        assert!(map.insert("a", 1));
        let writer = {
            let map = map.clone();
            // The second name rebuilds the two-slot table; the third goes
            // into the new one in place.
            thread::spawn(move || assert!(map.insert("b", 2) && map.insert("c", 3)))
        };
        assert_eq!(map.get("a"), Some(1), "a was there all along");
        let c = map.get("c");
        assert!(c.is_none() || c == Some(3), "{c:?}");
        writer.join().unwrap();
        assert_eq!((map.get("a"), map.get("b"), map.get("c")), (Some(1), Some(2), Some(3)));
    });
}

/// A removal, and the name inserted again, against lookups: a lookup that
/// starts after the removal returned does not find the old value, and a
/// name there all along (keyed after the removed one's tombstone) is found.
#[test]
fn a_lookup_never_finds_a_name_removed_before_it_started() {
    model(|| {
        let map = Arc::new(NameMap::new(8));
        assert!(map.insert("x", 1) && map.insert("a", 2));
        let removed = Arc::new(AtomicBool::new(false));
        let writer = {
            let (map, removed) = (map.clone(), removed.clone());
            thread::spawn(move || {
                assert!(map.remove("x"));
                // Release: pairs with the reader's Acquire; the removal
                // happened before.
                removed.store(true, Ordering::Release);
                assert!(map.insert("x", 3));
            })
        };
        // Acquire: pairs with the writer's Release.
        let after = removed.load(Ordering::Acquire);
        let x = map.get("x");
        if after {
            assert_ne!(x, Some(1), "found a value removed before the lookup");
        }
        assert_eq!(map.get("a"), Some(2), "a was there all along");
        writer.join().unwrap();
        assert_eq!(map.get("x"), Some(3));
    });
}
