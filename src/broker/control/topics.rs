//! Creating and deleting topics: the topic map's changes (see "The topic
//! map" in `mod.rs`), their listing in the data directory, and attaching
//! (or letting go of) the subscriptions and consumers their names match.

use super::data_dir::wait_offsets;
use super::named::wait_all;
use super::timers::{COMPACTION_CHECK, Compact, Expire, expiry_period};
use super::{BrokerInner, Control, entry, saved_positions, topic_of};
use crate::broker::consumer::ConsumerCore;
use crate::broker::dispatch::Timer;
use crate::broker::doorbell::TopicsWatch;
use crate::broker::names;
use crate::broker::schema::{self, OnInvalid, Schema};
use crate::broker::store::{NameHold, Ticket, TopicMeta};
use crate::broker::subscription::{SubCore, attach, close};
use crate::broker::topic::{Opening, Partition, Topic, TopicOptions};
use crate::error::{Error, Result};
use crate::log::{Fsync, Log, LogConfig, MIN_SEGMENT_BYTES, Sharing};
use crate::sync::Arc;

/// The timers a topic needs: the age limit's, with its period, and the
/// compactor's (see [`BrokerInner::timers_for`]).
type TopicTimers = (Option<(Arc<Timer<Expire>>, std::time::Duration)>, Option<Arc<Timer<Compact>>>);

impl BrokerInner {
    #[inline]
    pub(crate) fn topic_for_publish(&self, name: &str) -> Result<Arc<Topic>> {
        match self.topic_or_listed(name) {
            Err(Error::NoSuchTopic(_))
                if self.config.auto_create_topics && !name.starts_with(names::RESERVED_PREFIX) =>
            {
                let options = self.config.default_topic.clone();
                match self.create_topic(name, &options) {
                    Ok(t) => Ok(t),
                    // Another thread created it first.
                    Err(Error::TopicExists(_)) => self.topic(name),
                    Err(e) => Err(e),
                }
            }
            other => other,
        }
    }

    /// The topic `name`; on a miss in `Sharing::Processes` mode, the
    /// directory's list is read first, and a topic another process listed
    /// is joined (its doorbell may not have caught up with the change yet;
    /// see "Topics other processes create or delete" in `doorbell.rs`).
    /// A hit costs what [`BrokerInner::topic`] does.
    #[inline]
    pub(crate) fn topic_or_listed(&self, name: &str) -> Result<Arc<Topic>> {
        match self.topic(name) {
            Err(Error::NoSuchTopic(_)) if self.doorbell.is_some() => self.join_listed(name),
            other => other,
        }
    }

    #[cold]
    fn join_listed(&self, name: &str) -> Result<Arc<Topic>> {
        self.sync_topics_now()?;
        self.topic(name)
    }

    /// Brings this broker's topics in line with the directory's list
    /// (`Sharing::Processes`; nothing otherwise): joins every topic listed
    /// that it does not have, attaching the subscriptions whose patterns
    /// match it as a creation here does. Called by the doorbell thread when
    /// the list's change counter moved, and on a miss by name.
    pub(crate) fn sync_topics_now(&self) -> Result<()> {
        let Some(store) = self.store().filter(|s| s.sharing() == Sharing::Processes) else { return Ok(()) };
        // The control lock first, then the list's (the order of
        // `create_topic` and `delete_topic`): a topic this process creates
        // or deletes meanwhile is in the map and the list, or in neither.
        let mut control = self.control.lock();
        self.check_open()?;
        // The schemas the follows below replace, waited on once the locks
        // are let go (see `schema::Retired::wait`).
        let mut retired = Vec::new();
        let (gone, dropped) = store.with_topic_list(|list| {
            // Gone: a topic this broker has that the list no longer names,
            // or names in another directory (deleted, then created again).
            let gone: Vec<Arc<Topic>> = self
                .topics
                .values()
                .iter()
                .map(topic_of)
                .filter(|t| {
                    let opened = store.opened_dir(&t.name);
                    !list.iter().any(|m| *m.name == *t.name && Some(m.dir) == opened)
                })
                .cloned()
                .collect();
            let mut dropped = Vec::with_capacity(gone.len());
            for topic in &gone {
                store.forget_opened(&topic.name);
                self.unmap_topic(topic);
                dropped.push(self.let_go_locked(&mut control, topic));
            }
            // The schemas of the topics it keeps: one another process set,
            // replaced or removed is followed here (see "Several processes"
            // in `schema.rs`). Before the joins, which read their own.
            for meta in list {
                let Some(topic) = self.topics.get(meta.name.as_str()).map(|t| topic_of(&t).clone()) else { continue };
                if store.opened_dir(&meta.name) != Some(meta.dir) {
                    continue;
                }
                match topic.schema.follow(&store.topic_files(meta.dir)) {
                    Ok(old) => retired.extend(old),
                    // Left as it was; the next change rereads.
                    Err(e) => {
                        ::log::warn!(target: "rill::broker", "could not reread the schema of topic {:?}: {e}", meta.name)
                    }
                }
            }
            for meta in list.iter().filter(|m| !self.topics.contains_key(m.name.as_str())) {
                if let Err(e) = self.create_locked(&control, &meta.name, &meta.options, Some(meta)) {
                    // Its files may have gone with a deletion in another
                    // process; the next change rereads.
                    ::log::warn!(target: "rill::broker", "could not join topic {:?}, listed by another process: {e}", meta.name);
                }
            }
            Ok((gone, dropped))
        })?;
        drop(control);
        retired.into_iter().for_each(schema::Retired::wait);
        if gone.is_empty() {
            return Ok(());
        }
        let placeholder = self.placeholder()?;
        for (topic, dropped) in gone.iter().zip(dropped) {
            // Its files are the deleter's to remove (see "Topics other
            // processes create or delete" in `doorbell.rs`).
            self.let_go(&topic.name, topic, dropped, &placeholder);
        }
        Ok(())
    }

    /// Sets (or replaces) `name`'s schema (see
    /// [`Broker::set_schema`](crate::Broker::set_schema)).
    pub(crate) fn set_schema(&self, name: &str, schema: Schema, on_invalid: OnInvalid) -> Result<u64> {
        if on_invalid == OnInvalid::DeadLetter {
            names::validate_schema_dead_letter(name)?;
        }
        let mut schema = Some(schema);
        let (version, old) = self.change_schema(name, |topic, files, _| {
            topic.schema.set(schema.take().expect("changed once"), on_invalid, files)
        })?;
        // With every lock let go: a validator in flight may be changing
        // another topic's schema (see `schema::Retired::wait`).
        old.wait();
        Ok(version)
    }

    /// Removes `name`'s schema (see
    /// [`Broker::remove_schema`](crate::Broker::remove_schema)).
    pub(crate) fn remove_schema(&self, name: &str) -> Result<()> {
        // Waited on with every lock let go, as in `set_schema`.
        self.change_schema(name, |topic, files, shared| topic.schema.remove(files, shared))?.wait();
        Ok(())
    }

    /// Runs `change` on the topic `name` (with its schema files, if it is
    /// in the data directory, and whether that is shared by processes).
    /// In `Sharing::Processes` mode, under `topics.lock`, on the topic the
    /// list names (this broker's copy of one deleted and created again is
    /// brought up to date first), and every other broker of the directory
    /// is told, as of a topic change (see "Several processes" in
    /// `schema.rs`).
    fn change_schema<T>(
        &self,
        name: &str,
        mut change: impl FnMut(&Topic, Option<&dyn schema::Files>, bool) -> Result<T>,
    ) -> Result<T> {
        self.check_open()?;
        let Some(store) = self.store() else { return change(&*self.topic_or_listed(name)?, None, false) };
        let Some(bell) = self.doorbell.as_ref().map(|d| d.bell()) else {
            let topic = self.topic_or_listed(name)?;
            return store.with_listed_dir(&topic.name, |dir| {
                let files = dir.map(|dir| store.topic_files(dir));
                change(&topic, files.as_ref().map(|f| f as &dyn schema::Files), false)
            });
        };
        // Another process may delete and create the topic again between
        // this broker's look at it and `topics.lock`: then it catches up and
        // tries again, a few times (each a change by another process).
        for _ in 0..8 {
            let topic = self.topic_or_listed(name)?;
            let changed = store.with_topic_list(|list| {
                let Some(meta) = list.iter().find(|m| *m.name == *name) else {
                    return Err(Error::NoSuchTopic(name.to_owned()));
                };
                if store.opened_dir(name) != Some(meta.dir) {
                    return Ok(None);
                }
                let out = change(&topic, Some(&store.topic_files(meta.dir)), true)?;
                // Written; still under `topics.lock`, as a topic change is.
                bell.topics_changed();
                Ok(Some(out))
            })?;
            match changed {
                Some(out) => return Ok(out),
                None => self.sync_topics_now()?,
            }
        }
        Err(Error::Busy(format!("topic {name:?} is being deleted and created again by other processes")))
    }

    /// Creates a topic (reserved names allowed: the caller validated the name
    /// for users) and attaches every subscription whose pattern matches it.
    /// `TopicExists` if this call did not create it: this broker has it, or
    /// (`Sharing::Processes`) another process listed it first, which this
    /// broker then joins, with the options it was made with, before it
    /// says so (the topic is usable when the error returns), as a create
    /// that loses a race in one broker finds the winner's topic.
    pub(crate) fn create_topic(&self, name: &str, options: &TopicOptions) -> Result<Arc<Topic>> {
        names::validate_topic(name)?;
        let control = self.control.lock();
        self.check_open()?;
        self.create_locked(&control, name, options, None)
    }

    /// [`BrokerInner::create_topic`] under the control lock. `listed`: the
    /// directory's entry of a topic another process listed, joined without
    /// rereading the list (the caller holds its lock; `Sharing::Processes`),
    /// and `Ok` once joined; without it, a topic found listed is joined
    /// too, and is `TopicExists`.
    fn create_locked(
        &self,
        control: &Control,
        name: &str,
        options: &TopicOptions,
        listed: Option<&TopicMeta>,
    ) -> Result<Arc<Topic>> {
        if self.topics.contains_key(name) {
            return Err(Error::TopicExists(name.to_owned()));
        }
        // The timers first: failing to start one creates nothing.
        let mut timers = self.timers_for(options)?;
        let (fsync, repair) = (self.config.fsync, self.config.repair);
        // The options of a topic another process made, joined while this
        // call meant to create it: its own, not this caller's.
        let mut found: Option<TopicOptions> = None;
        let topic = Arc::new(match self.store() {
            None => Topic::new(name, options)?,
            Some(store) if store.sharing() == Sharing::Processes => {
                let bell = self.doorbell.as_ref().map(|d| d.bell());
                // Listed by another process: joined, with the options it was
                // made with (see "Several processes").
                let join = |meta: &TopicMeta| {
                    let dir = |p| store.partition_dir(meta.dir, p);
                    let topic = Topic::open(name, &meta.options, &dir, fsync, repair, Opening::Join, bell)?;
                    // With the schema set on it (the caller holds
                    // `topics.lock`: no process changes it meanwhile).
                    topic.schema.restore(&store.topic_files(meta.dir), false)?;
                    store.note_opened(name, meta.dir);
                    Ok(topic)
                };
                match listed {
                    Some(meta) => join(meta)?,
                    None => store.with_topic_list(|list| match list.iter().find(|t| t.name == name) {
                        Some(meta) => {
                            found = Some(meta.options.clone());
                            join(meta)
                        }
                        None => {
                            let topic = store.add_topic(name, options, |dir| {
                                Topic::open(name, options, dir, fsync, repair, Opening::First, bell)
                            })?;
                            // Under the list's lock, listed: every other
                            // broker on the directory rereads the list.
                            if let Some(bell) = bell {
                                bell.topics_changed();
                            }
                            Ok(topic)
                        }
                    })?,
                }
            }
            Some(store) => store
                .add_topic(name, options, |dir| Topic::open(name, options, dir, fsync, repair, Opening::Alone, None))?,
        });
        if let Some(theirs) = &found {
            timers = self.timers_for(theirs)?;
        }
        let (expiry, compactor) = timers;
        if let Some(doorbell) = &self.doorbell {
            Self::watch(doorbell, &topic);
        }
        if let Some((timer, every)) = expiry {
            timer.schedule(every, Expire { topic: topic.clone(), every, timer: timer.clone() });
        }
        if let Some(timer) = compactor {
            timer.schedule(COMPACTION_CHECK, Compact { topic: topic.clone(), timer: timer.clone() });
        }
        // Before any publisher can find it (see "Due" in `flusher.rs`).
        self.give_flush_due(&topic);
        // One slot written in place (see "The topic map" in `mod.rs`);
        // nobody else inserts: this holds the control lock, and the name
        // was absent above.
        if self.topics.insert(topic.name.clone(), entry(&topic)).is_err() {
            return Err(Error::TopicExists(name.to_owned()));
        }
        if let Some(poke) = &*self.flush_poke.lock() {
            // Its partitions' files are prepared and hooked now, not at the
            // next interval (see `prepare_ahead`).
            poke.poke();
        }
        for sub in control.patterns.matches(name) {
            // A new topic (here, or joined from another process's list) is read from its start: nothing published to it can
            // be missed, whatever the subscription's start position.
            let saved = saved_positions(control, &sub);
            for p in topic.partitions.iter() {
                let cursor = match saved.get(&(topic.name.clone(), p.index)) {
                    Some(&offset) => p.log.cursor_resuming(offset),
                    None => p.log.cursor_from_first(),
                };
                attach::attach_to(&sub, topic.name.clone(), p, cursor);
            }
            SubCore::poke(&sub);
        }
        if found.is_some() {
            // Joined, not created: the caller's options may not be the
            // ones the topic has (see `create_topic`).
            return Err(Error::TopicExists(name.to_owned()));
        }
        Ok(topic)
    }

    /// The age-limit timer with its period, and the compactor's timer, that
    /// a topic made with `options` needs (each started now if it is the
    /// first).
    fn timers_for(&self, options: &TopicOptions) -> Result<TopicTimers> {
        let expiry = match options.effective_retention_ms() {
            Some(ms) => Some((self.expiry_timer()?, expiry_period(ms))),
            None => None,
        };
        let compactor = if options.cleanup.compacts() { Some(self.compactor()?) } else { None };
        Ok((expiry, compactor))
    }

    /// The age-limit timer, started now if this is the first topic with one.
    /// Starts the age-limit and compaction jobs of the topics a data
    /// directory brought back (a topic created afterwards starts its own in
    /// `create_topic`).
    pub(crate) fn resume_expiry(&self) -> Result<()> {
        let Some(store) = self.store() else { return Ok(()) };
        for (name, options) in store.topic_options() {
            let topic = self.topics.get(name.as_str());
            let topic = topic.as_deref().map(topic_of);
            if let (Some(ms), Some(topic)) = (options.retention_ms.filter(|&ms| ms > 0), topic) {
                let timer = self.expiry_timer()?;
                let every = expiry_period(ms);
                timer.schedule(every, Expire { topic: topic.clone(), every, timer: timer.clone() });
            }
            // And the compactor's job of a compacted topic (`Topic::open`
            // gives one a policy only when the directory is not shared).
            if let Some(topic) = topic.filter(|t| t.compaction.is_some()) {
                let timer = self.compactor()?;
                timer.schedule(COMPACTION_CHECK, Compact { topic: topic.clone(), timer: timer.clone() });
            }
        }
        Ok(())
    }

    /// The compactor's thread, started now if this is the first compacted topic.
    pub(super) fn compactor(&self) -> Result<Arc<Timer<Compact>>> {
        let mut slot = self.compactor.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start_named("rill-compactor")?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    pub(super) fn expiry_timer(&self) -> Result<Arc<Timer<Expire>>> {
        let mut slot = self.expiry.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start()?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    /// The topic `name`, created with the default options if absent.
    /// The dead-letter topic `name`, created if absent with room for what
    /// a dead letter adds to a message of up to `source_max` bytes (`None`:
    /// the default limit; see "Room" in `dead_letter.rs`). One that exists
    /// keeps its own limits.
    pub(crate) fn dead_letter_topic_or_create(&self, name: &str, source_max: Option<usize>) -> Result<Arc<Topic>> {
        match self.topic_or_listed(name) {
            Err(Error::NoSuchTopic(_)) => {
                let options = crate::broker::dead_letter::topic_options(&self.config.default_topic, source_max);
                match self.create_topic(name, &options) {
                    // Another thread created it first.
                    Err(Error::TopicExists(_)) => self.topic(name),
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Removes `topic` from the topic map (if it is still the one under its
    /// name), and from the data directory if there is one. Readers that
    /// hold it (wildcard subscriptions that matched it) keep their
    /// reference and read nothing new: nobody can publish to it any more.
    /// Its memory goes with the last reference.
    pub(super) fn remove_topic(&self, _control: &Control, topic: &Arc<Topic>) {
        if !self.unmap_topic(topic) {
            return;
        }
        let Some(store) = self.store() else { return };
        let removed = match self.doorbell.as_ref().map(|d| d.bell()) {
            // Processes mode: unlisted under the list's lock, read afresh,
            // and every other broker told.
            Some(bell) => store
                .with_topic_list(|_| {
                    let dir = store.unlist_topic(&topic.name)?;
                    if dir.is_some() {
                        bell.topics_changed();
                    }
                    Ok(dir)
                })
                .and_then(|dir| dir.map_or(Ok(()), |d| store.remove_topic_dir(d))),
            None => store.remove_topic(&topic.name),
        };
        if let Err(e) = removed {
            // Nothing waits on this (a subscription is closing): the topic
            // stays listed, and comes back, empty, after a restart, or is
            // unlisted and its leftover directory goes at the next open.
            log::warn!("rill: could not remove the empty topic {:?} from the data directory: {e}", topic.name);
        }
    }

    /// Removes `topic` from the topic map, if it is still the one under its
    /// name, and marks it deleted; false if it was not there.
    fn unmap_topic(&self, topic: &Arc<Topic>) -> bool {
        if self.topics.remove_if(&topic.name, |t| Arc::ptr_eq(topic_of(t), topic)).is_none() {
            return false;
        }
        // Nothing publishes to it any more; this also ends its expiry job.
        // Before its files go, so a publish that raced this and fails on
        // them reports the deleted topic.
        topic.mark_deleted();
        true
    }

    /// What detached wildcard readers of deleted topics read instead: an
    /// empty partition of the smallest segment, shared by all of them and
    /// by every delete. Made at the first delete, before anything is
    /// deleted, so a failure to map it deletes nothing.
    fn placeholder(&self) -> Result<Arc<Partition>> {
        let mut slot = self.placeholder.lock();
        Ok(match &*slot {
            Some(p) => p.clone(),
            None => {
                let tiny = LogConfig { segment_bytes: Some(MIN_SEGMENT_BYTES), ..LogConfig::default() };
                slot.insert(Arc::new(Partition::new(0, Log::new(&tiny)?))).clone()
            }
        })
    }

    /// Deletes topic `name` (see [`Broker::delete_topic`](crate::Broker::delete_topic)).
    pub(crate) fn delete_topic(&self, name: &str) -> Result<()> {
        names::validate_topic(name)?;
        let placeholder = self.placeholder()?;
        let (topic, dir, dropped) = {
            let mut control = self.control.lock();
            self.check_open()?;
            let Some(topic) = self.topics.get(name).map(|t| topic_of(&t).clone()) else {
                return Err(Error::NoSuchTopic(name.to_owned()));
            };
            // On a data directory, unlisting it there is the commit point:
            // if that fails, nothing is deleted. Its directory goes below,
            // after publishers are told (see "Deleting a topic" in `store/mod.rs`).
            let dir = match (self.store(), self.doorbell.as_ref().map(|d| d.bell())) {
                (None, _) => None,
                // Processes mode: under the list's lock, read afresh; every
                // other broker on the directory is told, and lets go of it
                // as below (see "Topics other processes create or delete"
                // in `doorbell.rs`).
                (Some(store), Some(bell)) => store.with_topic_list(|list| {
                    let dir = store.unlist_topic(name)?;
                    if dir.is_some() {
                        bell.topics_changed();
                        // Still under `topics.lock`, so no process lists the
                        // name again meanwhile: no name nobody holds resumes
                        // this topic's positions in a re-created one (the
                        // names held, here too, drop them in `let_go_locked`;
                        // see "Deleting a topic" in `store/named.rs`).
                        if let Err(e) = store.drop_topic_from_names(name, list) {
                            ::log::warn!(
                                target: "rill::broker",
                                "deleted topic {name:?}, but dropping it from the named subscriptions' positions \
                                 failed: {e}"
                            );
                        }
                    }
                    Ok(dir)
                })?,
                (Some(store), None) => store.unlist_topic(name)?,
            };
            // Under the control lock, so no subscription or consumer can
            // attach to it after this, and a name re-created later is a new
            // topic (from offset 0) with nothing of this one's state.
            self.unmap_topic(&topic);
            let dropped = self.let_go_locked(&mut control, &topic);
            (topic, dir, dropped)
        };
        // Outside the control lock: deleting many files can take a while. A
        // re-creation of the name meanwhile gets a directory of its own.
        if let (Some(store), Some(dir)) = (self.store(), dir)
            && let Err(e) = store.remove_topic_dir(dir)
        {
            // The deletion is committed; what is left goes at the next open.
            ::log::warn!(target: "rill::broker", "deleted topic {name:?}, but removing its files failed: {e}");
        }
        self.let_go(name, &topic, dropped, &placeholder);
        Ok(())
    }

    /// Under the control lock, for a topic just taken out of the map
    /// (deleted here, or by another process): the subscriptions and
    /// consumers that read it, and a snapshot of the offsets without its
    /// group commits and durable positions.
    fn let_go_locked(&self, control: &mut Control, topic: &Arc<Topic>) -> LetGo {
        let name = &topic.name;
        let mut subs = control.patterns.matches(name);
        // Shared members are not in the pattern index (see `shared.rs`).
        subs.extend(control.subs.values().filter(|s| s.shared && s.pattern.as_str() == &**name).cloned());
        let consumers: Vec<Arc<ConsumerCore>> =
            control.consumers.values().filter(|c| Arc::ptr_eq(&c.topic, topic)).cloned().collect();
        // Offsets into a log that is gone mean nothing to its successor.
        control.groups.retain(|(_, t), _| *t != *name);
        for d in control.durable.values_mut() {
            d.positions.retain(|(t, _), _| *t != *name);
        }
        // Nor do the readers' own: out of the snapshots from now on (the
        // rest of the detaching is `let_go`'s, outside this lock).
        for sub in &subs {
            attach::forget_positions(sub, topic);
        }
        // Processes mode: a name held here drops them from what it keeps
        // and from its slots, before a topic re-created under the name can
        // be attached (see "Deleting a topic" in `store/named.rs`).
        let sync = self.config.fsync != Fsync::Never;
        let mut named = Vec::new();
        for held in control.held.values_mut() {
            let kept = held.base.len();
            held.base.retain(|(t, _), _| *t != *name);
            let read = subs.iter().any(|s| s.id == held.id);
            if let Some(sub) = control.subs.get(&held.id).filter(|_| read || held.base.len() != kept) {
                named.push((held.hold.clone(), held.hold.request(held.positions(sub), sync)));
            }
        }
        LetGo { subs, consumers, snapshot: self.snapshot_offsets(control), named }
    }

    /// Outside the control lock, after [`BrokerInner::let_go_locked`]:
    /// saves the offsets, detaches the subscriptions (closing those that
    /// named the topic) and wakes the consumers.
    fn let_go(&self, name: &str, topic: &Arc<Topic>, dropped: LetGo, placeholder: &Arc<Partition>) {
        let LetGo { subs, consumers, snapshot, named } = dropped;
        if let Err(e) = wait_offsets(snapshot) {
            // The topic is gone already; offsets of a topic that does not
            // exist are inert after a restart, and the next save drops them.
            ::log::warn!(target: "rill::broker", "deleted topic {name:?}, but saving offsets failed: {e}");
        }
        // Failures are logged; the next round or interval writes them again.
        wait_all(named);
        // Outside the control lock: closing runs the close hook, which takes it.
        for sub in &subs {
            attach::detach_topic(sub, topic, placeholder);
            if sub.pattern.is_literal() {
                close::close_with_reason(sub, "topic deleted".into());
            }
        }
        for c in &consumers {
            // A blocked poll wakes and reports the deletion; a member of a
            // group across processes leaves it.
            c.topic_deleted();
        }
        ::log::info!(
            target: "rill::broker",
            "deleted topic {name:?} ({} subscription(s) and {} consumer(s) let go of it)",
            subs.len(),
            consumers.len()
        );
    }
}

/// What a deleted topic's readers are, for [`BrokerInner::let_go`].
struct LetGo {
    subs: Vec<Arc<SubCore>>,
    consumers: Vec<Arc<ConsumerCore>>,
    snapshot: Option<(Arc<crate::broker::store::Store>, Ticket)>,
    /// Processes mode: the writes of the names held here without it.
    named: Vec<(Arc<NameHold>, Ticket)>,
}

impl TopicsWatch for BrokerInner {
    fn sync_topics(&self) -> bool {
        match self.sync_topics_now() {
            Ok(()) => true,
            // Closing: nothing to join any more.
            Err(_) if self.is_closed() => false,
            Err(e) => {
                ::log::warn!(target: "rill::broker", "could not reread the data directory's topic list: {e}");
                false
            }
        }
    }
}
