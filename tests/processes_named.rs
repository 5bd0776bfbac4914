//! Named (durable) subscriptions across processes (issue 39, its sixth
//! step): a name is held by one process at a time, `Busy` for every other
//! until the holder closes or dies, and the next holder resumes after the
//! last positions written. Positions move with the directory between
//! `Exclusive` and `Processes` mode.
//!
//! The other processes are this test binary run again with
//! [`procs::ROLE`] set and only the one test selected (as in
//! `processes.rs`; see `tests/common/procs.rs`).

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::procs::{self, TempDir, child_role, expect_success, mark, spawn};
use common::{Rng, wait_for};
use rill::{
    Ack, Broker, BrokerConfig, Error, Fsync, Record, Sharing, StartPosition, SubscriptionOptions, TopicOptions,
};

/// The topic every process shares.
const TOPIC: &str = "orders";
/// The durable subscription's name.
const NAME: &str = "audit";
/// Kill -9 iterations, unless `RILL_NAMED_KILLS` says more (the long
/// version).
const KILLS: u32 = 50;
/// Messages published before each holder of the kill loop starts.
const PER_ROUND: u64 = 20;

fn config(dir: &Path, sharing: Sharing, fsync: Fsync) -> BrokerConfig {
    BrokerConfig { fsync, ..procs::config(dir, sharing) }
}

fn processes(dir: &Path) -> Broker {
    Broker::new(config(dir, Sharing::Processes, Fsync::Never)).unwrap()
}

/// The offsets delivered to a subscription, in delivery order.
type Seen = Arc<Mutex<Vec<u64>>>;

/// Subscribes as [`NAME`] to [`TOPIC`] (from its start the first time),
/// recording each offset before acking it.
fn subscribe_named(broker: &Broker) -> Result<(rill::Subscription, Seen), Error> {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let options = SubscriptionOptions {
        name: Some(NAME.into()),
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    let sub = broker.subscribe(TOPIC, options, move |m| {
        sink.lock().unwrap().push(m.record().offset());
        Ack::Success
    })?;
    Ok((sub, seen))
}

fn publish(broker: &Broker, n: u64) {
    for _ in 0..n {
        broker.publish(TOPIC, &Record::new(b"m")).unwrap();
    }
}

fn busy<T>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::Busy(_)) => {}
        Err(e) => panic!("{what}: expected Busy, got {e}"),
        Ok(_) => panic!("{what}: expected Busy, got Ok"),
    }
}

/// The child of [`a_name_held_in_another_process_is_busy_until_it_lets_go`]:
/// takes the name, gets the ten messages, says so, and closes when told.
fn holder_child(dir: &Path) {
    let broker = processes(dir);
    let (sub, seen) = subscribe_named(&broker).unwrap();
    wait_for("the ten messages", || seen.lock().unwrap().len() == 10);
    assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<u64>>());
    mark(dir, "holding");
    wait_for("the parent's go-ahead", || dir.join("release").exists());
    sub.close();
    mark(dir, "released");
    // Open until the parent is done with the topic (see `processes.rs`:
    // a broker's close rings the directory's doorbells).
    wait_for("the parent's done", || dir.join("done").exists());
}

#[test]
fn a_name_held_in_another_process_is_busy_until_it_lets_go() {
    const TEST: &str = "a_name_held_in_another_process_is_busy_until_it_lets_go";
    if let Some((_, dir)) = child_role() {
        holder_child(&dir);
        return;
    }
    let dir = TempDir::new("busy");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    publish(&broker, 10);
    let child = spawn(TEST, "hold", &dir.0);
    procs::check_then_release(
        || {
            wait_for("the child to hold the name", || dir.0.join("holding").exists());
            busy(subscribe_named(&broker), "subscribing while another process holds the name");
            busy(broker.delete_durable(NAME), "deleting while another process holds the name");
            mark(&dir.0, "release");
            wait_for("the child to let go", || dir.0.join("released").exists());
            // Resumes after the ten the child acked.
            let (sub, seen) = subscribe_named(&broker).unwrap();
            // Inside one process a second subscriber of a held name is Busy too.
            busy(subscribe_named(&broker), "a second subscribe in the holder's broker");
            let other = processes(&dir.0);
            busy(subscribe_named(&other), "a subscribe in another broker of the holder's process");
            publish(&broker, 3);
            wait_for("the three new messages", || seen.lock().unwrap().len() == 3);
            assert!(sub.wait_idle(common::WAIT).unwrap());
            assert_eq!(*seen.lock().unwrap(), [10, 11, 12], "nothing acked before is delivered again");
            busy(other.delete_durable(NAME), "deleting while another broker holds the name");
            sub.close();
            other.delete_durable(NAME).unwrap();
            match other.delete_durable(NAME) {
                Err(Error::NotFound(_)) => {}
                r => panic!("a second delete: expected NotFound, got {r:?}"),
            }
            // Forgotten: the next holder starts from its start option again.
            let (sub, seen) = subscribe_named(&broker).unwrap();
            wait_for("every message again", || seen.lock().unwrap().len() == 13);
            sub.close();
        },
        || {
            mark(&dir.0, "done");
            expect_success(child, "the holder");
        },
    );
}

/// The child of the kill loop, role `<i>:<fsync>:<published>`: takes the
/// name and records every offset it is given in `records-<i>`, one line
/// each, written before the handler acks it. Once it has the last of the
/// `published` messages and its subscription is idle (its last round
/// ended, and under `Always` its positions are synced), it makes `idle-<i>`.
/// Then it waits to be killed, unless it is the last (`end` exists), which
/// closes.
fn consumer_child(dir: &Path, role: &str) {
    let parts: Vec<&str> = role.split(':').collect();
    let (i, published): (&str, u64) = (parts[0], parts[2].parse().unwrap());
    let fsync = if parts[1] == "always" { Fsync::Always } else { Fsync::Never };
    let broker = Broker::new(config(dir, Sharing::Processes, fsync)).unwrap();
    let mut file =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("records-{i}"))).unwrap();
    let options = SubscriptionOptions {
        name: Some(NAME.into()),
        start: StartPosition::Earliest,
        ..SubscriptionOptions::default()
    };
    let last = Arc::new(Mutex::new(None));
    let seen = last.clone();
    let sub = broker
        .subscribe(TOPIC, options, move |m| {
            // One write of a whole line: a kill leaves it whole or absent.
            file.write_all(format!("{}\n", m.record().offset()).as_bytes()).unwrap();
            *seen.lock().unwrap() = Some(m.record().offset());
            Ack::Success
        })
        .unwrap();
    wait_for("every message", || *last.lock().unwrap() == Some(published - 1));
    assert!(sub.wait_idle(common::WAIT).unwrap());
    mark(dir, &format!("idle-{i}"));
    wait_for("the kill, or the parent's note that this is the last", || dir.join("end").exists());
    sub.close();
}

/// The offsets child `i` recorded (a line cut by the kill, if any, left out).
fn records(dir: &Path, i: u32) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join(format!("records-{i}"))).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |n| &text[..n]);
    whole.lines().map(|l| l.parse().unwrap()).collect()
}

#[test]
fn a_killed_holders_name_is_taken_by_another_process_which_resumes() {
    const TEST: &str = "a_killed_holders_name_is_taken_by_another_process_which_resumes";
    if let Some((role, dir)) = child_role() {
        consumer_child(&dir, &role);
        return;
    }
    let kills = procs::env_or("RILL_NAMED_KILLS", KILLS);
    let seed = std::env::var("RILL_NAMED_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("kill loop: {kills} kills, RILL_NAMED_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = TempDir::new("kills");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    // The highest offset any holder was given, and where the last holder
    // that was given anything started.
    let (mut highest, mut floor): (Option<u64>, u64) = (None, 0);
    // `exact`: the holder before was killed with its last acks written,
    // so the next one given anything must start right after them.
    let mut exact = false;
    let mut check = |i: u32, got: &[u64], exact: bool| {
        assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "holder {i}: in order, none skipped or doubled: {got:?}");
        if let Some(&first) = got.first() {
            let next = highest.map_or(0, |h| h + 1);
            assert!(first <= next, "holder {i} started at {first}, past {next}: messages lost (seed {seed})");
            assert!(!exact || first == next, "holder {i} started at {first}, not {next}: acks lost (seed {seed})");
            assert!(first >= floor, "holder {i} started at {first}, before {floor}: positions went back (seed {seed})");
            floor = first;
            highest = highest.max(got.last().copied());
        }
    };
    for i in 0..kills {
        publish(&broker, PER_ROUND);
        let published = u64::from(i + 1) * PER_ROUND;
        let always = i % 2 == 1;
        let fsync = if always { "always" } else { "never" };
        let mut child = spawn(TEST, &format!("{i}:{fsync}:{published}"), &dir.0);
        // A random moment: after it recorded `r` messages (0: at once,
        // perhaps before it has the name; every holder has at least
        // PER_ROUND new ones to read), or, one time in four, once it is
        // idle with every message acked.
        let idle = rng.below(4) == 0;
        if idle {
            wait_for("the holder to be idle", || dir.0.join(format!("idle-{i}")).exists());
        } else {
            let r = rng.below(PER_ROUND + 1) as usize;
            wait_for("the holder's progress", || records(&dir.0, i).len() >= r);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        check(i, &records(&dir.0, i), exact);
        // Under `Always` an idle holder's acks were synced before it went
        // idle: the next holder resumes exactly after them.
        exact = exact && records(&dir.0, i).is_empty() || (idle && always);
    }
    // The last holder reads to the end (new messages included, so it has
    // some whatever its predecessors read) and closes: nothing was lost.
    publish(&broker, PER_ROUND);
    let end = u64::from(kills + 1) * PER_ROUND;
    mark(&dir.0, "end");
    expect_success(spawn(TEST, &format!("{kills}:never:{end}"), &dir.0), "the last holder");
    check(kills, &records(&dir.0, kills), exact);
    assert_eq!(highest, Some(end - 1), "every message was delivered to some holder");
    // It closed after the last: the next holder gets only what is new.
    let (sub, seen) = subscribe_named(&broker).unwrap();
    publish(&broker, 1);
    wait_for("the new message", || !seen.lock().unwrap().is_empty());
    assert!(sub.wait_idle(common::WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), [end]);
}

#[test]
fn positions_move_with_the_directory_between_modes() {
    let dir = TempDir::new("modes");
    let exclusive = || Broker::new(config(&dir.0, Sharing::Exclusive, Fsync::Never)).unwrap();
    let take = |broker: &Broker, publish_n: u64, want: std::ops::Range<u64>| {
        let (sub, seen) = subscribe_named(broker).unwrap();
        publish(broker, publish_n);
        wait_for("the messages", || seen.lock().unwrap().len() >= want.clone().count());
        assert!(sub.wait_idle(common::WAIT).unwrap());
        assert_eq!(*seen.lock().unwrap(), want.collect::<Vec<u64>>());
        sub.close();
    };
    let broker = exclusive();
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    take(&broker, 5, 0..5);
    drop(broker);
    // Processes: the position saved in Exclusive mode, moved to the name's slots.
    let broker = processes(&dir.0);
    take(&broker, 3, 5..8);
    drop(broker);
    assert!(dir.0.join("named").is_dir());
    // Exclusive again: the position written in Processes mode, moved back.
    let broker = exclusive();
    assert!(!dir.0.join("named").exists(), "an Exclusive open folds the names' slots into the offsets");
    take(&broker, 2, 8..10);
    drop(broker);
    // Moved out by an open in which no one took the name, and back.
    drop(processes(&dir.0));
    let broker = exclusive();
    take(&broker, 1, 10..11);
    drop(broker);
    let broker = processes(&dir.0);
    take(&broker, 1, 11..12);
    broker.delete_durable(NAME).unwrap();
    drop(broker);
    // Deleted in Processes mode: gone in Exclusive mode too.
    let broker = exclusive();
    match broker.delete_durable(NAME) {
        Err(Error::NotFound(_)) => {}
        r => panic!("expected NotFound, got {r:?}"),
    }
}

/// A delete of a name no subscription ever took is `NotFound` and leaves
/// nothing behind: no lock file under `named/` (which a `Processes` broker
/// never removes), so the name is not listed, now or after a reopen. A
/// name whose positions an open moved there (no lock file yet) is still
/// deleted, and a name taken and deleted is `NotFound` the second time.
#[test]
fn deleting_a_name_never_taken_leaves_nothing_behind() {
    let dir = TempDir::new("unknown");
    let named = dir.0.join("named");
    let lock_files = || match std::fs::read_dir(&named) {
        Ok(entries) => entries.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".lock")).count(),
        Err(_) => 0,
    };
    let broker = processes(&dir.0);
    for i in 0..5 {
        match broker.delete_durable(&format!("never-used-{i}")) {
            Err(Error::NotFound(_)) => {}
            r => panic!("expected NotFound, got {r:?}"),
        }
    }
    assert_eq!(lock_files(), 0, "a delete of an unknown name made a lock file");
    assert!(broker.named_subscriptions().unwrap().is_empty(), "listed");
    drop(broker);
    assert!(processes(&dir.0).named_subscriptions().unwrap().is_empty(), "listed after a reopen");

    // Positions saved in Exclusive mode, moved to the name's slots by a
    // Processes open, with no lock file: the delete finds and forgets them.
    let exclusive = Broker::new(config(&dir.0, Sharing::Exclusive, Fsync::Never)).unwrap();
    exclusive.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    let (sub, seen) = subscribe_named(&exclusive).unwrap();
    publish(&exclusive, 3);
    wait_for("the messages", || seen.lock().unwrap().len() == 3);
    sub.close();
    drop(exclusive);
    let broker = processes(&dir.0);
    assert_eq!(lock_files(), 0);
    broker.delete_durable(NAME).unwrap();
    match broker.delete_durable(NAME) {
        Err(Error::NotFound(_)) => {}
        r => panic!("expected NotFound, got {r:?}"),
    }
    // Deleted: the name's next subscriber starts afresh.
    let (sub, seen) = subscribe_named(&broker).unwrap();
    wait_for("the messages again", || seen.lock().unwrap().len() == 3);
    assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);
    sub.close();
}

/// Creates [`TOPIC`] again, publishes five messages and checks that the
/// name's next holder reads the new topic from its first message.
fn recreated_is_read_from_its_start(broker: &Broker) {
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    publish(broker, 5);
    let (sub, seen) = subscribe_named(broker).unwrap();
    wait_for("the five new messages", || seen.lock().unwrap().len() >= 5);
    assert!(sub.wait_idle(common::WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), (0..5).collect::<Vec<u64>>(), "the new topic, from its first message");
    sub.close();
}

/// The child of [`a_held_name_drops_a_topic_another_process_deletes`]:
/// takes the name, which resumes the topic after the ten messages the
/// parent acked, says so, and waits until the parent's deletion closes the
/// subscription (it named the topic); then it closes its broker and ends.
fn deleted_under_holder_child(dir: &Path) {
    let broker = processes(dir);
    let (sub, seen) = subscribe_named(&broker).unwrap();
    mark(dir, "holding");
    wait_for("the deletion to close the subscription", || sub.is_closed());
    assert!(seen.lock().unwrap().is_empty(), "resumed after the ten acked: nothing more to deliver");
    drop(sub);
    drop(broker);
}

/// A topic deleted while another process holds a name whose positions
/// point into it, then created again: the name's next holder reads the new
/// topic from its first message, not from the old topic's position.
#[test]
fn a_held_name_drops_a_topic_another_process_deletes() {
    const TEST: &str = "a_held_name_drops_a_topic_another_process_deletes";
    if let Some((_, dir)) = child_role() {
        deleted_under_holder_child(&dir);
        return;
    }
    let dir = TempDir::new("held-deleted");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    publish(&broker, 10);
    let (sub, seen) = subscribe_named(&broker).unwrap();
    wait_for("the ten messages", || seen.lock().unwrap().len() == 10);
    assert!(sub.wait_idle(common::WAIT).unwrap());
    sub.close();
    // The child takes the name, its slots at the tenth message.
    let child = spawn(TEST, "hold", &dir.0);
    wait_for("the child to hold the name", || dir.0.join("holding").exists());
    // Held: the deleter leaves the name's slots to the holder.
    broker.delete_topic(TOPIC).unwrap();
    expect_success(child, "the holder");
    recreated_is_read_from_its_start(&broker);
}

/// The child of [`a_name_nobody_holds_drops_a_deleted_topic`]: takes the
/// name, acks the ten messages and closes, leaving its position in the
/// name's slots.
fn acked_ten_child(dir: &Path) {
    let broker = processes(dir);
    let (sub, seen) = subscribe_named(&broker).unwrap();
    wait_for("the ten messages", || seen.lock().unwrap().len() == 10);
    assert!(sub.wait_idle(common::WAIT).unwrap());
    assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<u64>>());
    sub.close();
    drop(broker);
}

/// A name nobody holds, whose positions point into a topic that is deleted
/// and created again: when it is taken again it reads the new topic from
/// its first message.
#[test]
fn a_name_nobody_holds_drops_a_deleted_topic() {
    const TEST: &str = "a_name_nobody_holds_drops_a_deleted_topic";
    if let Some((_, dir)) = child_role() {
        acked_ten_child(&dir);
        return;
    }
    let dir = TempDir::new("unheld-deleted");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    publish(&broker, 10);
    expect_success(spawn(TEST, "ack", &dir.0), "the first holder");
    // Nobody holds the name: the deleter drops the topic from its slots.
    broker.delete_topic(TOPIC).unwrap();
    recreated_is_read_from_its_start(&broker);
}

/// The child of [`a_holder_killed_before_it_saw_a_delete_leaves_no_stale_position`]:
/// takes the name, acks the ten messages with each drain round's positions
/// written (`Fsync::Always`), says so once its slots exist, and waits to be
/// stopped and killed.
fn holder_killed_child(dir: &Path) {
    let broker = Broker::new(config(dir, Sharing::Processes, Fsync::Always)).unwrap();
    let (sub, seen) = subscribe_named(&broker).unwrap();
    wait_for("the ten messages", || seen.lock().unwrap().len() == 10);
    assert!(sub.wait_idle(common::WAIT).unwrap());
    // The slots of a name written once (its key is its bytes in hex).
    let key: String = NAME.bytes().map(|b| format!("{b:02x}")).collect();
    let slots = [0, 1].map(|i| dir.join("named").join(format!("{key}.{i}")));
    wait_for("the positions written", || slots.iter().any(|s| s.exists()));
    mark(dir, "holding");
    wait_for("the kill", || dir.join("end").exists());
}

/// Every thread of process `pid` is stopped (`T` in its `stat`).
fn all_stopped(pid: u32) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks.map(|t| std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default()).all(|stat| {
        // The state is the first field after the command's closing parenthesis.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|c| c == 'T' || c == 't')
    })
}

/// The gap "What this leaves open" once named in `store/named.rs`: the
/// holder of a name is stopped (so its doorbell thread cannot reread the
/// topic list) while another process deletes the topic its positions point
/// into (skipping the held name), then killed. Its slots still hold the old
/// topic's positions; the name's next holder must see that they are of a
/// deleted topic (its directory number is not the re-created topic's) and
/// read the new topic from its first message.
#[test]
fn a_holder_killed_before_it_saw_a_delete_leaves_no_stale_position() {
    const TEST: &str = "a_holder_killed_before_it_saw_a_delete_leaves_no_stale_position";
    if let Some((_, dir)) = child_role() {
        holder_killed_child(&dir);
        return;
    }
    let dir = TempDir::new("killed-before-reread");
    let broker = processes(&dir.0);
    broker.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    publish(&broker, 10);
    let mut child = spawn(TEST, "hold", &dir.0);
    assert!(procs::wait_child_mark(&dir.0, "holding", &mut child), "the holder ended before holding the name");
    let pid = child.id();
    // SAFETY: kill(2) on our own child's pid, with a constant signal; it touches no memory.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    wait_for("every thread of the holder to stop", || all_stopped(pid));
    // Held: the deleter leaves the name's slots to the holder, which never
    // runs again to drop the topic from them.
    broker.delete_topic(TOPIC).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    recreated_is_read_from_its_start(&broker);
}

/// `named_subscriptions` across processes lists durable names: one held
/// (with its holder's pid), and one whose holder closed or died (no pid).
/// Not a name deleted with `delete_durable` (whose lock file stays: a
/// `Processes` broker never removes one), nor a shared subscription's
/// name, whose members hold the same lock file shared, as `Exclusive`
/// mode lists neither.
#[test]
fn a_deleted_name_and_a_shared_subscriptions_are_not_listed_as_durable() {
    let dir = TempDir::new("listed");
    let (a, b) = (processes(&dir.0), processes(&dir.0));
    a.create_topic(TOPIC, &TopicOptions::default()).unwrap();
    let listed = |broker: &Broker| -> Vec<(String, Option<u32>)> {
        broker.named_subscriptions().unwrap().into_iter().map(|n| (n.name, n.holder_pid)).collect()
    };
    let pid = Some(std::process::id());

    // Taken, never acked anything, closed: still a durable name.
    let (sub, _) = subscribe_named(&a).unwrap();
    assert_eq!(listed(&b), [(NAME.to_owned(), pid)]);
    sub.close();
    assert_eq!(listed(&b), [(NAME.to_owned(), None)]);
    a.delete_durable(NAME).unwrap();
    assert_eq!(listed(&b), [], "a deleted name is listed");
    assert_eq!(listed(&processes(&dir.0)), [], "a deleted name is listed after a reopen");

    // Taken again after its delete: listed again.
    let (sub, _) = subscribe_named(&b).unwrap();
    assert_eq!(listed(&a), [(NAME.to_owned(), pid)]);
    sub.close();

    let options = SubscriptionOptions { name: Some("workers".into()), shared: true, ..SubscriptionOptions::default() };
    let members = [
        a.subscribe(TOPIC, options.clone(), |_| Ack::Success).unwrap(),
        b.subscribe(TOPIC, options, |_| Ack::Success).unwrap(),
    ];
    assert_eq!(listed(&a), [(NAME.to_owned(), None)], "a shared subscription is listed as durable");
    for m in members {
        m.close();
    }
    assert_eq!(listed(&b), [(NAME.to_owned(), None)], "a closed shared subscription is listed as durable");
}
