"""The dedupe window across processes (issues 39 and 41),
``sharing="processes"``: processes started with ``multiprocessing``'s spawn
method race the same ``msg_id``s; each id is appended once, every racer
gets the record's position (the losers flagged ``duplicate``), and this
process, which published none of them, is answered the same way."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from conftest import WAIT

import rill

TOPIC = "orders"
IDS = [f"order-{n}" for n in range(200)]
RACERS = 2


def _racer(data_dir: str, ready: Any, go: Any, out: Any) -> None:
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never", worker_threads=1) as b:
        ready.put(True)
        go.get(timeout=WAIT)
        got = []
        for msg_id in IDS:
            p = b.publish(TOPIC, b"o", msg_id=msg_id)
            got.append((msg_id, p.partition, p.offset, p.duplicate))
        out.put(got)


def test_processes_racing_the_same_ids_append_each_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    data_dir = str(tmp_path / "data")
    with rill.Broker(data_dir=data_dir, sharing="processes", fsync="never") as b:
        b.create_topic(TOPIC, partitions=2)
        ready, go, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
        children = [ctx.Process(target=_racer, args=(data_dir, ready, go, out)) for _ in range(RACERS)]
        for c in children:
            c.start()
        try:
            for _ in children:
                assert ready.get(timeout=WAIT)
            for _ in children:
                go.put(True)
            results = [out.get(timeout=WAIT) for _ in children]
        finally:
            for _ in children:
                go.put(True)
            for c in children:
                c.join(WAIT)
        assert [c.exitcode for c in children] == [0] * RACERS
        by_id: dict[str, list[tuple[int, int, bool]]] = {}
        for got in results:
            for msg_id, partition, offset, duplicate in got:
                by_id.setdefault(msg_id, []).append((partition, offset, duplicate))
        assert b.topic_stats(TOPIC).publish_count == len(IDS), "each id appended once"
        for msg_id, outcomes in by_id.items():
            assert [d for (_, _, d) in outcomes].count(False) == 1, (msg_id, outcomes)
            assert len({(p, o) for (p, o, _) in outcomes}) == 1, (msg_id, outcomes)
            again = b.publish(TOPIC, b"o", msg_id=msg_id)
            assert again.duplicate
            assert (again.partition, again.offset) == outcomes[0][:2]
        assert b.topic_stats(TOPIC).publish_count == len(IDS)
