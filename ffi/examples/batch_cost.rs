//! The C batch publish against the Rust batch, in one process: batches of
//! 64 records of 64 B through `rill_publisher_publish_batch` (librill.so,
//! loaded with `dlopen` and called through its exported symbol, as a C
//! program calls it) and through `Publisher::publish_batch`, each on a
//! topic of its own broker with no subscriber, in interleaved rounds.
//! Prints each side's messages a second per round and the C/Rust ratio.
//!
//! usage: batch_cost [messages] [rounds] [plain|attrs|own]
//!   (default 2000000 messages a round, 5 rounds, plain; the library is
//!   `$RILL_LIBRARY`, else target/release/librill.so)
//!
//! `plain` records have no key and no attributes (the common batch);
//! `attrs` records carry two attributes each, which the C side hands over as
//! NUL-terminated strings and the Rust side as `&str`s; all 64 records of a
//! C batch point to one `rill_attribute` array, as all of a Rust batch's
//! share one slice. `own` is `attrs` with each C record pointing to an array
//! of its own (the same strings), so the library reads and checks every
//! record's strings (it reads an array shared by consecutive records once);
//! the Rust side is as in `attrs`.
//!
//! Each side's timed loop is a function of its own (`c_batches`,
//! `rust_batches`), so callgrind counts them apart, independent of the
//! machine's load:
//!
//! ```sh
//! cargo build --release -p rill-ffi --lib --example batch_cost
//! valgrind --tool=callgrind --toggle-collect='*c_batches*' \
//!   target/release/examples/batch_cost 64000 1
//! valgrind --tool=callgrind --toggle-collect='*rust_batches*' \
//!   target/release/examples/batch_cost 64000 1
//! ```
//!
//! and again with 128000: the difference of the two totals over 128000 (each
//! run publishes its messages twice, a fill round untimed, then the timed
//! one) is the cost of one message, the batch's overhead shared. `bash ffi/bench/run.sh` measures the same path from a C program
//! (mode `batch64/nosub`), in two processes.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::time::Instant;

use rill::{Broker, BrokerConfig, Publisher, Record, TopicOptions};

/// `rill_record`, as include/rill.h declares it.
#[repr(C)]
#[derive(Clone, Copy)]
struct CRecord {
    key: *const c_void,
    key_len: usize,
    payload: *const c_void,
    payload_len: usize,
    attributes: *const CAttribute,
    attribute_count: usize,
}

/// `rill_attribute`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CAttribute {
    key: *const c_char,
    value: *const c_char,
}

/// The two attributes of an `attrs` record, on both sides.
const ATTRS: [(&str, &str); 2] = [("source", "sensor-17"), ("kind", "reading")];
const C_ATTRS: [CAttribute; 2] = [
    CAttribute { key: c"source".as_ptr(), value: c"sensor-17".as_ptr() },
    CAttribute { key: c"kind".as_ptr(), value: c"reading".as_ptr() },
];

/// The leading fields of `rill_topic_options`: passed with its own size,
/// as a program built against an older header would (the "Option structs"
/// rules of include/rill.h), so the library takes its defaults for the rest.
#[repr(C)]
#[derive(Default)]
struct TopicOptions0 {
    struct_size: u32,
    partitions: u32,
    retention_bytes: u64,
    retention_messages: u64,
    max_message_bytes: u64,
}

type Status = c_int;

/// The few C calls the C side makes, resolved from librill.so.
struct Lib {
    broker_new: unsafe extern "C" fn(*const c_void, *mut *mut c_void) -> Status,
    broker_free: unsafe extern "C" fn(*mut c_void),
    topic_options_init: unsafe extern "C" fn(*mut TopicOptions0, usize),
    topic_create: unsafe extern "C" fn(*mut c_void, *const c_char, *const TopicOptions0) -> Status,
    publisher_new: unsafe extern "C" fn(*mut c_void, *const c_char, *mut *mut c_void) -> Status,
    publisher_free: unsafe extern "C" fn(*mut c_void),
    publish_batch: unsafe extern "C" fn(*const c_void, *const CRecord, usize, *mut c_void) -> Status,
}

/// A symbol of the library, as a function pointer of type `T`.
///
/// # Safety
///
/// `T` is a function pointer type matching the symbol's C declaration.
unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &CStr) -> T {
    // SAFETY: `lib` is a handle from `dlopen`; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    assert!(!p.is_null(), "librill.so lacks {name:?}");
    assert_eq!(size_of::<T>(), size_of::<*mut c_void>());
    // SAFETY: the caller promises `T` is the symbol's function pointer type.
    unsafe { std::mem::transmute_copy(&p) }
}

fn load(path: &str) -> Lib {
    let c_path = std::ffi::CString::new(path).expect("path");
    // SAFETY: a NUL-terminated path; the library stays loaded for the process.
    let lib = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "cannot load {path} (build it: cargo build --release -p rill-ffi --lib)");
    // SAFETY: each type is the function's declaration in include/rill.h.
    unsafe {
        Lib {
            broker_new: symbol(lib, c"rill_broker_new_v1"),
            broker_free: symbol(lib, c"rill_broker_free"),
            topic_options_init: symbol(lib, c"rill_topic_options_init_v1"),
            topic_create: symbol(lib, c"rill_topic_create_v1"),
            publisher_new: symbol(lib, c"rill_publisher_new"),
            publisher_free: symbol(lib, c"rill_publisher_free"),
            publish_batch: symbol(lib, c"rill_publisher_publish_batch"),
        }
    }
}

/// The C side's timed loop: `n / 64` calls of `rill_publisher_publish_batch`.
#[inline(never)]
fn c_batches(lib: &Lib, p: *const c_void, batch: &[CRecord; 64], n: u64) {
    for _ in 0..n.div_ceil(64) {
        let batch = std::hint::black_box(batch);
        // SAFETY: a live publisher; 64 records whose payloads outlive the call.
        let st = unsafe { (lib.publish_batch)(p, batch.as_ptr(), batch.len(), std::ptr::null_mut()) };
        assert_eq!(st, 0, "rill_publisher_publish_batch");
    }
}

/// The Rust side's timed loop: `n / 64` calls of `Publisher::publish_batch`.
#[inline(never)]
fn rust_batches(publisher: &Publisher, batch: &[Record<'_>], n: u64) {
    for _ in 0..n.div_ceil(64) {
        // `black_box`, as in rust_baseline.rs: the library cannot see what a
        // C program passes it, nor a Rust program publishing real data.
        std::hint::black_box(publisher.publish_batch(std::hint::black_box(batch)).expect("batch"));
    }
}

/// Messages a second through the C batch, on a fresh broker: a fill round
/// untimed (the topic's retention, reused by the timed round), then `n`.
fn c_round(lib: &Lib, n: u64, payload: &[u8; 64], mode: Mode) -> f64 {
    let mut b = std::ptr::null_mut();
    // SAFETY: the C calls as include/rill.h declares them; every out-pointer
    // is a live local; the handles are freed once, at the end.
    unsafe {
        assert_eq!((lib.broker_new)(std::ptr::null(), &mut b), 0, "rill_broker_new");
        let mut to = TopicOptions0::default();
        (lib.topic_options_init)(&mut to, size_of::<TopicOptions0>());
        // 64 MiB, as bench_ffi.c and `rust_round` set it.
        to.retention_bytes = 64 << 20;
        assert_eq!((lib.topic_create)(b, c"bench".as_ptr(), &to), 0, "rill_topic_create");
        let mut p = std::ptr::null_mut();
        assert_eq!((lib.publisher_new)(b, c"bench".as_ptr(), &mut p), 0, "rill_publisher_new");
        let own = [C_ATTRS; 64];
        let batch: [CRecord; 64] = std::array::from_fn(|i| CRecord {
            key: std::ptr::null(),
            key_len: 0,
            payload: payload.as_ptr().cast(),
            payload_len: payload.len(),
            attributes: match mode {
                Mode::Plain => std::ptr::null(),
                Mode::Attrs => C_ATTRS.as_ptr(),
                Mode::Own => own[i].as_ptr(),
            },
            attribute_count: if mode == Mode::Plain { 0 } else { C_ATTRS.len() },
        });
        c_batches(lib, p, &batch, n);
        let start = Instant::now();
        c_batches(lib, p, &batch, n);
        let rate = n as f64 / start.elapsed().as_secs_f64();
        (lib.publisher_free)(p);
        (lib.broker_free)(b);
        rate
    }
}

/// Messages a second through the Rust batch, as [`c_round`].
fn rust_round(n: u64, payload: &[u8; 64], mode: Mode) -> f64 {
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    let options = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
    broker.create_topic("bench", &options).expect("topic");
    let publisher = broker.publisher("bench").expect("publisher");
    let record = Record::new(payload).with_attributes(if mode == Mode::Plain { &[] } else { &ATTRS });
    let batch = vec![record; 64];
    rust_batches(&publisher, &batch, n);
    let start = Instant::now();
    rust_batches(&publisher, &batch, n);
    n as f64 / start.elapsed().as_secs_f64()
}

/// What the records carry (see the module's docs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Attrs,
    Own,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mode = match args.next().as_deref() {
        None | Some("plain") => Mode::Plain,
        Some("attrs") => Mode::Attrs,
        Some("own") => Mode::Own,
        Some(other) => panic!("unknown mode {other} (plain, attrs or own)"),
    };
    let path = std::env::var("RILL_LIBRARY").unwrap_or_else(|_| {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/librill.so");
        here.to_string_lossy().into_owned()
    });
    let lib = load(&path);
    let payload = [0x5au8; 64];
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Alternate which side runs first, so neither always follows the other.
        let (c, r) = if round % 2 == 0 {
            let c = c_round(&lib, n, &payload, mode);
            (c, rust_round(n, &payload, mode))
        } else {
            let r = rust_round(n, &payload, mode);
            (c_round(&lib, n, &payload, mode), r)
        };
        println!("round {round}: C {c:.0} msgs/s, Rust {r:.0} msgs/s, C/Rust {:.2}", c / r);
        ratios.push(c / r);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "C/Rust median {:.2}, worst {:.2}, best {:.2}",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
}
