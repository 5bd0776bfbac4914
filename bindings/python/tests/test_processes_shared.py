"""Shared subscriptions across processes (issue 39): a member here and a
member in a process started with ``multiprocessing``'s spawn method split
the topic's partitions; every message reaches exactly one of them."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from pathlib import Path
from typing import Any

from conftest import WAIT

import rill

TOPIC = "jobs"
NAME = "workers"
PARTITIONS = 4


def _member(data_dir: str, out: Any, stop: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        sub = b.subscribe(TOPIC, lambda m: out.put((m.partition, m.offset)), name=NAME, shared=True, start="earliest")
        out.put(("joined",))
        stop.wait(WAIT)
        sub.close()


def test_a_member_in_another_process_shares_the_partitions(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        lock = threading.Lock()
        mine: list[tuple[int, int]] = []

        def here(m: rill.Message) -> None:
            with lock:
                mine.append((m.partition, m.offset))

        sub = b.subscribe(TOPIC, here, name=NAME, shared=True, start="earliest")
        out = ctx.Queue()
        stop = ctx.Event()
        child = ctx.Process(target=_member, args=(data_dir, out, stop))
        child.start()
        try:
            assert out.get(timeout=WAIT) == ("joined",)
            theirs: list[tuple[int, int]] = []
            published = 0
            deadline = time.monotonic() + WAIT
            # A few at a time until both have had some (they split the
            # partitions once each has looked at the other).
            while not (theirs and mine) or len(theirs) + len(mine) < published:
                assert time.monotonic() < deadline, "the members did not split the partitions"
                if len(theirs) + len(mine) >= published:
                    for n in range(4):
                        b.publish(TOPIC, f"m-{n}")
                    published += 4
                with contextlib.suppress(queue.Empty):
                    theirs.append(out.get(timeout=0.01))
            for n in range(40):
                b.publish(TOPIC, f"m-{n}")
            published += 40
            deadline = time.monotonic() + WAIT
            while len(theirs) + len(mine) < published:
                assert time.monotonic() < deadline, "not every message came"
                with contextlib.suppress(queue.Empty):
                    theirs.append(out.get(timeout=0.01))
            with lock:
                both = mine + theirs
            assert len(set(both)) == len(both) == published, "every message, once"
        finally:
            stop.set()
            child.join(WAIT)
        sub.close()
        assert child.exitcode == 0
