//! The timer jobs a topic may have: its age limit ([`Expire`], on a timer
//! started with the first topic that has one) and its compaction
//! ([`Compact`], on the compactor's thread). Each comes back on its timer
//! until its topic is deleted or the broker closes. `topics.rs` starts them.

use std::time::Duration;

use crate::broker::dispatch::{Job, Timer};
use crate::broker::topic::Topic;
use crate::sync::Arc;

/// A timer job: applies a topic's age limit (`retention_ms`) to its
/// partitions, then comes back after `every`, until the topic is deleted or
/// the broker closes (which stops the timer and drops the job).
pub(crate) struct Expire {
    pub(super) topic: Arc<Topic>,
    pub(super) every: Duration,
    pub(super) timer: Arc<Timer<Expire>>,
}

impl Job for Expire {
    fn run(self) {
        if self.topic.is_deleted() {
            return;
        }
        for p in self.topic.partitions.iter() {
            // A segment that cannot be mapped now (out of memory) leaves the
            // partition as it is; the next round tries again.
            let _ = p.log.expire();
        }
        // A trimmed segment's file waits under a spare name until its last
        // handle goes: the retired directories' handles go only when the
        // epoch collects them, at a pin now and then (one in 128) or a
        // flush. A partition nobody publishes to or reads makes no pins, so
        // this timer, the only thread that trims it then, asks for a
        // collection itself: a few ticks after a trim the spares beyond the
        // pool's are deleted, rather than minutes later.
        crate::sync::epoch::pin().flush();
        let (timer, every) = (self.timer.clone(), self.every);
        timer.schedule(every, self);
    }
}

/// A compactor job: looks at a compacted topic's partitions and runs a
/// compaction pass on each that has work (`Log::compact`: segments sealed
/// since its last pass, or a kept record that has become removable), then
/// comes back after `COMPACTION_CHECK`, until the topic is deleted or the
/// broker closes. All compacted topics share the compactor's one thread, so
/// publishers never run a pass and never wait for one.
pub(crate) struct Compact {
    pub(super) topic: Arc<Topic>,
    pub(super) timer: Arc<Timer<Compact>>,
}

/// How often the compactor looks at a compacted topic. A look with nothing
/// to do loads each partition's directory and compares two numbers.
pub(super) const COMPACTION_CHECK: Duration = Duration::from_millis(20);

impl Job for Compact {
    fn run(self) {
        if self.topic.is_deleted() {
            return;
        }
        let policy = self.topic.compaction.expect("only compacted topics get a compactor job");
        for p in self.topic.partitions.iter() {
            if let Err(e) = p.log.compact(&policy, crate::clock::now_ns()) {
                // Out of memory for a rebuilt segment: nothing was replaced;
                // the next look tries again.
                log::warn!("rill: compaction of topic {:?} partition {} failed: {e}", &*self.topic.name, p.index);
            }
        }
        let timer = self.timer.clone();
        timer.schedule(COMPACTION_CHECK, self);
    }
}

/// How often a topic's age limit is applied: a quarter of the limit (so a
/// message outlives it by at most a quarter more plus a segment's worth),
/// at least every millisecond and at most every second.
pub(super) fn expiry_period(retention_ms: u64) -> Duration {
    Duration::from_millis((retention_ms / 4).clamp(1, 1000))
}
