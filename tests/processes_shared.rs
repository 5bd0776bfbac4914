//! Shared subscriptions across processes (issue 39, its seventh step):
//! members of one shared subscription in different processes split the
//! topic's partitions, each message delivered once when nothing fails; a
//! member killed with -9 at a random moment frees its partitions, the
//! survivor takes them and resumes from the positions the dead member
//! saved (nothing saved comes again, only what it handled after its last
//! save).
//!
//! The other processes are this test binary run again as a child
//! (`common/procs.rs`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};

use common::procs::{self, TempDir};
use common::{Rng, wait_for};
use rill::{Ack, Broker, Error, Sharing, StartPosition, Subscription, SubscriptionOptions, TopicOptions};

/// The topic every process shares.
const TOPIC: &str = "jobs";
/// The shared subscription's name.
const NAME: &str = "workers";
/// The topic's partitions.
const PARTITIONS: u32 = 4;
/// Kill -9 iterations, unless `RILL_CRASH_ITERATIONS` says more.
const KILLS: u32 = 50;
/// Messages published in each iteration of the kill loop.
const PER_ROUND: u64 = 12;

fn processes(dir: &Path) -> Broker {
    Broker::new(procs::config(dir, Sharing::Processes)).unwrap()
}

/// The (partition, offset) pairs delivered to a member.
type Seen = Arc<Mutex<Vec<(u32, u64)>>>;

/// A member of [`NAME`] whose handler calls `record` with each message's
/// (partition, offset) and acks it.
fn member(broker: &Broker, mut record: impl FnMut(u32, u64) + Send + 'static) -> Subscription {
    let options = SubscriptionOptions {
        name: Some(NAME.into()),
        shared: true,
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    broker
        .subscribe(TOPIC, options, move |m| {
            record(m.partition(), m.record().offset());
            Ack::Success
        })
        .unwrap()
}

/// A child member `i`: records each message in `records-<i>`, marks
/// `joined-<i>` once subscribed, and closes when the parent makes `end`.
fn recording_member(dir: &Path, i: &str) {
    let broker = processes(dir);
    let (d, file) = (dir.to_owned(), format!("records-{i}"));
    let sub = member(&broker, move |p, o| procs::append(&d, &file, &format!("{p} {o}")));
    procs::mark(dir, &format!("joined-{i}"));
    procs::wait_mark(dir, "end");
    sub.close();
}

#[test]
fn members_in_processes_split_the_partitions_and_each_message_comes_once() {
    const TEST: &str = "members_in_processes_split_the_partitions_and_each_message_comes_once";
    const MEMBERS: u32 = 3;
    if let Some((role, dir)) = procs::child_role() {
        recording_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("split");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let children: Vec<Child> = (0..MEMBERS).map(|i| procs::spawn(TEST, &i.to_string(), &dir.0)).collect();
    let all_records = |dir: &Path| -> Vec<Vec<(u32, u64)>> {
        (0..MEMBERS).map(|i| procs::records(dir, &format!("records-{i}"))).collect()
    };
    let checks = || {
        for i in 0..MEMBERS {
            procs::wait_mark(&dir.0, &format!("joined-{i}"));
        }
        // Published a few at a time until every member has had some: the
        // members split the partitions once each has looked at the others.
        let mut published = BTreeSet::new();
        wait_for("every member to get messages", || {
            published.extend(procs::publish(&broker, TOPIC, 8));
            wait_for("the messages so far", || {
                all_records(&dir.0).iter().map(Vec::len).sum::<usize>() >= published.len()
            });
            all_records(&dir.0).iter().all(|r| !r.is_empty())
        });
        published.extend(procs::publish(&broker, TOPIC, 200));
        wait_for("every message", || all_records(&dir.0).iter().map(Vec::len).sum::<usize>() >= published.len());
        published
    };
    let release = || {
        procs::mark(&dir.0, "end");
        for (i, child) in children.into_iter().enumerate() {
            procs::expect_success(child, &format!("member {i}"));
        }
    };
    let published = procs::check_then_release(checks, release);
    // Every message exactly once (nothing failed: a partition moved between
    // members goes from the position its reader let go of).
    let mut seen = BTreeSet::new();
    for got in all_records(&dir.0) {
        for at in got {
            assert!(seen.insert(at), "{at:?} was delivered twice");
        }
    }
    assert_eq!(seen, published, "every message delivered");
    // The positions the members saved: a member here has nothing left.
    let here: Seen = Arc::default();
    let sink = here.clone();
    let sub = member(&broker, move |p, o| sink.lock().unwrap().push((p, o)));
    let more = procs::publish(&broker, TOPIC, 8);
    wait_for("the new messages", || here.lock().unwrap().len() >= more.len());
    sub.close();
    assert_eq!(here.lock().unwrap().iter().copied().collect::<BTreeSet<_>>(), more.into_iter().collect());
}

/// The child of the kill loop, member `i`: records each message in
/// `records-<i>` and acks it, until it is killed.
fn killed_member(dir: &Path, i: &str) {
    let broker = processes(dir);
    let (d, file) = (dir.to_owned(), format!("records-{i}"));
    let _sub = member(&broker, move |p, o| procs::append(&d, &file, &format!("{p} {o}")));
    procs::mark(dir, &format!("joined-{i}"));
    // Killed while waiting (the parent never makes this mark).
    procs::wait_mark(dir, "never");
}

#[test]
fn a_killed_members_partitions_go_to_the_survivor_and_nothing_saved_comes_again() {
    const TEST: &str = "a_killed_members_partitions_go_to_the_survivor_and_nothing_saved_comes_again";
    if let Some((role, dir)) = procs::child_role() {
        killed_member(&dir, &role);
        return;
    }
    let kills = procs::env_or("RILL_CRASH_ITERATIONS", KILLS);
    println!("kill loop: {kills} kills");
    let seed = procs::seed("RILL_CRASH_SEED");
    let mut rng = Rng(seed);
    let dir = TempDir::new("kills");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    // The survivor: a member in this process.
    let mine: Seen = Arc::default();
    let sink = mine.clone();
    let survivor = member(&broker, move |p, o| sink.lock().unwrap().push((p, o)));
    let mut published = BTreeSet::new();
    let delivered = |published: &BTreeSet<(u32, u64)>, upto: u32| {
        let mut all: BTreeSet<(u32, u64)> = mine.lock().unwrap().iter().copied().collect();
        for i in 0..upto {
            all.extend(procs::records(&dir.0, &format!("records-{i}")));
        }
        published.is_subset(&all)
    };
    for i in 0..kills {
        let mut child = procs::spawn(TEST, &i.to_string(), &dir.0);
        assert!(procs::wait_child_mark(&dir.0, &format!("joined-{i}"), &mut child), "member {i} did not join");
        published.extend(procs::publish(&broker, TOPIC, PER_ROUND));
        // A random moment: after it recorded `r` messages (0: at once), or
        // once everything is delivered (the survivor may read it all).
        let r = rng.below(4) as usize;
        let file = format!("records-{i}");
        wait_for("the member's progress", || procs::records(&dir.0, &file).len() >= r || delivered(&published, i + 1));
        child.kill().unwrap();
        child.wait().unwrap();
        // The survivor takes the dead member's partitions and reads what
        // it left from the positions it saved.
        wait_for("the survivor to read everything", || delivered(&published, i + 1));
    }
    // The wait above ends once every message was delivered to someone, which
    // may be before the survivor has read again what the last killed member
    // handled after its last save. So a message more on every partition,
    // which only the survivor can get: once it has them all, it has read
    // each partition through from where it took it.
    let last = procs::publish(&broker, TOPIC, 2 * u64::from(PARTITIONS));
    assert_eq!(last.iter().map(|&(p, _)| p).collect::<BTreeSet<_>>().len(), PARTITIONS as usize);
    wait_for("the survivor to read every partition to its end", || {
        let mine = mine.lock().unwrap();
        last.iter().all(|at| mine.contains(at))
    });
    published.extend(last);
    survivor.close();
    // Everything delivered; the survivor never twice. A message delivered
    // more than once is one a killed member handled after its last save:
    // on its partition, a suffix of what that member handled comes again
    // (to the survivor, or to a later member that took the partition
    // first and may have been killed before saving it in turn).
    let mine = mine.lock().unwrap().clone();
    let mut count: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for at in &mine {
        *count.entry(*at).or_default() += 1;
        assert_eq!(count[at], 1, "{at:?} delivered twice to the survivor (seed {seed})");
    }
    let children: Vec<Vec<(u32, u64)>> = (0..kills).map(|i| procs::records(&dir.0, &format!("records-{i}"))).collect();
    for (i, got) in children.iter().enumerate() {
        let later: BTreeSet<(u32, u64)> = mine.iter().chain(children[i + 1..].iter().flatten()).copied().collect();
        let mut per_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for &(p, o) in got {
            *count.entry((p, o)).or_default() += 1;
            per_partition.entry(p).or_default().push(o);
        }
        for (p, offsets) in per_partition {
            let again: Vec<bool> = offsets.iter().map(|&o| later.contains(&(p, o))).collect();
            // Once one came again, every later one did too.
            if let Some(first) = again.iter().position(|&a| a) {
                assert!(
                    again[first..].iter().all(|&a| a),
                    "member {i}: a message on partition {p} came again before one it had saved (seed {seed}): \
                     it handled {offsets:?}, again {again:?}; the survivor's there: {:?}",
                    mine.iter().filter(|at| at.0 == p).map(|at| at.1).collect::<Vec<_>>()
                );
            }
        }
    }
    assert_eq!(count.keys().copied().collect::<BTreeSet<_>>(), published, "every message delivered (seed {seed})");
    let handled: usize = children.iter().map(Vec::len).sum();
    let again = count.values().map(|&n| n as usize - 1).sum::<usize>();
    println!("{handled} handled by the killed members, {again} deliveries again");
}

/// The child of [`a_deleted_name_forgets_the_shared_positions`] and
/// [`a_deleted_topic_forgets_the_shared_positions`], role `drain-<i>-<n>`:
/// a member that records each message in `records-<i>` until it has `n`,
/// then closes (saving its positions).
fn draining_member(dir: &Path, i: &str, n: usize) {
    let broker = processes(dir);
    let seen: Seen = Arc::default();
    let (sink, d, file) = (seen.clone(), dir.to_owned(), format!("records-{i}"));
    let sub = member(&broker, move |p, o| {
        procs::append(&d, &file, &format!("{p} {o}"));
        sink.lock().unwrap().push((p, o));
    });
    wait_for("every message", || seen.lock().unwrap().len() >= n);
    sub.close();
}

/// The child of [`a_shared_name_and_a_durable_name_are_kept_apart_across_processes`]:
/// `durable` holds a durable subscription named [`NAME`] until the parent
/// makes `end`; `durable-busy` finds the name `Busy` (a shared member
/// holds it) and so does its `delete_durable`.
fn durable_of_the_name(dir: &Path, role: &str) {
    let broker = processes(dir);
    let options = SubscriptionOptions { name: Some(NAME.into()), ..SubscriptionOptions::default() };
    let sub = broker.subscribe(TOPIC, options, |_| Ack::Success);
    if role == "durable" {
        let sub = sub.unwrap();
        procs::mark(dir, "held");
        procs::wait_mark(dir, "end");
        sub.close();
    } else {
        assert!(matches!(sub, Err(Error::Busy(_))), "a durable subscription took a shared member's name: {sub:?}");
        let deleted = broker.delete_durable(NAME);
        assert!(matches!(deleted, Err(Error::Busy(_))), "deleted a live shared name: {deleted:?}");
    }
}

/// Runs the member child of `test` as `drain-<i>-<n>` for `published` (n
/// of them) and checks it got each of them once.
fn drain_in_child(test: &str, dir: &Path, i: u32, published: &BTreeSet<(u32, u64)>) {
    procs::expect_each_once(test, &format!("drain-{i}-{}", published.len()), dir, i, published);
}

/// A child's `drain-<i>-<n>` role, played.
fn drain_role(dir: &Path, role: &str) {
    let (i, n) = role.strip_prefix("drain-").unwrap().split_once('-').unwrap();
    draining_member(dir, i, n.parse().unwrap());
}

#[test]
fn a_deleted_name_forgets_the_shared_positions() {
    const TEST: &str = "a_deleted_name_forgets_the_shared_positions";
    if let Some((role, dir)) = procs::child_role() {
        drain_role(&dir, &role);
        return;
    }
    let dir = TempDir::new("forget-name");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
    drain_in_child(TEST, &dir.0, 0, &published);
    // Its positions are saved: the name deleted forgets them, and a member
    // of it taken again starts at its start position (the first message).
    broker.delete_durable(NAME).unwrap();
    assert!(matches!(broker.delete_durable(NAME), Err(Error::NotFound(_))));
    drain_in_child(TEST, &dir.0, 1, &published);
}

#[test]
fn a_deleted_topic_forgets_the_shared_positions() {
    const TEST: &str = "a_deleted_topic_forgets_the_shared_positions";
    if let Some((role, dir)) = procs::child_role() {
        drain_role(&dir, &role);
        return;
    }
    let dir = TempDir::new("forget-topic");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
    drain_in_child(TEST, &dir.0, 0, &published);
    // The topic deleted (no member live) and created again: read from its
    // first message, not from the positions saved in the old one.
    broker.delete_topic(TOPIC).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
    drain_in_child(TEST, &dir.0, 1, &published);
}

#[test]
fn a_shared_name_and_a_durable_name_are_kept_apart_across_processes() {
    const TEST: &str = "a_shared_name_and_a_durable_name_are_kept_apart_across_processes";
    if let Some((role, dir)) = procs::child_role() {
        durable_of_the_name(&dir, &role);
        return;
    }
    let dir = TempDir::new("apart");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    // A durable subscription of the name in another process: no member.
    let mut child = procs::spawn(TEST, "durable", &dir.0);
    let held = procs::wait_child_mark(&dir.0, "held", &mut child);
    let checks = || {
        assert!(held, "the durable child did not subscribe");
        let options = SubscriptionOptions { name: Some(NAME.into()), shared: true, ..SubscriptionOptions::default() };
        let shared = broker.subscribe(TOPIC, options, |_| Ack::Success);
        assert!(matches!(shared, Err(Error::Busy(_))), "a shared member took a held durable name: {shared:?}");
        assert!(matches!(broker.delete_durable(NAME), Err(Error::Busy(_))));
    };
    procs::check_then_release(checks, || {
        procs::mark(&dir.0, "end");
        procs::expect_success(child, "the durable child");
    });
    // A member here: the name is a shared one's, the durable child is refused.
    let sub = member(&broker, |_, _| {});
    procs::expect_success(procs::spawn(TEST, "durable-busy", &dir.0), "the refused durable child");
    sub.close();
    // Both gone: a durable subscription of the name is taken again.
    durable_of_the_name_here(&broker);
}

/// A durable subscription of [`NAME`] in this process, taken and closed.
fn durable_of_the_name_here(broker: &Broker) {
    let options = SubscriptionOptions { name: Some(NAME.into()), ..SubscriptionOptions::default() };
    broker.subscribe(TOPIC, options, |_| Ack::Success).unwrap().close();
}

#[test]
fn a_topic_deleted_and_created_again_under_a_live_member_is_read_from_its_first_message() {
    const TEST: &str = "a_topic_deleted_and_created_again_under_a_live_member_is_read_from_its_first_message";
    if let Some((role, dir)) = procs::child_role() {
        if let Some(n) = role.strip_prefix("live-") {
            // A member that has handled (and saved) the old topic's
            // messages, still live when the topic is deleted.
            let broker = processes(&dir);
            let seen: Seen = Arc::default();
            let sink = seen.clone();
            let _sub = member(&broker, move |p, o| sink.lock().unwrap().push((p, o)));
            wait_for("the old topic's messages", || seen.lock().unwrap().len() >= n.parse().unwrap());
            procs::mark(&dir, "handled");
            procs::wait_mark(&dir, "end");
        } else {
            drain_role(&dir, &role);
        }
        return;
    }
    let dir = TempDir::new("live");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&broker, TOPIC, 20);
    let mut old = procs::spawn(TEST, "live-20", &dir.0);
    let handled = procs::wait_child_mark(&dir.0, "handled", &mut old);
    let checks = || {
        assert!(handled, "the live member did not handle the old topic");
        // Deleted while its member lives (the deleter cannot forget what
        // it saved), and created again in a directory of its own.
        broker.delete_topic(TOPIC).unwrap();
        broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
        let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
        // A new member takes each partition once the old one let go of it,
        // and starts it afresh: the saved positions are the old topic's.
        drain_in_child(TEST, &dir.0, 0, &published);
    };
    procs::check_then_release(checks, || {
        procs::mark(&dir.0, "end");
        procs::expect_success(old, "the old topic's member");
    });
}

/// The child of [`a_join_and_a_leave_in_another_process_are_followed_without_the_timer`],
/// member `i`: its fallback look an hour away (so only an announcement
/// moves partitions), it records each message in `records-<i>`, marks
/// `joined-<i>` once subscribed, and closes when the parent makes
/// `end-<i>`.
fn announced_member(dir: &Path, i: &str) {
    rill::broker::set_shared_look_fallback(std::time::Duration::from_secs(3600));
    let broker = processes(dir);
    let (d, file) = (dir.to_owned(), format!("records-{i}"));
    let sub = member(&broker, move |p, o| procs::append(&d, &file, &format!("{p} {o}")));
    procs::mark(dir, &format!("joined-{i}"));
    procs::wait_mark(dir, &format!("end-{i}"));
    sub.close();
}

/// A join and a leave are announced (see "Announcing changes" in
/// `store/membership.rs`): with both members' fallback looks an hour away,
/// a member joining in another process still gets messages (the first
/// gave it partitions), and once it leaves the first gets every
/// partition's again; each message comes once.
#[test]
fn a_join_and_a_leave_in_another_process_are_followed_without_the_timer() {
    const TEST: &str = "a_join_and_a_leave_in_another_process_are_followed_without_the_timer";
    if let Some((role, dir)) = procs::child_role() {
        announced_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("announced");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let got = |i: u32| procs::records(&dir.0, &format!("records-{i}"));
    let mut first = procs::spawn(TEST, "0", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "joined-0", &mut first), "member 0 did not join");
    let mut published: BTreeSet<(u32, u64)> = procs::publish(&broker, TOPIC, 8).into_iter().collect();
    let second = procs::spawn(TEST, "1", &dir.0);
    let checks = || {
        procs::wait_mark(&dir.0, "joined-1");
        wait_for("both members to get messages", || {
            published.extend(procs::publish(&broker, TOPIC, 8));
            wait_for("the messages so far", || got(0).len() + got(1).len() >= published.len());
            !got(1).is_empty()
        });
    };
    let release = || {
        procs::mark(&dir.0, "end-1");
        procs::expect_success(second, "member 1");
    };
    procs::check_then_release(checks, release);
    let checks = || {
        // Published after member 1 left: member 0 gets every partition's.
        let mut after = BTreeSet::new();
        wait_for("member 0 to get every partition back", || {
            after.extend(procs::publish(&broker, TOPIC, 8));
            let got0: BTreeSet<(u32, u64)> = got(0).into_iter().collect();
            (0..PARTITIONS).all(|p| after.iter().any(|&(q, o)| q == p && got0.contains(&(q, o))))
        });
        published.extend(after);
        wait_for("every message", || got(0).len() + got(1).len() >= published.len());
    };
    let release = || {
        procs::mark(&dir.0, "end-0");
        procs::expect_success(first, "member 0");
    };
    procs::check_then_release(checks, release);
    let mut seen = BTreeSet::new();
    for at in got(0).into_iter().chain(got(1)) {
        assert!(seen.insert(at), "{at:?} was delivered twice");
    }
    assert_eq!(seen, published, "every message delivered");
}

/// Publishes until the member `child` has read some of it (in its records
/// file), kills it with -9, publishes again, and waits until the member
/// recording in `survivor` has read all of that.
fn kill_once_it_reads_then_read_after(
    broker: &Broker,
    dir: &Path,
    (child, records): (&mut std::process::Child, &str),
    survivor: &str,
) {
    wait_for("the member to kill to read its share", || {
        procs::publish(broker, TOPIC, u64::from(PARTITIONS));
        !procs::records(dir, records).is_empty()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let after: BTreeSet<(u32, u64)> = procs::publish(broker, TOPIC, 4 * u64::from(PARTITIONS)).into_iter().collect();
    wait_for("the survivor to read everything published after the kill", || {
        let seen: BTreeSet<(u32, u64)> = procs::records(dir, survivor).into_iter().collect();
        after.is_subset(&seen)
    });
}

/// A member killed with -9 announces nothing, but its broker's watch of
/// the other members' processes sees it go (see "Deaths" in
/// `store/membership.rs`): with the survivor's fallback look an hour away,
/// it takes the dead member's partitions and reads everything published
/// after the kill.
#[test]
fn a_killed_member_is_followed_without_the_timer() {
    const TEST: &str = "a_killed_member_is_followed_without_the_timer";
    match procs::child_role() {
        Some((role, dir)) if role == "0" => return announced_member(&dir, &role),
        Some((role, dir)) => return killed_member(&dir, &role),
        None => {}
    }
    let dir = TempDir::new("death-watched");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let mut survivor = procs::spawn(TEST, "0", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "joined-0", &mut survivor), "the survivor did not join");
    let mut killed = procs::spawn(TEST, "1", &dir.0);
    let checks = || {
        assert!(procs::wait_child_mark(&dir.0, "joined-1", &mut killed), "the member to kill did not join");
        kill_once_it_reads_then_read_after(&broker, &dir.0, (&mut killed, "records-1"), "records-0");
    };
    let release = || {
        procs::mark(&dir.0, "end-0");
        procs::expect_success(survivor, "the survivor");
    };
    procs::check_then_release(checks, release);
}

/// The child of [`the_fallback_look_passes_to_another_member_when_its_member_closes`]
/// that holds two members, its watch of deaths off (so only a fallback
/// look finds a death): the second records each message in
/// `records-pair`; the first closes when the parent makes `close-first`.
fn pair_of_members(dir: &Path) {
    rill::broker::disable_death_watch();
    let broker = processes(dir);
    // The first member here starts the name's fallback chain; the second
    // joins it.
    let first = member(&broker, |_, _| {});
    let d = dir.to_owned();
    let second = member(&broker, move |p, o| procs::append(&d, "records-pair", &format!("{p} {o}")));
    procs::mark(dir, "joined-pair");
    procs::wait_mark(dir, "close-first");
    first.close();
    procs::mark(dir, "first-closed");
    procs::wait_mark(dir, "end-pair");
    second.close();
}

/// A process's members of one name share one fallback look (what finds a
/// member killed with -9 where deaths are not watched): when the member
/// running it closes, it passes to another member of the name there,
/// which then finds a member killed in another process and takes its
/// partitions.
#[test]
fn the_fallback_look_passes_to_another_member_when_its_member_closes() {
    const TEST: &str = "the_fallback_look_passes_to_another_member_when_its_member_closes";
    match procs::child_role() {
        Some((role, dir)) if role == "pair" => return pair_of_members(&dir),
        Some((role, dir)) => return killed_member(&dir, &role),
        None => {}
    }
    let dir = TempDir::new("fallback-hand-over");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let mut pair = procs::spawn(TEST, "pair", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "joined-pair", &mut pair), "the pair did not join");
    let mut child = procs::spawn(TEST, "0", &dir.0);
    let checks = || {
        assert!(procs::wait_child_mark(&dir.0, "joined-0", &mut child), "the child member did not join");
        // The first closes (its leave is announced: the child and the
        // second split the partitions), then the child dies, which nobody
        // announces.
        procs::mark(&dir.0, "close-first");
        procs::wait_mark(&dir.0, "first-closed");
        // Only a fallback look, now run by the second member, frees the
        // dead child's partitions for it.
        kill_once_it_reads_then_read_after(&broker, &dir.0, (&mut child, "records-0"), "records-pair");
    };
    let release = || {
        procs::mark(&dir.0, "end-pair");
        procs::expect_success(pair, "the pair of members");
    };
    procs::check_then_release(checks, release);
}
