"""Who holds what across processes (issue 39): ``Broker.named_subscriptions``
and ``Broker.group_members`` (and ``Broker.groups``) as an operator uses them. A ``multiprocessing``
spawn child holds the durable name "audit" and is the one member of the
group "billing" on both partitions of "orders"; this process holds
"ledger". The listings show the child's pid and partitions, and once the
child is killed with SIGKILL, "audit" is not held and the group has no
member, at once (the kernel lets go of a dead process's locks as it dies).
Then the same calls on a broker of its own (``sharing="exclusive"``):
this process's pid."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 2


def _holder(data_dir: str, out: Any, stop: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        sub = b.subscribe(TOPIC, lambda m: None, name="audit")
        c = b.consumer(GROUP, TOPIC)
        said = False
        while not stop.is_set():
            c.poll(max_messages=16, timeout=0.02)
            if not said and c.assignment() == list(range(PARTITIONS)):
                out.put(os.getpid())
                said = True
        c.close()
        sub.close()


def test_names_and_members_of_another_process_show_its_pid_until_it_is_killed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        mine = b.subscribe(TOPIC, lambda m: None, name="ledger")
        out = ctx.Queue()
        stop = ctx.Event()
        child = ctx.Process(target=_holder, args=(data_dir, out, stop))
        child.start()
        try:
            pid = out.get(timeout=WAIT)
            assert pid == child.pid
            assert b.named_subscriptions() == [
                rill.NamedSubscription("audit", child.pid),
                rill.NamedSubscription("ledger", os.getpid()),
            ]
            members = b.group_members(GROUP, TOPIC)
            assert [(m.pid, m.partitions) for m in members] == [(child.pid, [0, 1])]
            assert isinstance(members[0].id, int)
            # The child's member has committed nothing: its group is listed
            # for its live member alone.
            assert b.groups() == [(GROUP, TOPIC)]

            child.kill()
            child.join(WAIT)
            assert child.exitcode == -signal.SIGKILL
            assert b.named_subscriptions() == [
                rill.NamedSubscription("audit", None),
                rill.NamedSubscription("ledger", os.getpid()),
            ]
            assert b.group_members(GROUP, TOPIC) == []
            assert b.groups() == []
        finally:
            stop.set()
            child.join(WAIT)
            if child.is_alive():
                child.kill()
                child.join()
            mine.close()


def test_exclusive_mode_lists_this_brokers_names_and_members(tmp_path: Path) -> None:
    with rill.Broker(data_dir=str(tmp_path / "data")) as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        assert b.named_subscriptions() == []
        assert b.group_members(GROUP, TOPIC) == []
        anonymous = b.subscribe(TOPIC, lambda m: None)  # not a durable name
        audit = b.subscribe(TOPIC, lambda m: None, name="audit")
        consumer = b.consumer(GROUP, TOPIC)
        assert b.named_subscriptions() == [rill.NamedSubscription("audit", os.getpid())]
        members = b.group_members(GROUP, TOPIC)
        assert [(m.pid, m.partitions) for m in members] == [(os.getpid(), [0, 1])]
        with pytest.raises(rill.NoSuchTopic):
            b.group_members(GROUP, "no-such-topic")
        for handle in (consumer, audit, anonymous):
            handle.close()
