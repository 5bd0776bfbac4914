//! Loom model of the data directory's group commit of offsets (the essay
//! "Numbered snapshots" and its "hand-over" in `src/broker/store/offsets.rs`),
//! run on the real `Store::request` and `Store::wait` through `rill`'s loom
//! harness, on a real directory.
//!
//! The protocol is a mutex and a condition variable, so loom checks its
//! interleavings, not memory orderings: which committer writes, which waits,
//! and what each finds when it wakes. The file writes themselves are plain
//! system calls, which loom runs without a scheduling point inside.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::model;
use rill::broker::loom_harness::OffsetsStore;

/// A fresh data directory for one execution (loom runs the closure once
/// per interleaving): in memory (`/dev/shm`) where there is one, so that
/// the synced write costs no disk wait.
fn data_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // Relaxed: only uniqueness matters.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("rill-loom-store-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// One commit as the broker makes it: the next state, numbered under the
/// control mutex (so snapshots are numbered in the order of the changes
/// they hold), then the wait outside it. Once the wait returns, the disk
/// holds that state or a newer one.
fn commit(store: &OffsetsStore, control: &Mutex<u64>, sync: bool) -> u64 {
    let (n, ticket) = {
        let mut state = control.lock().unwrap();
        *state += 1;
        (*state, store.request(*state, sync))
    };
    store.wait(ticket).unwrap();
    let on_disk = store.on_disk();
    assert!(on_disk >= Some(n), "commit {n} returned with {on_disk:?} on disk");
    n
}

/// Two committers, one asking for a sync, race through the group commit:
/// each may find the other's write in flight (and wait for it, then write
/// the next snapshot or find its own covered), or be the writer of both
/// (the newest pending snapshot replaces the older). However they
/// interleave, both return, each with its state or a newer one on disk,
/// and the disk ends with the newest. `.ci/fence-check` leaves out each
/// step the essay names in turn and requires this model to fail: without
/// G1 (the writer's wake) a waiter sleeps for ever (loom: a deadlock);
/// without G2 (a newer snapshot keeps the older one's sync) the syncing
/// waiter finds nothing to write; without G3 (one writer at a time) a
/// second writer finds nothing to write, or writes the same slot as the
/// first and the older snapshot can land last, over the newer.
#[test]
fn group_commit_hands_over_without_losing_a_snapshot() {
    model(|| {
        let root = data_dir();
        let store = Arc::new(OffsetsStore::open(&root));
        let control = Arc::new(Mutex::new(0u64));
        let (s, c) = (store.clone(), control.clone());
        let other = thread::spawn(move || commit(&s, &c, true));
        let mine = commit(&store, &control, false);
        let theirs = other.join().unwrap();
        let mut both = [mine, theirs];
        both.sort_unstable();
        assert_eq!(both, [1, 2]);
        assert_eq!(store.on_disk(), Some(2), "the newest state is the one on disk");
        drop(store);
        std::fs::remove_dir_all(&root).unwrap();
    });
}
