//! The machinery behind `rill-bench`, as a library so that the criterion
//! benches (`benches/peers.rs`) drive rill and its peers through the very same
//! harnesses: one peer harness, used by both.
//!
//! * [`systems`]: rill and each peer, driven the way its own documentation
//!   recommends (see `PEERS.md`);
//! * [`plain`]: each peer in the plain loop a user would write, outside the
//!   harness, for the self-check;
//! * [`measure`]: the shape of a run, the subscriber's per-message work
//!   ([`measure::Work`]), the producer loop and the run clock;
//! * [`bench`](mod@bench), [`scenarios`], [`stats`], [`report`], [`plot`], [`probe`]:
//!   interleaved pairs, named workloads, ratios, output and the machine probe;
//! * [`scale`]: `--scenario scale`, costs against the number of topics, of
//!   subscriptions on one topic and of topics under one wildcard;
//! * [`recovery`]: `--recovery-mib`, a durable partition's recovery time
//!   against reading its files from the page cache;
//! * [`fresh`]: `--scenario fresh`, the first fill of a new topic against
//!   a warm one, in memory and durable, with the publishers' page faults;
//! * [`ipc`]: `--scenario ipc`, rill across processes on one data
//!   directory (`Sharing::Processes`) against rill in one process, a Unix
//!   socket stream and a shared-memory ping-pong (issue 39);
//! * [`priority`]: `--priority`, a priority-7 subscription's delivery
//!   latency on an overloaded pool against the pool idle (issue 42);
//! * [`compaction`]: `--compaction`, publishing into a compacted topic
//!   against a plain one, a compaction pass against a copy of as many
//!   bytes, and a publisher's rate beside a pass (issue 41);
//! * [`publish_cost`]: the publisher's own ns per call, with no subscriber
//!   and with 8 that keep up, beside crossbeam-channel's `send`, and the
//!   machine's floors under a publish (clock read, `lock xadd`, epoch pin,
//!   a minimal log append with and without a stamp, and pinned into a
//!   region of rill's default retention);
//! * `bridge` (the `nats` feature): the `bridge` scenario, rill through
//!   NATS JetStream against a plain async-nats pair.

pub mod bench;
#[cfg(feature = "nats")]
pub mod bridge;
pub mod compaction;
pub mod dedupe;
pub mod fresh;
pub mod ipc;
pub mod measure;
pub mod plain;
pub mod plot;
pub mod priority;
pub mod probe;
pub mod publish_cost;
pub mod recovery;
pub mod report;
pub mod scale;
pub mod scenarios;
pub mod schema_cost;
pub mod stats;
pub mod systems;
