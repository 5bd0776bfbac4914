//! Named scenarios and the suites that group them. The goals set for rill are
//! not here: the tool reports rill and its peers, and the goals sit beside the
//! latest report run's figures in `docs/PERFORMANCE.md`.

use serde::Serialize;

use crate::measure::{Amount, Delivery, HandlerCost, Persist, Shape, SubMode, Work};
use crate::systems::System;

/// What a scenario's comparison is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Delivered messages per second; ratio = rill / peer.
    Throughput,
    /// Publish-to-handler latency at a fixed rate; ratio = peer p50 / rill p50.
    Latency,
}

/// A named workload.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Short name (`--scenario`).
    pub name: String,
    /// What it measures.
    pub title: String,
    /// The workload.
    pub shape: Shape,
    /// Throughput or latency.
    pub metric: Metric,
    /// Part of a subscriber-count sweep (plotted by `--plot`).
    pub sweep: bool,
}

/// The scenarios the tool knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Named {
    /// 1 producer -> 1 push subscriber (worker pool).
    OneToOne,
    /// 1 producer -> 1 push subscriber on a dedicated thread.
    #[value(name = "one-to-one-dedicated")]
    OneToOneDedicated,
    /// 1 producer -> 1 subscriber, published in batches of 64.
    #[value(name = "batch-64")]
    Batch64,
    /// 2 producers -> 1 push subscriber.
    #[value(name = "publish-2")]
    Publish2,
    /// 1 producer -> 4 push subscribers (worker pool).
    #[value(name = "fan-out-4")]
    FanOut4,
    /// 1 producer -> 8 push subscribers (worker pool).
    #[value(name = "fan-out-8")]
    FanOut8,
    /// 1 producer -> 16 push subscribers (worker pool).
    #[value(name = "fan-out-16")]
    FanOut16,
    /// 1 producer -> 8 push subscribers, each on its own thread (more threads than cores).
    #[value(name = "fan-out-8-threads")]
    FanOut8Threads,
    /// 4 producers -> 1 push subscriber.
    #[value(name = "mpsc-4")]
    Mpsc4,
    /// 1 producer -> 1 pull consumer polling in batches.
    Pull,
    /// one-way latency at 100k msgs/s, dedicated (spinning) subscriber.
    Latency,
    /// A consumer group of 1 member on 4 partitions, handlers sleeping 50 us
    /// per message (standing for I/O): the baseline of group-4.
    #[value(name = "group-1")]
    Group1,
    /// A consumer group of 4 members on 4 partitions, handlers sleeping 50 us
    /// per message: compare with group-1 (target >= 3.5x).
    #[value(name = "group-4")]
    Group4,
    /// A consumer group of 1 member, CPU-bound handlers (20 us spin): the
    /// baseline of group-2-cpu.
    #[value(name = "group-1-cpu")]
    Group1Cpu,
    /// A consumer group of 2 members, CPU-bound handlers: scaling on 2 cores.
    #[value(name = "group-2-cpu")]
    Group2Cpu,
    /// A shared push subscription of 1 member on 4 partitions, handlers
    /// sleeping 50 us per message: the baseline of shared-4.
    #[value(name = "shared-1")]
    Shared1,
    /// A shared push subscription of 4 members (dedicated threads) on 4
    /// partitions, handlers sleeping 50 us: compare with shared-1 (target >= 3.5x).
    #[value(name = "shared-4")]
    Shared4,
    /// rill -> NATS JetStream -> rill through two bridges, against a plain
    /// async-nats publisher and consumer (built with `--features nats`; runs
    /// its own nats-server).
    Bridge,
    /// Costs against the number of topics (create, publish by name, memory
    /// per idle topic, `**` delivery) and of subscriptions on one topic,
    /// by powers of ten (`rill_bench::scale`; its own runner).
    Scale,
    /// A publish with an id, 1,000,000 ids in the topic's dedupe window,
    /// against one without (`rill_bench::dedupe`; its own runner).
    Dedupe,
    /// The first fill of a topic created just before the run against the
    /// same run on a warm topic, in memory and durable, 1 -> 1 and 4 -> 1,
    /// with the publishers' page faults (`rill_bench::fresh`; its own runner).
    Fresh,
    /// rill across processes on one data directory (`Sharing::Processes`,
    /// on /dev/shm): 1 -> 1 and 4 -> 1 against one process and a Unix
    /// socket, latency against a ping-pong, idle CPU (`rill_bench::ipc`;
    /// its own runner, child processes).
    Ipc,
    /// 1 producer -> 1 push subscriber, the broker on a data directory, Fsync::Never.
    #[value(name = "persist-never")]
    PersistNever,
    /// As persist-never with Fsync::Interval(100 ms), the default.
    #[value(name = "persist-interval")]
    PersistInterval,
    /// As persist-never with Fsync::Always: each publish waits for its fdatasync.
    #[value(name = "persist-always")]
    PersistAlways,
    /// 4 producers -> 1 push subscriber with Fsync::Always: group commit against persist-always.
    #[value(name = "persist-always-4")]
    PersistAlways4,
}

/// Sets of scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Suite {
    /// rill alone over a spread of shapes (about a minute); add --compare for peers.
    Default,
    /// The scenarios of the README's table, each against every peer (with --compare implied).
    Report,
    /// Fan-out over the --sweep subscriber counts against every peer (for --plot).
    Sweep,
    /// rill on a data directory under each fsync policy, with in-memory rill
    /// (one-to-one, mpsc-4) in the same run and the disk's own limits probed.
    Persist,
}

/// The shape every scenario starts from.
pub fn base_shape() -> Shape {
    Shape {
        producers: 1,
        subscribers: 1,
        mode: SubMode::Pool,
        partitions: 1,
        payload: 64,
        batch: 1,
        poll_batch: 256,
        amount: Amount::Seconds(0.5),
        rate: None,
        capacity: 4096,
        delivery: Delivery::AtLeastOnce,
        sample_every: 64,
        idle_spin_us: 0,
        work: Work::Minimal,
        handler: HandlerCost::Free,
        persist: None,
    }
}

/// A fan-out scenario with `n` push subscribers on the pool.
pub fn fan_out(n: usize, sweep: bool) -> Scenario {
    Scenario {
        name: format!("fan-out-{n}"),
        title: format!("fan-out to {n} subscriber{}", if n == 1 { "" } else { "s" }),
        shape: Shape { subscribers: n, ..base_shape() },
        metric: Metric::Throughput,
        sweep,
    }
}

/// A consumer group of `members` on a 4-partition topic whose handlers pay
/// `cost` per message; `messages` published (as fast as possible, up front),
/// so the members' pace sets the rate. Compare group sizes with each other.
pub fn group(members: usize, cost: HandlerCost, messages: u64) -> Scenario {
    let what = match cost {
        HandlerCost::SleepUs(us) => format!("sleeping {us} us per message"),
        HandlerCost::SpinUs(us) => format!("spinning {us} us per message"),
        HandlerCost::Free => "free handlers".into(),
    };
    let cpu = if matches!(cost, HandlerCost::SpinUs(_)) { "-cpu" } else { "" };
    Scenario {
        name: format!("group-{members}{cpu}"),
        title: format!("a consumer group of {members} on 4 partitions, {what}"),
        shape: Shape {
            subscribers: members,
            mode: SubMode::Group,
            partitions: 4,
            amount: Amount::Messages(messages),
            handler: cost,
            ..base_shape()
        },
        metric: Metric::Throughput,
        sweep: false,
    }
}

/// A shared push subscription of `members` (each on a thread of its own, as
/// handlers that wait on I/O want) on a 4-partition topic; like [`group`].
pub fn shared(members: usize, cost: HandlerCost, messages: u64) -> Scenario {
    let base = group(members, cost, messages);
    Scenario {
        name: format!("shared-{members}"),
        title: base.title.replace("a consumer group", "a shared push subscription"),
        shape: Shape { mode: SubMode::Shared, ..base.shape },
        ..base
    }
}

/// The scenario called `name`.
pub fn named(name: Named) -> Scenario {
    let base = base_shape();
    let sc = |name: &str, title: &str, shape: Shape| Scenario {
        name: name.into(),
        title: title.into(),
        shape,
        metric: Metric::Throughput,
        sweep: false,
    };
    match name {
        Named::OneToOne => sc("one-to-one", "one producer, one subscriber", base),
        Named::OneToOneDedicated => sc(
            "one-to-one-dedicated",
            "one producer, one subscriber on a dedicated thread",
            Shape { mode: SubMode::Dedicated, ..base },
        ),
        Named::Batch64 => sc("batch-64", "one to one, published in batches of 64", Shape { batch: 64, ..base }),
        Named::Publish2 => sc("publish-2", "two producers, one subscriber", Shape { producers: 2, ..base }),
        Named::FanOut4 => fan_out(4, false),
        Named::FanOut8 => fan_out(8, false),
        Named::FanOut16 => fan_out(16, false),
        Named::FanOut8Threads => sc(
            "fan-out-8-threads",
            "fan-out to 8 subscribers, a thread each (more threads than cores)",
            Shape { subscribers: 8, mode: SubMode::Dedicated, ..base },
        ),
        Named::Mpsc4 => sc("mpsc-4", "four producers, one subscriber", Shape { producers: 4, ..base }),
        Named::Pull => {
            sc("pull", "one producer, one pull consumer (poll batches)", Shape { mode: SubMode::Pull, ..base })
        }
        Named::Group1 => group(1, HandlerCost::SleepUs(50), 20_000),
        Named::Group4 => group(4, HandlerCost::SleepUs(50), 20_000),
        Named::Group1Cpu => group(1, HandlerCost::SpinUs(20), 40_000),
        Named::Group2Cpu => group(2, HandlerCost::SpinUs(20), 40_000),
        Named::PersistNever => sc(
            "persist-never",
            "one to one, on a data directory, Fsync::Never",
            Shape { persist: Some(Persist::Never), ..base },
        ),
        Named::PersistInterval => sc(
            "persist-interval",
            "one to one, on a data directory, Fsync::Interval(100 ms)",
            Shape { persist: Some(Persist::Interval), ..base },
        ),
        Named::PersistAlways => sc(
            "persist-always",
            "one to one, on a data directory, Fsync::Always",
            Shape { persist: Some(Persist::Always), ..base },
        ),
        Named::PersistAlways4 => sc(
            "persist-always-4",
            "four producers, one subscriber, on a data directory, Fsync::Always (group commit)",
            Shape { producers: 4, persist: Some(Persist::Always), ..base },
        ),
        Named::Shared1 => shared(1, HandlerCost::SleepUs(50), 20_000),
        Named::Shared4 => shared(4, HandlerCost::SleepUs(50), 20_000),
        Named::Latency => Scenario {
            name: "latency".into(),
            title: "one-way latency at 100k msgs/s, dedicated spinning subscriber".into(),
            shape: Shape {
                mode: SubMode::Dedicated,
                rate: Some(100_000),
                sample_every: 1,
                amount: Amount::Seconds(0.5),
                // "Spinning": keep polling across the 10 us gap between messages
                // instead of parking and paying a wake-up for each.
                idle_spin_us: 200,
                ..base
            },
            metric: Metric::Latency,
            sweep: false,
        },
        // Run by `rill_bench::bridge`, not the in-process harness: the shape
        // only carries --messages and --payload there.
        Named::Bridge => sc("bridge", "rill -> JetStream -> rill vs plain async-nats", base),
        // Run by `rill_bench::scale`, not the in-process harness.
        Named::Scale => sc("scale", "costs against topics and subscriptions, by powers of ten", base),
        // Run by `rill_bench::dedupe`, not the in-process harness.
        Named::Dedupe => sc("dedupe", "a publish with an id (1M ids in the window) vs without", base),
        Named::Fresh => sc("fresh", "the first fill of a new topic vs a warm topic", base),
        Named::Ipc => sc("ipc", "rill across processes vs one process, a Unix socket and a ping-pong", base),
    }
}

/// The scenarios of a suite (`sweep` lists the subscriber counts of the sweep).
pub fn suite(suite: Suite, sweep: &[usize]) -> Vec<Scenario> {
    match suite {
        Suite::Default => [
            Named::OneToOne,
            Named::Batch64,
            Named::FanOut4,
            Named::FanOut8,
            Named::FanOut8Threads,
            Named::Mpsc4,
            Named::Pull,
            Named::Latency,
        ]
        .into_iter()
        .map(named)
        .collect(),
        Suite::Report => [
            Named::OneToOne,
            Named::OneToOneDedicated,
            Named::FanOut8,
            Named::FanOut8Threads,
            Named::Mpsc4,
            Named::Latency,
        ]
        .into_iter()
        .map(named)
        .collect(),
        Suite::Sweep => sweep.iter().map(|&n| fan_out(n, true)).collect(),
        Suite::Persist => [
            Named::OneToOne,
            Named::PersistNever,
            Named::PersistInterval,
            Named::PersistAlways,
            Named::Mpsc4,
            Named::PersistAlways4,
        ]
        .into_iter()
        .map(named)
        .collect(),
    }
}

/// Whether `system` can run `shape` at all, and why not.
pub fn unsupported(system: System, shape: &Shape) -> Option<String> {
    match system {
        System::Rill => None,
        _ if shape.persist.is_some() => Some("peers keep messages in memory only".into()),
        System::Bus if shape.producers > 1 => Some("bus has a single producer".into()),
        _ if shape.mode == SubMode::Group => Some("consumer groups are rill's alone".into()),
        _ if shape.mode == SubMode::Shared => Some("shared push subscriptions are rill's alone".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_suite_covers_the_readme_table() {
        let report = suite(Suite::Report, &[]);
        let names: Vec<_> = report.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["one-to-one", "one-to-one-dedicated", "fan-out-8", "fan-out-8-threads", "mpsc-4", "latency"]
        );
        assert_eq!(named(Named::Latency).shape.rate, Some(100_000));
        assert!(report.iter().all(|s| s.shape.work == Work::Minimal), "headline tables use minimal work");
    }

    #[test]
    fn group_scenarios_compare_member_counts_on_four_partitions() {
        for (name, members, cost) in [
            (Named::Group1, 1, HandlerCost::SleepUs(50)),
            (Named::Group4, 4, HandlerCost::SleepUs(50)),
            (Named::Group1Cpu, 1, HandlerCost::SpinUs(20)),
            (Named::Group2Cpu, 2, HandlerCost::SpinUs(20)),
        ] {
            let sc = named(name);
            assert_eq!((sc.shape.mode, sc.shape.subscribers, sc.shape.partitions), (SubMode::Group, members, 4));
            assert_eq!((sc.shape.handler, sc.shape.receivers()), (cost, 1));
            assert!(matches!(sc.shape.amount, Amount::Messages(_)), "the handlers set the pace, not a duration");
        }
        assert_eq!(named(Named::Group2Cpu).name, "group-2-cpu");
        for (name, members) in [(Named::Shared1, 1), (Named::Shared4, 4)] {
            let sc = named(name);
            assert_eq!((sc.shape.mode, sc.shape.subscribers, sc.shape.partitions), (SubMode::Shared, members, 4));
            assert_eq!((sc.shape.handler, sc.shape.receivers()), (HandlerCost::SleepUs(50), 1));
            assert_eq!(sc.name, format!("shared-{members}"));
        }
    }

    #[test]
    fn sweeps_follow_the_counts_given() {
        let s = suite(Suite::Sweep, &[1, 3]);
        assert_eq!(s.iter().map(|s| s.shape.subscribers).collect::<Vec<_>>(), [1, 3]);
        assert!(s.iter().all(|s| s.sweep));
    }
}
