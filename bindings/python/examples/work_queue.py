"""A work queue: jobs on a partitioned topic, shared out among the members
of a consumer group, each job handled by one member.

    python examples/work_queue.py

A consumer group divides a topic's partitions among its live members; each
member polls only its own partitions and commits what it finished, so adding
a member adds a worker. Here two members, each on a thread of its own, share
four partitions. The program exits non-zero if a job is lost or handled
twice.
"""

from __future__ import annotations

import collections
import sys
import threading
import time

import rill

JOBS = 100
WORKERS = 2
DEADLINE = 30.0  # seconds the workers may take, in all, before giving up


def main() -> int:
    handled: dict[str, list[int]] = collections.defaultdict(list)  # job -> the workers that handled it
    lock = threading.Lock()
    errors: list[BaseException] = []

    with rill.Broker() as broker:
        # Partitions are the unit of parallelism: a group can keep at most
        # this many members busy.
        broker.create_topic("jobs/resize", partitions=4)

        # Join every worker before the jobs arrive, so the partitions are
        # shared out once. (A member that joins later takes partitions over
        # from the group's committed offsets: a job polled but not yet
        # committed by the member it was taken from is then handled again.)
        workers = [broker.consumer("resizers", "jobs/resize") for _ in range(WORKERS)]
        for n in range(JOBS):
            # Unkeyed: spread over the partitions round-robin. Give jobs a
            # key when the jobs of one key must stay in order.
            broker.publish("jobs/resize", f"job-{n}")

        give_up = time.monotonic() + DEADLINE

        def work(worker_id: int, worker: rill.Consumer) -> None:
            try:
                while len(handled) < JOBS and time.monotonic() < give_up:
                    # Up to 16 messages, waiting up to 50 ms for the first.
                    for job in worker.poll(max_messages=16, timeout=0.05):
                        with lock:
                            handled[job.payload.decode()].append(worker_id)
                    # Done with what it polled: the group moves past it. A
                    # worker that dies before committing leaves its jobs to
                    # be polled again by whoever takes its partitions.
                    worker.commit()
            except rill.RillError as e:
                errors.append(e)

        # A consumer is used from one thread at a time: one thread each.
        threads = [threading.Thread(target=work, args=(i, w)) for i, w in enumerate(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for w in workers:
            w.close()

    per_worker = [sum(1 for by in handled.values() if by == [i]) for i in range(WORKERS)]
    print(f"{len(handled)} jobs handled, per worker {per_worker}")
    twice = {job: by for job, by in handled.items() if len(by) > 1}
    if errors or len(handled) != JOBS or twice or 0 in per_worker:
        print(f"expected {JOBS} jobs, each once, over {WORKERS} workers; twice: {twice}; {errors}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
