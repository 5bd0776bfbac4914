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


def _jobs(data_dir: str, jobs: int) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        for j in range(jobs):
            c = b.consumer(f"job-{j}", TOPIC)
            while c.poll(max_messages=64, timeout=0.05):
                pass
            c.commit()
            c.close()
            b.subscribe(TOPIC, lambda m: None, name=f"job-{j}").close()


def _files(root: Path) -> list[str]:
    return sorted(str(Path(d, f).relative_to(root)) for d, _, files in os.walk(root) for f in files)


def test_deleted_groups_and_names_leave_nothing_in_the_data_dir(tmp_path: Path) -> None:
    """A group and a durable name per job, made in another process and
    deleted here (with the name's dead-letter topic, which holds data and
    is not deleted with the name): the data directory holds what it held
    before the jobs."""
    ctx = multiprocessing.get_context("spawn")
    data_dir = tmp_path / "data"
    jobs = 8
    with rill.Broker(data_dir=str(data_dir), sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=PARTITIONS)
        for i in range(10):
            b.publish(TOPIC, b"x%d" % i)
        before = _files(data_dir)
        child = ctx.Process(target=_jobs, args=(str(data_dir), jobs))
        child.start()
        child.join(WAIT)
        assert child.exitcode == 0
        assert len(b.groups()) == jobs
        assert len(_files(data_dir)) > len(before)
        for j in range(jobs):
            b.delete_group(f"job-{j}", TOPIC)
            b.delete_durable(f"job-{j}")
            b.delete_topic(f"$dlq/job-{j}")
        assert b.groups() == []
        assert b.named_subscriptions() == []
        after = _files(data_dir)
        assert after == before, (set(after) - set(before), set(before) - set(after))


def test_a_group_live_at_its_topics_delete_is_removed_once_its_member_is_gone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with rill.Broker(data_dir=str(data_dir), sharing="processes", fsync="never") as a, rill.Broker(
        data_dir=str(data_dir), sharing="processes", fsync="never"
    ) as b:
        a.create_topic("a")
        a.publish("a", b"x")
        c = b.consumer("g", "a")
        assert c.poll(max_messages=16, timeout=WAIT)
        c.commit()
        a.delete_topic("a")  # skips the group: its member is live
        assert any(f.startswith("groups/") for f in _files(data_dir))
        c.close()
        with pytest.raises(rill.NotFound):
            a.delete_group("g", "a")
        assert not any(f.startswith("groups/") for f in _files(data_dir))
