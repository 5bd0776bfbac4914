//! Loom model of the flusher's due word (`src/broker/flusher.rs`, "The race
//! it survives"): a publisher appends and then, after D1, loads the word
//! (due already: it does nothing); the flusher stores `CLEAN` at the start
//! of a round and then, after D2, looks at the log, and sleeps unless a
//! mark came in. Each side stores and then loads what the other stored, so
//! without a full fence on both, the publisher can see the `DIRTY` of the
//! round that is just beginning while that round misses its record, and
//! the flusher then sleeps for ever with the record unsynced. Loom reports
//! that as a deadlock; `.ci/fence-check` requires it with D1 or D2
//! weakened.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::FlushDue;

#[test]
fn an_idle_flusher_is_woken_by_a_publish() {
    model(|| {
        let flush = Arc::new(FlushDue::new());
        let publisher = {
            let flush = flush.clone();
            thread::spawn(move || flush.publish())
        };
        flush.flusher_until_a_record();
        publisher.join().unwrap();
    });
}
