//! Settings of a run that are not part of the workload's shape.

use std::time::Duration;

use serde::Serialize;

use super::payload::PeerPayload;

/// rill's behaviour when a subscriber falls `capacity` messages behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RillOverflow {
    /// `Overflow::Block` with `lag_limit = capacity`: publishers wait, like a
    /// bounded channel; nothing is lost.
    Block,
    /// rill's default: no lag limit, only retention bounds the lag; a
    /// subscriber that falls behind retention skips (counted as lost).
    Drop,
}

/// Settings that are not part of the workload's shape.
#[derive(Debug, Clone, Serialize)]
pub struct Env {
    /// rill worker pool size (`None`: one per core, rill's default); also the
    /// tokio runtime's worker count.
    pub workers: Option<usize>,
    /// rill retention per partition, MiB.
    pub retention_mib: u64,
    /// Fill rill's log past retention before each run, so segment memory is
    /// recycled (steady state) instead of faulted in during the measurement.
    pub warmup: bool,
    /// rill overflow policy.
    pub overflow: RillOverflow,
    /// rill push subscriptions use `subscribe_batch` (runs of up to 64
    /// messages per handler call) instead of `subscribe`.
    pub batch_handler: bool,
    /// Payload type of the peers.
    pub peer_payload: PeerPayload,
    /// Time cap of one run.
    pub timeout: Duration,
    /// Take a short cross-core ping-pong probe before and after every run of
    /// a pair, so each pair says which machine state its two runs saw (see
    /// `bench::MachineState`).
    pub state_probes: bool,
}

impl Default for Env {
    /// The tool's defaults, as `rill-bench` without options runs.
    fn default() -> Env {
        Env {
            workers: None,
            retention_mib: 64,
            warmup: true,
            overflow: RillOverflow::Block,
            batch_handler: false,
            peer_payload: PeerPayload::Auto,
            timeout: Duration::from_secs(10),
            state_probes: true,
        }
    }
}

impl Env {
    /// The worker count to use.
    pub fn workers(&self) -> usize {
        self.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
    }
}
