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

/// Topics created and deleted by several threads while others look topics
/// up by name (the topic map changed in place, its table rebuilt as it
/// grows and as deleted names pile up): a lookup finds every topic that
/// exists for the whole lookup, and never one deleted before it started.
#[test]
fn lookups_by_name_race_creates_deletes_and_rebuilds() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const STABLE: usize = 500;
    const CHURN_CYCLES: usize = 3_000;
    const GROWN: usize = 3_000;
    let b = Arc::new(broker());
    let options = TopicOptions::default();
    for i in 0..STABLE {
        b.create_topic(&format!("stable/{i}"), &options).unwrap();
    }
    // Names a thread finished deleting (never created again: each cycle
    // uses a new name), and how many topics the grower finished creating.
    let deleted: Arc<Mutex<Vec<String>>> = Arc::default();
    let grown = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..2 {
            let (b, deleted, options) = (&b, &deleted, &options);
            writers.push(s.spawn(move || {
                for c in 0..CHURN_CYCLES {
                    let name = format!("churn/{w}/{c}");
                    b.create_topic(&name, options).unwrap();
                    b.publish(&name, &Record::new(b"x")).unwrap();
                    b.delete_topic(&name).unwrap();
                    deleted.lock().unwrap().push(name);
                }
            }));
        }
        {
            let (b, grown, options) = (&b, &grown, &options);
            writers.push(s.spawn(move || {
                for i in 0..GROWN {
                    b.create_topic(&format!("grown/{i}"), options).unwrap();
                    // Release: pairs with the readers' Acquire; the topic
                    // exists before the count says so.
                    grown.store(i + 1, Ordering::Release);
                }
            }));
        }
        let mut readers = Vec::new();
        for r in 0..2usize {
            let (b, deleted, grown, done) = (&b, &deleted, &grown, &done);
            readers.push(s.spawn(move || {
                let mut lookups = 0usize;
                let mut i = r;
                // Acquire: pairs with the Release store below the joins.
                while !done.load(Ordering::Acquire) || lookups == 0 {
                    i = i.wrapping_mul(31).wrapping_add(7);
                    let stable = format!("stable/{}", i % STABLE);
                    b.publish(&stable, &Record::new(b"s")).unwrap_or_else(|e| panic!("{stable}: {e}"));
                    // Acquire: pairs with the grower's Release.
                    let n = grown.load(Ordering::Acquire);
                    if n > 0 {
                        let g = format!("grown/{}", i % n);
                        b.publish(&g, &Record::new(b"g")).unwrap_or_else(|e| panic!("{g}: {e}"));
                    }
                    let gone = {
                        let d = deleted.lock().unwrap();
                        (!d.is_empty()).then(|| d[i % d.len()].clone())
                    };
                    if let Some(gone) = gone {
                        let e = b.publish(&gone, &Record::new(b"late")).unwrap_err();
                        assert!(matches!(e, Error::NoSuchTopic(_)), "{gone}, deleted before the lookup: {e}");
                    }
                    lookups += 1;
                }
                lookups
            }));
        }
        for w in writers {
            w.join().unwrap();
        }
        // Release: pairs with the readers' Acquire.
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    // What is left: the stable and grown topics, each found, none of the churn.
    let listed = b.topics();
    assert_eq!(listed.len(), STABLE + GROWN);
    assert!(listed.iter().all(|t| !t.starts_with("churn/")));
    for i in 0..GROWN {
        b.publish(&format!("grown/{i}"), &Record::new(b"end")).unwrap();
    }
}
