"""Every process's subscriptions (issue 39): ``Broker.directory_subscriptions``
as an operator uses it. A ``multiprocessing`` spawn child has two push
subscriptions on "orders", the durable "audit" and an anonymous one; this
process has an anonymous one. The listing shows the child's two with its
pid and, once the child's handlers took every message published here, their
counters say so (published at the end of each drain round, so the test
waits, with a deadline, for the round to end). Once the child is killed with
SIGKILL they are gone, at once. Then a broker of its own
(``sharing="exclusive"``): this broker's, as ``subscriptions()``.

And every process's pull consumers, ``Broker.directory_consumers``: a spawn
child's consumer polls POLLED of the messages published here; the listing
shows it with the child's pid, its member id and counters saying what it
polled (published at the end of each poll), and not once it is killed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

from conftest import WAIT

import rill

TOPIC = "orders"
MESSAGES = 10


def _subscriber(data_dir: str, out: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        handled = {"anon": 0, "audit": 0}

        def counting(which: str) -> Any:
            def handle(_m: rill.Message) -> None:
                handled[which] += 1
                if all(n == MESSAGES for n in handled.values()):
                    out.put("done")

            return handle

        anon = b.subscribe(TOPIC, counting("anon"))
        audit = b.subscribe(TOPIC, counting("audit"), name="audit")
        out.put(os.getpid())
        # Until the parent kills this process: no event shared with it, whose
        # lock a kill in the middle of a wait would leave taken.
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            time.sleep(0.05)
        audit.close()
        anon.close()


def _theirs(b: rill.Broker, pid: int) -> list[rill.DirectorySubscription]:
    return [s for s in b.directory_subscriptions() if s.pid == pid]


def test_another_process_s_subscriptions_show_its_pid_and_counters_until_it_is_killed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        mine = b.subscribe(TOPIC, lambda m: None)
        out = ctx.Queue()
        child = ctx.Process(target=_subscriber, args=(data_dir, out))
        child.start()
        try:
            pid = child.pid
            assert pid is not None and out.get(timeout=WAIT) == pid
            theirs = _theirs(b, pid)
            assert sorted((s.durable, s.this_broker, s.stats.pattern) for s in theirs) == [
                (False, False, TOPIC),
                (True, False, TOPIC),
            ]
            assert {s.stats.name for s in theirs if s.durable} == {"audit"}
            ours = _theirs(b, os.getpid())
            assert [(s.this_broker, s.stats.name) for s in ours] == [(True, b.subscriptions()[0].name)]

            for _ in range(MESSAGES):
                b.publish(TOPIC, b"o")
            assert out.get(timeout=WAIT) == "done"
            deadline = time.monotonic() + WAIT
            while not all(s.stats.delivered == MESSAGES and s.stats.lag == 0 for s in _theirs(b, pid)):
                assert time.monotonic() < deadline, _theirs(b, pid)
                time.sleep(0.001)
            counted = [(s.stats.delivered, s.stats.acked, s.stats.retried, s.stats.state) for s in _theirs(b, pid)]
            assert counted == [(MESSAGES, MESSAGES, 0, "idle")] * 2

            child.kill()
            child.join(WAIT)
            assert child.exitcode == -signal.SIGKILL
            listed = b.directory_subscriptions()
            assert [(s.pid, s.this_broker) for s in listed] == [(os.getpid(), True)]
        finally:
            if child.is_alive():
                child.kill()
                child.join()
            mine.close()


def test_exclusive_mode_lists_this_brokers_subscriptions(tmp_path: Path) -> None:
    with rill.Broker(data_dir=str(tmp_path / "data")) as b:
        b.create_topic(TOPIC)
        assert b.directory_subscriptions() == []
        anonymous = b.subscribe(TOPIC, lambda m: None)
        audit = b.subscribe(TOPIC, lambda m: None, name="audit")
        listed = b.directory_subscriptions()
        assert sorted(s.stats.name for s in listed) == sorted(s.name for s in b.subscriptions())
        assert all(s.pid == os.getpid() and s.this_broker for s in listed)
        assert [s.durable for s in listed if s.stats.name == "audit"] == [True]
        for handle in (audit, anonymous):
            handle.close()


POLLED = 7


def _consumer(data_dir: str, out: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        consumer = b.consumer("billing", TOPIC)
        polled = 0
        while polled < POLLED:
            polled += len(consumer.poll(POLLED - polled, timeout=WAIT))
        out.put(os.getpid())
        # Until the parent kills this process (see `_subscriber`).
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            time.sleep(0.05)
        consumer.close()


def test_another_process_s_pull_consumer_shows_its_pid_and_counters_until_it_is_killed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        for _ in range(MESSAGES):
            b.publish(TOPIC, b"o")
        mine = b.consumer("audit", TOPIC)
        assert len(mine.poll(2, timeout=WAIT)) == 2
        out = ctx.Queue()
        child = ctx.Process(target=_consumer, args=(data_dir, out))
        child.start()
        try:
            pid = child.pid
            assert pid is not None and out.get(timeout=WAIT) == pid
            listed = b.directory_consumers()
            theirs = [c for c in listed if c.pid == pid]
            assert [(c.this_broker, c.group, c.topic, c.delivered, c.missed, c.lag) for c in theirs] == [
                (False, "billing", TOPIC, POLLED, 0, MESSAGES - POLLED)
            ]
            assert [(m.pid, m.id) for m in b.group_members("billing", TOPIC)] == [(pid, theirs[0].id)]
            ours = [(c.this_broker, c.group, c.delivered, c.lag) for c in listed if c.pid == os.getpid()]
            assert ours == [(True, "audit", 2, MESSAGES - 2)]
            assert b.directory_subscriptions() == []

            child.kill()
            child.join(WAIT)
            assert child.exitcode == -signal.SIGKILL
            assert [(c.pid, c.this_broker) for c in b.directory_consumers()] == [(os.getpid(), True)]
        finally:
            if child.is_alive():
                child.kill()
                child.join()
            mine.close()
        assert b.directory_consumers() == []


def test_exclusive_mode_lists_this_brokers_consumers(tmp_path: Path) -> None:
    with rill.Broker(data_dir=str(tmp_path / "data")) as b:
        b.create_topic(TOPIC)
        assert b.directory_consumers() == []
        b.publish(TOPIC, b"o")
        consumer = b.consumer("billing", TOPIC)
        assert len(consumer.poll(10, timeout=WAIT)) == 1
        listed = b.directory_consumers()
        assert [(c.pid, c.this_broker, c.group, c.topic, c.delivered, c.lag) for c in listed] == [
            (os.getpid(), True, "billing", TOPIC, 1, 0)
        ]
        assert listed[0].id == b.group_members("billing", TOPIC)[0].id
        consumer.close()
        assert b.directory_consumers() == []
