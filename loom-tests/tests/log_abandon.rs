//! Loom models of an abandoned reservation in a log shared by processes
//! (`segment.rs`, "An abandoned reservation"), on the real `rill::log`
//! code: a writer's late commit racing a reader's claim, and two readers
//! claiming the same slot. The log is in memory (loom's atomics cannot live
//! in a file), its segments commit and claim as a shared log's do, and its
//! cursors give a slot up at their second look at it.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use rill::log::{Cursor, Log, LogConfig, Record};

fn shared_log() -> Log {
    Log::shared_for_loom(&LogConfig { segment_bytes: Some(64), retention_bytes: None, ..LogConfig::default() }).unwrap()
}

fn tag(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload.try_into().expect("8-byte payload"))
}

/// Reads until the cursor reaches `end`; the tags read, by offset.
fn read_until(cursor: &mut Cursor, end: u64) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    while cursor.offset() < end {
        match cursor.read() {
            Ok(Some(r)) => seen.push((r.offset(), tag(r.payload()))),
            Ok(None) => thread::yield_now(),
            Err(lag) => panic!("nothing is trimmed: {lag:?}"),
        }
    }
    seen
}

/// A writer that reserved offset 0 writes and commits it while a reader,
/// waiting at it, gives it up. Exactly one wins: the record is read whole
/// (A1 orders its bytes before the commit) and the commit succeeds, or it
/// is never read and the commit fails. The record after it is read either way.
#[test]
fn a_late_commit_races_the_claim() {
    model(|| {
        let log = Arc::new(shared_log());
        let mine = 1u64.to_le_bytes();
        let reserved = log.reserve_for_loom(&Record::new(&mine));
        log.append(&Record::new(&2u64.to_le_bytes())).unwrap();
        let writer = thread::spawn(move || reserved.write_and_commit(&Record::new(&1u64.to_le_bytes())));
        let seen = read_until(&mut log.cursor_from_first(), 2);
        let committed = writer.join().unwrap();
        if committed {
            assert_eq!(seen, vec![(0, 1), (1, 2)]);
        } else {
            assert_eq!(seen, vec![(1, 2)], "a given-up offset is never read");
        }
    });
}

/// Two readers wait at a slot nobody will commit (its writer died after
/// its fetch-add) and both claim it: each passes over it once, and reads
/// the record after it.
#[test]
fn two_claimers_pass_over_the_same_slot() {
    model(|| {
        let log = Arc::new(shared_log());
        let _dead = log.reserve_for_loom(&Record::new(&1u64.to_le_bytes()));
        log.append(&Record::new(&2u64.to_le_bytes())).unwrap();
        let l = log.clone();
        let other = thread::spawn(move || read_until(&mut l.cursor_from_first(), 2));
        let seen = read_until(&mut log.cursor_from_first(), 2);
        assert_eq!(seen, vec![(1, 2)]);
        assert_eq!(other.join().unwrap(), vec![(1, 2)]);
    });
}

/// The seal of a segment whose elected sealer is late, taken over by a
/// reader waiting at its end (`segment.rs`, "A sealer that dies before it
/// seals"), races the sealer's own seal and a writer's late commit of the
/// segment's last slot. One seal wins and the other side adopts its count:
/// the next segment starts there (the record appended after the roll takes
/// that offset), the reader is never past it, reads the committed records
/// once each in offset order, and never a given-up one.
#[test]
fn a_taken_over_seal_races_the_late_sealer() {
    model(|| {
        let log = Arc::new(shared_log());
        log.append(&Record::new(&1u64.to_le_bytes())).unwrap();
        let late = log.reserve_for_loom(&Record::new(&2u64.to_le_bytes()));
        let sealer = log.elect_sealer_for_loom();
        let writer = thread::spawn(move || late.write_and_commit(&Record::new(&2u64.to_le_bytes())));
        let l = log.clone();
        let roller = thread::spawn(move || {
            sealer.seal_and_roll();
            l.append(&Record::new(&3u64.to_le_bytes())).unwrap()
        });
        let mut cursor = log.cursor_from_first();
        let mut seen = Vec::new();
        while !seen.iter().any(|&(_, t)| t == 3) {
            match cursor.read() {
                Ok(Some(r)) => seen.push((r.offset(), tag(r.payload()))),
                Ok(None) => thread::yield_now(),
                Err(lag) => panic!("nothing is trimmed: {lag:?}"),
            }
        }
        let committed = writer.join().unwrap();
        let third = roller.join().unwrap();
        let expect = if committed { vec![(0, 1), (1, 2), (2, 3)] } else { vec![(0, 1), (third, 3)] };
        assert_eq!(seen, expect);
        assert!(committed || third <= 2, "the next segment starts at the seal's count");
    });
}
