"""Compacted topics (issue 41): ``create_topic(name, cleanup="compact")``
keeps the newest message of every key; a keyless publish raises
InvalidArgument; offsets never change, so seeks and commits work across the
gaps compaction leaves; ``topic_stats`` counts what was removed."""

from __future__ import annotations

import time

import pytest

import rill

WAIT = 30.0
KEYS = 10
DATA = 1200  # 4000-byte messages: more than a 4 MiB segment
FILLER = 1100  # more than a segment again, so every data message is sealed
PAYLOAD = 4000


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


def newest_only(messages: list[rill.Message]) -> bool:
    data = [m for m in messages if m.key is not None and m.key.startswith(b"k")]
    want = [(DATA - KEYS + k, f"k{(DATA - KEYS + k) % KEYS}".encode(), value(DATA - KEYS + k)) for k in range(KEYS)]
    return [(m.offset, m.key, m.payload) for m in data] == want


def test_a_compacted_topic_keeps_the_newest_value_of_every_key(broker: rill.Broker) -> None:
    broker.create_topic("prices", cleanup="compact")
    with pytest.raises(rill.InvalidArgument, match="needs a key"):
        broker.publish("prices", b"no key")
    for i in range(DATA):
        assert broker.publish("prices", value(i), key=f"k{i % KEYS}").offset == i
    for _ in range(FILLER):
        broker.publish("prices", b"-" * PAYLOAD, key="~")

    # The compactor is a background thread: wait, with a deadline, until a
    # reader from the beginning sees only the newest value of each key.
    deadline = time.monotonic() + WAIT
    probe = 0
    while not newest_only(read_all(broker, f"probe-{probe}", "prices")):
        assert time.monotonic() < deadline, "the compactor did not remove the superseded messages"
        probe += 1

    s = broker.topic_stats("prices")
    assert s.compaction_passes >= 1
    assert s.compacted_messages >= DATA - KEYS
    assert s.compacted_bytes >= (DATA - KEYS) * PAYLOAD
    assert s.compaction_keys >= KEYS

    # A seek to a removed offset starts at the next kept one; commits cross gaps.
    c = broker.consumer("readers", "prices")
    c.seek(5)
    [m] = c.poll(1, 5.0)
    assert m.offset == DATA - KEYS
    c.commit()
    assert c.committed() == DATA - KEYS + 1
    c.close()
    # Offsets never change.
    assert broker.publish("prices", b"next", key="k0").offset == DATA + FILLER


def test_a_topic_that_goes_quiet_is_compacted(broker: rill.Broker) -> None:
    # Many keys first, so that the few segments a key's updates seal next
    # stay below the share of the log that starts a pass by itself.
    broker.create_topic("state", cleanup="compact", segment_bytes=4096)
    for i in range(1000):
        broker.publish("state", b"x" * 48, key=f"key-{i}")
    deadline = time.monotonic() + WAIT
    while broker.topic_stats("state").compaction_passes == 0:
        assert time.monotonic() < deadline, "no first pass"
    hot = [broker.publish("state", str(i).encode().ljust(2000, b"."), key="hot").offset for i in range(30)]

    def hot_values(probe: int) -> list[int]:
        return [m.offset for m in read_all(broker, f"quiet-{probe}", "state") if m.key == b"hot"]

    # Nobody publishes any more: within a second or so the compactor runs
    # a pass anyway, and a fresh reader sees the newest of the sealed
    # values and those of the segment being written (which a pass never
    # reads; two 2000-byte values fit a 4096-byte one).
    probe = 0
    while len(values := hot_values(probe)) > 3:
        assert time.monotonic() < deadline, f"a quiet topic kept {len(values)} values of one key"
        probe += 1
    assert values[-1] == hot[-1], "the newest value stays"


def test_a_deleted_key_kept_for_its_id_does_not_come_back(broker: rill.Broker) -> None:
    """A value kept for its id's dedupe window and a tombstone past its own
    retention (0): the tombstone stays while the value does, so a reader
    from the beginning finds the key deleted."""
    broker.create_topic("users", cleanup="compact", dedupe_window_ms=600_000, delete_retention_ms=0)
    broker.publish("users", b"old", key="user-1", msg_id="req-1")
    broker.publish("users", b"", key="user-1")
    for i in range(FILLER):  # more than a segment: the first two messages are sealed
        broker.publish("users", b"-" * PAYLOAD, key=f"f{i}")
    deadline = time.monotonic() + WAIT
    while broker.topic_stats("users").compaction_passes < 1:
        assert time.monotonic() < deadline, "the compactor did not run"
        time.sleep(0.01)
    state: dict[bytes, bytes] = {}
    user = []
    for m in read_all(broker, "rebuild", "users"):
        assert m.key is not None
        if m.key == b"user-1":
            user.append((m.offset, m.payload))
        if m.payload:
            state[m.key] = m.payload
        else:
            state.pop(m.key, None)
    assert user == [(0, b"old"), (1, b"")]
    assert b"user-1" not in state


def test_options_are_checked_and_plain_topics_are_unchanged(broker: rill.Broker) -> None:
    with pytest.raises(rill.InvalidArgument, match="cleanup"):
        broker.create_topic("t", cleanup="squash")  # type: ignore[arg-type]
    with pytest.raises(rill.InvalidArgument):
        broker.create_topic("t", cleanup="compact", delete_retention_ms=-1)
    broker.create_topic("t", cleanup="compact_delete", delete_retention_ms=0, min_compaction_lag_ms=10)
    with pytest.raises(rill.InvalidArgument):
        broker.publish("t", b"no key")
    broker.publish("t", b"", key="k")  # a tombstone is a keyed message
    broker.create_topic("plain")
    broker.publish("plain", b"no key")
    s = broker.topic_stats("plain")
    assert (s.compacted_messages, s.compacted_bytes, s.compaction_keys) == (0, 0, 0)


def test_a_compacted_topic_on_a_directory_shared_by_processes_is_created(tmp_path: object) -> None:
    # Compacted across processes: test_processes_compact.py.
    with rill.Broker(data_dir=str(tmp_path), sharing="processes") as b:
        b.create_topic("t", cleanup="compact")
        with pytest.raises(rill.InvalidArgument):
            b.publish("t", b"no key")
        assert b.publish("t", b"v", key="k").offset == 0
