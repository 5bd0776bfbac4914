"""Compacted topics across processes (issues 39 and 41),
``sharing="processes"``: a process started with ``multiprocessing``'s spawn
method publishes keyed messages and a tombstone to a compacted topic this
process created; whichever process compacts (the holder of the partition's
``compact.lock``), a reader from the beginning in each process sees exactly
the newest message of each key, under the offsets they were published at."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "prices"
KEYS = 10
DATA = 1200  # 4000-byte messages: more than a 4 MiB segment
FILLER = 1100  # more than a segment again, so every data message is sealed
PAYLOAD = 4000
TOMBSTONE = DATA - KEYS + 3  # the last message of key k3 deletes it


def value(i: int) -> bytes:
    return b"" if i == TOMBSTONE else f"v{i}".encode().ljust(PAYLOAD, b".")


# The newest message of each key: the last KEYS data messages.
WANT = [(i, f"k{i % KEYS}".encode(), value(i)) for i in range(DATA - KEYS, DATA)]


def read_data(b: rill.Broker, group: str) -> list[tuple[int, bytes, bytes]]:
    """The data messages (keys ``k*``) a new consumer reads from the first offset."""
    c = b.consumer(group, TOPIC)
    out: list[tuple[int, bytes, bytes]] = []
    while True:
        batch = c.poll(1000, 0.02)
        if not batch:
            c.close()
            return out
        for m in batch:
            if m.key is not None and m.key.startswith(b"k"):
                out.append((m.offset, m.key, m.payload))


def wait_for_compacted(b: rill.Broker, who: str) -> list[tuple[int, bytes, bytes]]:
    """Reads from the beginning until the read is the compacted log (a
    deadline around the background compactors); the last read."""
    deadline = time.monotonic() + WAIT
    n = 0
    while True:
        got = read_data(b, f"{who}-{n}")
        if got == WANT or time.monotonic() > deadline:
            return got
        n += 1


def _writer(data_dir: str, go: Any, out: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        go.get(timeout=WAIT)
        for i in range(DATA):
            assert b.publish(TOPIC, value(i), key=f"k{i % KEYS}").offset == i
        for _ in range(FILLER):
            b.publish(TOPIC, b"-" * PAYLOAD, key="~")
        out.put("written")
        go.get(timeout=WAIT)
        got = wait_for_compacted(b, "child")
        out.put((got == WANT, len(got), b.topic_stats(TOPIC).compaction_passes))


def test_a_compacted_topic_is_compacted_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, cleanup="compact", min_compaction_lag_ms=50)
        with pytest.raises(rill.InvalidArgument):
            b.publish(TOPIC, b"no key")
        go, out = ctx.Queue(), ctx.Queue()
        child = ctx.Process(target=_writer, args=(data_dir, go, out))
        child.start()
        try:
            go.put(True)
            assert out.get(timeout=WAIT) == "written"
            got = wait_for_compacted(b, "parent")
            assert got == WANT, f"this process read {len(got)} data messages"
            go.put(True)
            same, read, child_passes = out.get(timeout=WAIT)
        finally:
            go.put(True)
            go.put(True)
            child.join(WAIT)
        assert child.exitcode == 0
        assert same, f"the writer's process read {read} data messages, not the compacted log"
        assert b.topic_stats(TOPIC).compaction_passes + child_passes >= 1
