//! Many topics (issue 43): every one of them works, and creating one more
//! does not copy the ones already there.
//!
//! The cost is checked by counting, not timing: the test binary's allocator
//! counts the bytes each thread allocates, and creating a topic next to
//! 20 000 others may allocate no more than next to 1 000 others, give or
//! take what the topic itself needs. A topic map copied on every create
//! (as before issue 43) allocates a copy of the whole map each time.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rill::{Ack, Error, Record, TopicOptions};

use common::{broker, earliest, wait_for};

/// Topics the tests create: enough that a map copied per create shows.
const MANY: usize = 20_000;

/// The system allocator, counting the bytes the current thread allocates.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is a thread-local `Cell` with a const initialiser, which needs no
// allocation (and no destructor), so counting cannot recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn count(bytes: usize) {
    // A thread being torn down has no counter any more: not counted.
    let _ = ALLOCATED.try_with(|c| c.set(c.get() + bytes as u64));
}

/// Bytes the current thread allocated while running `f`.
fn allocated_by(f: impl FnOnce()) -> u64 {
    let before = ALLOCATED.with(Cell::get);
    f();
    ALLOCATED.with(Cell::get) - before
}

fn name(i: usize) -> String {
    format!("scale/{}/{i}", i % 97)
}

#[test]
fn creating_a_topic_does_not_copy_the_topic_map() {
    let b = broker();
    let options = TopicOptions::default();
    // Bytes allocated by creating one more topic after `n`, the smallest of
    // a few tries (a hash table may grow at any one of them).
    let mut created = 0;
    let mut next_create_cost = |n: usize| {
        while created < n {
            b.create_topic(&name(created), &options).unwrap();
            created += 1;
        }
        (0..4)
            .map(|_| {
                let cost = allocated_by(|| b.create_topic(&name(created), &options).unwrap());
                created += 1;
                cost
            })
            .min()
            .unwrap()
    };
    let small = next_create_cost(1_000);
    let large = next_create_cost(MANY);
    // Twenty times the topics: a copied map costs about twenty times as much
    // per create; a shared one a few more nodes on the path to the new key.
    assert!(
        large <= 2 * small,
        "creating a topic next to {MANY} others allocated {large} bytes, next to 1000 others {small}: \
         the topic map is copied on every create"
    );
}

#[test]
fn many_topics_each_work() {
    let b = broker();
    let options = TopicOptions::default();
    for i in 0..MANY {
        b.create_topic(&name(i), &options).unwrap();
    }
    // Listed, each once.
    let listed = b.topics();
    assert_eq!(listed.len(), MANY);
    let listed: HashSet<String> = listed.into_iter().collect();
    assert!((0..MANY).all(|i| listed.contains(&name(i))));
    // A second create of any of them is refused.
    assert!(matches!(b.create_topic(&name(MANY / 2), &options), Err(Error::TopicExists(_))));

    // A `**` subscription over all of them gets each one's message.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let s = seen.clone();
    let sub = b
        .subscribe("scale/**", earliest(), move |m| {
            s.lock().unwrap().insert(m.topic().to_owned());
            Ack::Success
        })
        .unwrap();
    for i in 0..MANY {
        let pos = b.publish(&name(i), &Record::new(name(i).as_bytes())).unwrap();
        assert_eq!(pos.offset, 0, "{}", name(i));
    }
    wait_for("a message from every topic", || seen.lock().unwrap().len() == MANY);
    sub.close();
    assert!((0..MANY).all(|i| seen.lock().unwrap().contains(&name(i))));

    // Each can be deleted; then it is gone by name and from the list.
    for i in 0..MANY {
        b.delete_topic(&name(i)).unwrap();
    }
    assert!(b.topics().is_empty());
    for i in (0..MANY).step_by(97) {
        assert!(matches!(b.publish(&name(i), &Record::new(b"x")), Err(Error::NoSuchTopic(_))), "{}", name(i));
    }

    // And re-created, new (from offset 0), each found by name again.
    for i in 0..MANY {
        b.create_topic(&name(i), &options).unwrap();
    }
    assert_eq!(b.topics().len(), MANY);
    for i in 0..MANY {
        assert_eq!(b.publish(&name(i), &Record::new(b"again")).unwrap().offset, 0, "{}", name(i));
    }
}
