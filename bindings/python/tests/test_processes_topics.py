"""Topics across processes (issue 39, its fifth step), ``sharing="processes"``.

A wildcard subscription in this process gets every message of a topic a
process started with ``multiprocessing``'s spawn method creates and
publishes to at once (the topic is read from its start when this process
joins it); this process publishes by name to that topic without creating
it; and when the other process deletes it, it vanishes here too. Every wait
has a deadline."""

from __future__ import annotations

import multiprocessing
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "orders/eu"
MESSAGES = 500


def _creator(data_dir: str, created: Any, delete: Any, deleted: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        b.create_topic(TOPIC)
        # At once: the other process has not joined the topic yet.
        for n in range(MESSAGES):
            b.publish(TOPIC, struct.pack("<I", n))
        created.set()
        assert delete.wait(WAIT), "the parent never asked for the delete"
        b.delete_topic(TOPIC)
        deleted.set()


def _vanishes(b: rill.Broker) -> bool:
    """Whether publishing to TOPIC fails with NoSuchTopic within the deadline
    (this broker's doorbell thread lets go of it when rung for the delete)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            b.publish(TOPIC, b"late")
        except rill.NoSuchTopic:
            return True
        time.sleep(0.001)
    return False


def test_a_topic_another_process_creates_and_deletes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    seen: list[tuple[str, int, int]] = []
    got_all = threading.Event()

    def handle(m: rill.Message) -> None:
        seen.append((m.topic, m.offset, struct.unpack("<I", m.payload)[0]))
        if len(seen) >= MESSAGES + 1:
            got_all.set()

    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        with pytest.raises(rill.NoSuchTopic):
            b.publish(TOPIC, b"none yet")
        # From the latest message: a topic it picks up is read from its start anyway.
        with b.subscribe("orders/*", handle, start="latest"):
            created, delete, deleted = ctx.Event(), ctx.Event(), ctx.Event()
            child = ctx.Process(target=_creator, args=(data_dir, created, delete, deleted))
            child.start()
            try:
                assert created.wait(WAIT), "the other process never created the topic"
                # By name, not created here.
                at = b.publish(TOPIC, struct.pack("<I", MESSAGES))
                assert at.offset == MESSAGES
                assert got_all.wait(WAIT), f"only {len(seen)} messages"
                assert seen == [(TOPIC, n, n) for n in range(MESSAGES + 1)], "in order, none missed"
                assert b.topics() == [TOPIC]
                delete.set()
                assert deleted.wait(WAIT), "the other process never deleted the topic"
                assert _vanishes(b), "the topic deleted in the other process is still here"
                assert b.topics() == []
            finally:
                delete.set()
                child.join(WAIT)
            assert child.exitcode == 0
