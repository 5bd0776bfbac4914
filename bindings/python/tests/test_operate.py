"""Operating a broker: listing and describing topics, subscriptions and
consumer groups; deleting them."""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT

import rill
from rill import _ffi


def test_topics_subscriptions_and_groups_are_listed(broker: rill.Broker) -> None:
    broker.create_topic("orders/eu", partitions=2)
    broker.create_topic("orders/us")
    assert broker.topics() == ["orders/eu", "orders/us"]

    def handler(m: rill.Message) -> Any:
        if m.payload == b"bad":
            raise ValueError("unparseable order")
        return True

    sub = broker.subscribe("orders/*", handler, name="billing", start="earliest", max_attempts=1)
    broker.publish("orders/us", b"good")
    broker.publish("orders/us", b"bad")
    assert sub.wait_idle(WAIT)

    [listed] = broker.subscriptions()
    assert isinstance(listed, rill.SubscriptionStats)
    assert (listed.name, listed.pattern, listed.delivered, listed.state) == ("billing", "orders/*", 2, "idle")
    assert listed.last_error is not None and "unparseable order" in listed.last_error
    assert "orders/us partition 0 offset 1" in listed.last_error
    # The handle's own stats say the same.
    assert sub.stats() == listed

    lags = sub.partition_lags()
    assert len(lags) == 3
    us = [p for p in lags if p.topic == "orders/us"]
    assert us == [rill.PartitionLag("orders/us", 0, 2, 2, 0)]

    assert broker.groups() == []
    c = broker.consumer("reports", "orders/us")
    assert len(c.poll(1, timeout=0)) == 1
    c.commit()
    c.close()
    assert broker.groups() == [("reports", "orders/us")]
    g = broker.group_stats("reports", "orders/us")
    assert g == rill.GroupStats("reports", "orders/us", 1, [rill.PartitionLag("orders/us", 0, 1, 2, 1)])
    with pytest.raises(rill.NotFound):
        broker.group_stats("nobody", "orders/us")
    with pytest.raises(rill.NoSuchTopic):
        broker.group_stats("reports", "missing")

    sub.close()
    assert broker.subscriptions() == []


def test_a_closed_brokers_listings_raise_closed(broker: rill.Broker) -> None:
    broker.create_topic("t")
    c = broker.consumer("g", "t")
    c.commit()
    c.close()
    sub = broker.subscribe("t", lambda m: None)
    # The library's RILL_ERR_CLOSED, with the Python object still open: what
    # a listing meets when the broker closes under it (it listed a closed
    # broker as an empty one, or with its groups, before).
    _ffi.lib.rill_broker_close(broker._handle())
    for listing in (broker.topics, broker.subscriptions, broker.groups):
        with pytest.raises(rill.Closed, match="broker is closed"):
            listing()
    sub.close()
    broker.close()
    for listing in (broker.topics, broker.subscriptions, broker.groups):
        with pytest.raises(rill.Closed):
            listing()


def test_a_subscription_without_failures_has_no_last_error(broker: rill.Broker) -> None:
    broker.create_topic("t")
    sub = broker.subscribe("t", lambda m: None, start="earliest")
    broker.publish("t", b"x")
    assert sub.wait_idle(WAIT)
    stats = sub.stats()
    assert stats.last_error is None and stats.name == sub.name and stats.pattern == "t"


def test_deleting_a_topic_with_live_handles(broker: rill.Broker) -> None:
    broker.create_topic("live/a")
    broker.create_topic("live/b")
    seen: list[bytes] = []
    wildcard = broker.subscribe("live/*", lambda m: seen.append(m.payload), start="earliest")
    literal = broker.subscribe("live/a", lambda m: None, name="a-reader", start="earliest")
    broker.publish("live/a", b"first")
    consumer = broker.consumer("pullers", "live/a")
    assert [m.payload for m in consumer.poll(10, timeout=WAIT)] == [b"first"]
    consumer.commit()
    assert wildcard.wait_idle(WAIT)

    # A poll blocked in another thread wakes with the error.
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            consumer.poll(10, timeout=WAIT)
        except rill.RillError as e:
            errors.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    broker.delete_topic("live/a")
    poller.join(WAIT)
    assert not poller.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], rill.NoSuchTopic)

    assert literal.stats().state == "closed" and literal.closed_reason == "topic deleted"
    with pytest.raises(rill.NoSuchTopic):
        broker.publish("live/a", b"late")
    with pytest.raises(rill.NoSuchTopic):
        broker.delete_topic("live/a")
    with pytest.raises(rill.NoSuchTopic):
        consumer.commit()
    assert broker.groups() == []
    consumer.close()

    broker.publish("live/b", b"on b")
    assert wildcard.wait_idle(WAIT)
    assert seen == [b"first", b"on b"]
    assert [p.topic for p in wildcard.partition_lags()] == ["live/b"]

    # Created again: a new topic from offset 0, published through a new handle.
    broker.create_topic("live/a")
    assert broker.publish("live/a", b"again") == rill.Position(0, 0)


def _files_held(data_dir: Path) -> tuple[int, int]:
    """This process's open file descriptors, and its mappings of deleted files
    under ``data_dir``."""
    with open("/proc/self/maps") as maps:
        mapped = sum(1 for line in maps if str(data_dir) in line and line.rstrip().endswith("(deleted)"))
    return len(os.listdir("/proc/self/fd")), mapped


def _settle(data_dir: Path, fds: int | None = None) -> tuple[int, int]:
    """What _files_held says once the broker's threads have let go of the
    topics deleted last (they may hold one for a moment), within the
    deadline: no mapping of a deleted file left and, given ``fds``, no more
    open file descriptors than that."""
    deadline = time.monotonic() + WAIT
    while True:
        held = _files_held(data_dir)
        if (held[1] == 0 and (fds is None or held[0] <= fds)) or time.monotonic() > deadline:
            return held
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self")
@pytest.mark.parametrize("sharing", ["exclusive", "processes"])
def test_deleting_topics_over_and_over_releases_their_files(tmp_path: Path, sharing: Any) -> None:
    # A deleted topic's segments stay mapped (and, shared by processes,
    # open) while a publisher of it lives, and publish() keeps one per topic.
    data_dir = tmp_path / "data"
    with rill.Broker(data_dir=str(data_dir), sharing=sharing, fsync="never") as b:
        held: list[tuple[int, int]] = []
        for cycle in range(1, 301):
            b.create_topic("scratch")
            b.publish("scratch", b"x" * 1000)
            b.publish_batch("scratch", [b"y" * 1000])
            b.delete_topic("scratch")
            if cycle in (50, 300):
                held.append(_settle(data_dir, held[0][0] if held else None))
        (fds_then, mapped_then), (fds_now, mapped_now) = held
        assert mapped_then == mapped_now == 0, "mappings of deleted files, after 50 and after 300 deletes"
        assert fds_now <= fds_then, "open file descriptors, after 50 and after 300 deletes"


def test_deleting_a_topic_while_threads_publish_to_it(broker: rill.Broker) -> None:
    # The publisher dropped with the topic is freed while other threads may
    # be inside a publish through it: each raises NoSuchTopic or publishes.
    broker.create_topic("t")
    stop = threading.Event()
    errors: list[BaseException] = []

    def publish() -> None:
        while not stop.is_set():
            try:
                broker.publish("t", b"x")
                broker.publish_batch("t", [b"y", b"z"])
            except rill.NoSuchTopic:
                pass
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
                return

    threads = [threading.Thread(target=publish) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            broker.delete_topic("t")
            broker.create_topic("t")
    finally:
        stop.set()
        for t in threads:
            t.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_deleting_durable_positions_and_groups(broker: rill.Broker) -> None:
    broker.create_topic("t")
    broker.publish("t", b"a")
    sub = broker.subscribe("t", lambda m: None, name="keeper", start="earliest")
    assert sub.wait_idle(WAIT)
    with pytest.raises(rill.Busy):
        broker.delete_durable("keeper")
    sub.close()
    broker.delete_durable("keeper")
    with pytest.raises(rill.NotFound):
        broker.delete_durable("keeper")

    c = broker.consumer("g", "t")
    c.poll(10, timeout=WAIT)
    c.commit()
    with pytest.raises(rill.Busy):
        broker.delete_group("g", "t")
    c.close()
    broker.delete_group("g", "t")
    with pytest.raises(rill.NotFound):
        broker.delete_group("g", "t")
    with pytest.raises(rill.NotFound):
        broker.group_stats("g", "t")


def poll_all(consumer: rill.Consumer, n: int) -> list[rill.Message]:
    """The next ``n`` messages, already published: a poll stops at the end of
    a log segment (a new topic's first one is small), so it may take several."""
    out: list[rill.Message] = []
    while len(out) < n:
        batch = consumer.poll(n - len(out), timeout=0)
        assert batch, f"only {len(out)} of {n} messages to read"
        out += batch
    return out


def test_seek_and_start_by_time(broker: rill.Broker) -> None:
    broker.create_topic("timed")
    for i in range(200):
        broker.publish("timed", str(i))
    c = broker.consumer("stamps", "timed")
    stamps = [m.timestamp_ns for m in poll_all(c, 200)]
    assert len(stamps) == 200
    t = stamps[100]
    want = next(i for i, s in enumerate(stamps) if s >= t)
    c.seek_to_time(t)
    assert c.position() == want
    # A datetime works too (microseconds: the first message at or after it).
    when = datetime.datetime.fromtimestamp(t / 1e9, tz=datetime.timezone.utc)
    micro = (when - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)
    want_dt = next(i for i, s in enumerate(stamps) if s >= micro * 1000)
    c.seek_to_time(when)
    assert c.position() == want_dt
    c.seek_to_time(datetime.datetime(2000, 1, 1))  # naive: local time, before everything
    assert c.position() == 0
    c.seek_to_time(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    assert c.position() == 200
    c.seek_to_time(-1)
    assert c.position() == 0
    with pytest.raises(rill.NotFound):
        c.seek_to_time(t, partition=3)
    with pytest.raises(rill.InvalidArgument):
        c.seek_to_time("yesterday")  # type: ignore[arg-type]

    from_time = broker.consumer("from-time", "timed", start=when)
    assert from_time.position() == want_dt
    seen: list[int] = []
    sub = broker.subscribe("timed", lambda m: seen.append(m.offset), start=when)
    assert sub.wait_idle(WAIT)
    assert seen == list(range(want_dt, 200))
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("timed", lambda m: None, start="noon")  # type: ignore[arg-type]


def test_retention_by_age_trims_a_quiet_topic(broker: rill.Broker) -> None:
    broker.create_topic("aging", retention_bytes=64 << 10, retention=0.03)
    broker.create_topic("kept", retention=0)
    for _ in range(100):
        broker.publish("aging", b"old")
        broker.publish("kept", b"old")
    watch = broker.consumer("watch", "aging")
    deadline = time.monotonic() + WAIT
    first = 0
    while first < 100 and time.monotonic() < deadline:
        watch.seek_to_beginning()
        first = watch.position()
        if first < 100:
            time.sleep(0.001)  # nothing to wait on: the timer trims in its own time
    assert first == 100, "the timer trimmed every expired segment"
    assert broker.publish("aging", b"new") == rill.Position(0, 100)
    kept = broker.consumer("all", "kept")
    assert len(poll_all(kept, 100)) == 100 and not kept.poll(200, timeout=0)
    with pytest.raises(rill.InvalidArgument):
        broker.create_topic("bad", retention=-1)


def test_logs_reach_python_logging_and_dead_letters_raise_the_alert(
    broker: rill.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rill")
    broker.create_topic("jobs")
    alerts: list[tuple[bytes, int, str]] = []

    def handler(m: rill.Message) -> Any:
        if m.payload == b"boom":
            raise KeyError("missing field")
        return rill.Ack.DEAD_LETTER

    sub = broker.subscribe(
        "jobs",
        handler,
        name="py-alerts",
        max_attempts=1,
        on_dead_letter=lambda m, why: alerts.append((m.payload, m.offset, why)),
    )
    broker.publish("jobs", b"boom")
    broker.publish("jobs", b"rejected")
    assert sub.wait_idle(WAIT)

    # The alert, once per dead letter, with the message and the reason.
    assert [(p, o) for p, o, _ in alerts] == [(b"boom", 0), (b"rejected", 1)]
    assert alerts[0][2] == "KeyError: 'missing field'"
    # The handler's exception is logged with its traceback.
    raised = [r for r in caplog.records if r.name == "rill" and r.exc_info]
    assert len(raised) == 1 and "jobs partition 0 offset 0" in raised[0].getMessage()
    assert raised[0].exc_info is not None and raised[0].exc_info[0] is KeyError
    # rill's own records arrive under "rill.<part>".
    warned = [r for r in caplog.records if r.name == "rill.subscription" and r.levelno == logging.WARNING]
    assert any("dead-lettered jobs partition 0 offset 1" in r.getMessage() for r in warned), caplog.text

    # A level above WARNING keeps rill's warnings in the library.
    rill.set_log_level(logging.ERROR)
    try:
        caplog.clear()
        broker.publish("jobs", b"again")
        assert sub.wait_idle(WAIT)
        assert not [r for r in caplog.records if r.name == "rill.subscription"]
    finally:
        rill.set_log_level(logging.INFO)


def test_a_poison_message_logs_one_line_per_retry_and_its_traceback_once(
    broker: rill.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rill")
    broker.create_topic("jobs")
    dead: list[str] = []

    def handler(m: rill.Message) -> Any:
        raise ValueError(f"unparseable order {m.payload!r}")

    sub = broker.subscribe(
        "jobs",
        handler,
        max_attempts=5,
        backoff=(0.001, 0.002),
        on_dead_letter=lambda m, why: dead.append(why),
    )
    broker.publish("jobs", b"poison")
    assert sub.wait_idle(WAIT)
    assert dead == ["ValueError: unparseable order b'poison'"]
    assert sub.stats().dead_lettered == 1

    ours = [r for r in caplog.records if r.name == "rill"]
    # Attempts 1 to 4 are retries: one line each, no traceback.
    retries = [r for r in ours if r.levelno < logging.ERROR]
    assert [r.levelno for r in retries] == [logging.WARNING] * 4, caplog.text
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in retries), caplog.text
    assert all(f"(attempt {k} of 5)" in r.getMessage() for k, r in enumerate(retries, 1)), caplog.text
    assert all("ValueError: unparseable order b'poison'" in r.getMessage() for r in retries), caplog.text
    # The fifth dead-letters it: the traceback, once, at ERROR.
    errors = [r for r in ours if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "(attempt 5 of 5)" in errors[0].getMessage(), caplog.text
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is ValueError
    assert [r for r in ours if r.exc_info] == errors, caplog.text

    # At DEBUG each retry's traceback is there too.
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="rill")
    broker.publish("jobs", b"again")
    assert sub.wait_idle(WAIT)
    traced = [r for r in caplog.records if r.name == "rill" and r.exc_info]
    assert [r.levelno for r in traced] == [logging.DEBUG] * 4 + [logging.ERROR], caplog.text


def test_a_raising_handler_of_an_at_most_once_subscription_logs_its_traceback_once(
    broker: rill.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rill")
    broker.create_topic("jobs")

    def handler(m: rill.Message) -> Any:
        raise ValueError("unparseable")

    sub = broker.subscribe("jobs", handler, delivery="at_most_once")
    broker.publish("jobs", b"poison")
    assert sub.wait_idle(WAIT)
    assert sub.stats().dropped == 1
    # No retry follows: the one failure is the last, logged with its traceback.
    ours = [r for r in caplog.records if r.name == "rill"]
    assert [(r.levelno, r.exc_info is not None) for r in ours] == [(logging.ERROR, True)], caplog.text


def test_a_raising_batch_handler_logs_one_line_per_retry_and_its_traceback_once(
    broker: rill.Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rill")
    broker.create_topic("jobs")

    def handler(batch: list[rill.Message]) -> Any:
        raise ValueError("unparseable batch")

    sub = broker.subscribe("jobs", handler, batch=True, max_attempts=2, backoff=(0.001, 0.002))
    broker.publish("jobs", b"poison")
    assert sub.wait_idle(WAIT)
    assert sub.stats().dead_lettered == 1
    ours = [r for r in caplog.records if r.name == "rill"]
    assert [(r.levelno, r.exc_info is not None) for r in ours] == [(logging.WARNING, False), (logging.ERROR, True)]
    assert "jobs partition 0 offset 0 (attempt 2 of 2)" in ours[1].getMessage(), caplog.text
