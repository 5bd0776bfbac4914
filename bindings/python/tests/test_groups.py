"""Consumer groups with many members (issue 12): the partitions split among
the live members, a close or a session expiry hands them over from the
committed offsets, and a commit for a partition that moved is Reassigned."""

from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import WAIT

import rill


def drain(c: rill.Consumer) -> list[tuple[int, int]]:
    """Polls without waiting until a poll is empty: (partition, offset) pairs."""
    got: list[tuple[int, int]] = []
    while batch := c.poll(64, 0):
        got.extend((m.partition, m.offset) for m in batch)
    return got


def test_two_members_split_four_partitions_and_a_close_hands_over(broker: rill.Broker) -> None:
    broker.create_topic("jobs", partitions=4)
    broker.publish_batch("jobs", [str(i) for i in range(40)])
    one = broker.consumer("workers", "jobs")
    assert one.assignment() == [0, 1, 2, 3]
    two = broker.consumer("workers", "jobs")
    a1, a2 = one.assignment(), two.assignment()
    assert len(a1) == len(a2) == 2
    assert sorted(a1 + a2) == [0, 1, 2, 3]

    got1, got2 = drain(one), drain(two)
    assert {p for p, _ in got1} <= set(a1) and {p for p, _ in got2} <= set(a2)
    assert len(set(got1 + got2)) == len(got1) + len(got2) == 40
    one.commit()
    two.commit()

    # `two` polls one more message per partition and closes without
    # committing: `one` owns everything and gets exactly those again.
    broker.publish_batch("jobs", ["a", "b", "c", "d"])
    polled_by_two = set(drain(two))
    assert len(polled_by_two) == 2
    two.close()
    assert one.assignment() == [0, 1, 2, 3]
    after = drain(one)
    assert len(after) == len(set(after)) == 4
    assert {at for at in after if at[0] in a2} == polled_by_two
    one.commit()
    assert one.stats().lag == 0


def test_an_idle_member_is_expelled_and_its_commit_is_reassigned(broker: rill.Broker) -> None:
    broker.create_topic("jobs", partitions=4)
    live = broker.consumer("workers", "jobs")
    stalled = broker.consumer("workers", "jobs", session_timeout=0.05)
    mine = stalled.assignment()
    broker.publish_batch("jobs", [str(i) for i in range(8)])
    polled = drain(stalled)
    assert {p for p, _ in polled} == set(mine) and len(polled) == 4
    got = drain(live)
    # `stalled` stops polling; `live` polls (a condition, not a sleep) until
    # it has expelled it and owns all four partitions.
    deadline = time.monotonic() + WAIT
    while live.assignment() != [0, 1, 2, 3]:
        assert time.monotonic() < deadline, "the idle member was never expelled"
        got.extend((m.partition, m.offset) for m in live.poll(64, 0.005))
    got.extend(drain(live))
    assert sorted(got) == sorted(set(got)) and len(got) == 8  # its own, and the stalled member's again
    live.commit()
    with pytest.raises(rill.Reassigned) as err:
        stalled.commit()
    assert err.value.status == 19 and err.value.status_name == "RILL_ERR_REASSIGNED"
    assert len(stalled.assignment()) == 2  # it rejoined
    assert drain(stalled) == []  # and reads from the group's commits


def test_commit_offset_for_a_partition_of_another_member_is_reassigned(broker: rill.Broker) -> None:
    broker.create_topic("jobs", partitions=2)
    one = broker.consumer("g", "jobs")
    two = broker.consumer("g", "jobs")
    (theirs,) = two.assignment()
    with pytest.raises(rill.Reassigned):
        one.commit_offset(0, partition=theirs)
    (own,) = one.assignment()
    one.commit_offset(0, partition=own)
    assert one.committed(partition=own) == 0


def test_session_timeout_is_checked(broker: rill.Broker) -> None:
    broker.create_topic("t")
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(rill.InvalidArgument):
            broker.consumer("g", "t", session_timeout=bad)
    with pytest.raises(TypeError):
        broker.consumer("g", "t", session_timeout="10")  # type: ignore[arg-type]


def test_nack_retries_then_dead_letters_and_skips(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    broker.publish("jobs", b"poison", key=b"k", attributes={"trace": "t-1"})
    broker.publish("jobs", b"fine")
    c = broker.consumer("workers", "jobs", max_attempts=3)
    for attempt in (1, 2, 3):
        assert [m.payload for m in c.poll(10, 0)] == [b"poison", b"fine"]
        assert c.nack(0, 0) is (attempt == 3)
    # Skipped: the next poll starts after it ("fine" comes again).
    assert [m.payload for m in c.poll(10, 0)] == [b"fine"]
    with pytest.raises(rill.OutOfRange):
        c.nack(0, 5)
    with pytest.raises(rill.NotFound):
        c.nack(3, 0)
    (dead,) = broker.consumer("reader", "$dlq/workers").poll(10, 0)
    assert (dead.payload, dead.key) == (b"poison", b"k")
    assert dead.attributes["trace"] == "t-1"
    assert dead.attributes["rill.dlq.attempts"] == "3"
    assert dead.attributes["rill.dlq.group"] == "workers"
    assert dead.attributes["rill.dlq.topic"] == "jobs"
    assert "nacked 3 times" in dead.attributes["rill.dlq.reason"]


def test_nack_to_a_chosen_dead_letter_topic_and_bad_options(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    broker.publish("jobs", b"poison")
    c = broker.consumer("w", "jobs", max_attempts=1, dead_letter_topic="graveyard")
    c.poll(10, 0)
    assert c.nack(0, 0) is True
    assert [m.payload for m in broker.consumer("r", "graveyard").poll(10, 0)] == [b"poison"]
    with pytest.raises(rill.InvalidArgument):
        broker.consumer("w", "jobs", max_attempts=0)
    with pytest.raises(rill.InvalidArgument):
        broker.consumer("w", "jobs", dead_letter_topic="jobs")


def test_a_group_name_must_leave_room_for_its_dead_letter_topic(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    # "$dlq/<group>" must fit the 255-byte topic name limit.
    with pytest.raises(rill.InvalidArgument, match="at most 250"):
        broker.consumer("g" * 251, "jobs")
    broker.publish("jobs", b"poison")
    c = broker.consumer("g" * 250, "jobs", max_attempts=1)
    c.poll(10, 0)
    assert c.nack(0, 0) is True
    assert [m.payload for m in broker.consumer("r", "$dlq/" + "g" * 250).poll(10, 0)] == [b"poison"]
    c.close()
    # A group with a dead-letter topic of its own may use all 255 bytes.
    c = broker.consumer("g" * 255, "jobs", max_attempts=1, dead_letter_topic="graveyard")
    c.poll(10, 0)
    assert c.nack(0, 0) is True


def test_a_consumer_behind_retention_counts_what_it_missed(broker: rill.Broker) -> None:
    broker.create_topic("firehose", retention_bytes=16 << 10)
    c = broker.consumer("slow", "firehose")
    broker.publish_batch("firehose", [i.to_bytes(8, "little") for i in range(5000)])
    polled: list[int] = []
    while batch := c.poll(256, 0.001):  # a waiting poll: the path that dropped the count
        polled.extend(int.from_bytes(m.payload, "little") for m in batch)
    missed = c.stats().missed
    assert missed > 0
    assert polled == list(range(missed, 5000))  # everything after the trimmed head, in order


def test_shared_subscription_members_split_the_partitions_and_a_close_hands_over(broker: rill.Broker) -> None:
    broker.create_topic("jobs", partitions=4)
    calls: list[tuple[int, int, int]] = []

    def member(i: int) -> rill.Subscription:
        return broker.subscribe(
            "jobs",
            lambda m: calls.append((i, m.partition, m.offset)),
            name="workers",
            shared=True,
            start="earliest",
        )

    one = member(0)
    two = member(1)
    # The first member hands two partitions over before it is idle again.
    assert one.wait_idle(WAIT)
    assert one.stats().partitions == two.stats().partitions == 2
    with pytest.raises(rill.Busy):
        broker.subscribe("jobs", lambda m: None, name="workers")
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("jobs", lambda m: None, shared=True)

    broker.publish_batch("jobs", [str(i) for i in range(40)])
    assert one.wait_idle(WAIT) and two.wait_idle(WAIT)
    assert one.stats().acked == two.stats().acked == 20
    mine = {m: {p for who, p, _ in calls if who == m} for m in (0, 1)}
    assert len(mine[0]) == len(mine[1]) == 2 and not mine[0] & mine[1]

    # A close hands everything over from where it was: nothing twice.
    one.close()
    broker.publish_batch("jobs", [str(i) for i in range(40)])
    assert two.wait_idle(WAIT)
    assert two.stats().partitions == 4
    at = [(p, o) for _, p, o in calls]
    assert len(at) == len(set(at)) == 80
    assert {(p, o) for p in range(4) for o in range(20)} == set(at)
    two.close()


def test_a_shared_member_stalled_past_ack_timeout_hands_over_and_its_late_ack_is_discarded(
    broker: rill.Broker,
) -> None:
    broker.create_topic("jobs")
    gate = threading.Event()
    calls: list[tuple[str, int]] = []

    def stuck(m: rill.Message) -> None:
        calls.append(("stalling", m.offset))
        gate.wait()  # a handler stuck on I/O until the test lets it go

    stalling = broker.subscribe("jobs", stuck, name="workers", shared=True, ack_timeout=0.1)
    # The gate opens whatever happens: a handler left stuck would block the
    # fixture's broker close, and a failure would hang the suite.
    try:
        # A long deadline for the other: a slow run must not stall it too.
        other = broker.subscribe(
            "jobs", lambda m: calls.append(("other", m.offset)), name="workers", shared=True, ack_timeout=60.0
        )
        assert other.stats().partitions == 0 and other.stats().ack_timeouts == 0
        broker.publish("jobs", "job")
        deadline = time.monotonic() + WAIT
        while ("other", 0) not in calls:
            assert time.monotonic() < deadline, "the stuck message never reached the other member"
            time.sleep(0.001)
        s = stalling.stats()
        assert (s.ack_timeouts, s.partitions) == (1, 0)
        assert "ack_timeout" in (s.last_error or "")
    finally:
        gate.set()
    assert stalling.wait_idle(WAIT) and other.wait_idle(WAIT)
    # The late ack moved nothing; the message came exactly once more.
    assert stalling.stats().acked == 0 and other.stats().acked == 1
    assert calls == [("stalling", 0), ("other", 0)]
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("jobs", lambda m: None, name="w2", shared=True, ack_timeout=0)
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("jobs", lambda m: None, name="w2", shared=True, ack_timeout=-1.0)


def test_a_stall_is_reported_before_the_stuck_message_comes_again(broker: rill.Broker) -> None:
    # The library used to hand the stuck message over before it wrote the
    # stall's `last_error`: a look at the stats as soon as the other member
    # had it could find no reason. Each round looks at once, without a
    # pause; RILL_STALL_ROUNDS runs more of them.
    for i in range(int(os.environ.get("RILL_STALL_ROUNDS", "20"))):
        _stall_round(broker, i)


def _stall_round(broker: rill.Broker, i: int) -> None:
    """One round of the test above, with events of its own."""
    name = f"workers-{i}"
    topic = f"jobs-{i}"
    broker.create_topic(topic)
    gate = threading.Event()
    took_over = threading.Event()
    stalling = broker.subscribe(topic, lambda m: gate.wait(), name=name, shared=True, ack_timeout=0.005)
    try:
        other = broker.subscribe(topic, lambda m: took_over.set(), name=name, shared=True, ack_timeout=60.0)
        broker.publish(topic, "job")
        assert took_over.wait(WAIT), f"round {i}: the stuck message never reached the other member"
        s = stalling.stats()
        assert s.ack_timeouts == 1, f"round {i}"
        assert "ack_timeout" in (s.last_error or ""), f"round {i}: handed over before it was reported"
    finally:
        gate.set()
    assert stalling.wait_idle(WAIT) and other.wait_idle(WAIT)
    stalling.close()
    other.close()


def test_a_stall_alone_is_counted_and_the_late_ack_counts(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    gate = threading.Event()
    sub = broker.subscribe("jobs", lambda m: gate.wait(), ack_timeout=0.05)
    broker.publish("jobs", "job")
    deadline = time.monotonic() + WAIT
    while sub.stats().ack_timeouts == 0:
        assert time.monotonic() < deadline, "the stall was never counted"
        time.sleep(0.001)
    assert sub.stats().acked == 0 and sub.stats().partitions == 1
    gate.set()
    assert sub.wait_idle(WAIT)
    s = sub.stats()
    assert (s.ack_timeouts, s.acked) == (1, 1)
