//! The ipc scenario's results and their tables.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::proto::{
    IDLE_GROUP_MEMBERS, IDLE_PROCESSES, IDLE_SETTLE, IDLE_SHARED_MEMBERS, IDLE_SUBSCRIPTIONS, LATENCY_RATE, MANY,
};
use crate::stats::{PairStats, fmt_count, fmt_ns, fmt_ratio, median, pair_stats};

/// One round of 1 -> 1, msgs/s.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OneToOne {
    /// rill, publisher and subscriber in two processes.
    pub across: f64,
    /// rill in one process.
    pub solo: f64,
    /// The socket, its publisher writing through a `BufWriter`.
    pub socket_buffered: f64,
    /// The socket, one `write` per message.
    pub socket_each: f64,
    /// iceoryx2's publish-subscribe (with the `iceoryx2` feature).
    pub iceoryx2: Option<f64>,
    /// Why iceoryx2's run failed, if it did.
    pub iceoryx2_failed: Option<String>,
}

/// Everything `--scenario ipc` measured.
#[derive(Debug, Clone, Serialize)]
pub struct IpcBench {
    pub messages: u64,
    pub payload: usize,
    pub root: PathBuf,
    /// Per round, 1 -> 1 msgs/s.
    pub one_to_one: Vec<OneToOne>,
    /// Per round: (across, one process) msgs/s, 4 -> 1.
    pub many_to_one: Vec<(f64, f64)>,
    /// Per round: (rill one-way p50, p99, ping-pong round trip p50, p99) ns.
    pub latency: Vec<(u64, u64, u64, u64)>,
    /// CPU ns of each idle process over the window, every thread but the
    /// one that measures (it waits on stdin for the parent's words).
    pub idle_cpu_ns: Vec<u64>,
    /// CPU ns of each idle process's measuring thread over the window: its
    /// wake-up at the window's end, the measurement's own cost.
    pub idle_measuring_ns: Vec<u64>,
    /// CPU ns of each idle process over the settle before the window
    /// (`IDLE_SETTLE`).
    pub idle_settle_ns: Vec<u64>,
    pub idle_window: Duration,
    /// Subscriptions the message after the window woke.
    pub idle_woken: u64,
    /// What the idle shared subscription's members got of it (1: one of them).
    pub idle_shared_got: u64,
    /// What the idle consumer group's members polled of it (1: one of them).
    pub idle_group_got: u64,
}

fn ratios(f: impl Fn(usize) -> f64, n: usize) -> Option<PairStats> {
    pair_stats(&(0..n).map(f).collect::<Vec<_>>())
}

fn describe(p: Option<PairStats>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("median {}, worst {}", fmt_ratio(p.median), fmt_ratio(p.worst)))
}

impl IpcBench {
    /// The report's lines.
    pub fn table(&self) -> String {
        let mut out = format!(
            "ipc: rill across processes on one data directory (Sharing::Processes, Fsync::Never) under {}, \
             {} B payloads, {} messages per throughput run, {} interleaved rounds\n",
            self.root.display(),
            self.payload,
            self.messages,
            self.one_to_one.len()
        );
        let n = self.one_to_one.len();
        out += "\n1 -> 1, msgs/s (publisher process -> push subscriber process; one process: a publisher thread and \
                a push subscriber, Sharing::Exclusive; socket: a Unix stream read with BufReader + read_exact, \
                written with write_all through a BufWriter (buffered) or straight into the socket (a write per \
                message))\n| round | across processes | one process | socket, buffered | socket, a write per \
                message | across / one process | across / buffered | across / write per message |\n\
                |---|---|---|---|---|---|---|---|\n";
        for (i, o) in self.one_to_one.iter().enumerate() {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                i + 1,
                fmt_count(o.across),
                fmt_count(o.solo),
                fmt_count(o.socket_buffered),
                fmt_count(o.socket_each),
                fmt_ratio(o.across / o.solo),
                fmt_ratio(o.across / o.socket_buffered),
                fmt_ratio(o.across / o.socket_each)
            );
        }
        let col = |f: fn(&OneToOne) -> f64| fmt_count(median(&self.one_to_one.iter().map(f).collect::<Vec<_>>()));
        out += &format!(
            "| median | {} | {} | {} | {} | | | |\n",
            col(|o| o.across),
            col(|o| o.solo),
            col(|o| o.socket_buffered),
            col(|o| o.socket_each)
        );
        let o = &self.one_to_one;
        out += &format!(
            "across / one process: {} (goal >= 0.5x); across / socket (goal >= 10x): buffered {}; a write per \
             message {}\n",
            describe(ratios(|i| o[i].across / o[i].solo, n)),
            describe(ratios(|i| o[i].across / o[i].socket_buffered, n)),
            describe(ratios(|i| o[i].across / o[i].socket_each, n))
        );
        if o.iter().all(|r| r.iceoryx2.is_some()) {
            let ice: Vec<f64> = o.iter().map(|r| r.iceoryx2.unwrap_or(f64::NAN)).collect();
            let each: Vec<String> = ice.iter().map(|r| fmt_count(*r)).collect();
            out += &format!(
                "iceoryx2 publish-subscribe (polling subscriber), msgs/s per round: {}; across / iceoryx2: {}\n",
                each.join(", "),
                describe(ratios(|i| o[i].across / ice[i], n))
            );
        } else if let Some(e) = o.iter().find_map(|r| r.iceoryx2_failed.as_ref()) {
            out += &format!("iceoryx2: FAILED ({e})\n");
        } else {
            out += "iceoryx2: not in this build (rill-bench --features iceoryx2 adds it)\n";
        }

        out += &format!(
            "\n{MANY} -> 1, msgs/s in all ({MANY} publisher processes -> 1 subscriber process; one process: {MANY} \
             publisher threads and a subscriber)\n| round | across processes | one process | across / one process |\n\
             |---|---|---|---|\n"
        );
        for (i, (a, s)) in self.many_to_one.iter().enumerate() {
            out += &format!("| {} | {} | {} | {} |\n", i + 1, fmt_count(*a), fmt_count(*s), fmt_ratio(a / s));
        }
        out += &format!(
            "across / one process: {} (goal >= 0.5x)\n",
            describe(ratios(|i| self.many_to_one[i].0 / self.many_to_one[i].1, self.many_to_one.len()))
        );

        out += &format!(
            "\none-way latency across processes at {} msgs/s (CLOCK_MONOTONIC stamp in the payload, dedicated \
             spinning subscriber) against a shared-memory spin ping-pong round trip between two processes, \
             paced at the same rate\n\
             | round | rill p50 | rill p99 | round trip p50 | round trip p99 | rill p50 / round trip p50 |\n\
             |---|---|---|---|---|---|\n",
            fmt_count(LATENCY_RATE as f64)
        );
        for (i, (l50, l99, p50, p99)) in self.latency.iter().enumerate() {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                i + 1,
                fmt_ns(*l50),
                fmt_ns(*l99),
                fmt_ns(*p50),
                fmt_ns(*p99),
                fmt_ratio(*l50 as f64 / (*p50).max(1) as f64)
            );
        }
        // Lower is better here, so the worst round is the largest ratio.
        let lat: Vec<f64> = self.latency.iter().map(|r| r.0 as f64 / r.2.max(1) as f64).collect();
        let worst = lat.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out += &format!(
            "rill p50 / round trip p50: median {}, worst {} (goal <= 2x)\n",
            fmt_ratio(median(&lat)),
            fmt_ratio(worst)
        );

        let total: u64 = self.idle_cpu_ns.iter().sum();
        let each: Vec<String> = self.idle_cpu_ns.iter().map(|ns| fmt_ns(*ns)).collect();
        out += &format!(
            "\nidle: {IDLE_SUBSCRIPTIONS} caught-up subscriptions, {IDLE_SHARED_MEMBERS} members of a shared subscription \
             and {IDLE_GROUP_MEMBERS} members of a consumer group across {IDLE_PROCESSES} processes: {} of CPU in {:.1} s \
             (getrusage of each process, less its measuring thread: {}; goal < 1 ms; the measuring threads' own \
             wake-ups at the window's end: {}), and {} in the {:.1} s settle before it (the setup's delayed work); \
             the message published after the window woke {} of the subscriptions, {} shared member and {} group \
             member\n",
            fmt_ns(total),
            self.idle_window.as_secs_f64(),
            each.join(", "),
            fmt_ns(self.idle_measuring_ns.iter().sum()),
            fmt_ns(self.idle_settle_ns.iter().sum()),
            IDLE_SETTLE.as_secs_f64(),
            self.idle_woken,
            self.idle_shared_got,
            self.idle_group_got
        );
        out
    }
}
