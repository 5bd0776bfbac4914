"""Worker processes: a producer and four worker processes in one consumer
group, sharing a data directory, each partition handled by exactly one
worker.

    python examples/worker_processes.py

Python runs one thread of Python at a time (the GIL), so work that needs
four cores needs four processes. Brokers opened with ``sharing="processes"``
on one ``data_dir`` are one broker: a topic created in one process is there
in all, and the members of a consumer group in different processes split
the topic's partitions among them. When a worker process dies, however it
dies, its partitions go to the others (within its ``session_timeout``),
which resume from its last commit. The program exits non-zero if a job is
lost, handled twice, or a partition is handled by two workers.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import sys
import tempfile
import time
from typing import Any

import rill

JOBS = 200
WORKERS = 4
PARTITIONS = 4
DEADLINE = 60.0  # seconds the whole run may take before giving up
# Members look at the group every quarter of this: a short one makes the
# workers settle fast (the default is 10 s).
SESSION_TIMEOUT = 0.4


def worker(data_dir: str, worker_id: int, reports: Any, stop: Any) -> None:
    """One worker process: a member of the group "resizers"."""
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as broker:
        consumer = broker.consumer("resizers", "jobs/resize", session_timeout=SESSION_TIMEOUT)
        owned: list[int] | None = None
        while not stop.is_set():
            jobs = consumer.poll(max_messages=16, timeout=0.05)
            for job in jobs:
                reports.put(("job", worker_id, job.partition, job.payload.decode()))
            if jobs:
                # Done with what it polled: the group moves past it
                # (Reassigned: partitions it gave up while the workers
                # settled, whose new owner polls them again).
                with contextlib.suppress(rill.Reassigned):
                    consumer.commit()
            now = consumer.assignment()
            if now != owned:
                reports.put(("owns", worker_id, now))
                owned = now
        consumer.close()


def main() -> int:
    # "spawn": fresh interpreters, as a program with the GIL in the way
    # starts its workers (and no broker's threads are inherited).
    ctx = multiprocessing.get_context("spawn")
    tmp = tempfile.TemporaryDirectory()
    with tmp as data_dir, rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as producer:
        producer.create_topic("jobs/resize", partitions=PARTITIONS)
        reports = ctx.Queue()
        stop = ctx.Event()
        workers = [ctx.Process(target=worker, args=(data_dir, i, reports, stop)) for i in range(WORKERS)]
        for w in workers:
            w.start()
        give_up = time.monotonic() + DEADLINE
        owns: dict[int, list[int]] = {}
        handled: dict[str, list[int]] = {}
        readers: dict[int, set[int]] = {}

        def take(timeout: float) -> None:
            try:
                report = reports.get(timeout=timeout)
            except queue.Empty:
                return
            if report[0] == "owns":
                owns[report[1]] = report[2]
            else:
                _, worker_id, partition, job = report
                handled.setdefault(job, []).append(worker_id)
                readers.setdefault(partition, set()).add(worker_id)

        # Wait until the workers have split the partitions, one each,
        # so they are shared out once before the jobs arrive.
        while sorted(p for ps in owns.values() for p in ps) != list(range(PARTITIONS)) or any(
            len(ps) != 1 for ps in owns.values()
        ):
            if time.monotonic() > give_up:
                print(f"the workers did not settle: {owns}", file=sys.stderr)
                stop.set()
                return 1
            take(0.1)
        print(f"settled: {dict(sorted(owns.items()))}")
        for n in range(JOBS):
            producer.publish("jobs/resize", f"job-{n}")
        while len(handled) < JOBS and time.monotonic() < give_up:
            take(0.1)
        stop.set()
        for w in workers:
            w.join(timeout=DEADLINE)
        # Anything reported after the last job arrived (a second copy).
        while True:
            try:
                report = reports.get_nowait()
            except queue.Empty:
                break
            if report[0] == "job":
                handled.setdefault(report[3], []).append(report[1])

    lost = [f"job-{n}" for n in range(JOBS) if f"job-{n}" not in handled]
    twice = {job: ws for job, ws in handled.items() if len(ws) != 1}
    shared = {p: ws for p, ws in readers.items() if len(ws) != 1}
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    print(f"{len(handled)} jobs handled by {WORKERS} worker processes, one partition each")
    if lost or twice or shared or failed:
        print(
            f"lost: {lost}; twice: {twice}; partitions with several workers: {shared}; workers failed: {failed}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
