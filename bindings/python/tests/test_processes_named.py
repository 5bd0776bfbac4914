"""Named (durable) subscriptions across processes (issue 39): a name held
by a subscription in another process is ``Busy`` (to ``subscribe`` and
``delete_durable``) until that subscription closes, and the next holder
resumes after the last ack; a kill -9 loop: a holder process is killed at a
random moment and the next one takes the name and resumes.

The children are ``multiprocessing`` spawn processes. A holder records each
offset it is given in a file, with one ``os.write`` before its handler
returns (and so before the ack), so what a killed holder recorded is at
least what it acked. ``RILL_NAMED_KILLS`` sets the number of kills."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "orders"
NAME = "audit"
PER_ROUND = 20
# Fewer than the Rust and C loops (50): each kill here starts an interpreter.
KILLS = int(os.environ.get("RILL_NAMED_KILLS", "20"))


def _wait_for(what: str, ready: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def _holder(data_dir: str, fsync: str, records: str, idle: Any, close: Any, closed: Any, published: int) -> None:
    """Holds the name, recording every offset before acking it; makes
    ``idle`` once it was given every one of ``published`` messages and is
    idle; closes when told (unless killed first)."""
    fd = os.open(records, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    last = [-1]

    def handle(m: rill.Message) -> None:
        os.write(fd, f"{m.offset}\n".encode())
        last[0] = m.offset

    with rill.Broker(data_dir=data_dir, sharing="processes", fsync=fsync, worker_threads=1) as b:
        sub = b.subscribe(TOPIC, handle, name=NAME, start="earliest")
        _wait_for("every message", lambda: last[0] == published - 1)
        assert sub.wait_idle(WAIT)
        idle.set()
        assert close.wait(WAIT), "never told to close"
        sub.close()
        closed.set()


def _recorded(path: Path) -> list[int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    # A line cut by the kill is left out.
    return [int(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def _publish(b: rill.Broker, n: int) -> None:
    for _ in range(n):
        b.publish(TOPIC, b"m")


def test_a_name_held_in_another_process_is_busy_until_it_lets_go(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        _publish(b, 10)
        idle, close, closed = ctx.Event(), ctx.Event(), ctx.Event()
        records = str(tmp_path / "records")
        child = ctx.Process(target=_holder, args=(data_dir, "never", records, idle, close, closed, 10))
        child.start()
        try:
            assert idle.wait(WAIT), "the child never took the name"
            with pytest.raises(rill.Busy):
                b.subscribe(TOPIC, lambda m: None, name=NAME)
            with pytest.raises(rill.Busy):
                b.delete_durable(NAME)
        finally:
            close.set()
            child.join(WAIT)
        assert child.exitcode == 0 and closed.is_set()
        assert _recorded(Path(records)) == list(range(10))
        seen: list[int] = []
        got = threading.Event()

        def handle(m: rill.Message) -> None:
            seen.append(m.offset)
            if len(seen) == 3:
                got.set()

        with b.subscribe(TOPIC, handle, name=NAME, start="earliest") as sub:
            _publish(b, 3)
            assert got.wait(WAIT)
            assert sub.wait_idle(WAIT)
        assert seen == [10, 11, 12], "resumed after the child's acks"
        b.delete_durable(NAME)
        with pytest.raises(rill.NotFound):
            b.delete_durable(NAME)


def test_a_killed_holders_name_is_taken_by_another_process_which_resumes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    seed = int(os.environ.get("RILL_NAMED_SEED", str(time.time_ns())))
    rng = random.Random(seed)
    data_dir = str(tmp_path / "data")
    highest, floor, exact = -1, 0, False
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        for i in range(KILLS + 1):
            last = i == KILLS
            _publish(b, PER_ROUND)
            published = (i + 1) * PER_ROUND
            always = i % 2 == 1 and not last
            idle, close, closed = ctx.Event(), ctx.Event(), ctx.Event()
            records = tmp_path / f"records-{i}"
            args = (data_dir, "always" if always else "never", str(records), idle, close, closed, published)
            child = ctx.Process(target=_holder, args=args)
            child.start()
            # A random moment: after `r` messages, or (one time in four)
            # once it is idle with every message acked.
            waited_idle = last or rng.randrange(4) == 0
            try:
                if waited_idle:
                    assert idle.wait(WAIT), f"holder {i} never got idle (seed {seed})"
                else:
                    r = rng.randrange(PER_ROUND + 1)
                    _wait_for("the holder's progress", lambda at=records, n=r: len(_recorded(at)) >= n)
            finally:
                if last:
                    close.set()
                    child.join(WAIT)
                else:
                    child.kill()
                    child.join(WAIT)
            assert child.exitcode == (0 if last else -9), (i, child.exitcode)
            got = _recorded(records)
            assert all(b_ == a + 1 for a, b_ in zip(got, got[1:])), f"holder {i}: in order, none doubled: {got}"
            if got:
                first = got[0]
                assert first <= highest + 1, f"holder {i} started at {first}, past {highest + 1} (seed {seed})"
                assert first >= floor, f"holder {i} started at {first}, before {floor} (seed {seed})"
                assert not exact or first == highest + 1, f"holder {i}: acks lost (seed {seed})"
                floor, highest = first, max(highest, got[-1])
            # Under "always" an idle holder's acks were synced before it
            # went idle: the next holder resumes right after them.
            exact = (exact and not got) or (waited_idle and always)
        assert highest == (KILLS + 1) * PER_ROUND - 1, "every message was given to some holder"
