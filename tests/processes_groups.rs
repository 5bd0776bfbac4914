//! Consumer groups across processes (issue 39, its seventh step): members
//! in different processes split a topic's partitions, each partition read
//! by exactly one live member; commits made in one process are seen in the
//! others; a member killed with -9 at a random moment gives its partitions
//! to the survivors, which resume from its last commit (nothing committed
//! is lost, only what it polled and had not committed comes again).
//!
//! The other processes are this test binary run again as a child
//! (`common/procs.rs`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::procs::{self, TempDir};
use common::{Rng, wait_for};
use rill::{Broker, BrokerConfig, ConsumerOptions, Error, Sharing, TopicOptions};

/// The topic every process shares.
const TOPIC: &str = "orders";
/// The consumer group.
const GROUP: &str = "billing";
/// The topic's partitions.
const PARTITIONS: u32 = 4;
/// A short session timeout, so members look at the group often (every
/// quarter of it) and the tests stay short.
const SESSION: Duration = Duration::from_millis(200);
/// Kill -9 iterations, unless `RILL_CRASH_ITERATIONS` says more.
const KILLS: u32 = 50;
/// Messages published in each iteration of the kill loop.
const PER_ROUND: u64 = 12;

fn processes(dir: &Path) -> Broker {
    Broker::new(procs::config(dir, Sharing::Processes)).unwrap()
}

fn options() -> ConsumerOptions {
    ConsumerOptions { session_timeout: SESSION, ..ConsumerOptions::default() }
}

/// The child of [`members_in_processes_split_the_partitions_and_see_each_others_commits`],
/// member `i`: writes its assignment to `owns-<i>` whenever it changes, and
/// each message it polls to `records-<i>`, committing after each batch,
/// until the parent makes `end`.
fn splitting_member(dir: &Path, i: &str) {
    let broker = processes(dir);
    let mut consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    let mut owns = None;
    while !dir.join("end").exists() {
        let polled: Vec<(u32, u64)> = consumer
            .poll(16, Duration::from_millis(20))
            .unwrap()
            .iter()
            .map(|m| (m.partition(), m.record().offset()))
            .collect();
        for (p, o) in &polled {
            procs::append(dir, &format!("records-{i}"), &format!("{p} {o}"));
        }
        if !polled.is_empty() {
            match consumer.commit() {
                // Partitions it gave up while the members settled.
                Ok(()) | Err(Error::Reassigned(_)) => {}
                Err(e) => panic!("commit: {e}"),
            }
        }
        let now = consumer.assignment();
        if owns.as_ref() != Some(&now) {
            let line: Vec<String> = now.iter().map(u32::to_string).collect();
            std::fs::write(dir.join(format!("owns-{i}.tmp")), line.join(" ")).unwrap();
            std::fs::rename(dir.join(format!("owns-{i}.tmp")), dir.join(format!("owns-{i}"))).unwrap();
            owns = Some(now);
        }
    }
    consumer.close();
}

/// Member `i`'s assignment as it last wrote it.
fn owns(dir: &Path, i: u32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(dir.join(format!("owns-{i}"))).ok()?;
    Some(text.split_whitespace().map(|p| p.parse().unwrap()).collect())
}

#[test]
fn members_in_processes_split_the_partitions_and_see_each_others_commits() {
    const TEST: &str = "members_in_processes_split_the_partitions_and_see_each_others_commits";
    const MEMBERS: u32 = 3;
    if let Some((role, dir)) = procs::child_role() {
        splitting_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("split");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let children: Vec<Child> = (0..MEMBERS).map(|i| procs::spawn(TEST, &i.to_string(), &dir.0)).collect();
    let checks = || {
        // Each member owning its share of three (ranges over the members
        // sorted by name: one each, and two for the last): the members
        // have all seen each other and settled.
        wait_for("the members to split the partitions", || {
            let all: Option<Vec<Vec<u32>>> = (0..MEMBERS).map(|i| owns(&dir.0, i)).collect();
            all.is_some_and(|mut all| {
                all.sort();
                all == [vec![0], vec![1], vec![2, 3]]
            })
        });
        let published = procs::publish(&broker, TOPIC, 200);
        let mut end = BTreeMap::new();
        for (p, o) in &published {
            end.insert(*p, o + 1);
        }
        // The members' commits, seen from this process.
        wait_for("every message committed", || match broker.group_stats(GROUP, TOPIC) {
            Ok(stats) => stats.partitions.iter().all(|p| p.committed == end.get(&p.partition).copied()),
            // Nothing committed yet.
            Err(Error::NotFound(_)) => false,
            Err(e) => panic!("group_stats: {e}"),
        });
        procs::mark(&dir.0, "end");
        // A member here starts after what the others committed.
        let mut late = broker.consumer(GROUP, TOPIC, options()).unwrap();
        assert!(late.poll(100, Duration::from_millis(10)).unwrap().is_empty());
        for (p, e) in &end {
            assert_eq!(late.committed(*p).unwrap(), *e);
        }
        late.close();
        end
    };
    let release = || {
        procs::mark(&dir.0, "end");
        for (i, child) in children.into_iter().enumerate() {
            procs::expect_success(child, &format!("member {i}"));
        }
    };
    let end = procs::check_then_release(checks, release);
    // Every message exactly once (nothing failed, and the members had
    // settled before the first was published), each partition read by one
    // member.
    let mut seen = BTreeSet::new();
    let mut reader: BTreeMap<u32, u32> = BTreeMap::new();
    for i in 0..MEMBERS {
        for (p, o) in procs::records(&dir.0, &format!("records-{i}")) {
            assert!(seen.insert((p, o)), "({p}, {o}) was delivered twice");
            assert_eq!(*reader.entry(p).or_insert(i), i, "partition {p} was read by two members");
        }
    }
    let want: BTreeSet<(u32, u64)> = end.iter().flat_map(|(&p, &e)| (0..e).map(move |o| (p, o))).collect();
    assert_eq!(seen, want, "every message delivered");
}

/// The child of the kill loop, member `i`: polls one message at a time,
/// records it in `records-<i>` and then commits it, until it is killed.
fn killed_member(dir: &Path, i: &str) {
    let broker = processes(dir);
    let mut consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    loop {
        let polled: Vec<(u32, u64)> = consumer
            .poll(1, Duration::from_millis(20))
            .unwrap()
            .iter()
            .map(|m| (m.partition(), m.record().offset()))
            .collect();
        for (p, o) in polled {
            procs::append(dir, &format!("records-{i}"), &format!("{p} {o}"));
            consumer.commit_offset(p, o + 1).unwrap();
        }
    }
}

#[test]
fn a_killed_members_partitions_go_to_the_survivor_and_nothing_committed_is_lost() {
    const TEST: &str = "a_killed_members_partitions_go_to_the_survivor_and_nothing_committed_is_lost";
    if let Some((role, dir)) = procs::child_role() {
        killed_member(&dir, &role);
        return;
    }
    let kills = procs::env_or("RILL_CRASH_ITERATIONS", KILLS);
    println!("kill loop: {kills} kills");
    let seed = procs::seed("RILL_GROUPS_SEED");
    let mut rng = Rng(seed);
    let dir = TempDir::new("kills");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    // The survivor: a member in this process, polled one message at a
    // time and committing each, as the children do.
    let mut survivor = broker.consumer(GROUP, TOPIC, options()).unwrap();
    let mut mine: Vec<(u32, u64)> = Vec::new();
    let mut end: BTreeMap<u32, u64> = BTreeMap::new();
    let committed_all = |end: &BTreeMap<u32, u64>| match broker.group_stats(GROUP, TOPIC) {
        Ok(stats) => end.iter().all(|(&p, &e)| stats.partitions[p as usize].committed == Some(e)),
        // Nothing committed yet.
        Err(Error::NotFound(_)) => false,
        Err(e) => panic!("group_stats: {e}"),
    };
    for i in 0..kills {
        for (p, o) in procs::publish(&broker, TOPIC, PER_ROUND) {
            end.insert(p, o + 1);
        }
        let mut child = procs::spawn(TEST, &i.to_string(), &dir.0);
        // A random moment: after it recorded `r` messages (0: at once,
        // perhaps before it joined). The survivor only follows the group
        // meanwhile (a poll of nothing gives up what the child should own).
        let r = rng.below(4) as usize;
        let file = format!("records-{i}");
        wait_for("the member's progress", || {
            survivor.poll(0, Duration::ZERO).unwrap();
            procs::records(&dir.0, &file).len() >= r
        });
        child.kill().unwrap();
        child.wait().unwrap();
        // The survivor takes the dead member's partitions (within its
        // session timeout) and reads everything left from its commits.
        wait_for("the survivor to read everything", || {
            let polled: Vec<(u32, u64)> = survivor
                .poll(1, Duration::from_millis(10))
                .unwrap()
                .iter()
                .map(|m| (m.partition(), m.record().offset()))
                .collect();
            for (p, o) in polled {
                mine.push((p, o));
                survivor.commit_offset(p, o + 1).unwrap();
            }
            committed_all(&end)
        });
        // Then it owns every partition again (the dead member's may have
        // had nothing left to read).
        wait_for("the survivor to own every partition", || {
            survivor.poll(0, Duration::ZERO).unwrap();
            survivor.assignment() == (0..PARTITIONS).collect::<Vec<_>>()
        });
    }
    // Everything delivered; a message delivered twice is one a killed
    // member recorded and had not committed (its last, one per kill).
    let mut count: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut last_of_killed = BTreeSet::new();
    for i in 0..kills {
        let got = procs::records(&dir.0, &format!("records-{i}"));
        if let Some(&last) = got.last() {
            last_of_killed.insert(last);
        }
        for at in got {
            *count.entry(at).or_default() += 1;
        }
    }
    for at in mine {
        *count.entry(at).or_default() += 1;
    }
    let want: BTreeSet<(u32, u64)> = end.iter().flat_map(|(&p, &e)| (0..e).map(move |o| (p, o))).collect();
    assert_eq!(count.keys().copied().collect::<BTreeSet<_>>(), want, "every message delivered (seed {seed})");
    for (at, n) in &count {
        assert!(
            *n == 1 || (*n == 2 && last_of_killed.contains(at)),
            "{at:?} delivered {n} times, and not as a killed member's uncommitted last (seed {seed})"
        );
    }
    // Nothing left for a new member.
    survivor.close();
    let mut next = broker.consumer(GROUP, TOPIC, options()).unwrap();
    assert!(next.poll(100, Duration::from_millis(10)).unwrap().is_empty());
    match broker.delete_group(GROUP, TOPIC) {
        Err(Error::Busy(_)) => {}
        r => panic!("deleting a group with a live member: expected Busy, got {r:?}"),
    }
    assert_eq!(broker.groups(), [(GROUP.to_owned(), TOPIC.to_owned())]);
    next.close();
    broker.delete_group(GROUP, TOPIC).unwrap();
    assert!(broker.groups().is_empty());
    assert!(matches!(broker.group_stats(GROUP, TOPIC), Err(Error::NotFound(_))));
}

#[test]
fn commits_move_with_the_directory_between_modes() {
    let dir = TempDir::new("modes");
    let open = |sharing| {
        let config = BrokerConfig { data_dir: Some(dir.0.clone()), sharing, ..BrokerConfig::default() };
        Broker::new(config).unwrap()
    };
    // Reads what is left, one partition's worth, and commits it.
    let read = |broker: &Broker, want: std::ops::Range<u64>| {
        let mut c = broker.consumer(GROUP, TOPIC, options()).unwrap();
        let got: Vec<u64> =
            c.poll(100, Duration::from_millis(10)).unwrap().iter().map(|m| m.record().offset()).collect();
        assert_eq!(got, want.collect::<Vec<_>>());
        c.commit().unwrap();
        c.close();
    };
    let broker = open(Sharing::Exclusive);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    procs::publish(&broker, TOPIC, 3);
    read(&broker, 0..3);
    drop(broker);
    // The group's commit, made in Exclusive mode, is found across processes.
    let broker = open(Sharing::Processes);
    assert_eq!(broker.group_stats(GROUP, TOPIC).unwrap().partitions[0].committed, Some(3));
    procs::publish(&broker, TOPIC, 2);
    read(&broker, 3..5);
    drop(broker);
    // And back.
    let broker = open(Sharing::Exclusive);
    assert_eq!(broker.group_stats(GROUP, TOPIC).unwrap().partitions[0].committed, Some(5));
    assert!(!dir.0.join("groups").exists(), "folded back into the offsets");
    procs::publish(&broker, TOPIC, 1);
    read(&broker, 5..6);
}

/// The child of [`a_deleted_topic_forgets_the_groups_commits`], role
/// `commit-<i>-<n>`: a member alone in [`GROUP`] that polls until it has
/// `n` messages, recording each in `records-<i>`, commits and closes.
fn committing_member(dir: &Path, role: &str) {
    let (i, n) = role.strip_prefix("commit-").unwrap().split_once('-').unwrap();
    let n: usize = n.parse().unwrap();
    let broker = processes(dir);
    let mut consumer = broker.consumer(GROUP, TOPIC, options()).unwrap();
    let mut got = 0;
    wait_for("every message", || {
        for m in consumer.poll(16, Duration::from_millis(20)).unwrap().iter() {
            procs::append(dir, &format!("records-{i}"), &format!("{} {}", m.partition(), m.record().offset()));
            got += 1;
        }
        got >= n
    });
    consumer.commit().unwrap();
    consumer.close();
}

#[test]
fn a_deleted_topic_forgets_the_groups_commits() {
    const TEST: &str = "a_deleted_topic_forgets_the_groups_commits";
    if let Some((role, dir)) = procs::child_role() {
        committing_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("forget-topic");
    let broker = processes(&dir.0);
    let consume_in_child = |i: u32, published: &BTreeSet<(u32, u64)>| {
        procs::expect_each_once(TEST, &format!("commit-{i}-{}", published.len()), &dir.0, i, published);
    };
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
    consume_in_child(0, &published);
    assert!(broker.group_stats(GROUP, TOPIC).is_ok(), "its commits are seen here");
    // The topic deleted (no member live) and created again: the group
    // reads it from its first message, not from the old topic's commits.
    broker.delete_topic(TOPIC).unwrap();
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 20).into_iter().collect();
    consume_in_child(1, &published);
}

/// The child of [`a_member_left_open_on_a_deleted_topic_frees_the_re_created_ones`]:
/// a member of [`GROUP`] that polls once (owning every partition), marks
/// `joined`, then neither polls nor closes until the parent makes `end`,
/// as a program that keeps a handle it no longer uses.
fn idle_member(dir: &Path) {
    let broker = processes(dir);
    let options = options_long();
    let mut consumer = broker.consumer(GROUP, TOPIC, options).unwrap();
    consumer.poll(16, Duration::ZERO).unwrap();
    assert_eq!(consumer.assignment(), [0, 1, 2, 3], "alone, it owns every partition");
    procs::mark(dir, "joined");
    procs::wait_mark(dir, "end");
    assert!(matches!(consumer.poll(1, Duration::ZERO), Err(Error::NoSuchTopic(_))), "its topic was deleted");
    consumer.close();
}

/// A consumer left open on a topic another process deletes leaves the
/// group when its process sees the delete, so a member of the topic
/// created again under the name gets every partition at once, with the
/// stale handle still open (and its session an hour long).
#[test]
fn a_member_left_open_on_a_deleted_topic_frees_the_re_created_ones() {
    const TEST: &str = "a_member_left_open_on_a_deleted_topic_frees_the_re_created_ones";
    if let Some((_, dir)) = procs::child_role() {
        idle_member(&dir);
        return;
    }
    let dir = TempDir::new("stale-member");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let mut child = procs::spawn(TEST, "0", &dir.0);
    let joined = procs::wait_child_mark(&dir.0, "joined", &mut child);
    let checks = || {
        assert!(joined, "the child exited before it joined");
        broker.delete_topic(TOPIC).unwrap();
        broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
        let published: BTreeSet<_> = procs::publish(&broker, TOPIC, 8).into_iter().collect();
        let options = options_long();
        let mut mine = broker.consumer(GROUP, TOPIC, options).unwrap();
        let mut got = BTreeSet::new();
        wait_for("every partition of the new topic, with the stale member still open", || {
            for m in mine.poll(16, Duration::from_millis(20)).unwrap().iter() {
                got.insert((m.partition(), m.record().offset()));
            }
            mine.assignment() == [0, 1, 2, 3] && got == published
        });
        mine.close();
    };
    procs::check_then_release(checks, || {
        procs::mark(&dir.0, "end");
        procs::expect_success(child, "the stale member");
    });
}

/// A session timeout so long that the fallback look (every half of it)
/// never comes during a test: only an announcement explains a rebalance.
const LONG_SESSION: Duration = Duration::from_secs(3600);

/// The child of [`a_join_and_a_leave_in_another_process_are_followed_without_the_timer`]:
/// a member with [`LONG_SESSION`] that writes its assignment to `owns-<i>`
/// whenever it changes, until the parent makes `end`.
fn long_session_member(dir: &Path, i: &str) {
    let broker = processes(dir);
    let options = options_long();
    let mut consumer = broker.consumer(GROUP, TOPIC, options).unwrap();
    let mut owns = None;
    while !dir.join("end").exists() {
        consumer.poll(16, Duration::from_millis(20)).unwrap();
        let now = consumer.assignment();
        if owns.as_ref() != Some(&now) {
            let line: Vec<String> = now.iter().map(u32::to_string).collect();
            std::fs::write(dir.join(format!("owns-{i}.tmp")), line.join(" ")).unwrap();
            std::fs::rename(dir.join(format!("owns-{i}.tmp")), dir.join(format!("owns-{i}"))).unwrap();
            owns = Some(now);
        }
    }
    consumer.close();
}

/// A join and a leave are announced (see "Announcing changes" in
/// `store/membership.rs`): with every member's fallback look an hour away,
/// a member joining in another process still gets its share, and its
/// leave still gives the partitions back.
#[test]
fn a_join_and_a_leave_in_another_process_are_followed_without_the_timer() {
    const TEST: &str = "a_join_and_a_leave_in_another_process_are_followed_without_the_timer";
    if let Some((role, dir)) = procs::child_role() {
        long_session_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("announced");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let options = options_long();
    let mut mine = broker.consumer(GROUP, TOPIC, options).unwrap();
    mine.poll(16, Duration::ZERO).unwrap();
    assert_eq!(mine.assignment(), [0, 1, 2, 3], "alone, it owns every partition");
    let child = procs::spawn(TEST, "0", &dir.0);
    let checks = || {
        wait_for("the member in the other process to get its share", || {
            mine.poll(16, Duration::from_millis(20)).unwrap();
            let theirs = owns(&dir.0, 0).unwrap_or_default();
            let mut all: Vec<u32> = mine.assignment().into_iter().chain(theirs.iter().copied()).collect();
            all.sort_unstable();
            theirs.len() == 2 && all == [0, 1, 2, 3]
        });
    };
    let release = || {
        procs::mark(&dir.0, "end");
        procs::expect_success(child, "the other member");
    };
    procs::check_then_release(checks, release);
    wait_for("the partitions to come back after the other member's leave", || {
        mine.poll(16, Duration::from_millis(20)).unwrap();
        mine.assignment() == [0, 1, 2, 3]
    });
    mine.close();
}

/// A member killed with -9 announces nothing, but its broker's watch of
/// the other members' processes sees it go (see "Deaths" in
/// `store/membership.rs`): with every member's session an hour long, the
/// survivor gets the dead member's partitions back.
#[test]
fn a_killed_member_is_followed_without_the_timer() {
    const TEST: &str = "a_killed_member_is_followed_without_the_timer";
    if let Some((role, dir)) = procs::child_role() {
        long_session_member(&dir, &role);
        return;
    }
    let dir = TempDir::new("death-watched");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let options = options_long();
    let mut mine = broker.consumer(GROUP, TOPIC, options).unwrap();
    mine.poll(16, Duration::ZERO).unwrap();
    let mut child = procs::spawn(TEST, "0", &dir.0);
    let checks = || {
        wait_for("the member in the other process to get its share", || {
            mine.poll(16, Duration::from_millis(20)).unwrap();
            owns(&dir.0, 0).is_some_and(|theirs| theirs.len() == 2)
        })
    };
    // Killed whether or not it got its share, so it never outlives the test.
    procs::check_then_release(checks, || {
        child.kill().unwrap();
        child.wait().unwrap();
    });
    wait_for("the partitions to come back after the other member's death", || {
        mine.poll(16, Duration::from_millis(20)).unwrap();
        mine.assignment() == [0, 1, 2, 3]
    });
    mine.close();
}

/// A group whose members have committed nothing yet is a group all the
/// same: `group_stats` from another broker on the directory reads every
/// partition uncommitted with its whole log as lag, as in one process, and
/// `NotFound` once its last member has gone.
#[test]
fn a_group_with_live_members_and_no_commit_has_stats_everywhere() {
    let dir = TempDir::new("nocommit");
    let (member_side, asker) = (processes(&dir.0), processes(&dir.0));
    member_side.create_topic(TOPIC, &TopicOptions { partitions: PARTITIONS, ..TopicOptions::default() }).unwrap();
    procs::publish(&member_side, TOPIC, 8);
    let mut consumer = member_side.consumer(GROUP, TOPIC, options()).unwrap();
    // Its join made the group's folder; its first poll takes partitions.
    assert!(!consumer.poll(1, Duration::from_millis(10)).unwrap().is_empty());
    let stats = asker.group_stats(GROUP, TOPIC).unwrap();
    assert_eq!(stats.partitions.len(), PARTITIONS as usize);
    assert!(stats.partitions.iter().all(|p| p.committed.is_none() && p.position == 0));
    assert_eq!(stats.lag, 8);
    consumer.close();
    assert!(matches!(asker.group_stats(GROUP, TOPIC), Err(Error::NotFound(_))));
}

/// The child of [`a_worker_forked_without_exec_does_not_keep_a_dead_parents_locks`]:
/// holds durable name `dn` and a group membership of every partition,
/// forks a worker that neither execs nor touches what it inherited (it
/// waits for `end`, or a minute, with system calls only, as a child of a
/// threaded process must), marks `forked`, and waits to be killed.
fn forking_holder(dir: &Path) {
    let broker = processes(dir);
    let options = rill::SubscriptionOptions { name: Some("dn".into()), ..rill::SubscriptionOptions::default() };
    let _named = broker.subscribe(TOPIC, options, |_| rill::Ack::Success).unwrap();
    let mut consumer = broker.consumer(GROUP, TOPIC, options_long()).unwrap();
    consumer.poll(1, Duration::ZERO).unwrap();
    assert_eq!(consumer.assignment(), [0, 1, 2, 3], "alone, it owns every partition");
    let end = std::ffi::CString::new(dir.join("end").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: the child runs only async-signal-safe calls (access,
    // nanosleep, _exit) on memory it inherited, then exits.
    if unsafe { libc::fork() } == 0 {
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 10_000_000 };
        for _ in 0..6000 {
            // SAFETY: a NUL-terminated path the child inherited; a valid timespec.
            if unsafe { libc::access(end.as_ptr(), libc::F_OK) } == 0 {
                break;
            }
            // SAFETY: as above.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
        // SAFETY: ends the child at once, running nothing it inherited.
        unsafe { libc::_exit(0) };
    }
    procs::mark(dir, "forked");
    procs::wait_mark(dir, "end");
}

/// A member's options with [`LONG_SESSION`]: no fallback look comes during
/// a test.
fn options_long() -> ConsumerOptions {
    ConsumerOptions { session_timeout: LONG_SESSION, ..ConsumerOptions::default() }
}

/// A process that forks a worker without `exec` and is then killed does
/// not leave its durable name and its partitions to the worker: the
/// worker shares none of its lock files' descriptions (see "A child of
/// `fork` lets go of them" in `src/log/file/lock_file.rs`), so another
/// process takes the name and the partitions as soon as the holder dies,
/// with the worker still alive.
#[test]
fn a_worker_forked_without_exec_does_not_keep_a_dead_parents_locks() {
    const TEST: &str = "a_worker_forked_without_exec_does_not_keep_a_dead_parents_locks";
    if let Some((_, dir)) = procs::child_role() {
        forking_holder(&dir);
        return;
    }
    let dir = TempDir::new("forked-worker");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    let mut child = procs::spawn(TEST, "0", &dir.0);
    let forked = procs::wait_child_mark(&dir.0, "forked", &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let checks = || {
        assert!(forked, "the holder exited before it forked");
        let options = rill::SubscriptionOptions { name: Some("dn".into()), ..rill::SubscriptionOptions::default() };
        let mut named = None;
        wait_for("the durable name, with the worker alive", || {
            match broker.subscribe(TOPIC, options.clone(), |_| rill::Ack::Success) {
                Ok(sub) => named = Some(sub),
                Err(Error::Busy(_)) => {}
                Err(e) => panic!("subscribe: {e}"),
            }
            named.is_some()
        });
        let mut mine = broker.consumer(GROUP, TOPIC, options_long()).unwrap();
        wait_for("every partition, with the worker alive", || {
            mine.poll(1, Duration::from_millis(20)).unwrap();
            mine.assignment() == [0, 1, 2, 3]
        });
        mine.close();
    };
    // The worker waits for `end` (or a minute) and exits by itself.
    procs::check_then_release(checks, || procs::mark(&dir.0, "end"));
}

/// A group with a live member when another broker deletes its topic keeps
/// its commits on disk (the deleter forgets only groups with none live).
/// Once that member has left, the topic created again under the name has
/// no such group, as in one process: not listed, `group_stats` and
/// `delete_group` `NotFound` from either broker, until a member of the new
/// topic commits.
#[test]
fn a_group_live_when_its_topic_is_deleted_is_no_group_of_the_re_created_one() {
    let dir = TempDir::new("ghost-group");
    let (deleter, member_side) = (processes(&dir.0), processes(&dir.0));
    deleter.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&deleter, TOPIC, 8);
    let mut consumer = member_side.consumer(GROUP, TOPIC, options()).unwrap();
    wait_for("a message", || !consumer.poll(4, Duration::from_millis(20)).unwrap().is_empty());
    consumer.commit().unwrap();
    deleter.delete_topic(TOPIC).unwrap();
    // Its broker sees the delete (and its member leaves the group).
    wait_for("the delete seen by the member's broker", || {
        matches!(consumer.poll(1, Duration::ZERO), Err(Error::NoSuchTopic(_)))
    });
    consumer.close();
    deleter.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    for broker in [&deleter, &member_side] {
        assert_eq!(broker.groups(), [] as [(String, String); 0], "the deleted topic's group is not listed");
        assert!(matches!(broker.group_stats(GROUP, TOPIC), Err(Error::NotFound(_))));
        assert!(matches!(broker.delete_group(GROUP, TOPIC), Err(Error::NotFound(_))));
    }
    // A member of the new topic that commits makes it the group's.
    let published = procs::publish(&deleter, TOPIC, 4);
    let mut fresh = deleter.consumer(GROUP, TOPIC, options()).unwrap();
    let mut got = 0;
    wait_for("the new topic's messages", || {
        got += fresh.poll(16, Duration::from_millis(20)).unwrap().len();
        got >= published.len()
    });
    fresh.commit().unwrap();
    fresh.close();
    for broker in [&deleter, &member_side] {
        assert_eq!(broker.groups(), [(GROUP.to_owned(), TOPIC.to_owned())]);
        assert_eq!(broker.group_stats(GROUP, TOPIC).unwrap().lag, 0);
    }
    member_side.delete_group(GROUP, TOPIC).unwrap();
    assert!(deleter.groups().is_empty());
}

#[test]
fn a_group_whose_members_have_not_committed_is_listed_by_every_broker() {
    let dir = TempDir::new("groups-listed");
    let (a, b) = (processes(&dir.0), processes(&dir.0));
    a.create_topic(TOPIC, &TopicOptions { partitions: PARTITIONS, ..TopicOptions::default() }).unwrap();
    let mut member = a.consumer(GROUP, TOPIC, options()).unwrap();
    let want = [(GROUP.to_owned(), TOPIC.to_owned())];
    assert_eq!(a.groups(), want, "its own broker lists it");
    assert_eq!(b.groups(), want, "another broker on the directory lists it");
    member.close();
    assert!(b.groups().is_empty(), "a group with no member and no commit is no group");
}
