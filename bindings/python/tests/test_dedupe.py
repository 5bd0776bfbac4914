"""Publishing without duplicates (issue 41): ``msg_id=`` and a topic's
``dedupe_window_ms``, as a Python program retries publishes."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from conftest import WAIT

import rill
from rill import aio


def test_a_duplicate_returns_the_first_position_flagged(broker: rill.Broker) -> None:
    broker.create_topic("orders", partitions=4)
    first = broker.publish("orders", b"o-1", msg_id="order-1")
    assert not first.duplicate
    again = broker.publish("orders", b"o-1", msg_id="order-1")
    assert again.duplicate
    assert again == first
    # Still a 2-tuple: unpacking and comparing with a tuple work as before.
    partition, offset = again
    assert (partition, offset) == first == (first.partition, first.offset)
    assert len(again) == 2
    assert "duplicate=True" in repr(again)
    assert repr(first) == f"Position(partition={first.partition}, offset={first.offset})"
    assert broker.try_publish("orders", "changed", msg_id="order-1").duplicate
    # The id as an attribute is the same id.
    assert broker.publish("orders", b"x", attributes={"region": "IN", "rill.id": "order-1"}) == first
    s = broker.topic_stats("orders")
    assert (s.publish_count, s.dedupe_ids, s.dedupe_duplicates) == (1, 1, 3)


def test_different_ids_and_no_id_both_append(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    a = broker.publish("orders", b"x", msg_id="a")
    b = broker.publish("orders", b"x", msg_id="b")
    c = broker.publish("orders", b"x")
    assert [a, b, c] == [(0, 0), (0, 1), (0, 2)]
    assert not (a.duplicate or b.duplicate or c.duplicate)
    assert rill.Position(0, 5).duplicate is False


def test_a_batch_with_ids_appends_each_id_once(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    out = broker.publish_batch("orders", [b"1", b"2", b"3", b"4"], msg_ids=["a", None, "a", "b"])
    assert [p.duplicate for p in out] == [False, False, True, False]
    assert out[2] == out[0]
    again = broker.publish_batch("orders", [b"1", b"4"], msg_ids=["a", "b"])
    assert [p.duplicate for p in again] == [True, True]
    assert again == [out[0], out[3]]
    assert broker.topic_stats("orders").publish_count == 3
    with pytest.raises(rill.InvalidArgument, match="one per payload"):
        broker.publish_batch("orders", [b"1"], msg_ids=["a", "b"])


def test_racing_threads_publish_each_id_once(broker: rill.Broker) -> None:
    broker.create_topic("orders", partitions=4)
    ids, threads = 200, 8
    start = threading.Barrier(threads)
    results: list[list[rill.Position]] = [[] for _ in range(threads)]

    def run(t: int) -> None:
        start.wait()
        results[t] = [broker.publish("orders", f"m{i}", msg_id=f"id-{i}") for i in range(ids)]

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sum(not p.duplicate for r in results for p in r) == ids
    assert all(r == results[0] for r in results)
    assert broker.topic_stats("orders").publish_count == ids


def test_a_window_of_0_turns_the_check_off(broker: rill.Broker) -> None:
    broker.create_topic("orders", dedupe_window_ms=0)
    assert broker.publish("orders", b"x", msg_id="a") == (0, 0)
    again = broker.publish("orders", b"x", msg_id="a")
    assert again == (0, 1) and not again.duplicate
    assert broker.topic_stats("orders").dedupe_ids == 0


def test_an_id_expires_after_its_window(broker: rill.Broker) -> None:
    broker.create_topic("orders", dedupe_window_ms=20)
    first = broker.publish("orders", b"x", msg_id="a")
    # Polls until the window has passed (a deadline, not a sleep standing in
    # for it): a retry then appends again.
    deadline = time.monotonic() + WAIT
    later = broker.publish("orders", b"x", msg_id="a")
    while later.duplicate:
        assert later == first
        assert time.monotonic() < deadline, "the id never expired"
        later = broker.publish("orders", b"x", msg_id="a")
    assert later == (0, 1)


def test_bad_ids_are_refused_and_publish_nothing(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    for bad in ["i" * 129, ""]:
        with pytest.raises(rill.InvalidArgument, match="1 to 128 bytes"):
            broker.publish("orders", b"x", msg_id=bad)
        with pytest.raises(rill.InvalidArgument):
            broker.publish_batch("orders", [b"fine", b"x"], msg_ids=[None, bad])
    with pytest.raises(rill.InvalidArgument, match="at most one id"):
        broker.publish("orders", b"x", attributes={"rill.id": "a"}, msg_id="b")
    with pytest.raises(rill.InvalidArgument):
        broker.create_topic("t", dedupe_window_ms=-1)
    assert broker.topic_stats("orders").publish_count == 0
    assert not broker.publish("orders", b"x", msg_id="i" * 128).duplicate


def test_the_window_survives_a_restart(tmp_path: Path) -> None:
    with rill.Broker(data_dir=tmp_path) as b:
        b.create_topic("orders", partitions=2)
        b.create_topic("off", dedupe_window_ms=0)
        first = b.publish("orders", b"order", msg_id="order-1")
    with rill.Broker(data_dir=tmp_path) as b:
        again = b.publish("orders", b"order", msg_id="order-1")
        assert again.duplicate and again == first
        assert b.topic_stats("orders").publish_count == 1
        b.publish("off", b"x", msg_id="a")
        assert not b.publish("off", b"x", msg_id="a").duplicate


def test_the_aio_publisher_takes_ids(broker: rill.Broker) -> None:
    broker.create_topic("orders")

    async def main() -> list[rill.Position]:
        publisher = aio.Publisher(broker)
        try:
            one = await publisher.publish("orders", b"x", msg_id="a")
            two = await publisher.publish("orders", b"x", msg_id="a")
            batch = await publisher.publish_batch("orders", [b"y", b"x"], msg_ids=["b", "a"])
            return [one, two, *batch]
        finally:
            await publisher.aclose()

    out = asyncio.run(main())
    assert [p.duplicate for p in out] == [False, True, False, True]
    assert out[1] == out[0] == out[3]
