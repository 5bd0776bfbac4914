//! Topics created and deleted under a wildcard subscription, over and over
//! (short-lived topics, keys-as-topics): the subscription and the broker
//! hold what the live topics need, not a trace of every topic deleted.
//!
//! Checked by counting, not timing: the live heap bytes (a counting
//! allocator) and the process's memory mappings (`/proc/self/maps`), after a
//! warm-up and again after many more cycles. Before the fix each deletion
//! left a placeholder reader in every wildcard subscription and a
//! placeholder partition (two mappings) for good, so both grew with every
//! cycle, and a long enough churn ran the process out of mappings.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use rill::{Ack, Record, TopicOptions};

use common::{WAIT, broker, earliest};

/// Cycles before the first measurement: every structure reaches its size.
const WARM_UP: usize = 300;
/// Cycles between the two measurements.
const CYCLES: usize = 1500;
/// Heap growth allowed over `CYCLES` (what one deleted topic left behind
/// before the fix, a reader and its share of a placeholder, was several
/// hundred bytes: over `CYCLES`, several hundred KiB).
const HEAP_SLACK: i64 = 64 << 10;
/// Mapping growth allowed over `CYCLES` (two per cycle before the fix).
const MAPS_SLACK: i64 = 16;

/// The system allocator, counting the bytes live in the whole process.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is a static atomic, which needs no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic, read after the work it counts was joined.
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as above.
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Relaxed: as above.
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Relaxed: as above.
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn mappings() -> i64 {
    std::fs::read_to_string("/proc/self/maps").expect("Linux /proc").lines().count() as i64
}

#[test]
fn topic_churn_under_a_wildcard_subscription_keeps_memory_flat() {
    let b = broker();
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let s = seen.clone();
    let sub = b
        .subscribe("churn/**", earliest(), move |m| {
            s.lock().unwrap().push(m.payload().to_vec());
            Ack::Success
        })
        .unwrap();
    // Two topics live at a time, so a deleted topic's slot is reused while
    // another one is still read.
    let cycle = |i: usize| {
        let name = format!("churn/{i}");
        b.create_topic(&name, &TopicOptions::default()).unwrap();
        b.publish(&name, &Record::new(name.as_bytes())).unwrap();
        // Delivered before its topic can go (a delete drops what a
        // subscription has not read yet).
        assert!(sub.wait_idle(WAIT).unwrap());
        if i > 0 {
            b.delete_topic(&format!("churn/{}", i - 1)).unwrap();
        }
    };
    for i in 0..WARM_UP {
        cycle(i);
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    seen.lock().unwrap().clear();
    seen.lock().unwrap().shrink_to_fit();
    let (heap, maps) = (LIVE.load(Ordering::Relaxed), mappings());
    for i in WARM_UP..WARM_UP + CYCLES {
        cycle(i);
    }
    assert!(sub.wait_idle(WAIT).unwrap());
    // Every message of the measured cycles was delivered, in order.
    let got = std::mem::take(&mut *seen.lock().unwrap());
    let want: Vec<Vec<u8>> = (WARM_UP..WARM_UP + CYCLES).map(|i| format!("churn/{i}").into_bytes()).collect();
    assert_eq!(got, want);
    drop(got);
    drop(want);
    let grew_heap = LIVE.load(Ordering::Relaxed) - heap;
    let grew_maps = mappings() - maps;
    assert!(grew_heap <= HEAP_SLACK, "{CYCLES} create/delete cycles left {grew_heap} more heap bytes live");
    assert!(grew_maps <= MAPS_SLACK, "{CYCLES} create/delete cycles left {grew_maps} more mappings");
}
