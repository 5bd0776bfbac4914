//! Subscribing (checking the options, making the subscription's core with
//! its hooks into the broker, attaching it to every partition its pattern
//! matches), the close hook every subscription runs, and forgetting a
//! durable subscription's saved positions.

use super::data_dir::wait_offsets;
use super::named::take_held;
use super::shared_procs::{Looks, ProcessShare};
use super::{BrokerInner, saved_positions, topic_of};
use crate::broker::dispatch::Timer;
use crate::broker::names::{self, Pattern};
use crate::broker::shared::SharedGroup;
use crate::broker::store::{Registry, Slot, SubDesc};
use crate::broker::subscription::{
    AckWatch, CloseHook, DeadLetters, Exec, HandlerKind, Stall, StartPosition, SubCore, SubEnv, Subscription,
    SubscriptionOptions, attach, drain, registry_counts,
};
use crate::broker::topic::Topic;
use crate::error::{Error, Result};
use crate::log::{Fsync, Sharing};
use crate::sync::{Arc, Mutex};

/// `hook`, followed by publishing the subscription's counts to `slot`, if
/// there is one (at the end of each drain round).
fn with_publish(slot: Option<Arc<Slot>>, hook: Option<CloseHook>) -> Option<CloseHook> {
    let Some(slot) = slot else { return hook };
    Some(Box::new(move |sub: &SubCore| {
        if let Some(hook) = &hook {
            hook(sub);
        }
        slot.publish(&registry_counts(sub));
    }))
}

impl BrokerInner {
    pub(crate) fn subscribe(
        this: &Arc<BrokerInner>,
        pattern: &str,
        mut options: SubscriptionOptions,
        handler: HandlerKind,
    ) -> Result<Subscription> {
        this.check_open()?;
        let pattern = Pattern::parse(pattern)?;
        // Every name is checked before anything is looked up or created, so
        // the error names the argument that is wrong.
        if let Some(name) = &options.name {
            names::validate_subscription_name(name)?;
        }
        if let Some(topic) = &options.dead_letter_topic {
            names::validate_dead_letter_topic(topic)?;
        }
        if options.shared && (options.name.is_none() || !pattern.is_literal()) {
            return Err(Error::InvalidArgument(format!(
                "a shared subscription needs a name and a pattern naming one topic (no wildcards), got \
                 name {:?} and pattern {:?}",
                options.name,
                pattern.as_str()
            )));
        }
        // Processes mode: its members, in every process, split the topic's
        // partitions through the data directory (see `shared_procs.rs`).
        let processes_shared = options.shared && this.config.sharing == Sharing::Processes;
        // A named one in Processes mode holds its name across processes
        // (see `named.rs`); a shared one is a member instead.
        let holds_name = options.name.is_some() && this.config.sharing == Sharing::Processes && !options.shared;
        if pattern.is_literal() && this.topic(pattern.as_str()).is_err() {
            // Naming one topic that does not exist is a mistake, unless topics
            // are created on demand.
            this.topic_for_publish(pattern.as_str())?;
        }
        if options.priority.is_none() && pattern.is_literal() {
            // The one topic it names gives its default priority.
            options.priority = this.topic(pattern.as_str()).ok().and_then(|t| t.priority);
        }
        let id = crate::sync::unique_id();
        let name = options.name.clone().unwrap_or_else(|| match this.config.sharing {
            Sharing::Exclusive => format!("anon-{id}"),
            // Ids are per process: the pid keeps two processes' anonymous
            // subscriptions (and their dead-letter topics, which live in the
            // shared directory) apart.
            Sharing::Processes => format!("anon-{}-{id}", std::process::id()),
        });
        let dlq_name = options.dead_letter_topic.clone().unwrap_or_else(|| names::default_dead_letter_topic(&name));
        if pattern.matches(&dlq_name) {
            // Its dead letters would come back to it, fail again and loop.
            return Err(Error::InvalidArgument(format!(
                "the dead-letter topic {dlq_name:?} matches the subscription's own pattern {:?}: \
                 its dead letters would be delivered to it again; choose a dead_letter_topic outside it",
                pattern.as_str()
            )));
        }
        let listed_dlq = dlq_name.clone();
        // The largest message it may have to dead-letter, if its pattern
        // names one topic (a wildcard's: the default limit).
        let source_max = this.topic(pattern.as_str()).ok().map(|t| t.partitions[0].log.max_record_bytes());
        let dead_letters = if options.name.is_none() && options.dead_letter_topic.is_none() {
            // An anonymous subscription's own dead-letter topic is made when
            // its first message is dead-lettered: most never need one.
            let (broker, name) = (this.clone(), dlq_name.clone());
            DeadLetters::lazy(dlq_name, Box::new(move || broker.dead_letter_topic_or_create(&name, source_max)))
        } else {
            DeadLetters::Known(this.dead_letter_topic_or_create(&dlq_name, source_max)?)
        };
        let share = match processes_shared {
            true => {
                let topic = this.topic(pattern.as_str())?;
                let store = this.store().ok_or_else(Error::broker_closed)?;
                let membership = store.join_shared(&name, &topic.name, topic.partitions.len() as u32, id)?;
                let membership = match this.member_announce() {
                    Some(announce) => membership.announcing(announce),
                    None => membership,
                };
                let sync = this.config.fsync == Fsync::Always;
                Some(Arc::new(ProcessShare::new(membership, topic, options.start, sync)))
            }
            false => None,
        };
        let look_timer = match processes_shared {
            true => Some(this.shared_look_timer()?),
            false => None,
        };
        let broker = this.clone();
        let releaser = this.clone();
        let (closing, releasing, saving) = (share.clone(), share.clone(), share.clone());
        let persister = this.clone();
        // A durable subscription's rounds move positions the data directory
        // keeps: written at each round's end under `Always`, by the flusher
        // (marked due) otherwise.
        let store = this.store();
        let persist = options.name.is_some() && store.is_some();
        let always = store.is_some_and(|s| s.sync_commits());
        let ack_watch = match options.ack_timeout {
            Some(_) => Some(this.ack_watch_timer()?),
            None => None,
        };
        let on_stall = (options.shared && options.ack_timeout.is_some()).then(|| {
            let broker = this.clone();
            Box::new(move |sub: &Arc<SubCore>, call: u64, report: &dyn Fn(Stall)| {
                let mut control = broker.control.lock();
                broker.shared_member_stalled(&mut control, sub, call, report)
            }) as _
        });
        // Processes mode: a slot other processes read its counters from,
        // written at the end of each drain round (see `store/registry.rs`).
        let slot = match &this.registry {
            Some(registry) => Some(Arc::new(Registry::slot(registry, id)?)),
            None => None,
        };
        let closing_slot = slot.clone();
        let exec =
            if options.dedicated_thread { Exec::Dedicated(Mutex::new(None)) } else { Exec::Pool(this.pool.clone()) };
        let env = SubEnv {
            exec,
            timer: Some(this.timer.clone()),
            dead_letters: Some(dead_letters),
            on_close: Some(Box::new(move |sub: &SubCore| {
                // Its positions saved and its partitions let go first: the
                // close hook runs after its last handler call.
                if let Some(share) = &closing {
                    share.close(sub);
                }
                if let Some(slot) = &closing_slot
                    && let Err(e) = slot.unlist()
                {
                    log::warn!("subscription {:?}: could not take it out of the registry: {e}", sub.name);
                }
                broker.on_subscription_closed(sub)
            })),
            on_release: options.shared.then(|| {
                Box::new(move |sub: &SubCore, partition: u32, offset: u64| match &releasing {
                    Some(share) => share.release(sub, partition, offset),
                    None => {
                        let mut control = releaser.control.lock();
                        releaser.hand_over(&mut control, &sub.name, sub.pattern.as_str(), partition, offset);
                    }
                }) as _
            }),
            on_round_end: with_publish(
                slot.clone(),
                if let Some(share) = saving {
                    Some(Box::new(move |sub: &SubCore| share.save(sub)) as _)
                } else {
                    persist.then(|| {
                        Box::new(move |sub: &SubCore| match (always, holds_name) {
                            // The flusher writes them (see "Due" in `flusher.rs`).
                            (false, _) => persister.mark_flush_due(),
                            (true, true) => persister.persist_named(sub),
                            (true, false) => persister.persist_acks(sub),
                        }) as _
                    })
                },
            ),
            ack_watch,
            on_stall,
        };
        let sub = Arc::new(SubCore::new(id, name.clone(), pattern.clone(), &options, handler, env)?);

        let mut control = this.control.lock();
        this.check_open()?;
        let shared_here = match processes_shared {
            // Another member of it in this process.
            true => control.subs.values().any(|s| s.shared && s.name == name && s.pattern.as_str() == pattern.as_str()),
            false => control.shared.get(&name).is_some_and(|g| g.topic == pattern.as_str()),
        };
        if control.live_names.contains(&name) && !(options.shared && shared_here) {
            return Err(Error::Busy(format!(
                "a subscription named {name:?} is already live (only shared subscriptions on the same topic \
                 may share a name)"
            )));
        }
        // Taken last of the checks: an error below drops it, letting go.
        let held = if holds_name { Some(this.take_name(&name, id)?) } else { None };
        // Work out every reader first, so a bad start offset attaches nothing.
        let saved = match &held {
            Some(h) => h.base.clone(),
            None => saved_positions(&control, &sub),
        };
        let mut readers = Vec::new();
        // A literal pattern names its one topic: looked up, not matched
        // against every topic. Under the control lock, which every change
        // to the map takes: this is every topic there is.
        let mut matched: Vec<Arc<Topic>> = if pattern.is_literal() {
            this.topics.get(pattern.as_str()).map(|t| topic_of(&t).clone()).into_iter().collect()
        } else {
            let mut matched = Vec::new();
            this.topics.for_each(|t| {
                if pattern.matches(&topic_of(t).name) {
                    matched.push(topic_of(t).clone());
                }
            });
            matched
        };
        matched.sort_by(|a, b| a.name.cmp(&b.name));
        for t in matched {
            for p in t.partitions.iter() {
                let log = &p.log;
                let cursor = match saved.get(&(t.name.clone(), p.index)) {
                    // A durable subscription resumes where it left off; if
                    // retention trimmed that meanwhile, its first read reports
                    // what it missed.
                    Some(&offset) => log.cursor_resuming(offset),
                    None => match options.start {
                        StartPosition::Latest => log.cursor_from_end(),
                        StartPosition::Earliest => log.cursor_from_first(),
                        StartPosition::Offset(o) => log.cursor_at(o)?,
                        // Resuming: retention may trim the found offset
                        // before the cursor is made; the first read then
                        // reports what it missed.
                        StartPosition::Time(t) => log.cursor_resuming(log.offset_at_time(t)),
                    },
                };
                readers.push((t.name.clone(), p.clone(), cursor));
            }
        }
        if options.dedicated_thread {
            let s = sub.clone();
            let handle = crate::sync::spawn_named(format!("rill-sub-{}", sub.name), move || drain::dedicated_loop(s))?;
            // Joined when the subscription is closed (or detached when its
            // last reference goes), not kept here for the broker's lifetime.
            sub.set_join_handle(handle);
        }
        if processes_shared {
            // Its look attaches the partitions it takes, below.
            readers.clear();
        } else if options.shared {
            // A member reads only the partitions nobody held; the ones taken
            // from other members come when they let go (see `shared.rs`).
            let group = control
                .shared
                .entry(name.clone())
                .or_insert_with(|| SharedGroup::new(pattern.as_str().to_string(), readers.len()));
            let moves = group.join(sub.clone());
            readers.retain(|(_, p, _)| moves.take.contains(&p.index));
            for (member, partition) in moves.revoke {
                attach::revoke(&member, partition);
            }
        }
        for (topic, p, cursor) in readers {
            attach::attach_to(&sub, topic, &p, cursor);
        }
        if !options.shared {
            // Shared members take partitions by assignment only, never all
            // of a re-created topic's.
            control.patterns.insert(&pattern, id, sub.clone());
        }
        control.subs.insert(id, sub.clone());
        if let Some(held) = held {
            control.held.insert(name.clone(), held);
        }
        control.live_names.insert(name);
        drop(control);
        if let (Some(share), Some(looks)) = (share, look_timer) {
            // Its first look now (it takes the free partitions of its
            // target), then one at each announcement and death, and the
            // fallback ones (`shared_procs.rs`).
            looks.add(share, &sub);
        }
        if let Some(slot) = &slot {
            slot.publish(&registry_counts(&sub));
            let desc = SubDesc {
                id,
                name: sub.name.clone(),
                pattern: sub.pattern.as_str().to_owned(),
                durable: sub.durable,
                shared: sub.shared,
                priority: sub.priority,
                dead_letter_topic: Some(listed_dlq),
            };
            if let Err(e) = slot.list(desc) {
                log::warn!("subscription {:?}: could not list it in the registry: {e}", sub.name);
            }
        }
        // Deliver whatever is already there (earliest, or a saved position).
        SubCore::poke(&sub);
        Ok(Subscription { core: sub })
    }

    /// The close hook of every subscription: forget it, and keep a durable
    /// one's positions for its return.
    pub(crate) fn on_subscription_closed(&self, sub: &SubCore) {
        let mut control = self.control.lock();
        control.patterns.remove(&sub.pattern, sub.id);
        control.subs.remove(&sub.id);
        if sub.shared && self.config.sharing == Sharing::Processes {
            // Its share let go already (see `shared_procs.rs`); the name
            // stays live while another member here has it.
            if !control.subs.values().any(|s| s.shared && s.name == sub.name) {
                control.live_names.remove(&sub.name);
            }
            return;
        }
        if sub.shared {
            self.shared_member_closed(&mut control, sub);
            return;
        }
        if let Some(held) = take_held(&mut control, sub) {
            // Written and let go of without the control mutex; the name
            // stays live in this process until then.
            drop(control);
            self.release_held(held, sub);
            self.control.lock().live_names.remove(&sub.name);
            return;
        }
        control.live_names.remove(&sub.name);
        // An anonymous subscription's own dead-letter topic goes with it
        // unless it holds dead letters (nothing can publish to it after the
        // last handler call, which came before this hook).
        if let Some(dlq) = sub.own_dead_letter_topic()
            && self.config.sharing == Sharing::Exclusive
            && dlq.partitions.iter().all(|p| p.log.end_offset() == 0)
        {
            self.remove_topic(&control, &dlq);
        }
        if sub.durable {
            let saved = control.durable.entry(sub.name.clone()).or_default();
            for (topic, partition, offset) in sub.positions() {
                saved.positions.insert((topic, partition), offset);
            }
            let snapshot = self.snapshot_offsets(&control);
            drop(control);
            if let Err(e) = wait_offsets(snapshot) {
                // A close hook cannot fail: after a crash now, the
                // subscription resumes from the positions saved before.
                log::warn!("rill: could not save the positions of subscription {:?}: {e}", sub.name);
            }
        }
    }

    /// The timer of shared members' looks across processes (see
    /// `shared_procs.rs`), started with the first one.
    fn shared_look_timer(&self) -> Result<Arc<Looks>> {
        let mut slot = self.shared_look.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let looks = Arc::new(Looks::start()?);
        *slot = Some(looks.clone());
        Ok(looks)
    }

    pub(super) fn ack_watch_timer(&self) -> Result<Arc<Timer<AckWatch>>> {
        let mut slot = self.ack_watch.lock();
        if let Some(t) = &*slot {
            return Ok(t.clone());
        }
        let timer = Arc::new(Timer::start()?);
        *slot = Some(timer.clone());
        Ok(timer)
    }

    /// Forgets durable subscription `name`'s saved positions.
    pub(crate) fn delete_durable(&self, name: &str) -> Result<()> {
        names::validate_subscription_name(name)?;
        let mut control = self.control.lock();
        self.check_open()?;
        if control.subs.values().any(|s| s.durable && s.name == name) || control.held.contains_key(name) {
            return Err(Error::Busy(format!(
                "durable subscription {name:?} is live: close it before deleting its saved position"
            )));
        }
        if self.config.sharing == Sharing::Processes {
            // The name's lock keeps out every other taker meanwhile.
            drop(control);
            return self.forget_name(name);
        }
        match control.durable.remove(name) {
            Some(_) => {
                let snapshot = self.snapshot_offsets(&control);
                drop(control);
                wait_offsets(snapshot)
            }
            None => Err(Error::NotFound(format!("no durable subscription {name:?} has a saved position"))),
        }
    }
}
