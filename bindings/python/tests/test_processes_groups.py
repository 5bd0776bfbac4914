"""Consumer groups across processes (issue 39): members in processes started
with ``multiprocessing``'s spawn method split a topic's partitions, each
partition handled by exactly one of them, and their commits are seen by a
member in another process; the worker_processes example (a producer and four
worker processes in one group) runs here too."""

from __future__ import annotations

import multiprocessing
import os
import queue
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "jobs"
GROUP = "workers"
PARTITIONS = 2
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "worker_processes.py"


def _member(data_dir: str, out: Any, stop: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        c = b.consumer(GROUP, TOPIC, session_timeout=0.2)
        owned: list[int] | None = None
        while not stop.is_set():
            got = c.poll(max_messages=16, timeout=0.02)
            for m in got:
                out.put(("got", m.partition, m.offset))
            if got:
                c.commit()
            now = c.assignment()
            if now != owned:
                out.put(("owns", os.getpid(), now))
                owned = now
        c.close()


def test_a_member_in_another_process_takes_half_and_commits_for_all(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        here = b.consumer(GROUP, TOPIC, session_timeout=0.2)
        out = ctx.Queue()
        stop = ctx.Event()
        child = ctx.Process(target=_member, args=(data_dir, out, stop))
        child.start()
        try:
            theirs: list[int] = []
            while len(theirs) != 1 or here.assignment() != [p for p in range(PARTITIONS) if p not in theirs]:
                here.poll(max_messages=0, timeout=0)
                report = out.get(timeout=WAIT)
                if report[0] == "owns":
                    theirs = report[2]
            for n in range(20):
                b.publish(TOPIC, f"m-{n}")
            mine: list[tuple[int, int]] = []
            got_there: list[tuple[int, int]] = []
            want = 20
            while len(mine) + len(got_there) < want:
                for m in here.poll(max_messages=16, timeout=0.01):
                    mine.append((m.partition, m.offset))
                here.commit()
                try:
                    report = out.get(timeout=0.01)
                except queue.Empty:
                    continue
                if report[0] == "got":
                    got_there.append((report[1], report[2]))
            assert {p for p, _ in mine}.isdisjoint({p for p, _ in got_there}), "each partition read by one member"
            assert len(set(mine) | set(got_there)) == want, "every message, once"
        finally:
            stop.set()
            child.join(WAIT)
        assert child.exitcode == 0
        here.close()
        # The other process's commits, seen here: nothing left to read.
        late = b.consumer(GROUP, TOPIC)
        assert late.poll(max_messages=100, timeout=0.01) == []
        assert b.group_stats(GROUP, TOPIC).lag == 0


def test_worker_processes_example() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"worker_processes.py exited {result.returncode}\n{result.stdout}\n{result.stderr}"


def _stale_member(data_dir: str, joined: Any, stop: Any) -> None:
    """A member that owns every partition, then keeps its handle open and
    unused while another process deletes and re-creates the topic."""
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        c = b.consumer(GROUP, TOPIC, session_timeout=3600)
        c.poll(max_messages=1, timeout=0)
        joined.put(c.assignment())
        # Past the parent's deadline, so only the delete can free the partitions.
        stop.wait(5 * WAIT)
        try:
            c.poll(max_messages=1, timeout=0)
        except rill.NoSuchTopic:
            joined.put("no such topic")
        c.close()


def test_a_consumer_left_open_on_a_deleted_topic_frees_the_re_created_ones(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        joined = ctx.Queue()
        stop = ctx.Event()
        child = ctx.Process(target=_stale_member, args=(data_dir, joined, stop))
        child.start()
        try:
            assert joined.get(timeout=WAIT) == list(range(PARTITIONS))
            b.delete_topic(TOPIC)
            b.create_topic(TOPIC, partitions=PARTITIONS)
            for n in range(4):
                b.publish(TOPIC, f"m-{n}")
            here = b.consumer(GROUP, TOPIC, session_timeout=3600)
            got: list[bytes] = []
            deadline = time.monotonic() + WAIT
            while here.assignment() != list(range(PARTITIONS)) or len(got) < 4:
                assert time.monotonic() < deadline, f"owns {here.assignment()} with the stale member open"
                got += [m.payload for m in here.poll(max_messages=16, timeout=0.02)]
            assert sorted(got) == [f"m-{n}".encode() for n in range(4)]
            here.close()
        finally:
            stop.set()
            child.join(WAIT)
        assert joined.get(timeout=WAIT) == "no such topic"
        assert child.exitcode == 0


def test_a_group_live_when_its_topic_is_deleted_is_no_group_of_the_re_created_one(tmp_path: Path) -> None:
    # Two brokers on one directory stand in for two processes. The group
    # has a live member when its topic is deleted, so its commits stay on
    # disk; once the member has gone, the topic created again has no such
    # group, as with sharing="exclusive".
    data_dir = str(tmp_path / "data")
    opts: dict[str, Any] = {"data_dir": data_dir, "sharing": "processes", "fsync": "never"}
    with rill.Broker(**opts) as a, rill.Broker(**opts) as b:
        a.create_topic(TOPIC, partitions=PARTITIONS)
        for n in range(5):
            a.publish(TOPIC, f"m-{n}")
        member = b.consumer(GROUP, TOPIC)
        deadline = time.monotonic() + WAIT
        while not member.poll(max_messages=3, timeout=0.02):
            assert time.monotonic() < deadline, "the member got nothing"
        member.commit()
        a.delete_topic(TOPIC)
        while True:
            assert time.monotonic() < deadline, "the member's broker never saw the delete"
            try:
                member.poll(max_messages=1, timeout=0)
            except rill.NoSuchTopic:
                break
            time.sleep(0.001)
        member.close()
        a.create_topic(TOPIC, partitions=PARTITIONS)
        for broker in (a, b):
            assert broker.groups() == []
            with pytest.raises(rill.NotFound):
                broker.group_stats(GROUP, TOPIC)
            with pytest.raises(rill.NotFound):
                broker.delete_group(GROUP, TOPIC)


def _publish_when_told(data_dir: str, ready: Any, go: Any, done: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        ready.set()
        go.wait(WAIT)
        b.publish(TOPIC, b"from the other process")
        # Open until the parent has looked: a broker's close rings every
        # doorbell of the directory, which would wake the parent's anyway
        # (so past the parent's own wait).
        done.wait(3 * WAIT)


def test_a_consumers_notify_fd_is_rung_by_a_publish_in_another_process(tmp_path: Path) -> None:
    """An event loop's consumer (its notify fd) that polled nothing is
    woken by a publish in another process: its process's doorbell, asleep
    without arming while no consumer of it waits, is told that one does."""
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        ready, go, done = ctx.Event(), ctx.Event(), ctx.Event()
        child = ctx.Process(target=_publish_when_told, args=(data_dir, ready, go, done))
        child.start()
        try:
            with b.consumer(GROUP, TOPIC) as consumer, selectors.DefaultSelector() as sel:
                assert ready.wait(WAIT)
                sel.register(consumer.notify_fd(), selectors.EVENT_READ)
                assert consumer.poll(timeout=0) == []  # armed
                go.set()
                assert sel.select(WAIT), "the other process's publish did not make the fd readable"
                assert [m.payload for m in consumer.poll(timeout=0)] == [b"from the other process"]
        finally:
            go.set()
            done.set()
            child.join(WAIT)
        assert child.exitcode == 0
