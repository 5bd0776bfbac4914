//! What a delete leaves behind in a data directory shared by processes:
//! nothing. A consumer group's folder (its partitions' lock files, its
//! members' files) and a durable name's lock file go with the group or
//! the name, so a program that uses a new group or name for each job
//! does not fill the directory with one folder or file per name ever used.
//! A group with a live member keeps its folder (its delete is `Busy`), and
//! a member killed with -9 leaves nothing once the group is deleted.
//!
//! The killed member is this test binary run again as a child
//! (`common/procs.rs`).

mod common;

use std::path::Path;
use std::time::Duration;

use common::procs::{self, TempDir};
use rill::{Ack, Broker, ConsumerOptions, Error, Sharing, StartPosition, SubscriptionOptions, TopicOptions};

const TOPIC: &str = "jobs";
const PARTITIONS: u32 = 3;

fn processes(dir: &Path) -> Broker {
    Broker::new(procs::config(dir, Sharing::Processes)).unwrap()
}

/// The entries of `dir`'s folder `sub` (none if it is missing), sorted.
fn files_in(dir: &Path, sub: &str) -> Vec<String> {
    let mut files: Vec<String> = match std::fs::read_dir(dir.join(sub)) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{sub}: {e}"),
    };
    files.sort();
    files
}

/// A member of `group` that polls everything there is and commits it, then
/// closes.
fn consume_and_commit(broker: &Broker, group: &str) {
    let mut consumer = broker.consumer(group, TOPIC, ConsumerOptions::default()).unwrap();
    while !consumer.poll(64, Duration::from_millis(50)).unwrap().is_empty() {}
    consumer.commit().unwrap();
    consumer.close();
}

#[test]
fn deleted_groups_leave_no_folder_and_a_live_member_keeps_its_own() {
    let dir = TempDir::new("tidy-groups");
    let (a, b) = (processes(&dir.0), processes(&dir.0));
    a.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&a, TOPIC, 30);

    // One group a job, each used, committed and deleted: nothing stays.
    for job in 0..20 {
        let group = format!("job-{job}");
        consume_and_commit(if job % 2 == 0 { &a } else { &b }, &group);
        assert_eq!(files_in(&dir.0, "groups").len(), 1, "the group's folder while it has commits");
        b.delete_group(&group, TOPIC).unwrap();
        assert_eq!(files_in(&dir.0, "groups"), Vec::<String>::new(), "job {job} left its folder behind");
    }

    // A live member (in the other broker) keeps the group and its folder.
    consume_and_commit(&a, "live");
    let mut member = b.consumer("live", TOPIC, ConsumerOptions::default()).unwrap();
    member.poll(1, Duration::ZERO).unwrap();
    assert!(matches!(a.delete_group("live", TOPIC), Err(Error::Busy(_))));
    let folder = files_in(&dir.0, "groups");
    assert_eq!(folder.len(), 1);
    let inside = files_in(&dir.0, &format!("groups/{}", folder[0]));
    assert!(inside.iter().any(|f| f.ends_with(".member")), "the live member's file: {inside:?}");
    assert!(inside.iter().any(|f| f == "p0.lock"), "its partitions' lock files: {inside:?}");
    // It still owns its partitions and commits.
    assert_eq!(member.assignment(), (0..PARTITIONS).collect::<Vec<_>>());
    member.commit().unwrap();
    member.close();
    a.delete_group("live", TOPIC).unwrap();
    assert_eq!(files_in(&dir.0, "groups"), Vec::<String>::new());

    // The same name used again after its delete: a new group, from the
    // first message, through new lock files.
    let mut again = a.consumer("job-0", TOPIC, ConsumerOptions::default()).unwrap();
    let mut polled = 0;
    loop {
        let n = again.poll(64, Duration::from_millis(50)).unwrap().len();
        if n == 0 {
            break;
        }
        polled += n;
    }
    assert_eq!(polled, 30, "a group deleted and used again starts afresh");
    again.close();
}

#[test]
fn a_deleted_topic_takes_the_folders_of_groups_that_never_committed() {
    let dir = TempDir::new("tidy-topic");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&broker, TOPIC, 5);
    for group in ["never-committed", "also-never"] {
        let mut consumer = broker.consumer(group, TOPIC, ConsumerOptions::default()).unwrap();
        assert!(!consumer.poll(64, Duration::from_millis(50)).unwrap().is_empty());
        consumer.close();
    }
    consume_and_commit(&broker, "committed");
    assert_eq!(files_in(&dir.0, "groups").len(), 3);
    broker.delete_topic(TOPIC).unwrap();
    assert_eq!(files_in(&dir.0, "groups"), Vec::<String>::new());
}

/// The child of [`a_killed_members_group_is_deleted_with_its_files`]: joins
/// the group, owns every partition, commits, marks `joined` and waits to be
/// killed.
fn killed_member(dir: &Path) {
    let broker = processes(dir);
    let mut consumer = broker.consumer("crashy", TOPIC, ConsumerOptions::default()).unwrap();
    consumer.poll(64, Duration::from_millis(50)).unwrap();
    consumer.commit().unwrap();
    procs::mark(dir, "joined");
    procs::wait_mark(dir, "never");
}

#[test]
fn a_killed_members_group_is_deleted_with_its_files() {
    const TEST: &str = "a_killed_members_group_is_deleted_with_its_files";
    if let Some((_, dir)) = procs::child_role() {
        killed_member(&dir);
        return;
    }
    let dir = TempDir::new("tidy-killed");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&broker, TOPIC, 10);
    let mut child = procs::spawn(TEST, "member", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "joined", &mut child), "the member did not join");
    assert!(matches!(broker.delete_group("crashy", TOPIC), Err(Error::Busy(_))), "its member is live");
    child.kill().unwrap();
    child.wait().unwrap();
    broker.delete_group("crashy", TOPIC).unwrap();
    assert_eq!(files_in(&dir.0, "groups"), Vec::<String>::new(), "the dead member's files stayed");
}

#[test]
fn a_deleted_durable_name_leaves_no_lock_file() {
    let dir = TempDir::new("tidy-names");
    let (a, b) = (processes(&dir.0), processes(&dir.0));
    a.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    procs::publish(&a, TOPIC, 3);
    let options = |name: &str| SubscriptionOptions {
        name: Some(name.into()),
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    for job in 0..20 {
        let name = format!("job-{job}");
        let sub = a.subscribe(TOPIC, options(&name), |_| Ack::Success).unwrap();
        sub.close();
        assert!(!files_in(&dir.0, "named").is_empty());
        b.delete_durable(&name).unwrap();
        assert_eq!(files_in(&dir.0, "named"), Vec::<String>::new(), "job {job} left its name's files behind");
        assert!(matches!(b.delete_durable(&name), Err(Error::NotFound(_))), "a deleted name is deleted");
    }
    // A name taken again after its delete is held through its new file:
    // a second taker is refused.
    let held = b.subscribe(TOPIC, options("job-0"), |_| Ack::Success).unwrap();
    assert!(matches!(a.subscribe(TOPIC, options("job-0"), |_| Ack::Success), Err(Error::Busy(_))));
    held.close();
}

/// Members joining, committing and leaving in two brokers while a third
/// deletes the group over and over: every call succeeds or is refused as
/// documented (`Busy` while a member lives, `NotFound` with nothing to
/// forget, `Reassigned` for a partition given up), none fails on a file
/// or folder the delete removed under it; once all have left, the delete
/// takes everything.
#[test]
fn joins_racing_deletes_fail_only_as_documented() {
    let dir = TempDir::new("tidy-race");
    let brokers = [processes(&dir.0), processes(&dir.0), processes(&dir.0)];
    brokers[0].create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&brokers[0], TOPIC, 30);
    let rounds = procs::env_or("RILL_CRASH_ITERATIONS", 40);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let members: Vec<_> = brokers[..2]
            .iter()
            .map(|broker| {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let mut c = broker.consumer("racy", TOPIC, ConsumerOptions::default()).unwrap();
                        c.poll(64, Duration::from_millis(5)).unwrap();
                        match c.commit() {
                            Ok(()) | Err(Error::Reassigned(_)) => {}
                            Err(e) => panic!("commit: {e}"),
                        }
                        c.close();
                        // Room for the delete between a leave and the next
                        // join, which two members in a loop seldom leave.
                        for _ in 0..200 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match brokers[2].delete_group("racy", TOPIC) {
                    Ok(()) | Err(Error::Busy(_) | Error::NotFound(_)) => {}
                    Err(e) => panic!("delete_group: {e}"),
                }
            }
        });
        for m in members {
            m.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    match brokers[2].delete_group("racy", TOPIC) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => panic!("the last delete_group: {e}"),
    }
    assert_eq!(files_in(&dir.0, "groups"), Vec::<String>::new());
}

/// A group with a live member when its topic is deleted is skipped by the
/// delete; once its member has gone, `delete_group` (which answers
/// `NotFound`, as in one process) or the next topic deleted removes what
/// it left, and a group of the topic created again is kept.
#[test]
fn a_group_live_when_its_topic_was_deleted_is_removed_once_its_member_is_gone() {
    let dir = TempDir::new("tidy-deleted-topic");
    let (a, b) = (processes(&dir.0), processes(&dir.0));
    a.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&a, TOPIC, 10);
    let mut members: Vec<_> = ["late-1", "late-2"]
        .into_iter()
        .map(|group| {
            let mut c = b.consumer(group, TOPIC, ConsumerOptions::default()).unwrap();
            c.poll(64, Duration::from_millis(50)).unwrap();
            c.commit().unwrap();
            c
        })
        .collect();
    a.delete_topic(TOPIC).unwrap();
    assert_eq!(files_in(&dir.0, "groups").len(), 2, "live members keep their groups at the delete");
    for mut c in members.drain(..) {
        c.close();
    }
    assert!(matches!(a.delete_group("late-1", TOPIC), Err(Error::NotFound(_))));
    assert_eq!(files_in(&dir.0, "groups").len(), 1, "delete_group removed late-1's folder");
    // The topic created again, a group of it committed and gone: the next
    // topic deleted takes late-2's folder and keeps the new group's.
    a.create_topic(TOPIC, &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    procs::publish(&a, TOPIC, 5);
    consume_and_commit(&a, "fresh");
    a.create_topic("other", &TopicOptions::default()).unwrap();
    a.delete_topic("other").unwrap();
    assert_eq!(files_in(&dir.0, "groups").len(), 1, "late-2's folder stayed, or fresh's went");
    assert_eq!(a.groups(), [("fresh".to_owned(), TOPIC.to_owned())]);
    let mut again = a.consumer("fresh", TOPIC, ConsumerOptions::default()).unwrap();
    assert!(again.poll(64, Duration::from_millis(50)).unwrap().is_empty(), "fresh's commits were kept");
    again.close();
}

/// Reopens of a shared directory go on in each partition's newest file
/// ("Resuming the last file" in `src/log/recovery.rs`): five rounds of a
/// first opener and a broker that joins it, each publishing, leave one
/// segment file a partition, and a consumer reads every message.
#[test]
fn reopens_of_a_shared_directory_leave_one_file_a_partition() {
    let dir = TempDir::new("tidy-reopen");
    let per_round = 4 * PARTITIONS as usize;
    for round in 0..5 {
        let first = processes(&dir.0);
        if round == 0 {
            first.create_topic(TOPIC, &TopicOptions { partitions: PARTITIONS, ..TopicOptions::default() }).unwrap();
        }
        let joined = processes(&dir.0);
        for (i, broker) in [&first, &joined].into_iter().enumerate() {
            for n in 0..per_round / 2 {
                let key = format!("{round}-{i}-{n}");
                broker.publish(TOPIC, &rill::Record::new(key.as_bytes()).with_key(key.as_bytes())).unwrap();
            }
        }
        joined.close();
        first.close();
    }
    for p in 0..PARTITIONS {
        let files = files_in(&dir.0, &format!("topics/0/{p}"));
        let segments: Vec<&String> = files.iter().filter(|f| f.ends_with(".seg")).collect();
        assert_eq!(segments.len(), 1, "partition {p}: {files:?}");
    }
    let broker = processes(&dir.0);
    let mut consumer = broker.consumer("check", TOPIC, ConsumerOptions::default()).unwrap();
    let mut got = 0;
    loop {
        let batch = consumer.poll(64, Duration::from_millis(200)).unwrap();
        if batch.is_empty() {
            break;
        }
        got += batch.len();
    }
    assert_eq!(got, 5 * per_round);
    consumer.close();
}
