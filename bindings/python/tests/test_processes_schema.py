"""Schemas across processes (issues 39 and 42), ``sharing="processes"``.

A JSON schema a process started with ``multiprocessing``'s spawn method
sets, replaces and removes checks this process's publishes from the moment
this process's broker has seen the change, which the test waits for on
``Broker.schema_version`` (with a deadline)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "orders"
NEEDS_ID = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}
NEEDS_NAME = {"type": "object", "required": ["name"]}


def _setter(data_dir: str, steps: Any, seen: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        assert b.set_schema(TOPIC, json_schema=NEEDS_ID) == 1
        steps.put("set")
        assert seen.get(timeout=WAIT) == "set"
        assert b.set_schema(TOPIC, json_schema=NEEDS_NAME) == 2
        steps.put("replaced")
        assert seen.get(timeout=WAIT) == "replaced"
        b.remove_schema(TOPIC)
        steps.put("removed")


def _wait_version(b: rill.Broker, v: int) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if b.schema_version(TOPIC) == v:
            return True
        time.sleep(0.001)
    return False


def _start(data_dir: str, target: Any) -> tuple[Any, Any, Any]:
    """A spawned process running ``target(data_dir, steps, seen)``: it puts
    its steps on ``steps`` and waits for this process's answers on
    ``seen``."""
    ctx = multiprocessing.get_context("spawn")
    steps, seen = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=target, args=(data_dir, steps, seen))
    child.start()
    return child, steps, seen


def test_a_schema_another_process_sets_replaces_and_removes_checks_this_one(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        child, steps, seen = _start(data_dir, _setter)
        try:
            assert steps.get(timeout=WAIT) == "set"
            assert _wait_version(b, 1), "the schema set in the other process never reached this one"
            with pytest.raises(rill.SchemaError):
                b.publish(TOPIC, b'{"id": "seven"}')
            b.publish(TOPIC, b'{"id": 7}')
            seen.put("set")
            assert steps.get(timeout=WAIT) == "replaced"
            assert _wait_version(b, 2)
            with pytest.raises(rill.SchemaError):
                b.publish(TOPIC, b'{"id": 7}')
            b.publish(TOPIC, b'{"name": "n"}')
            seen.put("replaced")
            assert steps.get(timeout=WAIT) == "removed"
            assert _wait_version(b, 0)
            b.publish(TOPIC, b"anything")
            # The directory's next number: 3 went to the removal.
            assert b.set_schema(TOPIC, json_schema=True) == 4
        finally:
            seen.put("set")
            seen.put("replaced")
            child.join(WAIT)
        assert child.exitcode == 0


def _dead_letter_setter(data_dir: str, steps: Any, seen: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        b.set_schema(TOPIC, json_schema=NEEDS_ID, on_invalid="dead_letter")
        steps.put("set")
        assert seen.get(timeout=WAIT) == "done"


def test_a_dead_letter_schema_another_process_sets_flags_this_ones_fast_publishes(tmp_path: Path) -> None:
    # The publisher was made (and used) before any schema existed: the
    # one-call publish and the packed batch must still say which messages
    # went to the dead-letter topic.
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC)
        first = b.publish(TOPIC, b"before")
        assert not first.dead_lettered
        child, steps, seen = _start(data_dir, _dead_letter_setter)
        try:
            assert steps.get(timeout=WAIT) == "set"
            assert _wait_version(b, 1), "the schema set in the other process never reached this one"
            bad = b.publish(TOPIC, b'{"id": "seven"}')
            assert bad.dead_lettered and not bad.duplicate
            good = b.publish(TOPIC, b'{"id": 7}')
            assert not good.dead_lettered and good == (0, first.offset + 1)
            batch = b.publish_batch(TOPIC, [b'{"id": 8}', b"not json", b'{"id": 9}'])
            assert [p.dead_lettered for p in batch] == [False, True, False]
            assert [p.offset for p in (batch[0], batch[2])] == [first.offset + 2, first.offset + 3]
            # What the flags point at is in the dead-letter topic.
            dlq = f"$dlq/{TOPIC}"
            assert b.topic_stats(dlq).publish_count == 2
        finally:
            seen.put("done")
            child.join(WAIT)
        assert child.exitcode == 0
