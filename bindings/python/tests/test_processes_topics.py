"""Topics across processes (issue 39, its fifth step), ``sharing="processes"``.

A wildcard subscription in this process gets every message of a topic a
process started with ``multiprocessing``'s spawn method creates and
publishes to at once (the topic is read from its start when this process
joins it); this process publishes by name to that topic without creating
it; and when the other process deletes it, it vanishes here too. A topic
this process published to and another deleted (and maybe created again)
takes publishes by name again once it exists. Every wait has a deadline."""

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


def _deleter(data_dir: str, create_again: bool) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        b.delete_topic(TOPIC)
        if create_again:
            b.create_topic(TOPIC)
            b.publish(TOPIC, b"new")


def _deleted_elsewhere(b: rill.Broker, data_dir: str, create_again: bool) -> None:
    """Has `b` publish to TOPIC through its cached publisher, then another
    process delete TOPIC (and create it again, with one message), and waits
    until `b` has let go of the deleted topic (a subscription naming it is
    closed)."""
    b.create_topic(TOPIC)
    for n in range(10):
        b.publish(TOPIC, b"old %d" % n)
    with b.subscribe(TOPIC, lambda m: None) as literal:
        child = multiprocessing.get_context("spawn").Process(target=_deleter, args=(data_dir, create_again))
        child.start()
        child.join(WAIT)
        assert child.exitcode == 0
        deadline = time.monotonic() + WAIT
        while literal.closed_reason != "topic deleted":
            assert time.monotonic() < deadline, "the topic deleted in the other process is still here"
            time.sleep(0.001)


def _payloads(b: rill.Broker) -> list[bytes]:
    seen: list[bytes] = []
    with b.subscribe(TOPIC, lambda m: seen.append(m.payload), start="earliest") as sub:
        assert sub.wait_idle(WAIT)
    return seen


def test_publishing_reaches_a_topic_another_process_deleted_and_created_again(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        _deleted_elsewhere(b, data_dir, create_again=True)
        # The cached publisher is the deleted topic's: a publish by name goes
        # to the topic the name has now, as the one with attributes does.
        assert b.publish(TOPIC, b"plain").offset == 1
        assert [p.offset for p in b.publish_batch(TOPIC, [b"batch 1", b"batch 2"])] == [2, 3]
        assert b.publish_batch(TOPIC, [b"with id"], msg_ids=["id-1"])[0].offset == 4
        assert b.publish(TOPIC, b"with attributes", attributes={"k": "v"}).offset == 5
        assert _payloads(b) == [b"new", b"plain", b"batch 1", b"batch 2", b"with id", b"with attributes"]


def test_publishing_to_a_topic_another_process_deleted_raises_until_it_is_created_again(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        _deleted_elsewhere(b, data_dir, create_again=False)
        with pytest.raises(rill.NoSuchTopic):
            b.publish(TOPIC, b"plain")
        with pytest.raises(rill.NoSuchTopic):
            b.publish_batch(TOPIC, [b"batch"])
        with pytest.raises(rill.NoSuchTopic):
            b.publish_batch(TOPIC, [b"with id"], msg_ids=["id-1"])
        assert b.topics() == []
        # Created again here: the publishes that raised appended nothing.
        b.create_topic(TOPIC)
        assert b.publish(TOPIC, b"plain").offset == 0
        assert [p.offset for p in b.publish_batch(TOPIC, [b"batch"])] == [1]
        assert _payloads(b) == [b"plain", b"batch"]


def _churner(data_dir: str, cycles: int, published: Any, done: Any) -> None:
    """Deletes TOPIC and creates it again `cycles` times, each once the
    parent has published a few more messages to it."""
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        for _ in range(cycles):
            start = published.value
            deadline = time.monotonic() + WAIT
            while published.value < start + 8:
                assert time.monotonic() < deadline, "the parent stopped publishing"
                time.sleep(0.001)
            b.delete_topic(TOPIC)
            b.create_topic(TOPIC, retention_bytes=256 << 10)
    done.set()


def test_a_publisher_rolling_as_another_process_deletes_its_topic_gets_no_such_topic(tmp_path: Path) -> None:
    # 16 KB messages in 64 KiB segments: a roll every few publishes, some
    # of them after the other process removed the topic's files and before
    # this one has seen the delete. Each reports NoSuchTopic, not a
    # StorageError.
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    errors: dict[str, int] = {}
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, retention_bytes=256 << 10)
        published = ctx.Value("Q", 0, lock=False)
        done = ctx.Event()
        child = ctx.Process(target=_churner, args=(data_dir, 30, published, done))
        child.start()
        try:
            deadline = time.monotonic() + 10 * WAIT
            while not done.is_set() and child.is_alive():
                assert time.monotonic() < deadline, "the deleting process never finished"
                try:
                    b.publish(TOPIC, b"." * 16000)
                    published.value += 1
                except rill.RillError as e:
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
        finally:
            child.join(WAIT)
        assert child.exitcode == 0
    assert set(errors) <= {"NoSuchTopic"}, errors
