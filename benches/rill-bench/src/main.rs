//! `rill-bench`: throughput and latency of rill on this machine, alone or side
//! by side with its peers (crossbeam-channel, flume, tokio broadcast, bus,
//! disruptor) running the same workload with the same payloads. flume,
//! tokio, bus and disruptor are built with the `peers` feature only
//! (`--features peers`); without it a comparison runs crossbeam and bare-log
//! and says which peers it left out.
//!
//! Every comparison interleaves rill and the peer in pairs (rill, peer, rill,
//! peer, ...) and reports the median and the worst pair's ratio, so a shared VM
//! changing speed during the run hurts both sides alike. Each invocation starts
//! with a cross-core ping-pong probe that says how fast the machine was.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use indicatif::{ProgressBar, ProgressStyle};

use rill_bench::measure::{Amount, Delivery, HandlerCost, SubMode, Work};
use rill_bench::report::{self, Format, Report};
use rill_bench::scenarios::{self, Named, Scenario, Suite};
use rill_bench::systems::{self, Env, PeerPayload, RillOverflow, System};
use rill_bench::{bench, plot, probe};

const AFTER_HELP: &str = "\
SCENARIOS (--scenario NAME):
  one-to-one          1 producer -> 1 push subscriber (worker pool)
  one-to-one-dedicated
                      1 producer -> 1 push subscriber on a dedicated thread
  batch-64            1 -> 1, published in batches of 64
  publish-2           2 producers -> 1 subscriber
  fan-out-4, fan-out-8, fan-out-16
                      1 producer -> N subscribers on rill's pool
  fan-out-8-threads   1 -> 8 subscribers, a thread each
  mpsc-4              4 producers -> 1 subscriber
  pull                1 producer -> 1 pull consumer (poll batches)
  latency             100k msgs/s, dedicated spinning subscriber (one-way latency)
  group-1, group-4    a consumer group of 1 or 4 members on 4 partitions, 20,000 messages, each
                      handler sleeping 50 us (I/O); compare the two (rill alone)
  group-1-cpu, group-2-cpu
                      the same with 1 or 2 members and CPU-bound handlers (20 us spin), 40,000 messages
  scale               costs as topics multiply (create, publish by name, RSS per idle topic, ** delivery;
                      10^0..10^5 topics, 10^6 with --scale-full) and as subscriptions on one topic do
                      (10..10^4): tables of each decade and its ratio to the first; --plot FILE.svg draws them
  fresh               the first fill of a topic created just before the run against the same run on a
                      warm topic (filled past retention first), in interleaved --pairs, in memory and
                      durable (Fsync::Never), 1 -> 1 and 4 -> 1, with the publishers' minor page faults
                      (--messages per run, default 2000000; --retention-mib)
  dedupe              a publish with an id into a topic whose dedupe window holds 1,000,000 ids, against
                      the same record into a topic without a window and one without an id, interleaved in
                      --pairs (--messages per run, default 200000)
  ipc                 rill across processes on one data directory (Sharing::Processes, on /dev/shm; --ipc-disk:
                      under RILL_BENCH_DATA_DIR or the temp dir): 1 -> 1 against rill in one process and a Unix
                      socket, 4 -> 1 against one process, one-way latency at 100k msgs/s against a shared-memory
                      ping-pong, idle CPU of 100 subscriptions, 16 shared-subscription members and 8 consumer-group
                      members in 4 processes; in --pairs rounds (--messages per run, default 1000000)
  bridge              rill -> NATS JetStream -> rill through two rill_nats bridges, against a plain
                      async-nats publisher + pull consumer, interleaved in --pairs on a nats-server it
                      starts (build with --features nats; --messages sets the run length, default 20000)

SUITES:
  default   (no options) the scenarios above but fan-out-16/publish-2/one-to-one-dedicated, rill alone,
            5 runs of 1 s each: about a minute
  report    one-to-one (pool, dedicated), fan-out-8, fan-out-8-threads, mpsc-4, latency, each against every
            peer in 5 interleaved pairs plus the peer's plain loop, with --work minimal, then touch (3 pairs); prints
            Markdown tables of ratios for the README (about 10 minutes)
  sweep     fan-out over --sweep subscriber counts against every peer; use with --plot

Shape options (--producers, --subscribers, --consumers, --dedicated, --partitions, --batch, --rate,
--delivery) define a custom scenario, or change the ones named with --scenario. Global options
(--payload, --messages/--duration, --capacity, --work, ...) apply to every scenario.

PEERS: crossbeam and bare-log are always built; flume, tokio, tokio-blocking, bus and disruptor only
with the peers feature (cargo run --release --bin rill-bench --features peers -- ...). Without it a
comparison runs the peers that were built and says which were not.

EXAMPLES:
  rill-bench                                        the default suite, rill alone
  rill-bench --suite report                         every scenario of the README, against every peer
  rill-bench --scenario one-to-one --peers crossbeam --work minimal,touch
  rill-bench --scenario fan-out-8 --compare --peers bus,tokio
  rill-bench -p 1 -s 8 --payload 256 --compare      a custom shape against every peer
  rill-bench -c 2 --batch 64 --poll-batch 1024      pull consumers
  rill-bench --suite sweep --plot fanout.svg        throughput against subscriber count
  rill-bench --suite report --format json > report.json
  rill-bench --schema-cost --pairs 5               publishes/s to a topic with a JSON Schema (200 B, 5 fields) beside jsonschema's own rate
  rill-bench --compaction --compaction-mib 1024   1 -> 1 into a compacted topic beside a plain one, a pass over 1 GiB beside a copy, a publisher beside a pass
  rill-bench --publish-cost --pairs 5              publish ns/call (no subscriber and 8 keeping up, each on a new topic and past its retention; 8 idle) beside crossbeam send, and the machine's floors (clock read, lock xadd, pin, minimal log append, the same pinned into 256 MiB)

MEASUREMENT: throughput counts delivered messages (what a subscriber skipped earns nothing; see
the 'lost' column) per subscriber per second, from releasing the producers to the last subscriber
finishing. --work minimal (the default): each subscriber black_boxes the payload and counts it in a
local, as a plain loop does; no shared write and no clock read per message; latency is sampled on 1
in --sample-every messages, and peers' producers stamp only those. --work touch: the harness before
(sum every payload byte, a shared store per message, a producer clock read per message). Peers carry
what their users send: [u8; 64] by value one-to-one and many-to-one, Arc<[u8]> when fanning out
(--peer-payload). Pairs alternate their order (rill, peer, then peer, rill). Every comparison also
times the peer in the plain loop its user would write, outside the harness: 'harness/plain' is the
harnessed peer's rate over it, and below 0.8x the comparison is marked INVALID; 'rill/plain' is
rill's rate over it, valid pair or not. csw/1k: voluntary
context switches per 1,000 messages (a blocking channel makes many). Latency is publish-to-handler
on rill's clock (rill::clock::now_ns), in an HDR histogram.";

/// Benchmarks rill's in-memory broker, alone or against peer channels.
#[derive(Debug, Parser)]
#[command(name = "rill-bench", version, about, long_about = None, after_help = AFTER_HELP)]
struct Cli {
    /// The suite to run when no --scenario (and no shape option) is given.
    #[arg(long, value_enum, default_value_t = Suite::Default)]
    suite: Suite,

    /// Run these scenarios instead of a suite (comma-separated or repeated).
    #[arg(long, value_enum, value_delimiter = ',')]
    scenario: Vec<Named>,

    /// Also run every scenario on the peers, interleaved with rill in pairs.
    #[arg(long)]
    compare: bool,

    /// Which peers to compare against (implies --compare) [default: all that were built].
    #[arg(long, value_enum, value_delimiter = ',')]
    peers: Vec<System>,

    /// Interleaved pairs per comparison (order alternating; at most 3 with a work other than
    /// minimal), or rill runs when not comparing.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pairs: usize,

    // ---- shape ----
    /// Publishing threads.
    #[arg(short, long, help_heading = "Shape")]
    producers: Option<usize>,

    /// Push subscribers, each receiving every message.
    #[arg(short, long, conflicts_with = "consumers", help_heading = "Shape")]
    subscribers: Option<usize>,

    /// Pull consumers (rill `Consumer::poll`, one group each; peers receive on a thread as usual).
    #[arg(short, long, help_heading = "Shape")]
    consumers: Option<usize>,

    /// Run rill's push subscribers on dedicated threads instead of the worker pool.
    #[arg(long, help_heading = "Shape")]
    dedicated: bool,

    /// With dedicated subscribers: microseconds each keeps polling before it parks
    /// [default: 200 in the latency scenario, else rill's short spin].
    #[arg(long, help_heading = "Shape")]
    idle_spin_us: Option<u64>,

    /// rill topic partitions (peers have none).
    #[arg(long, help_heading = "Shape")]
    partitions: Option<u32>,

    /// Messages per publish call (rill `publish_batch`, disruptor `batch_publish`; other peers send one by one).
    #[arg(short, long, help_heading = "Shape")]
    batch: Option<usize>,

    /// Publish at this total rate (msgs/s) instead of as fast as possible.
    #[arg(long, help_heading = "Shape")]
    rate: Option<u64>,

    /// rill delivery mode.
    #[arg(long, value_enum, help_heading = "Shape")]
    delivery: Option<Delivery>,

    /// What each subscriber does with each message; several (comma-separated) run the
    /// scenarios once per mode, the first one being the headline [default: minimal;
    /// minimal,touch for the report suite].
    #[arg(long, value_enum, value_delimiter = ',', help_heading = "Workload")]
    work: Vec<Work>,

    // ---- workload ----
    /// Payload size in bytes (every system carries a byte buffer of this size).
    #[arg(long, default_value_t = 64, help_heading = "Workload")]
    payload: usize,

    /// Messages per producer per run (instead of a duration).
    #[arg(short = 'n', long, conflicts_with = "duration", help_heading = "Workload")]
    messages: Option<u64>,

    /// Seconds each run publishes for, before the subscribers drain [default: 1.0 for the default suite, 0.5 otherwise].
    #[arg(short, long, help_heading = "Workload")]
    duration: Option<f64>,

    /// Most messages a rill pull consumer takes per poll.
    #[arg(long, default_value_t = 256, help_heading = "Workload")]
    poll_batch: usize,

    /// Messages a subscriber may fall behind: channel capacity / ring size of the peers, and rill's
    /// lag_limit with --overflow block.
    #[arg(long, default_value_t = 4096, help_heading = "Workload")]
    capacity: usize,

    /// Sample the latency of every N-th message per subscriber [default: 64; 1 for latency scenarios].
    #[arg(long, help_heading = "Workload")]
    sample_every: Option<u64>,

    /// Subscriber counts of the sweep suite / --plot.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", help_heading = "Workload")]
    sweep: Vec<usize>,

    // ---- systems ----
    /// rill worker pool size (and tokio runtime workers) [default: one per core].
    #[arg(long, help_heading = "Systems")]
    workers: Option<usize>,

    /// rill retention per partition, MiB.
    #[arg(long, default_value_t = 64, help_heading = "Systems")]
    retention_mib: u64,

    /// Do not pre-fill rill's log past retention before each run (first-touch page faults are then
    /// part of the measurement).
    #[arg(long, help_heading = "Systems")]
    no_warmup: bool,

    /// What rill does when a subscriber is --capacity messages behind: block publishers (like a
    /// bounded channel) or drop the oldest (rill's default; only retention bounds the lag).
    #[arg(long, value_enum, default_value_t = RillOverflow::Block, help_heading = "Systems")]
    overflow: RillOverflow,

    /// rill push subscribers take runs of up to 64 messages per handler call (`subscribe_batch`).
    #[arg(long, help_heading = "Systems")]
    batch_handler: bool,

    /// Payload type of the peers: auto (what a user of the peer sends: a `[u8; N]` by value with
    /// one subscriber, an `Arc<[u8]>` shared when fanning out), vec (a `Vec<u8>`, cloned per
    /// subscriber), arc, or array (by value; up to 4096 bytes).
    #[arg(long, value_enum, default_value_t = PeerPayload::Auto, help_heading = "Systems")]
    peer_payload: PeerPayload,

    /// Time cap of one run, seconds: a run that has not finished by then stops and is reported as
    /// a timeout (a peer that times out is not run again in that scenario).
    #[arg(long, default_value_t = 10.0, help_heading = "Systems")]
    timeout: f64,

    // ---- output ----
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table, help_heading = "Output")]
    format: Format,

    /// Also run a fan-out sweep (--sweep counts; shape options apply) and draw its throughput
    /// against subscriber count for rill and each peer, as an SVG line chart.
    #[arg(long, value_name = "FILE.svg", help_heading = "Output")]
    plot: Option<PathBuf>,

    /// Instead of scenarios: the publisher's own ns per `Publisher::publish` (64 B) with no
    /// subscriber and with 8 that keep up, beside crossbeam-channel `send` in --pairs
    /// interleaved pairs of --messages (default 1,000,000) publishes.
    #[arg(long, help_heading = "Output")]
    publish_cost: bool,

    /// Instead of scenarios: publishes per second to a topic with a JSON Schema (a 200-byte
    /// document with 5 fields) beside jsonschema's own parse-and-validate rate in a plain loop,
    /// in --pairs interleaved pairs of --messages (default 200,000).
    #[arg(long, help_heading = "Output")]
    schema_cost: bool,

    /// Instead of scenarios: 1 -> 1 publishing (64 B payloads, 8 B keys) into a compacted topic
    /// against a plain one (--messages, default 1,000,000), one compaction pass over a log of
    /// --compaction-mib MiB with 1,000,000 distinct keys against copying as many bytes, and a
    /// publisher's append rate beside that pass against alone, in --pairs interleaved rounds.
    #[arg(long, help_heading = "Output")]
    compaction: bool,

    /// The size of --compaction's compacted log, in MiB (issue 41's figure: 1024).
    #[arg(long, value_name = "N", default_value_t = rill_bench::compaction::DEFAULT_MIB, help_heading = "Output")]
    compaction_mib: u64,

    /// Skip the cross-core ping-pong and hiccup probes, and the short ping-pong taken around every
    /// run of a pair (which marks the pairs during which the machine changed state).
    #[arg(long, help_heading = "Output")]
    no_probe: bool,

    /// Instead of scenarios: fill one durable partition with N MiB of records (--payload bytes
    /// each) under RILL_BENCH_DATA_DIR (else the temp directory), then time its recovery
    /// (`Log::open`) against reading its files from the page cache, in --pairs interleaved
    /// pairs; the files are deleted afterwards. Needs N MiB of free disk (issue 11: N = 1024).
    #[arg(long, value_name = "N", help_heading = "Systems")]
    recovery_mib: Option<u64>,
    /// Instead of scenarios: the delivery latency (p50, p99) of a priority-7 subscription on a
    /// pool of 2 workers with the pool idle, beside 8 busy priority-0 subscriptions, and beside
    /// the same 8 with every priority the default, in --pairs interleaved rounds of
    /// --messages probes (default 2,000, one every 200 µs).
    #[arg(long, help_heading = "Systems")]
    priority: bool,
    /// With --scenario scale: sweep up to 1,000,000 topics instead of 100,000.
    #[arg(long, help_heading = "Systems")]
    scale_full: bool,

    /// With --scenario ipc: the data directories under RILL_BENCH_DATA_DIR (else the temp
    /// directory) instead of /dev/shm.
    #[arg(long, help_heading = "Systems")]
    ipc_disk: bool,

    /// With --scenario ipc: the idle window, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, help_heading = "Systems")]
    ipc_idle_secs: f64,

    /// Also measure idle CPU: the process CPU time (getrusage) over this many
    /// seconds of wall time while 100 caught-up subscriptions (on the pool,
    /// then with a thread each) have nothing to deliver. Reported as a note.
    #[arg(long, value_name = "SECONDS", help_heading = "Output")]
    idle_probe: Option<f64>,
}

impl Cli {
    fn shape_given(&self) -> bool {
        self.producers.is_some()
            || self.subscribers.is_some()
            || self.consumers.is_some()
            || self.dedicated
            || self.partitions.is_some()
            || self.batch.is_some()
            || self.rate.is_some()
            || self.delivery.is_some()
    }

    /// Applies the shape and workload options to `sc`.
    fn apply(&self, sc: &mut Scenario, default_seconds: f64) {
        let s = &mut sc.shape;
        if let Some(p) = self.producers {
            s.producers = p.max(1);
        }
        if let Some(n) = self.subscribers {
            s.subscribers = n.max(1);
            if s.mode == SubMode::Pull {
                s.mode = SubMode::Pool;
            }
        }
        if let Some(n) = self.consumers {
            s.subscribers = n.max(1);
            s.mode = SubMode::Pull;
        }
        if self.dedicated && s.mode == SubMode::Pool {
            s.mode = SubMode::Dedicated;
        }
        if let Some(p) = self.partitions {
            s.partitions = p.max(1);
        }
        if let Some(b) = self.batch {
            s.batch = b.max(1);
        }
        if let Some(r) = self.rate {
            s.rate = Some(r.max(1));
        }
        if let Some(d) = self.delivery {
            s.delivery = d;
        }
        if let Some(us) = self.idle_spin_us {
            s.idle_spin_us = us;
        }
        s.payload = self.payload;
        s.poll_batch = self.poll_batch.max(1);
        s.capacity = self.capacity.max(1);
        if let Some(k) = self.sample_every {
            s.sample_every = k.max(1);
        }
        s.amount = match (self.messages, self.duration) {
            (Some(n), _) => Amount::Messages(n.max(1)),
            (None, Some(d)) => Amount::Seconds(d.max(0.001)),
            // Rate-limited scenarios, and those whose handlers set the pace,
            // keep their own length.
            (None, None) if s.rate.is_some() || s.handler != HandlerCost::Free => s.amount,
            (None, None) => Amount::Seconds(default_seconds),
        };
    }
}

fn main() {
    // `--scenario ipc` runs this binary again as its other processes.
    if let Some(code) = rill_bench::ipc::child_main() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    if matches!(cli.peer_payload, PeerPayload::Array | PeerPayload::Auto) && cli.payload > systems::MAX_ARRAY_PAYLOAD {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "--peer-payload array (and auto, with one subscriber) carries at most {} bytes; --payload is {}; use --peer-payload arc or vec",
                    systems::MAX_ARRAY_PAYLOAD,
                    cli.payload
                ),
            )
            .exit();
    }
    if cli.schema_cost {
        let messages = cli.messages.unwrap_or(200_000);
        print!("{}", rill_bench::schema_cost::table(&rill_bench::schema_cost::run(messages, cli.pairs.max(1))));
        return;
    }
    if cli.publish_cost {
        run_publish_cost(&cli);
        return;
    }
    if cli.compaction {
        use rill_bench::compaction;
        let messages = cli.messages.unwrap_or(compaction::DEFAULT_MESSAGES);
        let reporting = rill_bench::probe::memory_reporting();
        match compaction::run(messages, cli.compaction_mib, cli.pairs.max(1)) {
            Ok(rounds) => {
                print!("{}", compaction::table(&rounds, messages, cli.compaction_mib));
                print!("\n{}", rill_bench::probe::memory_reporting_note(reporting).unwrap_or_default());
            }
            Err(e) => fail(&format!("compaction measurement failed: {e}")),
        }
        return;
    }
    let started = Instant::now();
    if cli.priority {
        let messages = cli.messages.unwrap_or(2_000).max(1);
        match rill_bench::priority::measure(cli.pairs.max(1), messages) {
            Ok(r) => {
                println!("{}", r.describe());
                println!("({:.1} s in all)", started.elapsed().as_secs_f64());
            }
            Err(e) => fail(&format!("priority measurement failed: {e}")),
        }
        return;
    }
    if let Some(mib) = cli.recovery_mib {
        let root = systems::rill_sys::data_root();
        match rill_bench::recovery::measure(&root, mib.max(1), cli.payload, cli.pairs.max(1)) {
            Ok(r) => {
                println!("{}", r.describe());
                println!("({:.1} s in all)", started.elapsed().as_secs_f64());
            }
            Err(e) => {
                eprintln!("recovery measurement under {} failed: {e}", root.display());
                std::process::exit(1);
            }
        }
        return;
    }
    let comparing = cli.compare || !cli.peers.is_empty() || matches!(cli.suite, Suite::Report | Suite::Sweep);
    let peers: Vec<System> = if !comparing {
        Vec::new()
    } else if cli.peers.is_empty() {
        System::PEERS.into_iter().filter(|p| p.built()).collect()
    } else {
        let mut p: Vec<System> = cli.peers.iter().copied().filter(|s| *s != System::Rill).collect();
        p.dedup();
        if let Some(missing) = p.iter().find(|s| !s.built()) {
            Cli::command()
                .error(clap::error::ErrorKind::ValueValidation, format!("{} {NOT_BUILT}", missing.name()))
                .exit();
        }
        p
    };
    // Peers the comparison would have had in a build with them.
    let not_built: Vec<System> = if comparing && cli.peers.is_empty() {
        System::PEERS.into_iter().filter(|p| !p.built()).collect()
    } else {
        Vec::new()
    };
    if !not_built.is_empty() {
        eprintln!("{}", not_built_note(&not_built));
    }
    let default_suite_alone =
        cli.scenario.is_empty() && !cli.shape_given() && cli.suite == Suite::Default && !comparing;
    let default_seconds = if default_suite_alone { 1.0 } else { 0.5 };
    let pairs = cli.pairs.max(1);

    if cli.scenario.contains(&Named::Bridge) {
        run_bridge(&cli, pairs);
    }
    if cli.scenario.contains(&Named::Scale) {
        run_scale(&cli);
    }
    if cli.scenario.contains(&Named::Dedupe) {
        run_dedupe(&cli, pairs);
    }
    if cli.scenario.contains(&Named::Fresh) {
        run_fresh(&cli, pairs);
    }
    if cli.scenario.contains(&Named::Ipc) {
        run_ipc(&cli, pairs);
    }
    let own_runner = |n: &Named| matches!(n, Named::Bridge | Named::Scale | Named::Dedupe | Named::Fresh | Named::Ipc);
    if !cli.scenario.is_empty() && cli.scenario.iter().all(own_runner) {
        return;
    }
    let mut list: Vec<Scenario> = if !cli.scenario.is_empty() {
        cli.scenario.iter().filter(|n| !own_runner(n)).map(|n| scenarios::named(*n)).collect()
    } else if cli.shape_given() {
        let mut sc = scenarios::named(Named::OneToOne);
        sc.name = "custom".into();
        sc.title = "custom shape".into();
        vec![sc]
    } else {
        scenarios::suite(cli.suite, &cli.sweep)
    };
    if cli.plot.is_some() && !list.iter().any(|s| s.sweep) {
        list.extend(scenarios::suite(Suite::Sweep, &cli.sweep));
    }
    for sc in &mut list {
        cli.apply(sc, default_seconds);
        if sc.sweep {
            // The sweep varies the subscriber count, whatever --subscribers says.
            let n = sc.name.trim_start_matches("fan-out-").parse().unwrap_or(sc.shape.subscribers);
            sc.shape.subscribers = n;
        }
    }
    let mut works: Vec<Work> = cli.work.clone();
    if works.is_empty() {
        works = if cli.suite == Suite::Report && cli.scenario.is_empty() && !cli.shape_given() {
            vec![Work::Minimal, Work::Touch]
        } else {
            vec![Work::Minimal]
        };
    }
    works.dedup();
    // Every scenario once per work mode, the first mode first.
    let list: Vec<Scenario> = works
        .iter()
        .flat_map(|&w| {
            list.iter().map(move |sc| {
                let mut sc = sc.clone();
                sc.shape.work = w;
                sc
            })
        })
        .collect();

    let env = Env {
        workers: cli.workers,
        retention_mib: cli.retention_mib.max(1),
        warmup: !cli.no_warmup,
        overflow: cli.overflow,
        batch_handler: cli.batch_handler,
        peer_payload: cli.peer_payload,
        timeout: Duration::from_secs_f64(cli.timeout.max(0.1)),
        state_probes: !cli.no_probe,
    };

    let total: u64 = list.iter().map(|sc| bench::planned_runs(sc, &peers, pairs)).sum();
    let progress = Progress::new(started);
    let bar = if !progress.lines {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };

    if !cli.no_probe {
        progress.line("probing the machine: cross-core ping-pong, then hiccups");
    }
    let probe = if cli.no_probe {
        None
    } else {
        bar.set_message("cross-core ping-pong probe");
        Some(probe::ping_pong(7, Duration::from_millis(40)))
    };
    let hiccups = if cli.no_probe {
        None
    } else {
        bar.set_message("hiccup probe");
        Some(probe::hiccups(Duration::from_millis(200)))
    };
    let idle = cli.idle_probe.map(|secs| {
        bar.set_message("idle probe");
        let each = Duration::from_secs_f64(secs.max(0.01));
        probe::idle(100, each).map_or_else(|e| format!("idle probe failed: {e}"), |i| i.describe())
    });
    if let Some(p) = probe.as_ref().filter(|_| !bar.is_hidden()) {
        // Early word on the machine's state while the runs go on.
        bar.suspend(|| eprintln!("{}", p.describe()));
    }

    // The disk's own limits, for the persist-* scenarios to be read against.
    let disk = if list.iter().any(|sc| sc.shape.persist.is_some()) {
        bar.set_message("disk probe");
        let dir = systems::rill_sys::data_root();
        let probed =
            probe::disk(&dir).map_or_else(|e| format!("disk probe at {} failed: {e}", dir.display()), |d| d.describe());
        Some(format!("persist-*: a broker on a new data directory per run (no pre-fill); {probed}"))
    } else {
        None
    };

    let mut results = Vec::new();
    for (i, sc) in list.iter().enumerate() {
        let what = format!("[{}/{}] {} ({}) [work: {}]", i + 1, list.len(), sc.name, sc.title, sc.shape.work.name());
        progress.line(&format!("{what}: started"));
        let scenario_started = Instant::now();
        results.push(bench::measure(sc, &peers, pairs, &env, &bar));
        progress.line(&format!("{what}: done in {:.1} s", scenario_started.elapsed().as_secs_f64()));
    }
    bar.finish_and_clear();
    // A last probe after the runs, so that a machine that changed state
    // during them shows in the verdict even when no pair was probed.
    let noise = probe.as_ref().map(|opening| {
        let closing = probe::ping_pong(bench::STATE_PROBE_ROUNDS, bench::STATE_PROBE_EACH).round_trip_ns;
        report::noise_verdict(opening, Some(closing), &results)
    });
    if let Some(noise) = noise.as_ref().filter(|_| cli.format != Format::Table) {
        // The table carries the verdict; other formats carry it as a field,
        // so it is said here too, where a person reads.
        eprintln!("{noise}");
    }

    let report = Report {
        version: env!("CARGO_PKG_VERSION").into(),
        command: command_line(),
        probe: probe.clone(),
        hiccups,
        noise,
        notes: notes(&env, &peers, &list, pairs)
            .into_iter()
            .chain((!not_built.is_empty()).then(|| not_built_note(&not_built)))
            .chain(disk)
            .chain(idle)
            .collect(),
        env,
        elapsed_s: started.elapsed().as_secs_f64(),
        scenarios: results,
    };
    print!("{}", report::render(&report, cli.format));

    if let Some(path) = &cli.plot {
        let series = plot::series(&report.scenarios);
        let sub = match &probe {
            Some(p) => format!("{} B payloads; ping-pong probe {:.0} ns/round trip", cli.payload, p.round_trip_ns),
            None => format!("{} B payloads", cli.payload),
        };
        let svg = plot::svg("rill-bench: fan-out throughput against subscriber count", &sub, &series);
        match std::fs::write(path, svg) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
        }
    }
}

/// Progress for a reader who cannot see the bar: when stderr is not a
/// terminal (a pipe, a CI log, a file), the bar is hidden and each step
/// (the probes, each scenario's start and end) is a line on stderr instead,
/// so a piped run does not go silent for a minute.
struct Progress {
    /// True when stderr is not a terminal.
    lines: bool,
    started: Instant,
}

impl Progress {
    fn new(started: Instant) -> Progress {
        Progress { lines: !std::io::stderr().is_terminal(), started }
    }

    /// One line, with the time since rill-bench started.
    fn line(&self, what: &str) {
        if self.lines {
            eprintln!("rill-bench {:>6.1} s  {what}", self.started.elapsed().as_secs_f64());
        }
    }
}

/// The command line, with the binary shown as `rill-bench`.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() { "rill-bench".into() } else { format!("rill-bench {}", args.join(" ")) }
}

/// Why a peer cannot run in this build.
const NOT_BUILT: &str = "is not in this build of rill-bench: build it with the peers feature \
                         (cargo run --release --bin rill-bench --features peers -- ...)";

/// The report's line on the peers a build without the `peers` feature leaves out.
fn not_built_note(missing: &[System]) -> String {
    let names: Vec<&str> = missing.iter().map(|p| p.name()).collect();
    format!(
        "peers NOT measured, not built: {} (rill-bench was built without the peers feature; \
             cargo run --release --bin rill-bench --features peers -- ... adds them)",
        names.join(", ")
    )
}

/// The setup, in words, for the report header.
fn notes(env: &Env, peers: &[System], list: &[Scenario], pairs: usize) -> Vec<String> {
    let mut n = Vec::new();
    let workers = env.workers();
    let cap = list.first().map_or(4096, |s| s.shape.capacity);
    n.push(format!(
        "rill: a fresh in-memory broker per run, {workers} pool workers{}; retention {} MiB per partition, {}",
        if env.workers.is_none() { " (one per core, the default)" } else { "" },
        env.retention_mib,
        if env.warmup {
            "log pre-filled past retention before each run so segment memory is recycled (steady state)"
        } else {
            "no warm-up (first-touch page faults are measured)"
        }
    ));
    n.push(match env.overflow {
        RillOverflow::Block => format!(
            "rill subscribers use Overflow::Block with lag_limit {cap}: publishers wait, as with a bounded channel of {cap}"
        ),
        RillOverflow::Drop => "rill subscribers use Overflow::DropOldest (default): only retention bounds the lag".into(),
    });
    if env.batch_handler {
        n.push("rill push subscribers use subscribe_batch (up to 64 messages per handler call)".into());
    }
    if !peers.is_empty() {
        let names: Vec<&str> = peers.iter().map(|p| p.name()).collect();
        n.push(format!(
            "peers ({}): capacity {cap} each; payload {} per message; see PEERS.md; {pairs} interleaved pairs per peer, \
             order alternating (rill, peer / peer, rill), each followed by the peer's plain loop (the self-check)",
            names.join(", "),
            match env.peer_payload {
                PeerPayload::Auto => "what its users send: [u8; N] by value with one subscriber, Arc<[u8]> when fanning out",
                PeerPayload::Vec => "a Vec<u8> (cloned per subscriber)",
                PeerPayload::Arc => "an Arc<[u8]> (shared)",
                PeerPayload::Array => "a fixed-size array by value (no allocation)",
            }
        ));
    }
    let mut works: Vec<&str> = Vec::new();
    for sc in list {
        if !works.contains(&sc.shape.work.name()) {
            works.push(sc.shape.work.name());
        }
    }
    n.push(format!(
        "subscriber work: {} (minimal: black_box and count in a local, latency sampled 1 in --sample-every; \
         touch: sum the payload, a shared store per message, peers' producers stamp every message)",
        works.join(", then ")
    ));
    let amount = list.iter().find(|s| s.shape.rate.is_none()).map(|s| s.shape.amount);
    n.push(match amount {
        Some(Amount::Seconds(s)) => format!(
            "each run publishes for {s} s, then the subscribers drain; time cap {:.0} s",
            env.timeout.as_secs_f64()
        ),
        Some(Amount::Messages(m)) => {
            format!("each producer publishes {m} messages per run; time cap {:.0} s", env.timeout.as_secs_f64())
        }
        None => format!("time cap {:.0} s per run", env.timeout.as_secs_f64()),
    });
    n.push(
        "msgs/s = delivered messages per subscriber per second (median of runs); deliv/s = msgs/s x subscribers; \
         csw/1k = voluntary context switches per 1,000 messages (median of runs); \
         latency = publish to handler, HDR histogram over all runs; harness/plain = the harnessed peer's msgs/s \
         over its plain loop's (below 0.8x: INVALID); rill/plain = rill's msgs/s over the peer's plain loop's"
            .into(),
    );
    n
}

/// Messages per run of the bridge scenario unless --messages says otherwise.
#[cfg(feature = "nats")]
const BRIDGE_MESSAGES: usize = 20_000;

/// The `bridge` scenario: its own runner, a nats-server and two processes'
/// worth of brokers, outside the in-process harness.
#[cfg(feature = "nats")]
fn run_bridge(cli: &Cli, pairs: usize) {
    let n = cli.messages.map_or(BRIDGE_MESSAGES, |m| m.max(1) as usize);
    let rate = Some(rill_bench::bridge::LATENCY_RATE);
    let runs = rill_bench::bridge::run(n, cli.payload, pairs, None)
        .and_then(|t| Ok((t, rill_bench::bridge::run(n, cli.payload, pairs, rate)?)));
    match runs {
        Ok((throughput, latency)) => print!("{}", rill_bench::bridge::report(n, cli.payload, &throughput, &latency)),
        Err(e) => fail(&format!("bridge scenario failed: {e}")),
    }
}

#[cfg(not(feature = "nats"))]
fn run_bridge(_cli: &Cli, _pairs: usize) {
    eprintln!(
        "the bridge scenario needs rill-bench built with the nats feature: cargo run --release -p rill-bench --features nats -- --scenario bridge"
    );
    std::process::exit(2);
}

/// `--scenario dedupe`: its own runner, rounds of three runs (see
/// `rill_bench::dedupe`), printed as a table.
fn run_dedupe(cli: &Cli, pairs: usize) {
    use rill_bench::dedupe;
    let messages = cli.messages.unwrap_or(dedupe::DEFAULT_MESSAGES);
    let batch = cli.batch.unwrap_or(1);
    match dedupe::run(messages, cli.payload, pairs, batch) {
        Ok(result) => {
            if batch > 1 {
                println!("published in batches of {batch} (publish_batch), every run alike");
            }
            print!("{}", dedupe::table(&result))
        }
        Err(e) => fail(&format!("dedupe scenario failed: {e}")),
    }
}

/// Says why a measurement failed, and exits with status 1.
fn fail(why: &str) -> ! {
    eprintln!("{why}");
    std::process::exit(1);
}

/// `--scenario fresh`: its own runner, interleaved rounds of a fresh and
/// a warm topic (see `rill_bench::fresh`), printed as tables.
fn run_fresh(cli: &Cli, pairs: usize) {
    use rill_bench::fresh;
    let messages = cli.messages.unwrap_or(fresh::DEFAULT_MESSAGES);
    let reporting = rill_bench::probe::memory_reporting();
    match fresh::run(messages, cli.payload, cli.retention_mib, pairs) {
        Ok(cases) => {
            print!("{}", fresh::table(&cases, messages, cli.payload, cli.retention_mib));
            print!("{}", rill_bench::probe::memory_reporting_note(reporting).unwrap_or_default());
        }
        Err(e) => fail(&format!("fresh scenario failed: {e}")),
    }
}

/// Messages per throughput run of the ipc scenario unless --messages says otherwise.
const IPC_MESSAGES: u64 = 1_000_000;

/// `--scenario ipc`: its own runner, child processes (see `rill_bench::ipc`).
fn run_ipc(cli: &Cli, pairs: usize) {
    use rill_bench::ipc;
    let config = ipc::Config {
        messages: cli.messages.unwrap_or(IPC_MESSAGES).max(1),
        payload: cli.payload,
        rounds: pairs,
        root: ipc::Config::root(cli.ipc_disk),
        idle: Duration::from_secs_f64(cli.ipc_idle_secs.max(0.01)),
    };
    let started = Instant::now();
    let mut progress = |step: &str| eprintln!("{step} ({:.1} s)", started.elapsed().as_secs_f64());
    match ipc::run_self(&config, &mut progress) {
        Ok(result) => match cli.format {
            Format::Json => println!("{}", serde_json::to_string_pretty(&result).expect("plain data")),
            Format::Table | Format::Csv => print!("{}", result.table()),
        },
        Err(e) => fail(&format!("ipc scenario failed: {e}")),
    }
}

/// `--scenario scale`: its own runner, two sweeps by powers of ten (see
/// `rill_bench::scale`), printed as tables (or JSON) and drawn with `--plot`.
fn run_scale(cli: &Cli) {
    use rill_bench::scale;
    let max_topics = if cli.scale_full { scale::FULL_TOPICS } else { scale::QUICK_TOPICS };
    let started = Instant::now();
    let mut progress = |step: &str| eprintln!("{step} ({:.1} s)", started.elapsed().as_secs_f64());
    let result = match scale::run(max_topics, scale::MAX_SUBSCRIPTIONS, cli.payload, &mut progress) {
        Ok(r) => r,
        Err(e) => fail(&format!("scale scenario failed: {e}")),
    };
    match cli.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&result).expect("plain data")),
        Format::Table | Format::Csv => print!("{}", result.table()),
    }
    if let Some(path) = &cli.plot {
        let axes = plot::Axes {
            x: "topics",
            y: "ns per operation (log scale)",
            note: "one broker grown decade by decade; medians of one run",
        };
        let svg = plot::svg_with("rill-bench: costs against the number of topics", "", &axes, &result.series());
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!("could not write {}: {e}", path.display());
            std::process::exit(1);
        }
        eprintln!("wrote {}", path.display());
    }
}

/// `--publish-cost`: the publisher's own cost per call beside crossbeam's send.
fn run_publish_cost(cli: &Cli) {
    let messages = cli.messages.unwrap_or(1_000_000);
    if !cli.no_probe {
        println!("{}", probe::ping_pong(7, Duration::from_millis(40)).describe());
    }
    let rows = rill_bench::publish_cost::run(messages, cli.pairs.max(1));
    println!(
        "Publisher's own time per call, {} interleaved pairs of {messages} messages (draining afterwards not timed):\n",
        cli.pairs.max(1)
    );
    print!("{}", rill_bench::publish_cost::table(&rows));
    let floors = rill_bench::publish_cost::floors(messages, cli.pairs.max(1));
    println!(
        "\nThe floors under a publish on this machine, in the same run ({} repeats of {messages} steps each):\n",
        cli.pairs.max(1)
    );
    print!("{}", rill_bench::publish_cost::floors_table(&floors));
}
