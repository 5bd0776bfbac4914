"""Several processes, one data directory (issue 39): ``sharing="processes"``.

Publisher processes started with ``multiprocessing``'s spawn method (fresh
interpreters, as a user with the GIL in the way would start them) publish
into one topic; subscriber processes get every message once, each
publisher's in its order, at dense offsets. An idle subscriber is woken by a
single publish from another process that stays open meanwhile (a broker's
close wakes the directory's doorbells, so only the publish's own wake can
deliver it). And the errors: ``Busy`` for mismatched modes,
``InvalidArgument`` without a data_dir and for what is not shared yet."""

from __future__ import annotations

import contextlib
import multiprocessing
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "orders"
PUBLISHERS = 3
SUBSCRIBERS = 2
EACH = 500


def _ensure_topic(b: rill.Broker) -> None:
    # On disk when this broker opened: already its own.
    with contextlib.suppress(rill.TopicExists):
        b.create_topic(TOPIC)


def _publisher(data_dir: str, who: int, each: int, done: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        _ensure_topic(b)
        for seq in range(each):
            b.publish(TOPIC, struct.pack("<II", who, seq))
        # Open until the parent says every subscriber is done.
        assert done.wait(WAIT), "the parent never finished"


def _subscriber(data_dir: str, ready: Any, out: Any, total: int) -> None:
    seen: list[tuple[int, int, int]] = []
    got_all = threading.Event()

    def handle(m: rill.Message) -> None:
        who, seq = struct.unpack("<II", m.payload)
        seen.append((m.offset, who, seq))
        if len(seen) >= total:
            got_all.set()

    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        _ensure_topic(b)
        with b.subscribe(TOPIC, handle, start="earliest"):
            ready.set()
            got_all.wait(WAIT)
    out.put(seen)


def _check_all(seen: list[tuple[int, int, int]], publishers: int, each: int) -> None:
    assert len(seen) == publishers * each, "every message, once"
    following = [0] * publishers
    for _, who, seq in seen:
        assert seq == following[who], f"publisher {who}'s messages in its order"
        following[who] += 1
    assert following == [each] * publishers
    assert sorted(o for o, _, _ in seen) == list(range(publishers * each)), "offsets dense from 0"


def test_publishers_and_subscribers_in_separate_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        done = ctx.Event()
        out = ctx.Queue()
        readies = [ctx.Event() for _ in range(SUBSCRIBERS)]
        subs = [ctx.Process(target=_subscriber, args=(data_dir, r, out, PUBLISHERS * EACH)) for r in readies]
        for p in subs:
            p.start()
        # Subscribed (and idle) before the first publish.
        assert all(r.wait(WAIT) for r in readies), "a subscriber never started"
        pubs = [ctx.Process(target=_publisher, args=(data_dir, who, EACH, done)) for who in range(PUBLISHERS)]
        for p in pubs:
            p.start()
        try:
            results = [out.get(timeout=WAIT) for _ in subs]
        finally:
            done.set()
            for p in pubs + subs:
                p.join(WAIT)
        for p in pubs + subs:
            assert p.exitcode == 0, p
        for seen in results:
            _check_all(seen, PUBLISHERS, EACH)


def _one_publish(data_dir: str, done: Any) -> None:
    _publisher(data_dir, 7, 1, done)


def test_an_idle_subscriber_is_woken_by_one_publish_in_another_process(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    got = threading.Event()
    seen: list[bytes] = []

    def handle(m: rill.Message) -> None:
        seen.append(m.payload)
        got.set()

    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        with b.subscribe(TOPIC, handle) as sub:
            assert sub.wait_idle(WAIT)
            done = ctx.Event()
            child = ctx.Process(target=_one_publish, args=(data_dir, done))
            child.start()
            try:
                woken = got.wait(WAIT)
            finally:
                done.set()
                child.join(WAIT)
            assert child.exitcode == 0
            assert woken, "the idle subscriber was never woken"
            assert seen == [struct.pack("<II", 7, 0)]


def test_mismatched_modes_are_busy_and_processes_share(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir), pytest.raises(rill.Busy):
        rill.Broker(data_dir=data_dir, sharing="processes")
    first = rill.Broker(data_dir=data_dir, sharing="processes")
    second = rill.Broker(data_dir=data_dir, sharing="processes")
    with first, second, pytest.raises(rill.Busy):
        rill.Broker(data_dir=data_dir, sharing="exclusive")


def test_processes_needs_a_data_dir_and_a_known_mode(tmp_path: Path) -> None:
    with pytest.raises(rill.InvalidArgument, match="data_dir"):
        rill.Broker(sharing="processes")
    with pytest.raises(rill.InvalidArgument, match="sharing"):
        rill.Broker(data_dir=str(tmp_path), sharing="threads")  # type: ignore[arg-type]


def test_a_shared_subscription_is_taken_in_processes_mode(tmp_path: Path) -> None:
    with rill.Broker(data_dir=str(tmp_path / "data"), sharing="processes") as b:
        b.create_topic(TOPIC)
        # Its members in several processes: test_processes_shared.py.
        b.subscribe(TOPIC, lambda m: None, name="workers", shared=True).close()
