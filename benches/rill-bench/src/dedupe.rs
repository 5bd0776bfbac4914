//! The cost of a publish with an id (issue 41's "Speed" line): a publisher
//! appending records with fresh ids into a topic whose dedupe window already
//! holds [`WINDOW_IDS`] ids, against the same publisher appending the same
//! records (the id carried as the attribute `rill.id`, the same bytes) into
//! a topic without a window, and against records without ids; the three
//! runs are interleaved in rounds on fresh brokers, each timed after
//! [`WINDOW_IDS`] records of its own kind, so every log is in the same
//! state (reaching its retention by count during the timed publishes). Run with
//! `--scenario dedupe`; `--messages` sets the publishes timed per run,
//! `--payload` their size, and `--batch N` publishes them in batches of N
//! (`Publisher::publish_batch`, every run alike; in a batch the window's
//! reads of its table are asked for ahead, see `Window::prefetch`).
//!
//! The window's own cost is the first ratio printed (with a window over the
//! same bytes without one); the second (with a window over no id at all)
//! adds what carrying the id costs: its bytes in the record, and the
//! publish path a record with attributes takes.
//!
//! Ids are built before the clock starts, so the timed loop measures the
//! publish (the window's hash, lock and insert, and the id's bytes in the
//! record), not the formatting of ids.
//!
//! Each run's publishing loops, its fill and its timed one, are a function
//! of its own (`publish_plain`, `publish_same_bytes`, `publish_window`), so
//! callgrind counts the three apart, independent of the machine's load:
//! under `valgrind --tool=callgrind`, each one's inclusive instructions
//! (`callgrind_annotate --inclusive=yes`) over its [`WINDOW_IDS`] plus
//! `--messages` publishes are a publish's.

use std::time::Instant;

use rill::{Broker, BrokerConfig, Publisher, Record, TopicOptions};

/// Ids in the window before the timed publishes start.
pub const WINDOW_IDS: u64 = 1_000_000;

/// A window long enough that nothing expires during a run.
const WINDOW_MS: u64 = 3_600_000;

/// Each run's timed publishes when `--messages` is not given.
pub const DEFAULT_MESSAGES: u64 = 200_000;

/// One interleaved round: ns per publish without an id, with one on a
/// topic without a window, and with one into a window of [`WINDOW_IDS`].
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub plain_ns: f64,
    pub carried_ns: f64,
    pub with_id_ns: f64,
}

/// The three runs: records without ids; with ids, on a topic without a
/// window; with ids, into a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Plain,
    Carried,
    Window,
}

/// ns per publish of `messages` records on a fresh broker, after
/// [`WINDOW_IDS`] records of the same kind: every run times its publishes
/// on a log in the same state (filled, trimming by count), and differs from
/// the others only in the ids its records carry and the window.
fn timed(run: Run, messages: u64, payload: &[u8], batch: usize) -> rill::Result<f64> {
    let broker = Broker::new(BrokerConfig::default())?;
    let window_ms = if run == Run::Carried { 0 } else { WINDOW_MS };
    // Retention by count keeps memory flat whatever the run length.
    let options =
        TopicOptions { dedupe_window_ms: window_ms, retention_messages: Some(1 << 20), ..TopicOptions::default() };
    broker.create_topic("t", &options)?;
    let publisher = broker.publisher("t")?;
    let fill: Vec<String> = (0..WINDOW_IDS).map(|i| format!("fill-{i:016x}")).collect();
    // Distinct, and all of one length.
    let ids: Vec<String> = (0..messages).map(|i| format!("id-{i:016x}")).collect();
    publish_each(&publisher, run, payload, &fill, batch)?;
    drop(fill);
    let started = Instant::now();
    publish_each(&publisher, run, payload, &ids, batch)?;
    let ns = started.elapsed().as_nanos() as f64 / messages as f64;
    if run == Run::Window {
        let held = broker.topic_stats("t")?.dedupe_ids;
        assert_eq!(held, WINDOW_IDS + messages, "every id stayed in the window");
    }
    Ok(ns)
}

/// Publishes one record a string of `ids`: with that id, or (`Run::Plain`)
/// without any; through a function for each run, which callgrind counts
/// apart (see the module's docs); one by one, or in batches of `batch`
/// when it is more than 1.
fn publish_each(publisher: &Publisher, run: Run, payload: &[u8], ids: &[String], batch: usize) -> rill::Result<()> {
    if batch > 1 {
        return publish_batches(publisher, run, payload, ids, batch);
    }
    match run {
        Run::Plain => publish_plain(publisher, payload, ids),
        Run::Carried => publish_same_bytes(publisher, payload, ids),
        Run::Window => publish_window(publisher, payload, ids),
    }
}

/// `publish_each` in batches of `batch` records.
#[inline(never)]
fn publish_batches(publisher: &Publisher, run: Run, payload: &[u8], ids: &[String], batch: usize) -> rill::Result<()> {
    let mut records = Vec::with_capacity(batch);
    for chunk in ids.chunks(batch) {
        records.clear();
        records.extend(chunk.iter().map(|id| match run {
            Run::Plain => Record::new(payload),
            Run::Carried | Run::Window => Record::new(payload).with_id(id),
        }));
        publisher.publish_batch(&records)?;
    }
    Ok(())
}

/// A record without an id for each of `ids`.
#[inline(never)]
fn publish_plain(publisher: &Publisher, payload: &[u8], ids: &[String]) -> rill::Result<()> {
    for _ in ids {
        publisher.publish(&Record::new(payload))?;
    }
    Ok(())
}

/// A record with each of `ids`, to a topic without a window.
#[inline(never)]
fn publish_same_bytes(publisher: &Publisher, payload: &[u8], ids: &[String]) -> rill::Result<()> {
    // Once a call: keeps the compiler from merging this function with
    // `publish_window`, whose code is the same, so callgrind sees both.
    std::hint::black_box(Run::Carried);
    for id in ids {
        publisher.publish(&Record::new(payload).with_id(id))?;
    }
    Ok(())
}

/// A record with each of `ids`, into the window.
#[inline(never)]
fn publish_window(publisher: &Publisher, payload: &[u8], ids: &[String]) -> rill::Result<()> {
    std::hint::black_box(Run::Window);
    for id in ids {
        publisher.publish(&Record::new(payload).with_id(id))?;
    }
    Ok(())
}

/// `pairs` interleaved rounds of the three runs, publishing in batches of
/// `batch` when it is more than 1.
pub fn run(messages: u64, payload: usize, pairs: usize, batch: usize) -> rill::Result<Vec<Pair>> {
    let payload = vec![0x5a; payload];
    (0..pairs.max(1))
        .map(|_| {
            Ok(Pair {
                plain_ns: timed(Run::Plain, messages, &payload, batch)?,
                carried_ns: timed(Run::Carried, messages, &payload, batch)?,
                with_id_ns: timed(Run::Window, messages, &payload, batch)?,
            })
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A table of the rounds, their medians and the spread of each ratio.
pub fn table(pairs: &[Pair]) -> String {
    let mut out = String::from(
        "ns per publish; \"same bytes\": the record with its id (rill.id attribute) into a topic without a \
         dedupe window; \"window\": the same into a topic whose window holds 1M ids\n\
         | round | no id | id, no window (same bytes) | id, 1M ids in the window | window / same bytes | window / no id |\n\
         |---|---|---|---|---|---|\n",
    );
    for (i, p) in pairs.iter().enumerate() {
        out += &format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |\n",
            i + 1,
            p.plain_ns,
            p.carried_ns,
            p.with_id_ns,
            p.with_id_ns / p.carried_ns,
            p.with_id_ns / p.plain_ns
        );
    }
    let col = |f: fn(&Pair) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
    out += &format!(
        "| median | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |\n",
        median(col(|p| p.plain_ns)),
        median(col(|p| p.carried_ns)),
        median(col(|p| p.with_id_ns)),
        median(col(|p| p.with_id_ns / p.carried_ns)),
        median(col(|p| p.with_id_ns / p.plain_ns)),
    );
    let spread = |v: Vec<f64>| {
        let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{lo:.2}..{hi:.2}")
    };
    out += &format!(
        "| range | | | | {} | {} |\n",
        spread(col(|p| p.with_id_ns / p.carried_ns)),
        spread(col(|p| p.with_id_ns / p.plain_ns))
    );
    out
}
