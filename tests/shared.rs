//! Shared (competing) push subscriptions: members with one name divide the
//! topic's partitions, a join or a close hands partitions over at the
//! position reached, and the only redelivery is the documented one (the
//! message whose handler call a close cut short).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rill::{Ack, Broker, Error, Record, RetryBackoff, StartPosition, Subscription, SubscriptionOptions};

mod common;
use common::{WAIT, broker, topic, wait_for};

/// (member, partition, offset) of one handler call, in call order.
type Log = Arc<Mutex<Vec<(usize, u32, u64)>>>;

fn shared(name: &str) -> SubscriptionOptions {
    SubscriptionOptions { name: Some(name.into()), shared: true, start: StartPosition::Earliest, ..Default::default() }
}

/// A member that records each call in `log` and acks it.
fn member(b: &Broker, name: &str, id: usize, log: &Log) -> Subscription {
    let log = log.clone();
    b.subscribe("jobs", shared(name), move |m| {
        log.lock().unwrap().push((id, m.partition(), m.offset()));
        Ack::Success
    })
    .unwrap()
}

fn owned(s: &Subscription) -> Vec<u32> {
    s.stats().partitions.iter().map(|p| p.partition).collect()
}

#[test]
fn members_divide_the_partitions_and_a_closed_members_go_to_the_others() {
    let b = broker();
    topic(&b, "jobs", 4);
    let log: Log = Arc::default();
    let m0 = member(&b, "w", 0, &log);
    assert_eq!(owned(&m0), vec![0, 1, 2, 3]);
    let m1 = member(&b, "w", 1, &log);
    // The first member gives up two partitions at its next round.
    wait_for("the hand-over to the second member", || owned(&m0).len() == 2 && owned(&m1).len() == 2);
    let m2 = member(&b, "w", 2, &log);
    wait_for("the hand-over to the third member", || {
        let mut all: Vec<u32> = [&m0, &m1, &m2].iter().flat_map(|s| owned(s)).collect();
        all.sort_unstable();
        all == vec![0, 1, 2, 3] && owned(&m2).len() == 1
    });
    m0.close();
    wait_for("the closed member's partitions at the others", || owned(&m1).len() + owned(&m2).len() == 4);
    let mut all: Vec<u32> = owned(&m1).into_iter().chain(owned(&m2)).collect();
    all.sort_unstable();
    assert_eq!(all, vec![0, 1, 2, 3]);
}

#[test]
fn a_shared_name_clashes_with_a_plain_one_and_needs_a_name_and_one_topic() {
    let b = broker();
    topic(&b, "jobs", 2);
    topic(&b, "other", 2);
    let plain =
        b.subscribe("jobs", SubscriptionOptions { name: Some("w".into()), ..Default::default() }, |_| Ack::Success);
    let plain = plain.unwrap();
    assert!(matches!(b.subscribe("jobs", shared("w"), |_| Ack::Success), Err(Error::Busy(_))));
    plain.close();
    let s = b.subscribe("jobs", shared("w"), |_| Ack::Success).unwrap();
    let again =
        b.subscribe("jobs", SubscriptionOptions { name: Some("w".into()), ..Default::default() }, |_| Ack::Success);
    assert!(matches!(again, Err(Error::Busy(_))));
    assert!(matches!(b.subscribe("other", shared("w"), |_| Ack::Success), Err(Error::Busy(_))));
    let anon = SubscriptionOptions { shared: true, ..Default::default() };
    assert!(matches!(b.subscribe("jobs", anon, |_| Ack::Success), Err(Error::InvalidArgument(_))));
    assert!(matches!(b.subscribe("*", shared("x"), |_| Ack::Success), Err(Error::InvalidArgument(_))));
    s.close();
}

#[test]
fn three_members_under_four_publishers_handle_everything_once_but_the_message_a_close_cut_short() {
    let b = broker();
    topic(&b, "jobs", 4);
    let log: Log = Arc::default();
    let m0 = member(&b, "w", 0, &log);
    let done = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicUsize::new(0));
    let publishers: Vec<_> = (0..4)
        .map(|t| {
            let (b, published, done) = (b.clone(), published.clone(), done.clone());
            thread::spawn(move || {
                let mut i = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let key = format!("{t}-{i}");
                    b.publish("jobs", &Record::new(key.as_bytes()).with_key(key.as_bytes())).unwrap();
                    published.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    let handled_by = |m: usize| log.lock().unwrap().iter().filter(|c| c.0 == m).count();
    let more = |n: usize| {
        let target = published.load(Ordering::Relaxed) + n;
        wait_for("more traffic", || published.load(Ordering::Relaxed) >= target);
    };
    // Joins and a close while the publishers run; each member gets work.
    more(1000);
    let m1 = member(&b, "w", 1, &log);
    wait_for("the second member to handle messages", || handled_by(1) > 100);
    let m2 = member(&b, "w", 2, &log);
    wait_for("the third member to handle messages", || handled_by(2) > 100);
    more(1000);
    m1.close();
    more(1000);
    done.store(true, Ordering::Relaxed);
    for p in publishers {
        p.join().unwrap();
    }
    assert!(m0.wait_idle(WAIT).unwrap());
    assert!(m2.wait_idle(WAIT).unwrap());
    let total = published.load(Ordering::Relaxed) as u64;

    let log = log.lock().unwrap().clone();
    let mut per_partition: BTreeMap<u32, Vec<(usize, u64)>> = BTreeMap::new();
    for &(m, p, o) in &log {
        per_partition.entry(p).or_default().push((m, o));
    }
    let mut distinct = 0;
    let mut twice = Vec::new();
    for (p, calls) in &per_partition {
        // In call order, each partition runs 0, 1, 2, ... with nothing
        // skipped; an offset comes twice only back to back, first at the
        // closed member (its last call there), then at the new owner.
        let mut expect = 0;
        for (k, &(m, o)) in calls.iter().enumerate() {
            if o + 1 == expect {
                let (prev, _) = calls[k - 1];
                assert_eq!(prev, 1, "partition {p} offset {o}: only the closed member's message comes again");
                assert!(
                    !calls[k + 1..].iter().any(|&(x, _)| x == 1),
                    "partition {p} offset {o}: the closed member's last call there"
                );
                assert_ne!(m, 1);
                twice.push((*p, o));
                continue;
            }
            assert_eq!(o, expect, "partition {p}: in order, none skipped ({calls:?})");
            expect += 1;
        }
        distinct += expect;
    }
    assert_eq!(distinct, total, "every message handled");
    // A close cuts short at most the one call in flight.
    assert!(twice.len() <= 1, "redelivered: {twice:?}");
    // Acks: every message once; the cut-short call's ack was discarded.
    let stats = [m0.stats(), m1.stats(), m2.stats()];
    assert_eq!(stats.iter().map(|s| s.acked).sum::<u64>(), total);
    assert_eq!(stats.iter().map(|s| s.delivered).sum::<u64>(), log.len() as u64);
    assert_eq!(log.len() as u64, total + twice.len() as u64);
    let owners: BTreeSet<u32> = owned(&m0).into_iter().chain(owned(&m2)).collect();
    assert_eq!(owners, (0..4).collect());
}

#[test]
fn a_message_waiting_for_a_retry_at_close_goes_to_the_next_member_not_lost() {
    let b = broker();
    topic(&b, "jobs", 1);
    let log: Log = Arc::default();
    let retries = SubscriptionOptions {
        backoff: RetryBackoff { initial: Duration::from_secs(60), max: Duration::from_secs(60), multiplier: 1.0 },
        ..shared("w")
    };
    let first = {
        let log = log.clone();
        b.subscribe("jobs", retries, move |m| {
            log.lock().unwrap().push((0, m.partition(), m.offset()));
            if m.offset() == 1 { Ack::Retry } else { Ack::Success }
        })
        .unwrap()
    };
    for i in 0..3u8 {
        b.publish("jobs", &Record::new(&[i])).unwrap();
    }
    wait_for("the retry to be scheduled", || first.stats().retried == 1);
    // The second member joins with nothing to take (one partition, held).
    let second = member(&b, "w", 1, &log);
    assert!(owned(&second).is_empty());
    first.close();
    wait_for("the hand-over", || owned(&second) == vec![0]);
    assert!(second.wait_idle(WAIT).unwrap());
    let log = log.lock().unwrap().clone();
    assert_eq!(log, vec![(0, 0, 0), (0, 0, 1), (1, 0, 1), (1, 0, 2)]);
}

#[test]
fn the_last_member_leaves_its_position_for_the_next_one() {
    let b = broker();
    topic(&b, "jobs", 2);
    let log: Log = Arc::default();
    let m = member(&b, "w", 0, &log);
    for i in 0..10u8 {
        b.publish("jobs", &Record::new(&[i])).unwrap();
    }
    assert!(m.wait_idle(WAIT).unwrap());
    m.close();
    for i in 0..10u8 {
        b.publish("jobs", &Record::new(&[i])).unwrap();
    }
    let n = member(&b, "w", 1, &log);
    assert!(n.wait_idle(WAIT).unwrap());
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 20, "nothing twice, nothing lost: {log:?}");
    assert_eq!(log.iter().filter(|c| c.0 == 1).count(), 10);
}

#[test]
fn members_on_their_own_threads_share_too_and_a_broker_close_ends_them_all() {
    let b = broker();
    topic(&b, "jobs", 4);
    let count = Arc::new(AtomicUsize::new(0));
    let members: Vec<Subscription> = (0..2)
        .map(|_| {
            let count = count.clone();
            let options = SubscriptionOptions { dedicated_thread: true, ..shared("w") };
            b.subscribe("jobs", options, move |_| {
                count.fetch_add(1, Ordering::Relaxed);
                Ack::Success
            })
            .unwrap()
        })
        .collect();
    assert!(members[0].wait_idle(WAIT).unwrap());
    assert_eq!(members.iter().map(|s| owned(s).len()).collect::<Vec<_>>(), [2, 2]);
    for i in 0..100u8 {
        b.publish("jobs", &Record::new(&[i])).unwrap();
    }
    for s in &members {
        assert!(s.wait_idle(WAIT).unwrap());
    }
    assert_eq!(count.load(Ordering::Relaxed), 100);
    assert_eq!(members.iter().map(|s| s.stats().acked).sum::<u64>(), 100);
    b.close();
    assert!(members.iter().all(Subscription::is_closed));
}

#[test]
fn deleting_the_topic_closes_every_shared_member_with_the_reason() {
    let b = broker();
    topic(&b, "jobs", 4);
    let log: Log = Arc::default();
    let members: Vec<Subscription> = (0..2).map(|i| member(&b, "w", i, &log)).collect();
    b.delete_topic("jobs").unwrap();
    for m in &members {
        wait_for("a shared member to close", || m.stats().closed_reason.is_some());
        assert_eq!(m.stats().closed_reason.as_deref(), Some("topic deleted"));
    }
    // The name is free again, for a new topic and new members.
    topic(&b, "jobs", 4);
    let again = member(&b, "w", 9, &log);
    assert_eq!(owned(&again), vec![0, 1, 2, 3]);
}

/// A member with a 100 ms ack deadline, recording each call in `log` and
/// each return in `returned`; given a `gate`, its handler blocks on it when
/// it gets payload `stuck` (standing for a handler stuck on I/O).
fn stalling_member(
    b: &Broker,
    id: usize,
    log: &Log,
    gate: Option<std::sync::mpsc::Receiver<()>>,
    returned: &Arc<AtomicUsize>,
) -> Subscription {
    let (log, returned) = (log.clone(), returned.clone());
    let gate = Mutex::new(gate);
    let options = SubscriptionOptions { ack_timeout: Some(Duration::from_millis(100)), ..shared("w") };
    b.subscribe("jobs", options, move |m| {
        log.lock().unwrap().push((id, m.partition(), m.offset()));
        if let Some(gate) = &*gate.lock().unwrap()
            && m.payload() == b"stuck"
        {
            gate.recv().unwrap();
        }
        returned.fetch_add(1, Ordering::SeqCst);
        Ack::Success
    })
    .unwrap()
}

#[test]
fn a_stalled_member_past_ack_timeout_hands_its_partitions_over_from_the_last_acked_offset() {
    let b = broker();
    topic(&b, "jobs", 2);
    let log: Log = Arc::default();
    let returned = Arc::new(AtomicUsize::new(0));
    let (release, gate) = std::sync::mpsc::channel();
    // The stalling member joins first and owns both partitions; the second
    // takes one, the third none (it waits for a rebalance).
    let m0 = stalling_member(&b, 0, &log, Some(gate), &returned);
    let m1 = stalling_member(&b, 1, &log, None, &returned);
    wait_for("the first hand-over", || owned(&m0).len() == 1 && owned(&m1).len() == 1);
    let m2 = stalling_member(&b, 2, &log, None, &returned);
    assert_eq!(owned(&m2), Vec::<u32>::new(), "two partitions, three members: one waits");
    let p0 = owned(&m0)[0];
    // Two messages the stalling member acks, then the one it gets stuck on,
    // then two behind it; keyed so they land on its partition.
    let mut on_p0 = Vec::new();
    for k in 0u32.. {
        let key = k.to_be_bytes();
        let payload: &[u8] = match on_p0.len() {
            2 => b"stuck",
            _ => b"fine",
        };
        let pos = b.publish("jobs", &Record::new(payload).with_key(&key)).unwrap();
        if pos.partition == p0 {
            on_p0.push(pos.offset);
            if on_p0.len() == 5 {
                break;
            }
        }
    }
    let stuck_at = on_p0[2];
    // After the deadline the watch hands p0 to a live member, from the stuck
    // message: it receives exactly the unacked ones.
    wait_for("the stalled member's partition at another member", || {
        owned(&m0).is_empty() && owned(&m1).len() + owned(&m2).len() == 2
    });
    let unacked: Vec<u64> = on_p0.iter().copied().filter(|&o| o >= stuck_at).collect();
    wait_for("the unacked messages at the new owner", || {
        let calls: Vec<u64> =
            log.lock().unwrap().iter().filter(|&&(m, p, _)| m != 0 && p == p0).map(|&(_, _, o)| o).collect();
        calls.len() >= unacked.len()
    });
    let s0 = m0.stats();
    assert_eq!(s0.ack_timeouts, 1, "counted once");
    assert!(s0.last_error.unwrap_or_default().contains("ack_timeout"));
    assert_eq!(m1.stats().ack_timeouts + m2.stats().ack_timeouts, 0);
    // The stalled member's late ack is discarded: release it, wait until it
    // is idle, and see that nothing moved and it handled nothing more.
    release.send(()).unwrap();
    // Idle means the late call has returned and its round has ended.
    assert!(m0.wait_idle(WAIT).unwrap());
    assert!(owned(&m0).is_empty(), "a stalled member holds nothing until a rebalance");
    let s0 = m0.stats();
    assert_eq!((s0.acked, s0.retried, s0.dead_lettered), (2, 0, 0), "the late ack counted for nothing");
    // One more message on p0, then everything is idle: per partition, each
    // offset handled once, in order, except the stuck one, delivered again
    // exactly once, by another member.
    let end0 = (100u32..)
        .find_map(|k| {
            let pos = b.publish("jobs", &Record::new(b"later").with_key(&k.to_be_bytes())).unwrap();
            (pos.partition == p0).then_some(pos.offset + 1)
        })
        .unwrap();
    for s in [&m1, &m2] {
        assert!(s.wait_idle(WAIT).unwrap());
    }
    let calls = log.lock().unwrap().clone();
    let mut p0_calls: Vec<(usize, u64)> = calls.iter().filter(|c| c.1 == p0).map(|c| (c.0, c.2)).collect();
    let first = p0_calls.iter().position(|&(m, _)| m != 0).unwrap();
    let (before, after) = p0_calls.split_at_mut(first);
    assert_eq!(before.iter().map(|c| c.0).collect::<Vec<_>>(), vec![0; 3], "m0: two acked, then stuck");
    assert_eq!(before.iter().map(|c| c.1).collect::<Vec<_>>(), on_p0[..3].to_vec());
    assert!(after.iter().all(|&(m, _)| m != 0), "m0 handled nothing after its stall: {p0_calls:?}");
    let offsets: Vec<u64> = after.iter().map(|c| c.1).collect();
    assert_eq!(offsets, (stuck_at..end0).collect::<Vec<_>>(), "from the stuck message on, once each, in order");
    // The stalled member stays a member: when another one leaves, it gets
    // partitions again.
    m2.close();
    m1.close();
    wait_for("the partitions back at the recovered member", || owned(&m0).len() == 2);
}

#[test]
fn a_stall_with_no_other_member_is_counted_and_reported_and_close_waits_for_the_handler() {
    for shared_member in [true, false] {
        let b = broker();
        topic(&b, "jobs", 1);
        let (tx, gate) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let returned = Arc::new(AtomicBool::new(false));
        let r = returned.clone();
        let options = SubscriptionOptions {
            ack_timeout: Some(Duration::from_millis(50)),
            shared: shared_member,
            ..shared("alone")
        };
        let s = b
            .subscribe("jobs", options, move |_| {
                // Err once the test let go of the sender (it failed).
                let _ = gate.lock().unwrap().recv();
                r.store(true, Ordering::SeqCst);
                Ack::Success
            })
            .unwrap();
        // Declared after `s`, so a failed assertion drops it first: the
        // stuck handler returns, and the drop of `s` (which waits for the
        // handler) reports the failure instead of hanging.
        let release = tx;
        publish_one(&b);
        wait_for("the stall to be counted", || s.stats().ack_timeouts == 1);
        let st = s.stats();
        assert_eq!(st.partitions.len(), 1, "nothing moved");
        assert_eq!(st.partitions[0].position, 0);
        assert!(st.last_error.unwrap().contains("nothing moved"));
        // The late ack counts as any: the position moves past the message.
        release.send(()).unwrap();
        assert!(s.wait_idle(WAIT).unwrap());
        let st = s.stats();
        assert_eq!((st.ack_timeouts, st.acked, st.partitions[0].position), (1, 1, 1));
        // The watch is armed again for the next call: a second stall counts.
        returned.store(false, Ordering::SeqCst);
        publish_one(&b);
        wait_for("the second stall to be counted", || s.stats().ack_timeouts == 2);
        // Close from another thread: it returns only after the handler did.
        let s = Arc::new(s);
        let closer = {
            let (s, returned) = (s.clone(), returned.clone());
            thread::spawn(move || {
                s.close();
                returned.load(Ordering::SeqCst)
            })
        };
        release.send(()).unwrap();
        assert!(closer.join().unwrap(), "close returned before the stalled handler");
        assert_eq!(s.stats().ack_timeouts, 2);
    }
}

/// A stall is reported (`last_error`) before it shows anywhere else: whoever
/// sees it counted in `ack_timeouts`, or sees the stuck message at another
/// member, sees why too. The watch used to count the stall first and write
/// `last_error` only after the hand-over, so a look at the stats in between
/// found the count without the report (and the test above, failing there
/// with its handler still stuck, hung in the drop that waits for it). Each
/// round looks as soon as it can, without a pause, to land in that window;
/// `RILL_LONG_TESTS` runs more rounds.
#[test]
fn a_stall_is_reported_before_it_is_counted_or_handed_over() {
    let rounds = if std::env::var_os("RILL_LONG_TESTS").is_some() { 500 } else { 25 };
    let b = broker();
    for round in 0..rounds {
        // Alone (not shared, then shared), then with a member to take over.
        for (case, shared_member, other_member) in
            [("plain", false, false), ("alone", true, false), ("pair", true, true)]
        {
            let name = format!("{case}-{round}");
            let jobs = format!("jobs-{name}");
            topic(&b, &jobs, 1);
            let (tx, gate) = std::sync::mpsc::channel::<()>();
            let gate = Mutex::new(gate);
            let options = SubscriptionOptions {
                ack_timeout: Some(Duration::from_millis(5)),
                shared: shared_member,
                ..shared(&name)
            };
            let stalling = b
                .subscribe(&jobs, options, move |_| {
                    // Err once the test let go of the sender (it failed).
                    let _ = gate.lock().unwrap().recv();
                    Ack::Success
                })
                .unwrap();
            let took_over = Arc::new(AtomicBool::new(false));
            let other = other_member.then(|| {
                let took_over = took_over.clone();
                let options = SubscriptionOptions { ack_timeout: Some(WAIT), ..shared(&name) };
                b.subscribe(&jobs, options, move |_| {
                    took_over.store(true, Ordering::SeqCst);
                    Ack::Success
                })
                .unwrap()
            });
            // Declared after the members, so a failure drops it first: the
            // stuck handler returns and the members' drops do not wait forever.
            let release = tx;
            b.publish(&jobs, &Record::new(b"x")).unwrap();
            let deadline = std::time::Instant::now() + WAIT;
            let seen = || match other_member {
                true => took_over.load(Ordering::SeqCst),
                false => stalling.stats().ack_timeouts > 0,
            };
            while !seen() {
                assert!(std::time::Instant::now() < deadline, "{name}: the stall never showed");
                std::hint::spin_loop();
            }
            let st = stalling.stats();
            assert_eq!(st.ack_timeouts, 1, "{name}");
            let why = st.last_error.unwrap_or_else(|| panic!("{name}: the stall showed before its report"));
            assert!(why.contains("ack_timeout"), "{name}: {why}");
            release.send(()).unwrap();
            assert!(stalling.wait_idle(WAIT).unwrap(), "{name}");
            drop(other);
            drop(stalling);
            b.delete_topic(&jobs).unwrap();
        }
    }
}

#[test]
fn ack_timeout_zero_is_refused() {
    let b = broker();
    topic(&b, "jobs", 1);
    let options = SubscriptionOptions { ack_timeout: Some(Duration::ZERO), ..shared("w") };
    let err = b.subscribe("jobs", options, |_| Ack::Success).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

fn publish_one(b: &Broker) {
    b.publish("jobs", &Record::new(b"x")).unwrap();
}

/// Members whose every handler call overruns `ack_timeout` (the work takes
/// `work`), on a topic of `partitions`: `messages` published before they
/// join. Returns the calls per (partition, offset), once every message is
/// acknowledged and every member idle.
fn every_call_stalls(
    members: usize,
    partitions: u32,
    messages: usize,
    ack_timeout: Duration,
    work: Duration,
) -> BTreeMap<(u32, u64), usize> {
    let b = broker();
    topic(&b, "jobs", partitions);
    for k in 0..messages as u32 {
        b.publish("jobs", &Record::new(b"slow").with_key(&k.to_be_bytes())).unwrap();
    }
    let calls: Arc<Mutex<BTreeMap<(u32, u64), usize>>> = Arc::default();
    let subs: Vec<Subscription> = (0..members)
        .map(|_| {
            let calls = calls.clone();
            let options = SubscriptionOptions { ack_timeout: Some(ack_timeout), ..shared("w") };
            b.subscribe("jobs", options, move |m| {
                *calls.lock().unwrap().entry((m.partition(), m.offset())).or_default() += 1;
                // The work itself (not a wait for anything): longer than the
                // deadline, so every call is a stall.
                thread::sleep(work);
                Ack::Success
            })
            .unwrap()
        })
        .collect();
    wait_for("every message acknowledged", || subs.iter().map(|s| s.stats().acked).sum::<u64>() == messages as u64);
    for s in &subs {
        assert!(s.wait_idle(WAIT).unwrap());
    }
    let calls = calls.lock().unwrap().clone();
    let acked: u64 = subs.iter().map(|s| s.stats().acked).sum();
    assert_eq!(acked, messages as u64, "acknowledged once each: {calls:?}");
    calls
}

#[test]
fn a_stuck_message_comes_again_once_and_stalled_members_get_nothing_back_until_a_join_or_leave() {
    // Before the fix a member whose stalled call had returned took
    // partitions back at the next stall of another member: the work went
    // back and forth, each message to every member (and on, with short
    // deadlines, without end).
    let long = std::env::var_os("RILL_LONG_TESTS").is_some();
    let mut cases = vec![(2, 4, 20, 5, 20), (3, 4, 20, 5, 20), (3, 3, 60, 1, 3)];
    if long {
        cases.push((3, 3, 900, 1, 3));
    }
    for (members, partitions, messages, timeout_ms, work_ms) in cases {
        let calls = every_call_stalls(
            members,
            partitions,
            messages,
            Duration::from_millis(timeout_ms),
            Duration::from_millis(work_ms),
        );
        assert_eq!(calls.len(), messages, "{members} members: every message handled");
        let again: Vec<_> = calls.iter().filter(|&(_, &n)| n > 2).collect();
        assert!(again.is_empty(), "{members} members: handled more than twice (stalled, then once again): {again:?}");
        let total: usize = calls.values().sum();
        // Each stall moves one message once; the first member to stall
        // leaves at most `members - 1` others to stall after it.
        assert!(total <= messages + members, "{members} members: {total} calls for {messages} messages: {calls:?}");
    }
}
