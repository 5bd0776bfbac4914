"""Subscription priorities from Python (issue 42): the ``priority`` option
of ``subscribe`` (and ``rill.aio.subscribe``) and ``create_topic``, its
checks and defaults, and the queue-wait figures of ``stats()`` under an
overloaded worker pool. Waits are compared with each other, never with a
time limit; ``RILL_LONG_TESTS=1`` gives every low-priority subscription ten
times as many turns."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import WAIT

import rill
import rill.aio


def _long() -> bool:
    return os.environ.get("RILL_LONG_TESTS", "0") not in ("", "0")


def test_the_priority_constants() -> None:
    assert rill.DEFAULT_PRIORITY == 4
    assert rill.MAX_PRIORITY == 7
    assert rill.PRIORITY_AGING_TAKES == 32


@pytest.mark.parametrize("bad", [-1, 8, 100])
def test_a_priority_out_of_range_is_refused(broker: rill.Broker, bad: int) -> None:
    broker.create_topic("t")
    with pytest.raises(rill.InvalidArgument, match="priority"):
        broker.subscribe("t", lambda m: None, priority=bad)
    with pytest.raises(rill.InvalidArgument, match="priority"):
        broker.create_topic("bad", priority=bad)
    assert "bad" not in broker.topics()
    with pytest.raises(TypeError):
        broker.subscribe("t", lambda m: None, priority=1.5)  # type: ignore[arg-type]


def test_a_topic_priority_is_its_subscriptions_default(broker: rill.Broker) -> None:
    broker.create_topic("urgent", priority=6)
    broker.create_topic("plain")

    def priority(pattern: str, priority: int | None = None) -> int:
        with broker.subscribe(pattern, lambda m: None, priority=priority) as s:
            return s.stats().priority

    assert priority("urgent") == 6
    assert priority("urgent", priority=1) == 1
    assert priority("plain") == rill.DEFAULT_PRIORITY
    assert priority("*") == rill.DEFAULT_PRIORITY
    assert priority("plain", priority=0) == 0
    assert priority("plain", priority=7) == 7


def test_a_durable_topic_keeps_its_priority(tmp_path: Path) -> None:
    with rill.Broker(data_dir=tmp_path) as b:
        b.create_topic("keep", priority=2)
    with rill.Broker(data_dir=tmp_path) as b, b.subscribe("keep", lambda m: None) as s:
        assert s.stats().priority == 2


def test_aio_subscribe_takes_a_priority() -> None:
    async def main() -> int:
        with rill.Broker() as b:
            b.create_topic("t")
            sub = rill.aio.subscribe(b, "t", start="earliest", priority=7)
            async with sub:
                b.publish("t", b"x")
                async for m in sub:
                    assert m.payload == b"x"
                    break
                return sub.stats().priority

    assert asyncio.run(main()) == 7


def test_an_overloaded_pool_runs_high_priority_first_and_starves_nobody() -> None:
    """Two priority-7 and six priority-0 subscriptions on two workers, all
    with more work than the run lasts: every low one gets its turns, none
    waiting more takes than the aging bound plus the others queued before
    it, and the high ones' median wait is far below every low median."""
    high, low = 2, 6
    turns = 30 if _long() else 3
    stop = threading.Event()

    def busy(_m: rill.Message) -> None:
        if not stop.is_set():
            x = 0
            for i in range(200):
                x = x * 31 + i

    with rill.Broker(worker_threads=2) as b:
        # Every backlog is published before any subscription starts, so none
        # is drained while the others are set up; each holds more than the
        # run can drain (the high ones' the most: under the GIL a low one
        # may hold a worker for a long turn while the high ones' threads
        # wait for the interpreter).
        for i in range(high + low):
            topic = f"busy/{i}"
            b.create_topic(topic)
            backlog = (200_000 if i < high else 20_000) * (10 if _long() else 1)
            for _ in range(0, backlog, 1000):
                b.publish_batch(topic, [b"work"] * 1000)
        subs = [
            b.subscribe(f"busy/{i}", busy, start="earliest", priority=7 if i < high else 0) for i in range(high + low)
        ]
        waits = [0] * (high + low)
        max_takes = [0] * (high + low)
        fastest_low = float("inf")
        deadline = time.monotonic() + 10 * WAIT
        while True:
            for i in range(high, high + low):
                st = subs[i].stats()
                assert st.priority == 0 and st.lag > 0
                waits[i] += st.queue_waits
                max_takes[i] = max(max_takes[i], st.queue_wait_max_takes)
                if st.queue_waits:
                    fastest_low = min(fastest_low, st.queue_wait_p50)
            if all(waits[i] >= turns for i in range(high, high + low)):
                break
            assert time.monotonic() < deadline, f"the low ones got {waits[high:]} turns"
            time.sleep(0.001)
        highs = [subs[i].stats() for i in range(high)]
        stop.set()
        for st in highs:
            assert st.priority == 7 and st.queue_waits > 0 and st.lag > 0
        for i in range(high, high + low):
            assert max_takes[i] <= rill.PRIORITY_AGING_TAKES + high + low - 1, max_takes
        slowest_high_p50 = max(st.queue_wait_p50 for st in highs)
        # The Rust, C and C++ tests require a factor of 8 here; under the GIL
        # a worker may wait for the interpreter whatever its job's priority,
        # so from Python only the order is required.
        assert slowest_high_p50 < fastest_low, (highs, fastest_low)
        for s in subs:
            s.close()
