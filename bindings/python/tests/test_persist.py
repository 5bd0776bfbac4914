"""A broker on a data directory, restarted: a writer process and a reader
process (each a fresh interpreter), then the directory lock, bad paths and
bad options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rill

# The directory holding the rill this test imported (installed or source), so
# the subprocesses run the same package and library.
PACKAGE = str(Path(rill.__file__).resolve().parents[1])

# Both processes describe every message the same way: what must survive.
SNAPSHOT = """
    import json, sys, threading
    import rill

    def snapshot(b):
        snap = b.consumer("snapshot", "orders")
        seen = []
        while len(seen) < 90:
            for m in snap.poll(100, 5.0):
                seen.append([m.partition, m.offset, m.timestamp_ns, m.key.hex(), m.payload.hex(), m.attributes])
        snap.close()
        return sorted(seen)
"""

WRITER = """

    data, expected = sys.argv[1], sys.argv[2]
    b = rill.Broker(data_dir=data, fsync="always")
    b.create_topic("orders", partitions=3)
    handled = []
    cond = threading.Condition()

    def audit(m):
        with cond:
            handled.append(m.offset)
            cond.notify_all()

    sub = b.subscribe("orders", audit, name="audit", start="earliest")
    for i in range(90):
        b.publish("orders", f"order {i}".encode(), key=f"k{i % 4}", attributes={"n": str(i)})
        if i + 1 == 60:
            with cond:
                assert cond.wait_for(lambda: len(handled) == 60, timeout=20)
            # The last ack follows the handler's return: wait for it.
            assert sub.wait_idle(20.0)
            sub.close()
    billing = b.consumer("billing", "orders")
    polled = 0
    while polled < 40:
        polled += len(billing.poll(40 - polled, 5.0))
    billing.commit()
    committed = [billing.committed(p) for p in range(3)]
    billing.close()
    seen = snapshot(b)
    with open(expected, "w") as f:
        json.dump({"messages": seen, "committed": committed}, f)
    b.close()
"""

READER = """

    data, expected = sys.argv[1], sys.argv[2]
    with open(expected) as f:
        want = json.load(f)
    b = rill.Broker(data_dir=data)
    stats = b.topic_stats("orders")
    assert stats.partitions == 3 and stats.publish_count == 90, stats
    seen = snapshot(b)
    assert seen == want["messages"]
    ends = {}
    for p, o, *_ in seen:
        ends[p] = max(ends.get(p, 0), o + 1)

    billing = b.consumer("billing", "orders")
    assert [billing.committed(p) for p in range(3)] == want["committed"]
    rest = 0
    while rest < 50:
        got = billing.poll(100, 5.0)
        assert got, rest
        rest += len(got)
    assert rest == 50
    billing.close()

    # The named subscription resumes after its last ack.
    ns = []
    cond = threading.Condition()

    def audit(m):
        with cond:
            ns.append(int(m.attributes["n"]))
            cond.notify_all()

    sub = b.subscribe("orders", audit, name="audit", start="latest")
    with cond:
        assert cond.wait_for(lambda: len(ns) >= 30, timeout=20)
    assert sub.wait_idle(5.0)
    assert sorted(ns) == list(range(60, 90)), ns
    sub.close()

    # New publishes continue the offsets.
    for i in range(6):
        pos = b.publish("orders", b"after", key=f"again{i}")
        assert pos.offset == ends.get(pos.partition, 0), (pos, ends)
        ends[pos.partition] = pos.offset + 1
    b.close()
"""


def run(script: str, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=PACKAGE)
    code = textwrap.dedent(SNAPSHOT) + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_restart_in_another_process_keeps_everything(tmp_path: Path) -> None:
    data, expected = str(tmp_path / "data"), str(tmp_path / "expected.json")
    run(WRITER, data, expected)
    run(READER, data, expected)
    assert json.loads(Path(expected).read_text())["messages"]


def test_a_directory_is_open_in_one_broker_at_a_time(tmp_path: Path) -> None:
    with rill.Broker(data_dir=tmp_path, fsync="never") as b:
        b.create_topic("t")
        with pytest.raises(rill.Busy):
            rill.Broker(data_dir=tmp_path)
        # Another process is refused too.
        env = dict(os.environ, PYTHONPATH=PACKAGE)
        script = "import sys, rill\ntry:\n    rill.Broker(data_dir=sys.argv[1])\nexcept rill.Busy:\n    sys.exit(7)"
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, timeout=60)
        assert done.returncode == 7
    # Closing lets go of it.
    with rill.Broker(data_dir=tmp_path) as b:
        assert b.topic_stats("t").partitions == 1


def test_a_file_as_data_dir_is_a_storage_error_and_an_os_error(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_bytes(b"x")
    with pytest.raises(rill.StorageError) as e:
        rill.Broker(data_dir=f)
    assert isinstance(e.value, OSError)
    assert str(f) in str(e.value)
    assert e.value.status_name == "RILL_ERR_IO"
    assert issubclass(rill.CorruptData, rill.RillError)


def test_bad_durability_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(rill.InvalidArgument):
        rill.Broker(data_dir=tmp_path, fsync="sometimes")
    with pytest.raises(rill.InvalidArgument):
        rill.Broker(data_dir=tmp_path, fsync_interval=0)
    with pytest.raises(rill.InvalidArgument):
        rill.Broker(data_dir="bad\0dir")
    # Nothing was left locked by the refused calls.
    with rill.Broker(data_dir=tmp_path, fsync="interval", fsync_interval=0.05, repair=True):
        pass


def _flip_inside(root: Path, needle: bytes) -> None:
    """Flips one bit of ``needle``'s bytes in the one segment file holding it."""
    hits = []
    for f in sorted((root / "topics").rglob("*")):
        if f.is_file():
            data = bytearray(f.read_bytes())
            at = data.find(needle)
            if at >= 0:
                data[at + 4] ^= 0x20
                f.write_bytes(bytes(data))
                hits.append(f)
    assert len(hits) == 1, hits


def _as_if_killed(root: Path) -> None:
    """Clears what a clean close writes in each segment file's header and a
    killed process never does: the checked prefix (bytes 72 to 92, see
    src/log/file/format.rs), which makes recovery judge damage among those
    records as damage rather than as a crash's torn tail."""
    for f in sorted((root / "topics").rglob("*.seg")):
        data = bytearray(f.read_bytes())
        data[72:92] = bytes(20)
        f.write_bytes(bytes(data))


def _lose_from(root: Path, needle: bytes) -> None:
    """Zeroes the record whose payload starts with ``needle`` and all after it
    in its segment file: what a machine crash before writeback leaves. (A
    damaged record with intact ones after it is a hole, recovered as a skip
    record, not a cut.) The payload follows the record's 8-byte frame and
    24-byte header, as no key or attribute comes between."""
    hits = []
    for f in sorted((root / "topics").rglob("*")):
        if f.is_file():
            data = bytearray(f.read_bytes())
            at = data.find(needle)
            if at >= 0:
                data[at - 32 :] = bytes(len(data) - (at - 32))
                f.write_bytes(bytes(data))
                hits.append(f)
    assert len(hits) == 1, hits


def _publish_numbered(b: rill.Broker, n: int) -> None:
    for i in range(n):
        b.publish("t", f"record number {i:03d} ".encode().ljust(1000, b"x"))


def test_recovery_figures_of_a_damaged_tail_are_in_the_topic_stats(tmp_path: Path) -> None:
    with rill.Broker(data_dir=tmp_path, fsync="always") as b:
        b.create_topic("t")
        _publish_numbered(b, 10)
        clean = b.topic_stats("t")
        assert (clean.recovered_truncated_records, clean.recovered_truncated_bytes) == (0, 0)
        assert clean.recovered_repaired_partitions == 0
    # Damage the last of 10 records in the active file of a killed process:
    # a torn tail, it goes. (A damaged record with intact ones after it is a
    # hole: recovery skips it and keeps the ones after it. After a clean
    # close it is damage: test_damage_in_the_newest_file_after_a_clean_close_is_corrupt.)
    _as_if_killed(tmp_path)
    _flip_inside(tmp_path, b"record number 009")
    with rill.Broker(data_dir=tmp_path) as b:
        s = b.topic_stats("t")
        assert s.publish_count == 9, s
        assert s.recovered_truncated_bytes >= 1000, s
        # Intact records are counted for whole files after the cut: none.
        assert s.recovered_truncated_records == 0, s
        assert s.recovered_repaired_partitions == 0
        # Publishing continues the offsets after the kept records.
        assert b.publish("t", b"next").offset == 9
    # A clean reopen has nothing to report.
    with rill.Broker(data_dir=tmp_path) as b:
        s = b.topic_stats("t")
        assert (s.publish_count, s.recovered_truncated_records, s.recovered_truncated_bytes) == (10, 0, 0)


def test_repair_of_a_sealed_segment_is_in_the_topic_stats(tmp_path: Path) -> None:
    # retention_bytes of 256 KiB makes 64 KiB segments: 150 records fill three.
    with rill.Broker(data_dir=tmp_path, fsync="never") as b:
        b.create_topic("t", retention_bytes=256 << 10)
        _publish_numbered(b, 150)
    _flip_inside(tmp_path, b"record number 005")
    with pytest.raises(rill.CorruptData):
        rill.Broker(data_dir=tmp_path)
    with rill.Broker(data_dir=tmp_path, repair=True) as b:
        s = b.topic_stats("t")
        assert s.publish_count == 5, s
        assert 0 < s.recovered_truncated_records <= 150 - 6, s
        assert s.recovered_truncated_bytes > 0, s
        assert s.recovered_repaired_partitions == 1, s


def test_damage_in_the_newest_file_after_a_clean_close_is_corrupt(tmp_path: Path) -> None:
    # After a clean close the newest file's records are as checked as a
    # sealed file's: a flipped byte among them fails the open (it was
    # skipped as a crash's hole, with a warning, found from outside).
    with rill.Broker(data_dir=tmp_path, fsync="always") as b:
        b.create_topic("t")
        _publish_numbered(b, 10)
    _flip_inside(tmp_path, b"record number 004")
    with pytest.raises(rill.CorruptData):
        rill.Broker(data_dir=tmp_path)
    with rill.Broker(data_dir=tmp_path, repair=True) as b:
        s = b.topic_stats("t")
        assert s.publish_count == 4, s
        assert s.recovered_repaired_partitions == 1, s


def test_a_commit_past_a_cut_tail_is_reset_and_counted(tmp_path: Path) -> None:
    # Issue 40 item 5: the group commits 100 and a durable subscription acks
    # 100; recovery cuts the tail at 71. Both are reset to 71 at the open, so
    # what is published after it is delivered.
    with rill.Broker(data_dir=tmp_path, fsync="never") as b:
        b.create_topic("t")
        _publish_numbered(b, 100)
        c = b.consumer("billing", "t")
        assert len(c.poll(1000, 0)) == 100
        c.commit()
        c.close()
        sub = b.subscribe("t", lambda m: None, name="audit", start="earliest")
        assert sub.wait_idle(30)
        sub.close()
    _as_if_killed(tmp_path)
    _lose_from(tmp_path, b"record number 071")
    with rill.Broker(data_dir=tmp_path) as b:
        s = b.topic_stats("t")
        assert (s.publish_count, s.recovered_offsets_reset) == (71, 2), s
        for i in range(50):
            b.publish("t", f"after {i}".encode())
        c = b.consumer("billing", "t")
        assert [m.offset for m in c.poll(1000, 0)] == list(range(71, 121))
        c.commit()
        c.close()
        seen: list[int] = []
        sub = b.subscribe("t", lambda m: seen.append(m.offset), name="audit", start="earliest")
        assert sub.wait_idle(30)
        sub.close()
        assert seen == list(range(71, 121))
    with rill.Broker(data_dir=tmp_path) as b:
        assert b.topic_stats("t").recovered_offsets_reset == 0


def _segment_bytes_on_disk(part: Path) -> tuple[int, int]:
    files = list(part.glob("*.seg"))
    return sum(f.stat().st_size for f in files), len(files)


def test_small_segments_make_a_small_durable_topic_cheap_on_disk(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with rill.Broker(data_dir=str(data), fsync="never") as b:
        with pytest.raises(rill.InvalidArgument, match="segment_bytes"):
            b.create_topic("tiny", segment_bytes=100)
        with pytest.raises(rill.InvalidArgument, match="half of retention_bytes"):
            b.create_topic("tiny", segment_bytes=1 << 20, retention_bytes=1 << 20)
        b.create_topic("small", segment_bytes=16 << 10)
        b.create_topic("default")
        b.publish("small", b"x")
        b.publish("default", b"x")
        # Directory numbers in order of creation, from 0.
        small, _ = _segment_bytes_on_disk(data / "topics" / "0" / "0")
        default, _ = _segment_bytes_on_disk(data / "topics" / "1" / "0")
        assert 0 < small < 64 << 10
        assert default >= 4 << 20
        for _ in range(100):
            b.publish("small", b"y" * 1000)
    _, files = _segment_bytes_on_disk(data / "topics" / "0" / "0")
    assert files >= 4
    # Reopened, the topic keeps its segment size.
    with rill.Broker(data_dir=str(data), fsync="never") as b:
        assert b.topic_stats("small").publish_count == 101
        for _ in range(100):
            b.publish("small", b"z" * 1000)
    _, more = _segment_bytes_on_disk(data / "topics" / "0" / "0")
    assert more >= files + 4


def test_a_topic_reopened_often_does_not_grow_by_a_file_per_open(tmp_path: Path) -> None:
    """Each open goes on in every partition's newest file ("Resuming the
    last file" in src/log/recovery.rs): twenty restarts that publish a
    little, three of them processes that exit without closing anything,
    leave the files of the first run, holding every message."""
    data = tmp_path / "data"
    parts = [data / "topics" / "0" / str(p) for p in range(2)]

    def publish_round(i: int) -> None:
        with rill.Broker(data_dir=str(data), fsync="never") as b:
            if i == 0:
                b.create_topic("audit", partitions=2)
            for k in range(2):
                b.publish("audit", b"round %d" % i, key=b"k%d" % k)

    publish_round(0)
    first = [_segment_bytes_on_disk(p) for p in parts]
    assert all(files == 1 for _, files in first), first
    for i in range(1, 17):
        publish_round(i)
    exit_unclosed = textwrap.dedent(
        """
        import os, sys
        import rill
        b = rill.Broker(data_dir=sys.argv[1], fsync="never")
        for k in range(2):
            b.publish("audit", b"round %s" % sys.argv[2].encode(), key=b"k%d" % k)
        os._exit(0)
        """
    )
    for i in range(17, 20):
        env = {**os.environ, "PYTHONPATH": PACKAGE}
        subprocess.run([sys.executable, "-c", exit_unclosed, str(data), str(i)], check=True, env=env, timeout=60)
    assert [_segment_bytes_on_disk(p) for p in parts] == first
    with rill.Broker(data_dir=str(data)) as b:
        c = b.consumer("check", "audit")
        got: list[bytes] = []
        while len(got) < 40:
            batch = c.poll(100, 5.0)
            assert batch, f"read {len(got)} of 40"
            got.extend(m.payload for m in batch)
        assert sorted(got) == sorted(b"round %d" % i for i in range(20) for _ in range(2))
        c.close()
