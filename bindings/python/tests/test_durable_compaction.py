"""Compaction on a data directory (issue 41): a compacted topic on a broker's
own ``data_dir`` is compacted in its segment files; a broker opened again on
the directory reads back exactly the newest value of each key, under the
offsets they were published at, and the topic is still compacted."""

from __future__ import annotations

import time

import pytest

import rill

WAIT = 60.0
KEYS = 10
DATA = 1200  # 4000-byte messages: more than a 4 MiB segment
FILLER = 1100  # more than a segment again, so every data message is sealed
PAYLOAD = 4000
DEAD = 3  # the key whose last message is a tombstone


def value(i: int) -> bytes:
    return f"v{i}".encode().ljust(PAYLOAD, b".")


def read_all(b: rill.Broker, group: str, topic: str) -> list[rill.Message]:
    c = b.consumer(group, topic)
    out: list[rill.Message] = []
    while True:
        batch = c.poll(1000, 0.02)
        if not batch:
            c.close()
            return out
        out.extend(batch)


def test_a_durable_compacted_topic_keeps_the_newest_value_of_each_key_across_a_restart(tmp_path: object) -> None:
    tombstone = DATA - KEYS + DEAD
    with rill.Broker(data_dir=str(tmp_path), fsync="never") as b:
        b.create_topic("prices", cleanup="compact")
        for i in range(DATA):
            payload = b"" if i == tombstone else value(i)
            assert b.publish("prices", payload, key=f"k{i % KEYS}").offset == i
        for _ in range(FILLER):
            b.publish("prices", b"-" * PAYLOAD, key="~")
        # The compactor is a background thread: a deadline around the condition.
        deadline = time.monotonic() + WAIT
        while b.topic_stats("prices").compacted_messages < DATA - KEYS:
            assert time.monotonic() < deadline, "the compactor did not rewrite the segment files"
            time.sleep(0.01)
        s = b.topic_stats("prices")
        assert s.compaction_passes >= 1 and s.compacted_bytes >= (DATA - KEYS) * PAYLOAD

    with rill.Broker(data_dir=str(tmp_path), fsync="never") as b:
        with pytest.raises(rill.InvalidArgument, match="needs a key"):
            b.publish("prices", b"no key")
        messages = read_all(b, "after-restart", "prices")
        offsets = [m.offset for m in messages]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        data = [(m.offset, m.key, m.payload) for m in messages if m.key is not None and m.key.startswith(b"k")]
        want = [(i, f"k{i % KEYS}".encode(), b"" if i == tombstone else value(i)) for i in range(DATA - KEYS, DATA)]
        assert data == want
        # Offsets continue after the last one.
        assert b.publish("prices", b"next", key="k0").offset == DATA + FILLER
