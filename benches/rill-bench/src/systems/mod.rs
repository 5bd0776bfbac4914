//! The systems under test: rill and its peers, each driven the way its own
//! documentation recommends (see `PEERS.md`), carrying what a user of that
//! peer would send ([`PeerPayload::Auto`]), with the same producer loop and the
//! same per-message work (`measure::Tally`, chosen by `--work`).
//!
//! This is the one peer harness: `rill-bench` and the criterion benches
//! (`benches/peers.rs`) both run systems through [`run`].

mod bare_log;
#[cfg(feature = "peers")]
mod bus_peer;
pub(crate) mod channels;
#[cfg(feature = "peers")]
mod disruptor_peer;
mod env;
mod payload;
pub mod rill_sys;
#[cfg(feature = "peers")]
mod tokio_peer;

use std::sync::Arc;

use serde::Serialize;

use crate::measure::{Outcome, Shape};

pub use env::{Env, RillOverflow};
pub use payload::{Inline, MAX_ARRAY_PAYLOAD, Payload, PeerPayload};

/// A system the tool can drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// rill: a broker topic, push subscriptions or pull consumers.
    #[value(skip)]
    Rill,
    /// crossbeam-channel: one bounded channel per subscriber, each message cloned.
    Crossbeam,
    /// flume: one bounded channel per subscriber, each message cloned.
    Flume,
    /// tokio::sync::broadcast, receivers as async tasks on a multi-thread runtime.
    Tokio,
    /// tokio::sync::broadcast, receivers on OS threads with `blocking_recv`.
    TokioBlocking,
    /// bus: single-producer broadcast ring, a reader thread per subscriber.
    Bus,
    /// disruptor (v4): ring buffer, a busy-spinning processor thread per subscriber.
    Disruptor,
    /// bare-log: a featureless Aeron-style frame log written in this tool, the ceiling.
    BareLog,
}

impl System {
    /// Every peer, in report order.
    pub const PEERS: [System; 7] = [
        System::Crossbeam,
        System::Flume,
        System::Tokio,
        System::TokioBlocking,
        System::Bus,
        System::Disruptor,
        System::BareLog,
    ];

    /// Whether this build can run it: flume, tokio, bus and disruptor come
    /// with the `peers` feature; rill, crossbeam and bare-log always.
    pub fn built(self) -> bool {
        cfg!(feature = "peers") || matches!(self, System::Rill | System::Crossbeam | System::BareLog)
    }

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            System::Rill => "rill",
            System::Crossbeam => "crossbeam",
            System::Flume => "flume",
            System::Tokio => "tokio",
            System::TokioBlocking => "tokio-blocking",
            System::Bus => "bus",
            System::Disruptor => "disruptor",
            System::BareLog => "bare-log",
        }
    }
}

/// Runs `shape` once on `system`.
pub fn run(system: System, shape: &Shape, env: &Env) -> Outcome {
    match (system, env.peer_payload.resolve(shape)) {
        (System::Rill, _) => rill_sys::run(shape, env),
        #[cfg(feature = "peers")]
        (System::Disruptor, _) => disruptor_peer::run(shape, env),
        (System::BareLog, _) => bare_log::run(shape, env),
        (s, PeerPayload::Vec) => run_peer::<Vec<u8>>(s, shape, env),
        (s, PeerPayload::Arc) => run_peer::<Arc<[u8]>>(s, shape, env),
        (s, _) => match shape.payload {
            64 => run_peer::<[u8; 64]>(s, shape, env),
            256 => run_peer::<[u8; 256]>(s, shape, env),
            1024 => run_peer::<[u8; 1024]>(s, shape, env),
            MAX_ARRAY_PAYLOAD => run_peer::<[u8; MAX_ARRAY_PAYLOAD]>(s, shape, env),
            0..=64 => run_peer::<Inline<64>>(s, shape, env),
            65..=256 => run_peer::<Inline<256>>(s, shape, env),
            257..=1024 => run_peer::<Inline<1024>>(s, shape, env),
            // main() refuses larger payloads with --peer-payload array.
            _ => run_peer::<Inline<MAX_ARRAY_PAYLOAD>>(s, shape, env),
        },
    }
}

fn run_peer<P: Payload>(system: System, shape: &Shape, env: &Env) -> Outcome {
    match system {
        System::Crossbeam => channels::run_crossbeam::<P>(shape, env),
        #[cfg(feature = "peers")]
        System::Flume => channels::run_flume::<P>(shape, env),
        #[cfg(feature = "peers")]
        System::Tokio => tokio_peer::run::<P>(shape, env, false),
        #[cfg(feature = "peers")]
        System::TokioBlocking => tokio_peer::run::<P>(shape, env, true),
        #[cfg(feature = "peers")]
        System::Bus => bus_peer::run::<P>(shape, env),
        #[cfg(feature = "peers")]
        System::Rill | System::Disruptor | System::BareLog => unreachable!("dispatched above"),
        // main() runs only what System::built() allows.
        #[cfg(not(feature = "peers"))]
        other => unreachable!("{} is not in this build of rill-bench (--features peers)", other.name()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::measure::{Amount, Delivery, Status, SubMode, Work};

    fn shape(producers: usize, subscribers: usize, payload: usize, amount: Amount, capacity: usize) -> Shape {
        Shape {
            producers,
            subscribers,
            mode: SubMode::Pool,
            partitions: 1,
            payload,
            batch: 1,
            poll_batch: 64,
            amount,
            rate: None,
            capacity,
            delivery: Delivery::AtLeastOnce,
            sample_every: 8,
            idle_spin_us: 0,
            work: Work::Touch,
            handler: crate::measure::HandlerCost::Free,
            persist: None,
        }
    }

    fn env(workers: usize, peer_payload: PeerPayload) -> Env {
        Env {
            workers: Some(workers),
            retention_mib: 1,
            warmup: false,
            overflow: RillOverflow::Block,
            batch_handler: false,
            peer_payload,
            timeout: Duration::from_secs(60),
            state_probes: false,
        }
    }

    #[test]
    fn inline_payloads_keep_exactly_their_bytes() {
        let short = Inline::<64>::copy_from(&[1, 2, 3]);
        assert_eq!(short.bytes(), &[1, 2, 3]);
        let full: Vec<u8> = (0..64).collect();
        assert_eq!(Inline::<64>::copy_from(&full).bytes(), &full[..]);
        assert_eq!(<[u8; 64]>::copy_from(&full).bytes(), &full[..]);
        assert!(Inline::<256>::copy_from(&[]).bytes().is_empty());
    }

    #[test]
    fn auto_payloads_are_what_a_user_of_the_peer_sends() {
        let one = shape(1, 1, 64, Amount::Messages(1), 8);
        let many = shape(4, 1, 64, Amount::Messages(1), 8);
        let fan = shape(1, 8, 64, Amount::Messages(1), 8);
        assert_eq!(PeerPayload::Auto.type_name(&one), "[u8; 64]");
        assert_eq!(PeerPayload::Auto.type_name(&many), "[u8; 64]");
        assert_eq!(PeerPayload::Auto.type_name(&fan), "Arc<[u8]>");
        assert_eq!(PeerPayload::Vec.type_name(&one), "Vec<u8>");
    }

    #[test]
    fn rill_on_a_data_directory_delivers_every_message_under_each_policy() {
        use crate::measure::Persist;
        let memory = run(System::Rill, &shape(2, 2, 100, Amount::Messages(500), 8), &env(2, PeerPayload::Auto));
        for p in [Persist::Never, Persist::Interval, Persist::Always] {
            let shape = Shape { persist: Some(p), ..shape(2, 2, 100, Amount::Messages(500), 8) };
            let out = run(System::Rill, &shape, &env(2, PeerPayload::Auto));
            assert_eq!(out.status, Status::Ok, "{p:?}");
            assert_eq!((out.published, out.delivered, out.missed), (1000, 2000, 0), "{p:?}");
            assert_eq!(out.payload_sum, memory.payload_sum, "{p:?}");
        }
        assert!(
            crate::scenarios::unsupported(
                System::Crossbeam,
                &Shape { persist: Some(Persist::Always), ..shape(1, 1, 8, Amount::Messages(1), 8) }
            )
            .is_some()
        );
    }

    #[test]
    fn every_system_hands_over_the_same_bytes() {
        // Two producers in batches of 4, three subscribers, a ring of 8 that
        // wraps hundreds of times, and payloads that are not a multiple of 8:
        // every system must account for every message, and every subscriber
        // must read exactly the bytes published (the sums would differ on a
        // torn, stale or skipped payload).
        let shape = Shape { batch: 4, ..shape(2, 3, 100, Amount::Messages(3000), 8) };
        let mut sums = Vec::new();
        for system in
            [System::Rill, System::Crossbeam, System::Flume, System::BareLog].into_iter().filter(|s| s.built())
        {
            let out = run(system, &shape, &env(2, PeerPayload::Auto));
            assert_eq!(out.status, Status::Ok, "{system:?}");
            assert_eq!((out.published, out.delivered, out.missed), (6000, 18000, 0), "{system:?}");
            sums.push((system, out.payload_sum));
        }
        assert_ne!(sums[0].1, 0);
        assert!(sums.iter().all(|&(_, s)| s == sums[0].1), "payload sums differ: {sums:?}");
    }

    #[test]
    fn every_peer_payload_type_delivers_every_message() {
        for (peer_payload, payload, subscribers) in [
            (PeerPayload::Vec, 64, 2),
            (PeerPayload::Arc, 64, 2),
            (PeerPayload::Array, 64, 2),
            (PeerPayload::Array, 200, 2),
            (PeerPayload::Auto, 64, 1),
            (PeerPayload::Auto, 64, 2),
        ] {
            let shape = shape(1, subscribers, payload, Amount::Messages(2000), 64);
            for system in [System::Crossbeam, System::Bus, System::TokioBlocking].into_iter().filter(|s| s.built()) {
                let out = run(system, &shape, &env(1, peer_payload));
                let what = format!("{system:?} with {peer_payload:?} payloads of {payload} B");
                assert_eq!(out.status, Status::Ok, "{what}");
                assert_eq!(out.published, 2000, "{what}");
                assert_eq!(out.delivered + out.missed, 2000 * subscribers as u64, "{what}");
                if system != System::TokioBlocking {
                    assert_eq!(out.missed, 0, "{what}");
                }
            }
        }
    }

    #[test]
    fn minimal_work_ends_timed_runs_exactly_and_samples_latency() {
        // Duration mode with several producers: the subscribers never write
        // their counts per message, so each must learn the final count from the
        // last producer before its final message arrives, or the run would
        // time out (the cap here is 60 s, far beyond what a healthy run takes).
        for (producers, subscribers) in [(1, 1), (3, 1), (1, 3)] {
            let shape = Shape {
                work: Work::Minimal,
                handler: crate::measure::HandlerCost::Free,
                sample_every: 16,
                ..shape(producers, subscribers, 64, Amount::Seconds(0.03), 64)
            };
            for system in
                [System::Rill, System::Crossbeam, System::Bus, System::BareLog].into_iter().filter(|s| s.built())
            {
                if system == System::Bus && producers > 1 {
                    continue;
                }
                let out = run(system, &shape, &env(2, PeerPayload::Auto));
                let what = format!("{system:?}, {producers} -> {subscribers}");
                assert_eq!(out.status, Status::Ok, "{what}");
                assert!(out.published > 0, "{what}");
                assert_eq!(out.delivered, out.published * subscribers as u64, "{what}");
                assert_eq!(out.payload_sum, 0, "{what}: minimal work reads no payload");
                assert!(!out.latency.is_empty(), "{what}: latency is sampled");
                assert!(
                    out.latency.len() <= out.delivered / 16 + subscribers as u64,
                    "{what}: at most 1 in 16 sampled, got {} of {}",
                    out.latency.len(),
                    out.delivered
                );
            }
        }
    }

    #[test]
    fn a_consumer_group_delivers_every_message_once_over_its_members() {
        // The members split the partitions: the group is one receiver, and
        // its count and payload sum are those of one subscriber.
        for members in [1, 3] {
            let shape = Shape {
                mode: SubMode::Group,
                partitions: 4,
                handler: crate::measure::HandlerCost::SpinUs(1),
                ..shape(1, members, 64, Amount::Messages(3000), 64)
            };
            let out = run(System::Rill, &shape, &env(2, PeerPayload::Auto));
            assert_eq!(out.status, Status::Ok, "{members} members");
            assert_eq!((out.published, out.delivered, out.missed), (3000, 3000, 0), "{members} members");
            assert_eq!(out.subscribers, 1);
            let alone = run(
                System::Rill,
                &Shape { mode: SubMode::Pull, subscribers: 1, ..shape.clone() },
                &env(2, PeerPayload::Auto),
            );
            assert_eq!(out.payload_sum, alone.payload_sum, "the same bytes as one pull consumer");
        }
        assert!(
            crate::scenarios::unsupported(
                System::Crossbeam,
                &crate::scenarios::named(crate::scenarios::Named::Group4).shape
            )
            .is_some()
        );
    }
}
