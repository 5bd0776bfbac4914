//! The cross-process wake of `doorbell.rs`, for `loom-tests/tests/doorbell.rs`:
//! a publish in another process against this process's doorbell
//! ([`WakeAcross`]), the doorbell that arms only while a listener may sleep,
//! with a subscription ([`LazyDoorbell`]) or a pull consumer
//! ([`LazyConsumer`]) for the listener, and the change counters of the
//! topic list and of the members ([`TopicChanges`], [`DisarmedTopicChanges`],
//! [`MemberChanges`]). Only built under `--cfg loom`.

use crate::log::{Log, LogConfig, Record};
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Condvar, Mutex};

use super::super::waiters::Waiters;

/// The cross-process wake of `doorbell.rs` on one partition, for
/// `loom-tests/tests/doorbell.rs`: a real log, the partition's interest
/// (raised: another broker listens) and the directory's bell, in memory
/// (loom has no file mapping; the futex is a mutex and a condition
/// variable, see `Bell`). The publisher's half is [`Cross::after_commit`],
/// as `Partition::notify` calls it; the doorbell's is [`Bell::round`], as
/// its thread runs it.
///
/// [`Cross::after_commit`]: super::super::doorbell::Cross
/// [`Bell::round`]: super::super::doorbell::Bell
pub struct WakeAcross {
    log: Log,
    cross: super::super::doorbell::Cross,
    bell: Arc<super::super::doorbell::Bell>,
    /// The doorbell's cursor, as `Partition::look` keeps one.
    cursor: Mutex<crate::log::Cursor>,
}

impl std::fmt::Debug for WakeAcross {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeAcross")
    }
}

impl WakeAcross {
    /// An empty partition another process listens to.
    pub fn new() -> WakeAcross {
        let bell = Arc::new(super::super::doorbell::Bell::in_memory());
        let cross = super::super::doorbell::Cross::in_memory(bell.clone());
        cross.set_listening(true);
        let config = LogConfig { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..LogConfig::default() };
        let log = Log::new(&config).expect("a log");
        let mut cursor = log.cursor_from_first();
        // Located now, before the model starts: a cursor locating its
        // segment pins, and a pin is a full fence in crossbeam's epoch (a
        // `SeqCst` read-modify-write), which inside the look would stand in
        // for X2 and hide it from the model. Once located, `has_next` reads
        // the slot alone, as the doorbell's looks after its first do.
        assert!(!cursor.has_next());
        WakeAcross { log, cross, bell, cursor: Mutex::new(cursor) }
    }

    /// A publisher in some process: appends a record, then its half of
    /// the wake.
    pub fn publish(&self) {
        self.log.append(&Record::new(b"x")).expect("room for one record");
        self.cross.after_commit();
    }

    /// The doorbell thread of the listening process: rounds until a look
    /// finds a record committed (sleeping between them as the real thread
    /// does).
    pub fn doorbell_until_a_record(&self) {
        while !self.bell.round(|| self.cursor.lock().has_next(), || None) {}
    }
}

impl Default for WakeAcross {
    fn default() -> Self {
        WakeAcross::new()
    }
}

/// The doorbell that arms only while a listener may sleep (`doorbell.rs`,
/// "Arming only while a listener may sleep"), for
/// `loom-tests/tests/doorbell.rs`: a real log another process publishes
/// to, a subscription's state word in this process, the directory's bell
/// and this process's [`Parking`]. The listener goes idle through
/// [`signal::go_idle_then`] (F4, its re-check, then the nudge); the
/// doorbell runs [`Bell::round_lazy`] (its disarm, X4, the states, then an
/// armed round or a disarmed sleep); the publisher commits and runs
/// [`Cross::after_commit`]. The record must reach the listener: its own
/// re-check finds it, or the doorbell's look wins its state.
///
/// [`Parking`]: super::super::doorbell::Parking
/// [`signal::go_idle_then`]: super::super::partition::signal
/// [`Bell::round_lazy`]: super::super::doorbell::Bell
/// [`Cross::after_commit`]: super::super::doorbell::Cross
pub struct LazyDoorbell {
    shared: LazyPartition,
    state: super::super::partition::state::State,
    /// The listener's cursor.
    reading: Mutex<crate::log::Cursor>,
    /// The record reached the listener.
    delivered: (Mutex<bool>, Condvar),
}

impl std::fmt::Debug for LazyDoorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LazyDoorbell")
    }
}

impl LazyDoorbell {
    /// An empty partition this process listens to, its subscription
    /// draining (`ACTIVE`) and about to find nothing more.
    pub fn new() -> LazyDoorbell {
        let (shared, reading) = LazyPartition::new();
        let state = super::super::partition::state::State::new();
        assert!(state.activate());
        LazyDoorbell { shared, state, reading: Mutex::new(reading), delivered: (Mutex::new(false), Condvar::new()) }
    }

    /// A publisher in another process: appends a record, then its half.
    pub fn publish(&self) {
        self.shared.publish();
    }

    fn deliver(&self) {
        let (lock, cv) = &self.delivered;
        *lock.lock() = true;
        cv.notify_all();
    }

    /// The subscription's drainer: goes idle; if its re-check finds the
    /// record it takes it and goes idle again.
    pub fn listener(&self) {
        loop {
            let idled = super::super::partition::signal::go_idle_then(
                &self.state,
                || self.reading.lock().has_next(),
                || self.shared.parking.listener_may_sleep(),
            );
            if idled != super::super::partition::signal::Idled::Resumed {
                return;
            }
            let mut reading = self.reading.lock();
            while reading.has_next() {
                let _ = reading.read();
            }
            drop(reading);
            self.deliver();
        }
    }

    /// This process's doorbell thread, until told to stop.
    pub fn doorbell(&self) {
        self.shared.doorbell(
            || self.state.reads_idle(),
            || {
                if self.state.activate() {
                    self.deliver();
                }
            },
        );
    }

    /// Waits until the record reached the listener, then stops the doorbell
    /// (as `Doorbell::stop` does).
    pub fn until_delivered_then_stop(&self) {
        let (lock, cv) = &self.delivered;
        let mut delivered = lock.lock();
        while !*delivered {
            delivered = cv.wait(delivered);
        }
        drop(delivered);
        self.shared.stop();
    }
}

impl Default for LazyDoorbell {
    fn default() -> Self {
        LazyDoorbell::new()
    }
}

/// What [`LazyDoorbell`] and [`LazyConsumer`] share: a real log another
/// process publishes to, the directory's bell, this process's
/// [`Parking`](super::super::doorbell::Parking), and its doorbell thread's
/// cursor and stop flag.
struct LazyPartition {
    log: Log,
    cross: super::super::doorbell::Cross,
    bell: Arc<super::super::doorbell::Bell>,
    parking: super::super::doorbell::Parking,
    /// The doorbell's cursor, as `Partition::look` keeps one.
    watched: Mutex<crate::log::Cursor>,
    stop: crate::sync::atomic::AtomicBool,
}

impl LazyPartition {
    /// An empty partition this process listens to, and the listener's
    /// cursor on it.
    fn new() -> (LazyPartition, crate::log::Cursor) {
        let bell = Arc::new(super::super::doorbell::Bell::in_memory());
        let cross = super::super::doorbell::Cross::in_memory(bell.clone());
        cross.set_listening(true);
        let config = LogConfig { segment_bytes: Some(crate::log::MIN_SEGMENT_BYTES), ..LogConfig::default() };
        let log = Log::new(&config).expect("a log");
        // Located before the model starts, as in `WakeAcross::new`.
        let mut watched = log.cursor_from_first();
        assert!(!watched.has_next());
        let mut reading = log.cursor_from_first();
        assert!(!reading.has_next());
        let shared = LazyPartition {
            log,
            cross,
            bell,
            parking: super::super::doorbell::Parking::new(),
            watched: Mutex::new(watched),
            stop: crate::sync::atomic::AtomicBool::new(false),
        };
        (shared, reading)
    }

    /// A publisher in another process: appends a record, then its half.
    fn publish(&self) {
        self.log.append(&Record::new(b"x")).expect("room for one record");
        self.cross.after_commit();
    }

    /// The doorbell thread, until told to stop: rounds of
    /// [`Bell::round_lazy`](super::super::doorbell::Bell), `may_sleep` its
    /// question to the listener after X4, `signal` what its look does on
    /// finding the record (as `Partition::look` signals the listeners).
    fn doorbell(&self, may_sleep: impl Fn() -> bool, signal: impl Fn()) {
        // Acquire: pairs with the Release store in `stop`.
        while !self.stop.load(Ordering::Acquire) {
            super::super::doorbell::Bell::round_lazy(
                &self.bell,
                &self.parking,
                &may_sleep,
                |partitions| {
                    // Acquire: as above.
                    if self.stop.load(Ordering::Acquire) {
                        return true;
                    }
                    if !partitions {
                        return false;
                    }
                    let mut watched = self.watched.lock();
                    if !watched.has_next() {
                        return false;
                    }
                    while watched.has_next() {
                        let _ = watched.read();
                    }
                    signal();
                    true
                },
                || None,
            );
        }
    }

    /// Stops the doorbell (as `Doorbell::stop` does).
    fn stop(&self) {
        // Release: pairs with the Acquire loads in `doorbell`.
        self.stop.store(true, Ordering::Release);
        self.bell.ring_always();
    }
}

/// [`LazyDoorbell`] with a pull consumer for the listener: a consumer has
/// no state word, so the doorbell asks its `Waiters` whether a thread may
/// be waiting (`Waiters::may_sleep`, after X4), and the consumer, once
/// registered and past W2, nudges the disarmed doorbells
/// (`Waiters::wait_notified_until`'s `may_sleep`). Without X4 or W2 the
/// doorbell can read no waiter while the consumer reads no disarmed
/// doorbell: the doorbell sleeps disarmed, the publisher in the other
/// process finds the bell quiet, and the consumer waits for ever.
pub struct LazyConsumer {
    shared: LazyPartition,
    waiters: Waiters,
    /// The consumer's cursor.
    reading: Mutex<crate::log::Cursor>,
}

impl std::fmt::Debug for LazyConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LazyConsumer")
    }
}

impl LazyConsumer {
    /// An empty partition this process's consumer reads, nobody waiting.
    pub fn new() -> LazyConsumer {
        let (shared, reading) = LazyPartition::new();
        LazyConsumer { shared, waiters: Waiters::new(), reading: Mutex::new(reading) }
    }

    /// A publisher in another process: appends a record, then its half.
    pub fn publish(&self) {
        self.shared.publish();
    }

    /// The consumer's `poll`, past its spin: waits until the record is
    /// there to read.
    pub fn consumer_until_a_record(&self) {
        let ready = self
            .waiters
            .block_notified_until(|| self.reading.lock().has_next(), || self.shared.parking.listener_may_sleep());
        assert!(ready, "a wait without a deadline returns only once ready");
    }

    /// This process's doorbell thread, until told to stop: a record its
    /// look finds wakes the consumer (its `Listener::wake`, after the
    /// signal's fence).
    pub fn doorbell(&self) {
        self.shared.doorbell(|| self.waiters.may_sleep(), || self.waiters.notify());
    }

    /// Stops the doorbell (as `Doorbell::stop` does).
    pub fn stop(&self) {
        self.shared.stop();
    }
}

impl Default for LazyConsumer {
    fn default() -> Self {
        LazyConsumer::new()
    }
}

/// A topic change seen by a doorbell that sleeps disarmed (no listener of
/// its process may sleep): [`Bell::round_lazy`] with no listener, against
/// [`Bell::topics_changed`]; its load before the sleep (X5), the fence
/// after that load (X4) and the ring's X3 must carry the change.
///
/// [`Bell::round_lazy`]: super::super::doorbell::Bell
/// [`Bell::topics_changed`]: super::super::doorbell::Bell
pub struct DisarmedTopicChanges {
    bell: Arc<super::super::doorbell::Bell>,
    parking: super::super::doorbell::Parking,
}

impl std::fmt::Debug for DisarmedTopicChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DisarmedTopicChanges")
    }
}

impl DisarmedTopicChanges {
    /// A directory whose topic list has not changed yet.
    pub fn new() -> DisarmedTopicChanges {
        DisarmedTopicChanges {
            bell: Arc::new(super::super::doorbell::Bell::in_memory()),
            parking: super::super::doorbell::Parking::new(),
        }
    }

    /// A process changes the topic list: its half.
    pub fn change(&self) {
        self.bell.topics_changed();
    }

    /// Another process's doorbell, with no listener that may sleep: rounds
    /// until a look finds the counter moved.
    pub fn doorbell_until_a_change(&self) {
        while !super::super::doorbell::Bell::round_lazy(
            &self.bell,
            &self.parking,
            || false,
            |_| self.bell.topic_changes() != 0,
            || None,
        ) {}
    }
}

impl Default for DisarmedTopicChanges {
    fn default() -> Self {
        DisarmedTopicChanges::new()
    }
}

/// The topic list's change counter of `doorbell.rs` ("Topics other
/// processes create or delete"), for `loom-tests/tests/doorbell.rs`: the
/// directory's bell, in memory. A process that created or deleted a topic
/// bumps the counter and rings ([`Bell::topics_changed`]); a doorbell
/// rounds ([`Bell::round`]) until a look finds the counter moved.
///
/// [`Bell::topics_changed`]: super::super::doorbell::Bell
/// [`Bell::round`]: super::super::doorbell::Bell
pub struct TopicChanges {
    bell: super::super::doorbell::Bell,
}

impl std::fmt::Debug for TopicChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicChanges")
    }
}

impl TopicChanges {
    /// A directory whose topic list has not changed yet.
    pub fn new() -> TopicChanges {
        TopicChanges { bell: super::super::doorbell::Bell::in_memory() }
    }

    /// A process changes the topic list: its half.
    pub fn change(&self) {
        self.bell.topics_changed();
    }

    /// Another process's doorbell thread: rounds (sleeping between them
    /// as the real thread does) until a look finds the counter moved from
    /// what it was when the model started.
    pub fn doorbell_until_a_change(&self) {
        while !self.bell.round(|| self.bell.topic_changes() != 0, || None) {}
    }
}

impl Default for TopicChanges {
    fn default() -> Self {
        TopicChanges::new()
    }
}

/// The members' change counter of `doorbell.rs` ("Members of groups and
/// shared subscriptions"), for `loom-tests/tests/doorbell.rs`: the
/// directory's bell, in memory, and a stand-in for a member folder (a
/// file a joiner makes before it announces). A process whose member
/// joined makes its file and then announces ([`Bell::members_changed`]);
/// another process's doorbell rounds ([`Bell::round`]) until a look finds
/// the counter moved, and then its member looks at the folder, which must
/// hold the joiner's file.
///
/// [`Bell::members_changed`]: super::super::doorbell::Bell
/// [`Bell::round`]: super::super::doorbell::Bell
pub struct MemberChanges {
    bell: super::super::doorbell::Bell,
    /// The joiner's member file: a Relaxed flag stands for it, so only
    /// the announcement's orderings carry it.
    joined: crate::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for MemberChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberChanges")
    }
}

impl MemberChanges {
    /// A folder with no member joined yet.
    pub fn new() -> MemberChanges {
        MemberChanges {
            bell: super::super::doorbell::Bell::in_memory(),
            joined: crate::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A member joins in one process: its file, then the announcement.
    pub fn join(&self) {
        // Relaxed: the announcement's Release bump publishes it.
        self.joined.store(true, Ordering::Relaxed);
        self.bell.members_changed();
    }

    /// Another process's doorbell thread: rounds until a look finds the
    /// counter moved; then its member's look, which returns whether it
    /// found the joiner's file.
    pub fn doorbell_until_a_change_then_look(&self) -> bool {
        while !self.bell.round(|| self.bell.member_changes() != 0, || None) {}
        // Relaxed: ordered after the bump by the counter's Acquire load.
        self.joined.load(Ordering::Relaxed)
    }
}

impl Default for MemberChanges {
    fn default() -> Self {
        MemberChanges::new()
    }
}
