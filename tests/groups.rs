//! Consumer groups with many members: the partitions split among the live
//! members, rebalances on join, close and session expiry, the redelivery a
//! rebalance causes (and no other), and commits refused after a partition
//! moved.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rill::broker::partition_for_key;
use rill::{Broker, Consumer, ConsumerOptions, ConsumerStart, Error, Record, TopicOptions};

mod common;
use common::{WAIT, broker, wait_for};

/// (partition, offset) of a message.
type At = (u32, u64);

/// A key that routes to `partition` of a topic with `partitions`.
fn key_for(partition: u32, partitions: u32) -> Vec<u8> {
    (0u32..).map(|i| i.to_le_bytes().to_vec()).find(|k| partition_for_key(k, partitions) == partition).unwrap()
}

/// Publishes one message to `partition` of a topic with `partitions`.
fn publish_to(b: &Broker, topic: &str, partition: u32, partitions: u32, payload: &[u8]) {
    let key = key_for(partition, partitions);
    let pos = b.publish(topic, &Record::new(payload).with_key(&key)).unwrap();
    assert_eq!(pos.partition, partition);
}

/// Publishes `per` messages to each of the `partitions` partitions (keyed,
/// so the count per partition is exact).
fn fill(b: &Broker, topic: &str, partitions: u32, per: u64) {
    for p in 0..partitions {
        for i in 0..per {
            publish_to(b, topic, p, partitions, format!("{p}:{i}").as_bytes());
        }
    }
}

/// Polls without waiting until a poll comes back empty; returns what it got.
fn drain(c: &mut Consumer) -> Vec<At> {
    let mut got = Vec::new();
    loop {
        let batch: Vec<At> = c.poll(64, Duration::ZERO).unwrap().iter().map(|m| (m.partition(), m.offset())).collect();
        if batch.is_empty() {
            return got;
        }
        got.extend(batch);
    }
}

fn all(partitions: &[u32], from: u64, to: u64) -> BTreeSet<At> {
    partitions.iter().flat_map(|&p| (from..to).map(move |o| (p, o))).collect()
}

fn once(got: &[At]) -> BTreeSet<At> {
    let set: BTreeSet<At> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "no message twice: {got:?}");
    set
}

#[test]
fn two_members_split_four_partitions_and_a_close_hands_over_the_uncommitted_messages() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(4)).unwrap();
    fill(&b, "orders", 4, 10);
    let mut one = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    assert_eq!(one.assignment(), vec![0, 1, 2, 3], "alone, it owns every partition");
    let mut two = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    let (a1, a2) = (one.assignment(), two.assignment());
    assert_eq!((a1.len(), a2.len()), (2, 2), "{a1:?} {a2:?}");
    let union: BTreeSet<u32> = a1.iter().chain(&a2).copied().collect();
    assert_eq!(union, (0..4).collect(), "disjoint, and together all four");

    // What they poll and commit covers every message once.
    let (got1, got2) = (drain(&mut one), drain(&mut two));
    one.commit().unwrap();
    two.commit().unwrap();
    assert_eq!(once(&got1), all(&a1, 0, 10));
    assert_eq!(once(&got2), all(&a2, 0, 10));

    // `two` polls two more per partition and closes without committing them:
    // `one` takes its partitions and gets exactly those messages again.
    fill(&b, "orders", 4, 2);
    let polled_by_two = once(&drain(&mut two));
    assert_eq!(polled_by_two, all(&a2, 10, 12));
    drop(two);
    assert_eq!(one.assignment(), vec![0, 1, 2, 3]);
    let after = once(&drain(&mut one));
    let (redelivered, own): (BTreeSet<At>, BTreeSet<At>) = after.iter().partition(|(p, _)| a2.contains(p));
    assert_eq!(redelivered, polled_by_two, "the closed member's uncommitted messages, and nothing it committed");
    assert_eq!(own, all(&a1, 10, 12));
    one.commit().unwrap();
    let stats = b.group_stats("billing", "orders").unwrap();
    assert_eq!(stats.lag, 0);
    assert!(stats.partitions.iter().all(|p| p.committed == Some(12)));
}

#[test]
fn a_member_that_stops_polling_is_expelled_and_its_commit_is_refused_as_reassigned() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(4)).unwrap();
    fill(&b, "orders", 4, 5);
    let mut live = b.consumer("billing", "orders", ConsumerOptions::default()).unwrap();
    let short = ConsumerOptions { session_timeout: Duration::from_millis(50), ..Default::default() };
    let mut stalled = b.consumer("billing", "orders", short).unwrap();
    let mine = stalled.assignment();
    assert_eq!(mine.len(), 2);
    let polled = once(&drain(&mut stalled));
    assert_eq!(polled, all(&mine, 0, 5));

    // `stalled` stops polling. `live` keeps polling and, past the session
    // timeout, expels it and takes its partitions from the committed offsets
    // (none: from the start), so it receives what `stalled` polled.
    let mut got = Vec::new();
    wait_for("the live member to own every partition", || {
        got.extend(live.poll(64, Duration::from_millis(5)).unwrap().iter().map(|m| (m.partition(), m.offset())));
        live.assignment().len() == 4
    });
    got.extend(drain(&mut live));
    let got = once(&got);
    assert_eq!(got, all(&[0, 1, 2, 3], 0, 5));
    live.commit().unwrap();

    // The expelled member's commit would move the live member's positions:
    // refused, naming the partitions. The call rejoined it.
    let err = stalled.commit().unwrap_err();
    assert!(matches!(&err, Error::Reassigned(m) if m.contains(&format!("{mine:?}"))), "{err}");
    assert_eq!(stalled.assignment().len(), 2, "it rejoined");
    assert_eq!(b.group_stats("billing", "orders").unwrap().lag, 0, "the refused commit moved nothing");
    // Once rejoined, it reads from the group's commits: nothing is left.
    assert!(drain(&mut stalled).is_empty());
    fill(&b, "orders", 4, 1);
    let (a, c) = (once(&drain(&mut live)), once(&drain(&mut stalled)));
    assert_eq!(a.len() + c.len(), 4);
    assert!(a.is_disjoint(&c));
    stalled.commit().unwrap();
    live.commit().unwrap();
}

#[test]
fn a_commit_for_a_partition_it_no_longer_owns_is_refused_and_the_others_are_kept() {
    let b = broker();
    b.create_topic("orders", &TopicOptions::with_partitions(2)).unwrap();
    fill(&b, "orders", 2, 3);
    let mut one = b.consumer("g", "orders", ConsumerOptions::default()).unwrap();
    assert_eq!(drain(&mut one).len(), 6);
    let two = b.consumer("g", "orders", ConsumerOptions::default()).unwrap();
    let (kept, taken) = (one.assignment(), two.assignment());
    assert_eq!((kept.len(), taken.len()), (1, 1));
    assert!(matches!(one.commit_offset(taken[0], 1), Err(Error::Reassigned(_))));
    let err = one.commit().unwrap_err();
    assert!(matches!(&err, Error::Reassigned(m) if m.contains(&format!("{taken:?}"))), "{err}");
    assert_eq!(one.committed(kept[0]).unwrap(), 3, "its own partition was committed");
    assert!(matches!(one.committed(taken[0]), Err(Error::NotFound(_))));
    // Reported once; the next commit is clean.
    one.commit().unwrap();
    assert!(matches!(one.position(taken[0]), Err(Error::Reassigned(_))));
    assert!(matches!(one.seek(taken[0], 0), Err(Error::Reassigned(_))));
    assert!(matches!(one.position(7), Err(Error::NotFound(_))));
}

#[test]
fn rebalances_are_sticky_and_extra_members_wait_with_nothing() {
    let b = broker();
    b.create_topic("t", &TopicOptions::with_partitions(4)).unwrap();
    let mut members: Vec<Consumer> = Vec::new();
    let mut before: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for n in 1..=6usize {
        members.push(b.consumer("g", "t", ConsumerOptions::default()).unwrap());
        let now: Vec<Vec<u32>> = members.iter().map(Consumer::assignment).collect();
        let owned: Vec<u32> = now.iter().flatten().copied().collect();
        assert_eq!(owned.iter().copied().collect::<BTreeSet<u32>>(), (0..4).collect(), "{now:?}");
        assert_eq!(owned.len(), 4, "each partition to one member: {now:?}");
        let most = now.iter().map(Vec::len).max().unwrap();
        let least = now.iter().map(Vec::len).min().unwrap();
        assert!(most - least <= 1, "balanced: {now:?}");
        // Sticky: a join moves only the partitions the newcomer takes.
        let moved = now[..n - 1]
            .iter()
            .enumerate()
            .map(|(i, a)| before.get(&(i as u64)).unwrap().iter().filter(|p| !a.contains(p)).count())
            .sum::<usize>();
        if n > 1 {
            assert_eq!(moved, now[n - 1].len(), "{now:?}");
        }
        before = now.into_iter().enumerate().map(|(i, a)| (i as u64, a)).collect();
    }
    // Two of six own nothing: their polls return nothing, and a close of an
    // owner gives its partition to one of them.
    let idle = members.iter().position(|m| m.assignment().is_empty()).unwrap();
    assert!(members[idle].poll(10, Duration::ZERO).unwrap().is_empty());
    let owner = members.iter().position(|m| !m.assignment().is_empty()).unwrap();
    let given = members[owner].assignment();
    members.remove(owner);
    let now: Vec<Vec<u32>> = members.iter().map(Consumer::assignment).collect();
    assert_eq!(now.iter().flatten().count(), 4);
    assert!(now.contains(&given), "the whole share went to one waiting member: {now:?}");
}

#[test]
fn a_member_waiting_in_poll_wakes_for_partitions_it_is_given() {
    let b = broker();
    b.create_topic("t", &TopicOptions::with_partitions(2)).unwrap();
    let mut waiting = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let other = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let theirs = other.assignment()[0];
    publish_to(&b, "t", theirs, 2, b"for the other");
    let closer = std::thread::spawn(move || drop(other));
    // Blocks until the other member's close gives it that partition.
    let got: Vec<(u32, Vec<u8>)> =
        waiting.poll(10, common::WAIT).unwrap().iter().map(|m| (m.partition(), m.payload().to_vec())).collect();
    closer.join().unwrap();
    assert_eq!(got, vec![(theirs, b"for the other".to_vec())]);
}

#[test]
fn members_on_threads_under_publishers_receive_every_message_and_only_handed_over_ones_twice() {
    const PER: u64 = 2_000;
    let b = broker();
    b.create_topic("t", &TopicOptions::with_partitions(4)).unwrap();
    let published = Arc::new(AtomicBool::new(false));
    // Each member polls, records and commits after every batch; the first
    // one closes after 500 messages with its last batch uncommitted.
    let members: Vec<Consumer> = (0..3).map(|_| b.consumer("g", "t", ConsumerOptions::default()).unwrap()).collect();
    let publisher = {
        let (b, published) = (b.clone(), published.clone());
        std::thread::spawn(move || {
            fill(&b, "t", 4, PER);
            published.store(true, Ordering::SeqCst);
        })
    };
    let handles: Vec<_> = members
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let published = published.clone();
            std::thread::spawn(move || {
                // Committed; left uncommitted at close; refused (polled on a
                // partition that moved before the commit).
                let (mut committed, mut uncommitted, mut refused) = (Vec::new(), Vec::new(), Vec::new());
                loop {
                    let batch: Vec<At> = c
                        .poll(16, Duration::from_millis(20))
                        .unwrap()
                        .iter()
                        .map(|m| (m.partition(), m.offset()))
                        .collect();
                    if batch.is_empty() && published.load(Ordering::SeqCst) && c.stats().lag == 0 {
                        break;
                    }
                    uncommitted.extend(batch);
                    if i == 0 && committed.len() + uncommitted.len() >= 500 {
                        return (committed, uncommitted, refused);
                    }
                    match c.commit() {
                        Ok(()) => committed.append(&mut uncommitted),
                        Err(Error::Reassigned(_)) => {
                            let mine = c.assignment();
                            let (kept, lost): (Vec<At>, Vec<At>) =
                                uncommitted.drain(..).partition(|(p, _)| mine.contains(p));
                            committed.extend(kept);
                            refused.extend(lost);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                (committed, uncommitted, refused)
            })
        })
        .collect();
    publisher.join().unwrap();
    let results: Vec<(Vec<At>, Vec<At>, Vec<At>)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut seen: BTreeMap<At, usize> = BTreeMap::new();
    let mut may_repeat: BTreeSet<At> = BTreeSet::new();
    for (committed, uncommitted, refused) in &results {
        for at in committed.iter().chain(uncommitted).chain(refused) {
            *seen.entry(*at).or_default() += 1;
        }
        may_repeat.extend(uncommitted.iter().chain(refused));
    }
    assert_eq!(seen.keys().copied().collect::<BTreeSet<At>>(), all(&[0, 1, 2, 3], 0, PER), "every message");
    // Twice exactly what a member polled and could not commit because its
    // partition moved (the leaver's last batch, or a batch whose commit was
    // refused); everything else once.
    for (at, n) in &seen {
        let expected = if may_repeat.contains(at) { 2 } else { 1 };
        assert_eq!(*n, expected, "{at:?}");
    }
    assert!(!results[0].1.is_empty(), "the leaver left something uncommitted");
    assert_eq!(b.group_stats("g", "t").unwrap().lag, 0);
}

#[test]
fn a_consumer_behind_retention_counts_what_it_missed() {
    let b = broker();
    b.create_topic("firehose", &TopicOptions { retention_bytes: Some(16 << 10), ..TopicOptions::default() }).unwrap();
    let mut c = b.consumer("slow", "firehose", ConsumerOptions::default()).unwrap();
    let n = 5_000u64;
    for i in 0..n {
        b.publish("firehose", &Record::new(&i.to_le_bytes())).unwrap();
    }
    let mut got = Vec::new();
    loop {
        // Waiting polls take the path whose check used to drop the count.
        let batch: Vec<u64> = c
            .poll(100, Duration::from_millis(1))
            .unwrap()
            .iter()
            .map(|m| u64::from_le_bytes(m.payload().try_into().unwrap()))
            .collect();
        if batch.is_empty() {
            break;
        }
        got.extend(batch);
    }
    let missed = c.stats().missed;
    let first = b.topic_stats("firehose").unwrap().partitions[0].first_offset;
    assert!(missed > 0);
    assert_eq!(missed, first, "what retention trimmed before it was read");
    assert_eq!(got.len() as u64 + missed, n);
    assert_eq!(got, (first..n).collect::<Vec<u64>>());
}

#[test]
fn a_zero_session_timeout_is_refused() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let options = ConsumerOptions { session_timeout: Duration::ZERO, ..Default::default() };
    assert!(matches!(b.consumer("g", "t", options), Err(Error::InvalidArgument(m)) if m.contains("session_timeout")));
}

/// Polls without waiting; returns (offset, payload) pairs.
fn payloads(c: &mut Consumer) -> Vec<(u64, Vec<u8>)> {
    c.poll(100, Duration::ZERO).unwrap().iter().map(|m| (m.offset(), m.payload().to_vec())).collect()
}

#[test]
fn a_poison_message_is_retried_by_nack_then_dead_lettered_with_its_reason_and_skipped() {
    let b = broker();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    let attrs = [("trace", "t-1")];
    b.publish("jobs", &Record::new(b"poison").with_key(b"k").with_attributes(&attrs)).unwrap();
    b.publish("jobs", &Record::new(b"fine")).unwrap();
    let options = ConsumerOptions { max_attempts: 3, ..Default::default() };
    let mut c = b.consumer("workers", "jobs", options).unwrap();
    let both = vec![(0, b"poison".to_vec()), (1, b"fine".to_vec())];
    for attempt in 1..3 {
        assert_eq!(payloads(&mut c), both, "attempt {attempt}");
        assert!(!c.nack(0, 0).unwrap(), "attempt {attempt} is below max_attempts: delivered again");
    }
    assert_eq!(payloads(&mut c), both);
    assert!(c.nack(0, 0).unwrap(), "the third nack gives up on it");
    assert_eq!(payloads(&mut c), vec![(1, b"fine".to_vec())], "skipped: the next poll starts after it");
    c.commit().unwrap();
    assert_eq!(c.committed(0).unwrap(), 2);

    let mut dlq = b.consumer("reader", "$dlq/workers", ConsumerOptions::default()).unwrap();
    let dead = dlq.poll(10, Duration::ZERO).unwrap();
    assert_eq!(dead.len(), 1, "dead-lettered once");
    let m = &dead[0];
    assert_eq!((m.payload(), m.key()), (&b"poison"[..], Some(&b"k"[..])));
    let attr = |k: &str| m.attribute(k).map(str::to_owned);
    assert_eq!(attr("trace").as_deref(), Some("t-1"));
    assert!(attr("rill.dlq.reason").unwrap().contains("nacked 3 times"));
    assert_eq!(attr("rill.dlq.topic").as_deref(), Some("jobs"));
    assert_eq!(attr("rill.dlq.partition").as_deref(), Some("0"));
    assert_eq!(attr("rill.dlq.offset").as_deref(), Some("0"));
    assert_eq!(attr("rill.dlq.attempts").as_deref(), Some("3"));
    assert_eq!(attr("rill.dlq.group").as_deref(), Some("workers"));
}

/// A group name of 251 to 255 bytes was accepted, but its default
/// dead-letter topic `$dlq/<group>` is then over the topic name limit: every
/// nack at `max_attempts` failed with `InvalidTopic`, and the message could
/// never be dead-lettered. Such a group is refused when its consumer is made,
/// unless it names a dead-letter topic of its own.
#[test]
fn a_group_name_too_long_for_its_default_dead_letter_topic_is_refused() {
    let b = broker();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    let options = ConsumerOptions { max_attempts: 1, ..Default::default() };
    let long = "g".repeat(rill::MAX_SUBSCRIPTION_NAME_LEN + 1);
    let err = b.consumer(&long, "jobs", options.clone()).unwrap_err();
    let Error::InvalidArgument(text) = &err else { panic!("{err:?}") };
    assert!(text.contains("consumer group name") && text.contains("at most 250"), "{text}");
    assert!(text.contains("dead_letter_topic") && text.contains("$dlq/<group>"), "{text}");

    // The longest one that fits dead-letters at max_attempts.
    let fits = "g".repeat(rill::MAX_SUBSCRIPTION_NAME_LEN);
    let mut c = b.consumer(&fits, "jobs", options.clone()).unwrap();
    b.publish("jobs", &Record::new(b"poison")).unwrap();
    assert_eq!(payloads(&mut c), vec![(0, b"poison".to_vec())]);
    assert!(c.nack(0, 0).unwrap(), "dead-lettered at the first nack");
    let mut dlq = b.consumer("reader", &format!("$dlq/{fits}"), ConsumerOptions::default()).unwrap();
    assert_eq!(payloads(&mut dlq), vec![(0, b"poison".to_vec())]);
    drop(c);

    // A group with a dead-letter topic of its own keeps the topic name limit.
    let longest = "g".repeat(rill::broker::MAX_NAME_LEN);
    let own = ConsumerOptions { dead_letter_topic: Some("graveyard".into()), ..options };
    let mut c = b.consumer(&longest, "jobs", own).unwrap();
    assert_eq!(payloads(&mut c), vec![(0, b"poison".to_vec())]);
    assert!(c.nack(0, 0).unwrap());
    let mut graveyard = b.consumer("reader", "graveyard", ConsumerOptions::default()).unwrap();
    assert_eq!(payloads(&mut graveyard), vec![(0, b"poison".to_vec())]);
}

#[test]
fn nack_counts_survive_a_move_of_the_partition_and_bad_nacks_are_refused() {
    let b = broker();
    b.create_topic("jobs", &TopicOptions::with_partitions(2)).unwrap();
    publish_to(&b, "jobs", 0, 2, b"poison");
    let options =
        ConsumerOptions { max_attempts: 2, dead_letter_topic: Some("graveyard".into()), ..Default::default() };
    let mut first = b.consumer("g", "jobs", options.clone()).unwrap();
    assert!(matches!(first.nack(0, 0), Err(Error::OutOfRange { .. })), "not polled yet");
    assert_eq!(payloads(&mut first), vec![(0, b"poison".to_vec())]);
    assert!(!first.nack(0, 0).unwrap());
    assert!(matches!(first.nack(0, 5), Err(Error::OutOfRange { .. })));
    drop(first);
    // Another member takes the partition: the group remembers one attempt.
    let mut second = b.consumer("g", "jobs", options.clone()).unwrap();
    let other = b.consumer("g", "jobs", options).unwrap();
    let (mine, theirs) = (second.assignment(), other.assignment());
    assert_eq!(mine, vec![0], "{mine:?} {theirs:?}");
    assert!(matches!(second.nack(1, 0), Err(Error::Reassigned(_))));
    assert_eq!(payloads(&mut second), vec![(0, b"poison".to_vec())]);
    assert!(second.nack(0, 0).unwrap(), "the second attempt overall gives up");
    let mut reader = b.consumer("r", "graveyard", ConsumerOptions::default()).unwrap();
    assert_eq!(payloads(&mut reader).len(), 1);

    let bad = |o: ConsumerOptions| b.consumer("g", "jobs", o).unwrap_err();
    assert!(matches!(bad(ConsumerOptions { max_attempts: 0, ..Default::default() }), Error::InvalidArgument(_)));
    let own = ConsumerOptions { dead_letter_topic: Some("jobs".into()), ..Default::default() };
    assert!(matches!(bad(own), Error::InvalidArgument(m) if m.contains("come back")));
}

/// Issue 40 item 3: a nack that dead-letters a message moves the partition
/// to the message after it, not past the whole polled batch: the rest of the
/// batch is polled again, as after a nack below `max_attempts`.
#[test]
fn a_dead_lettering_nack_moves_to_the_next_message_and_the_rest_of_the_batch_comes_again() {
    let b = broker();
    b.create_topic("jobs", &TopicOptions::default()).unwrap();
    for i in 0..10u8 {
        b.publish("jobs", &Record::new(&[i])).unwrap();
    }
    let options = ConsumerOptions { max_attempts: 1, ..Default::default() };
    let mut c = b.consumer("workers", "jobs", options).unwrap();
    let offsets = |c: &mut Consumer, max| -> Vec<u64> {
        c.poll(max, Duration::ZERO).unwrap().iter().map(|m| m.offset()).collect()
    };
    assert_eq!(offsets(&mut c, 8), (0..8).collect::<Vec<u64>>());
    assert!(c.nack(0, 0).unwrap(), "max_attempts 1: the first nack gives up on it");
    assert_eq!(c.position(0).unwrap(), 1, "the dead letter is skipped, nothing else");
    assert_eq!(offsets(&mut c, 100), (1..10).collect::<Vec<u64>>());

    // A storm: every message nacked once as soon as it is polled (the rest
    // of its batch then comes again): each one is dead-lettered exactly once.
    let n = 400u64;
    for i in 0..n - 10 {
        b.publish("jobs", &Record::new(&i.to_le_bytes())).unwrap();
    }
    let mut storm = b.consumer("storm", "jobs", ConsumerOptions { max_attempts: 1, ..Default::default() }).unwrap();
    let mut dead = Vec::new();
    while let Some(&first) = offsets(&mut storm, 8).first() {
        assert!(storm.nack(0, first).unwrap());
        dead.push(first);
    }
    assert_eq!(dead, (0..n).collect::<Vec<u64>>());
    assert_eq!(b.topic_stats("$dlq/storm").unwrap().publish_count, n);
}

/// Issue 40 item 9: a session timeout shorter than the members' poll cycle
/// (each member expires between its own polls, so the group churns on
/// every poll) still lets every partition make progress: the partitions of
/// the members a poll expels go to the polling member, which reads them in
/// that poll (every partition it owns gets a share of `max`).
#[test]
fn a_session_timeout_shorter_than_the_poll_cycle_starves_no_partition() {
    const MEMBERS: usize = 8;
    const PARTITIONS: u32 = 3;
    const PER: u64 = 200;
    let b = broker();
    b.create_topic("t", &TopicOptions::with_partitions(PARTITIONS)).unwrap();
    fill(&b, "t", PARTITIONS, PER);
    let short = ConsumerOptions { session_timeout: Duration::from_millis(1), ..Default::default() };
    let mut members: Vec<Consumer> = (0..MEMBERS).map(|_| b.consumer("g", "t", short.clone()).unwrap()).collect();
    // The members poll in turn, 1 ms each, and commit what they polled (a
    // commit may be refused as reassigned: the new owner reads it again).
    // Round after round with no pause between them (`wait_for`'s pause
    // would let every member expire at once, which hides the churn).
    let deadline = Instant::now() + WAIT;
    while b.group_stats("g", "t").unwrap().lag > 0 {
        let committed: Vec<_> = b.group_stats("g", "t").unwrap().partitions.iter().map(|p| p.committed).collect();
        assert!(Instant::now() < deadline, "a partition starves: committed {committed:?}");
        for c in &mut members {
            c.poll(10, Duration::from_millis(1)).unwrap();
            match c.commit() {
                Ok(()) | Err(Error::Reassigned(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    let committed: Vec<_> = b.group_stats("g", "t").unwrap().partitions.iter().map(|p| p.committed).collect();
    assert_eq!(committed, vec![Some(PER); PARTITIONS as usize]);
}

/// A counter a ready hook bumps: how many times the consumer's bell rang.
fn bell(c: &mut Consumer) -> Arc<std::sync::atomic::AtomicUsize> {
    let rings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = rings.clone();
    c.set_ready_hook(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    rings
}

/// The ready hook, as an event loop uses it: it rings once after a poll
/// that found nothing, at the first publish, rebalance, deletion or close;
/// not while the owner has not looked again; not after a poll that found
/// messages (the owner polls again before waiting). Hung up, it is armed
/// as after an empty poll, and rings at once for what is already there.
#[test]
fn a_ready_hook_rings_once_after_an_empty_poll_at_the_first_change() {
    let b = broker();
    b.create_topic("t", &TopicOptions::with_partitions(2)).unwrap();
    let mut c = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let rings = bell(&mut c);
    let count = || rings.load(Ordering::SeqCst);
    assert_eq!(count(), 0, "nothing to read yet: armed, not rung");
    publish_to(&b, "t", 0, 2, b"before");
    assert_eq!(count(), 1, "armed when hung up: the first publish rings");
    assert_eq!(drain(&mut c).len(), 1);
    // The last poll of `drain` found nothing: armed.
    publish_to(&b, "t", 1, 2, b"a");
    assert_eq!(count(), 2, "the first publish after an empty poll rings");
    publish_to(&b, "t", 0, 2, b"b");
    assert_eq!(count(), 2, "once per arming");
    // A poll that finds messages disarms: nothing rings until one finds none.
    assert_eq!(c.poll(1, Duration::ZERO).unwrap().len(), 1);
    publish_to(&b, "t", 1, 2, b"c");
    assert_eq!(count(), 2);
    assert_eq!(drain(&mut c).len(), 2);
    // A rebalance rings (a member joins and takes a partition).
    let other = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    assert_eq!(count(), 3, "a join that takes a partition rings");
    assert!(drain(&mut c).is_empty());
    // So does closing the broker, and the next poll reports it.
    b.close();
    assert_eq!(count(), 4, "a close rings");
    assert!(matches!(c.poll(1, Duration::ZERO), Err(Error::Closed(_))));
    drop(other);
}

/// A hook hung up after the poll that found nothing (an event loop that
/// asks for its file descriptor lazily) is armed all the same, and one
/// hung up with messages already there rings at once.
#[test]
fn a_ready_hook_hung_up_after_the_empty_poll_is_armed() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    let mut c = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    assert!(c.poll(10, Duration::ZERO).unwrap().is_empty());
    let rings = bell(&mut c);
    assert_eq!(rings.load(Ordering::SeqCst), 0);
    b.publish("t", &Record::new(b"late")).unwrap();
    assert_eq!(rings.load(Ordering::SeqCst), 1, "the publish after the hook rings");

    // A second consumer with a message waiting when its hook is hung up.
    let mut d =
        b.consumer("h", "t", ConsumerOptions { start: ConsumerStart::Earliest, ..ConsumerOptions::default() }).unwrap();
    assert!(d.poll(0, Duration::ZERO).unwrap().is_empty(), "joined, nothing read");
    let rings = bell(&mut d);
    assert_eq!(rings.load(Ordering::SeqCst), 1, "a message already there rings at once");
    assert_eq!(d.poll(10, Duration::ZERO).unwrap().len(), 1);
}

/// No ring is ever missed: publishers on two threads race an owner that
/// polls until empty and then waits only for the bell (a deadline-based
/// wait on the ring count, which fails the test instead of hanging if a
/// ring were lost). Every message arrives exactly once.
#[test]
fn a_ready_hook_never_misses_a_publish_racing_the_empty_poll() {
    const PER_THREAD: u64 = 2000;
    let b = Arc::new(broker());
    b.create_topic("t", &TopicOptions::with_partitions(2)).unwrap();
    let mut c = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let rings = bell(&mut c);
    let publishers: Vec<_> = (0..2u32)
        .map(|p| {
            let b = b.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    publish_to(&b, "t", p, 2, &i.to_le_bytes());
                    if i % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let mut got = Vec::new();
    while (got.len() as u64) < 2 * PER_THREAD {
        let seen = rings.load(Ordering::SeqCst);
        let batch = drain(&mut c);
        if batch.is_empty() {
            // Armed and empty: only the bell may say there is more.
            wait_for("the bell after an empty poll", || rings.load(Ordering::SeqCst) != seen);
        }
        got.extend(batch);
    }
    for t in publishers {
        t.join().unwrap();
    }
    assert_eq!(once(&got), all(&[0, 1], 0, PER_THREAD));
}

/// A poll for `max` messages gets `max` when that many wait, also where a
/// segment ends: on a new topic the first segment is a small one (a
/// kilobyte), which used to cut the first poll short.
#[test]
fn a_poll_gets_a_full_batch_across_a_segment_boundary() {
    let b = broker();
    b.create_topic("t", &TopicOptions::default()).unwrap();
    for i in 0..200u32 {
        b.publish("t", &Record::new(&[i as u8; 100])).unwrap();
    }
    let mut c = b.consumer("g", "t", ConsumerOptions::default()).unwrap();
    let mut offsets = Vec::new();
    for _ in 0..4 {
        let batch = c.poll(50, WAIT).unwrap();
        assert_eq!(batch.len(), 50, "a full batch");
        offsets.extend(batch.iter().map(|m| m.offset()));
    }
    assert_eq!(offsets, (0..200).collect::<Vec<u64>>(), "each once, in order");
}
