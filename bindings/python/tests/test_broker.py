"""The Python binding as Python programs use it."""

import threading
import time
from typing import Any, Callable

import pytest
from conftest import WAIT

import rill


def test_contract_shapes(broker: rill.Broker) -> None:
    broker.create_topic("orders", partitions=1, retention_bytes=None)
    pos = broker.publish("orders", b"payload", key=b"k", attributes={"region": "IN"})
    assert isinstance(pos, rill.Position)
    assert pos == (0, 0)
    assert broker.publish("orders", "text is utf-8 encoded") == rill.Position(0, 1)
    assert broker.publish_batch("orders", [b"a", b"b"]) == [rill.Position(0, 2), rill.Position(0, 3)]
    seen: list[Any] = []
    sub = broker.subscribe("orders", seen.append, start="earliest")
    assert sub.wait_idle(timeout=5.0) is True
    m = seen[0]
    assert (m.topic, m.partition, m.offset, m.key, m.payload, m.attributes, m.attempt) == (
        "orders",
        0,
        0,
        b"k",
        b"payload",
        {"region": "IN"},
        1,
    )
    assert seen[1].payload == b"text is utf-8 encoded"
    assert seen[1].key is None
    assert m.timestamp_ns > 1_600_000_000 * 10**9
    stats = sub.stats()
    assert (stats.delivered, stats.acked, stats.lag, stats.state) == (4, 4, 0, "idle")
    for field in ("retried", "dead_lettered", "filtered", "dropped"):
        assert getattr(stats, field) == 0
    sub.close()
    sub.close()  # idempotent
    assert broker.topic_stats("orders").publish_count == 4


def test_earliest_sees_the_past_and_latest_does_not(broker: rill.Broker) -> None:
    broker.create_topic("t")
    broker.publish("t", b"old")
    early: list[Any] = []
    late: list[Any] = []
    with broker.subscribe("t", early.append, start="earliest") as e, broker.subscribe("t", late.append) as lt:
        broker.publish("t", b"new")
        assert e.wait_idle(WAIT)
        assert lt.wait_idle(WAIT)
    assert [m.payload for m in early] == [b"old", b"new"]
    assert [m.payload for m in late] == [b"new"]


def test_start_at_an_offset_and_out_of_range(broker: rill.Broker) -> None:
    broker.create_topic("t")
    broker.publish_batch("t", [bytes([i]) for i in range(10)])
    got: list[Any] = []
    with broker.subscribe("t", got.append, start=7) as s:
        assert s.wait_idle(WAIT)
    assert [m.offset for m in got] == [7, 8, 9]
    with pytest.raises(rill.OutOfRange):
        broker.subscribe("t", got.append, start=11)


def test_fast_and_slow_subscribers(broker: rill.Broker) -> None:
    broker.create_topic("t")
    slow_seen: list[Any] = []

    def slow(m: rill.Message) -> None:
        time.sleep(0.01)
        slow_seen.append(m.offset)

    fast_seen: list[Any] = []
    with broker.subscribe("t", slow) as s, broker.subscribe("t", fast_seen.append) as f:
        broker.publish_batch("t", [b"x"] * 300)
        assert f.wait_idle(WAIT)
        assert len(fast_seen) == 300
        assert len(slow_seen) < 300
        assert s.stats().lag > 0


def test_a_slow_handler_does_not_hold_the_only_worker() -> None:
    # One pool worker: the slow subscription's handler sleeps 10 ms per
    # message, and the fast one still finishes while the slow one has handled
    # only a few (its turns are cut to about a millisecond).
    with rill.Broker(worker_threads=1) as broker:
        broker.create_topic("t")
        slow_seen: list[Any] = []
        fast_seen: list[Any] = []

        def slow(m: rill.Message) -> None:
            time.sleep(0.01)
            slow_seen.append(m.offset)

        with broker.subscribe("t", slow) as s, broker.subscribe("t", fast_seen.append) as f:
            broker.publish_batch("t", [b"x"] * 300)
            assert f.wait_idle(WAIT)
            assert len(fast_seen) == 300
            assert len(slow_seen) < 64
            assert s.stats().lag > 0


def test_concurrent_publishers_keep_their_order(broker: rill.Broker) -> None:
    broker.create_topic("t")
    got: list[Any] = []
    sub = broker.subscribe("t", got.append)

    def publish(p: int) -> None:
        for i in range(500):
            broker.publish("t", f"{p}:{i}")

    threads = [threading.Thread(target=publish, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sub.wait_idle(WAIT)
    assert len(got) == 2000
    last: dict[Any, Any] = {}
    for m in got:
        p, i = m.payload.decode().split(":")
        assert int(i) == last.get(p, -1) + 1
        last[p] = int(i)
    assert [m.offset for m in got] == list(range(2000))


def test_poison_message_goes_to_the_dead_letter_topic_after_max_attempts(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    attempts: list[Any] = []

    def handler(m: rill.Message) -> None:
        attempts.append((m.payload, m.attempt))
        if m.payload == b"poison":
            raise ValueError(f"cannot parse attempt {m.attempt}")

    with broker.subscribe("jobs", handler, name="worker", max_attempts=3, backoff=(0.001, 0.005)) as sub:
        broker.publish("jobs", b"poison", attributes={"region": "EU"})
        broker.publish("jobs", b"after")
        assert sub.wait_idle(WAIT)
        stats = sub.stats()
    assert attempts == [(b"poison", 1), (b"poison", 2), (b"poison", 3), (b"after", 1)]
    assert (stats.retried, stats.dead_lettered, stats.acked) == (2, 1, 1)
    with broker.consumer("dlq-reader", "$dlq/worker") as c:
        [dead] = c.poll(10, 1.0)
    assert dead.payload == b"poison"
    assert dead.attributes["region"] == "EU"
    assert dead.attributes["rill.dlq.reason"] == "ValueError: cannot parse attempt 3"
    assert dead.attributes["rill.dlq.attempts"] == "3"
    assert dead.attributes["rill.dlq.subscription"] == "worker"


def test_acks_returned_by_handlers(broker: rill.Broker) -> None:
    broker.create_topic("t")
    calls: list[Any] = []

    def handler(m: rill.Message) -> object:
        calls.append((m.payload, m.attempt))
        if m.payload == b"retry" and m.attempt == 1:
            return rill.Ack.RETRY
        if m.payload == b"dead":
            return rill.Ack.DEAD_LETTER
        if m.payload == b"false" and m.attempt == 1:
            return False
        if m.payload == b"weird" and m.attempt == 1:
            return "what?"
        return True

    with broker.subscribe("t", handler, backoff=(0.001, 0.002), dead_letter_topic="failed") as sub:
        broker.publish_batch("t", [b"retry", b"dead", b"false", b"weird", b"ok"])
        assert sub.wait_idle(WAIT)
        s = sub.stats()
    assert (s.acked, s.retried, s.dead_lettered) == (4, 3, 1)
    with broker.consumer("r", "failed") as c:
        [dead] = c.poll(10, 1.0)
        assert dead.payload == b"dead"


def test_batch_handlers(broker: rill.Broker) -> None:
    broker.create_topic("t")
    sizes: list[Any] = []

    def handler(msgs: list[rill.Message]) -> object:
        sizes.append(len(msgs))
        return [rill.Ack.SUCCESS] * len(msgs)

    with broker.subscribe("t", handler, batch=True, start="earliest") as sub:
        broker.publish_batch("t", [b"x"] * 500)
        assert sub.wait_idle(WAIT)
        assert sub.stats().acked == 500
    assert sum(sizes) == 500
    assert max(sizes) <= 64


def test_pull_poll_commit_rollback_replay(broker: rill.Broker) -> None:
    broker.create_topic("orders")
    broker.publish_batch("orders", [str(i) for i in range(10)])
    c = broker.consumer("billing", "orders", start="earliest")
    assert [m.payload for m in c.poll(max_messages=4, timeout=0)] == [b"0", b"1", b"2", b"3"]
    assert c.committed(partition=0) is None
    c.commit()
    assert c.committed(partition=0) == 4
    assert [m.offset for m in c.poll(3, 0)] == [4, 5, 6]
    c.rollback()
    assert c.position(partition=0) == 4
    assert [m.offset for m in c.poll(3, 0)] == [4, 5, 6]
    c.seek(9, partition=0)
    assert [m.payload for m in c.poll(10, 0)] == [b"9"]
    with pytest.raises(rill.OutOfRange):
        c.seek(11)
    with pytest.raises(rill.NotFound):
        c.position(partition=3)
    c.close()
    again = broker.consumer("billing", "orders")
    assert [m.offset for m in again.poll(100, 0)] == [4, 5, 6, 7, 8, 9]
    other = broker.consumer("shipping", "orders")
    assert len(other.poll(100, 0)) == 10
    other.commit_offset(4)
    st = other.stats()
    assert (st.delivered, st.missed, st.lag, st.partitions) == (10, 0, 6, 1)


def test_iterating_a_consumer_until_it_is_closed(broker: rill.Broker) -> None:
    broker.create_topic("q")
    c = broker.consumer("g", "q")
    got: list[Any] = []

    def read() -> None:
        for m in c:
            got.append(m.payload)

    t = threading.Thread(target=read)
    t.start()
    broker.publish_batch("q", [b"a", b"b"])
    deadline = time.time() + WAIT
    while len(got) < 2 and time.time() < deadline:
        time.sleep(0.01)
    c.close()
    t.join(WAIT)
    assert not t.is_alive()
    assert got == [b"a", b"b"]


def test_unknown_topic_and_bad_inputs(broker: rill.Broker) -> None:
    with pytest.raises(rill.NoSuchTopic) as e:
        broker.publish("missing", b"x")
    assert e.value.status == 6
    assert "missing" in e.value.message
    assert e.value.status_name == "RILL_ERR_NO_SUCH_TOPIC"
    assert isinstance(e.value, rill.RillError)
    for bad in ["", "a//b", "a/*"]:
        with pytest.raises(rill.InvalidTopic):
            broker.create_topic(bad)
    broker.create_topic("t")
    with pytest.raises(rill.TopicExists):
        broker.create_topic("t")
    with pytest.raises(rill.InvalidPattern):
        broker.subscribe("a/b*", print)
    with pytest.raises(rill.InvalidFilter) as f:
        broker.subscribe("t", print, filter='attributes.a = "1" AND attributes.b = "2" OR attributes:c')
    assert "byte 42" in str(f.value)
    assert isinstance(f.value, rill.InvalidArgument)
    with pytest.raises(rill.MessageTooLarge):
        broker.publish("t", b"x" * (2 << 20))
    with pytest.raises(rill.InvalidArgument):
        broker.create_topic("\ud800")  # a lone surrogate is not UTF-8
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("t", print, delivery="exactly_once")  # type: ignore[arg-type]
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("t", print, overflow="block")  # block needs a lag limit
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("t", print, start="yesterday")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        broker.publish("t", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        broker.subscribe("t", "not callable")  # type: ignore[arg-type]
    # A bool is not an integer here, though Python counts it as one.
    with pytest.raises(TypeError, match="priority must be an integer, not bool"):
        broker.create_topic("b", priority=True)
    with pytest.raises(TypeError, match="partitions must be an integer, not bool"):
        broker.create_topic("b", partitions=True)
    assert "b" not in broker.topics()
    assert broker.topic_stats("t").publish_count == 0


def test_overflow_policies(broker: rill.Broker) -> None:
    broker.create_topic("t")
    gate = threading.Event()
    entered = threading.Event()

    def gated(m: rill.Message) -> None:
        entered.set()
        gate.wait()

    sub = broker.subscribe("t", gated, overflow="block", lag_limit=2)
    broker.publish("t", b"0")
    assert entered.wait(WAIT)
    accepted = 1
    with pytest.raises(rill.Full):  # noqa: PT012 - the loop publishes until the limit refuses
        while accepted < 50:
            broker.try_publish("t", b"x")
            accepted += 1
    assert accepted <= 3
    gate.set()
    assert sub.wait_idle(WAIT)
    sub.close()

    broker.create_topic("d")
    gate2, entered2 = threading.Event(), threading.Event()

    def gated2(m: rill.Message) -> None:
        entered2.set()
        gate2.wait()

    disc = broker.subscribe("d", gated2, overflow="disconnect", lag_limit=3)
    broker.publish("d", b"0")
    assert entered2.wait(WAIT)
    broker.publish_batch("d", [b"x"] * 10)
    gate2.set()
    deadline = time.time() + WAIT
    while disc.stats().state != "closed" and time.time() < deadline:
        time.sleep(0.01)
    assert disc.stats().state == "closed"
    assert "lag limit 3" in disc.closed_reason
    with pytest.raises(rill.Closed):
        disc.wait_idle(0.1)


def test_wildcards_and_filters(broker: rill.Broker) -> None:
    for t in ["sports/cricket", "sports/cricket/live", "news"]:
        broker.create_topic(t)
    one: list[Any] = []
    many: list[Any] = []
    india: list[Any] = []
    with broker.subscribe("sports/*", one.append) as a, broker.subscribe(
        "sports/**", many.append
    ) as b, broker.subscribe("**", india.append, filter='attributes.region = "IN"') as c:
        broker.create_topic("sports/tennis")  # matched later
        for t in ["sports/cricket", "sports/cricket/live", "news", "sports/tennis"]:
            broker.publish(t, t, attributes={"region": "IN" if t == "news" else "US"})
        for s in (a, b, c):
            assert s.wait_idle(WAIT)
        assert c.stats().filtered == 3
    assert sorted(m.topic for m in one) == ["sports/cricket", "sports/tennis"]
    assert sorted(m.topic for m in many) == ["sports/cricket", "sports/cricket/live", "sports/tennis"]
    assert [m.topic for m in india] == ["news"]


def test_wildcard_messages_carry_their_own_topic(broker: rill.Broker) -> None:
    # Several topics delivered in turn through one wildcard subscription: the
    # binding caches decoded topic names, and each message must still name the
    # topic it was published to (the payload says which).
    topics = ["r/aa", "r/bb", "r/cc", "r/dd/ee"]
    for t in topics:
        broker.create_topic(t)
    seen: list[Any] = []
    with broker.subscribe("r/**", seen.append, start="earliest") as s:
        for i in range(80):
            broker.publish(topics[i % 4], topics[i % 4])
            if i % 5 == 0:
                assert s.wait_idle(WAIT)
        assert s.wait_idle(WAIT)
    assert len(seen) == 80
    assert [m.topic for m in seen if m.topic != m.payload.decode()] == []
    assert sorted(set(m.topic for m in seen)) == topics


def test_re_entrant_publish_from_a_handler(broker: rill.Broker) -> None:
    broker.create_topic("ping")
    broker.create_topic("pong")
    pongs: list[Any] = []

    def ping(m: rill.Message) -> None:
        n = int(m.payload)
        broker.publish("pong", m.payload)
        if n < 5:
            broker.publish("ping", str(n + 1))

    with broker.subscribe("ping", ping) as p, broker.subscribe("pong", pongs.append) as q:
        broker.publish("ping", "0")
        assert p.wait_idle(WAIT)
        assert q.wait_idle(WAIT)
    assert [m.payload for m in pongs] == [str(i).encode() for i in range(6)]


def test_closing_during_delivery_and_closing_the_broker() -> None:
    broker = rill.Broker()
    broker.create_topic("t")
    entered = threading.Event()
    release = threading.Event()
    calls: list[Any] = []

    def handler(m: rill.Message) -> None:
        calls.append(m.offset)
        entered.set()
        release.wait()

    sub = broker.subscribe("t", handler)
    consumer = broker.consumer("g", "t")
    broker.publish_batch("t", [b"x"] * 10)
    assert entered.wait(WAIT)
    closer = threading.Thread(target=sub.close)
    closer.start()
    # close() drops the handle first, then waits for the handler in flight,
    # which is still held: once the handle is gone the closer must be waiting.
    deadline = time.monotonic() + WAIT
    while not sub.closed:
        assert time.monotonic() < deadline, "close did not begin"
        time.sleep(0.001)
    assert closer.is_alive(), "close returned while the handler was still running"
    release.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    n = len(calls)
    time.sleep(0.05)
    assert len(calls) == n, "no handler call after close returned"

    other = broker.subscribe("t", lambda m: None)
    broker.close()
    broker.close()  # idempotent
    with pytest.raises(rill.Closed):
        broker.publish("t", b"x")
    with pytest.raises(rill.Closed):
        other.wait_idle(0.1)
    assert other.stats().state == "closed"
    with pytest.raises(rill.Closed):
        consumer.poll(1, 0)


def test_handler_exceptions_become_retries_with_their_text(broker: rill.Broker) -> None:
    broker.create_topic("t")
    seen: list[Any] = []

    def handler(m: rill.Message) -> None:
        seen.append(m.attempt)
        if m.attempt < 3:
            raise KeyError("missing field")

    with broker.subscribe("t", handler, backoff=(0.001, 0.002)) as s:
        broker.publish("t", b"x")
        assert s.wait_idle(WAIT)
        assert s.stats().retried == 2
    assert seen == [1, 2, 3]


def test_handles_are_released_by_garbage_collection() -> None:
    import gc

    from rill import _broker

    before = len(_broker._handlers)
    broker = rill.Broker()
    broker.create_topic("t")
    sub = broker.subscribe("t", lambda m: None)
    assert len(_broker._handlers) == before + 1
    del sub
    gc.collect()
    assert len(_broker._handlers) == before, "the handler table entry is released with the subscription"
    del broker
    gc.collect()


def test_dedicated_thread_and_many_partitions(broker: rill.Broker) -> None:
    broker.create_topic("t", partitions=4)
    got: list[Any] = []
    with broker.subscribe("t", got.append, dedicated_thread=True, idle_spin=0.0002) as s:
        for i in range(100):
            broker.publish("t", b"x", key=str(i % 7).encode())
        assert s.wait_idle(WAIT)
    assert len(got) == 100
    assert len({m.partition for m in got}) > 1


def test_durable_subscription_resumes(broker: rill.Broker) -> None:
    broker.create_topic("events")
    got: list[Any] = []
    s = broker.subscribe("events", got.append, name="audit", start="earliest")
    broker.publish("events", b"1")
    assert s.wait_idle(WAIT)
    with pytest.raises(rill.Busy):
        broker.subscribe("events", got.append, name="audit")
    s.close()
    broker.publish_batch("events", [b"2", b"3"])
    with broker.subscribe("events", got.append, name="audit") as again:
        assert again.wait_idle(WAIT)
    assert [m.payload for m in got] == [b"1", b"2", b"3"]


def test_auto_create_topics() -> None:
    with rill.Broker(auto_create_topics=True, worker_threads=1) as b:
        assert b.publish("made/on/demand", b"x") == (0, 0)
        with pytest.raises(rill.InvalidArgument):
            rill.Broker(worker_threads=0)


def _held_first() -> tuple[Callable[[rill.Message], None], threading.Event, threading.Event]:
    """A handler that holds its first message until ``gate`` is set, with
    the events that say it is holding (``entered``) and let it go."""
    entered, gate = threading.Event(), threading.Event()

    def held(m: rill.Message) -> None:
        entered.set()
        gate.wait()

    return held, entered, gate


def test_on_lagged_hears_what_retention_trimmed(broker: rill.Broker) -> None:
    broker.create_topic("firehose", retention_bytes=16 << 10)
    held, entered, gate = _held_first()
    heard: list[Any] = []
    with broker.subscribe("firehose", held, on_lagged=lambda t, p, n: heard.append((t, p, n))) as s:
        broker.publish("firehose", b"first")
        assert entered.wait(WAIT)
        for _ in range(5):
            broker.publish_batch("firehose", [b"x" * 16] * 1000)
        gate.set()
        assert s.wait_idle(WAIT)
        st = s.stats()
    assert st.missed > 0
    assert heard
    assert {(t, p) for t, p, _ in heard} == {("firehose", 0)}
    assert sum(n for _, _, n in heard) == st.missed
    assert st.delivered + st.missed == 5001


def test_an_on_lagged_that_raises_is_a_warning_and_delivery_goes_on(broker: rill.Broker) -> None:
    broker.create_topic("firehose", retention_bytes=16 << 10)
    held, entered, gate = _held_first()

    def bad(topic: str, partition: int, missed: int) -> None:
        raise ValueError("no")

    with pytest.warns(RuntimeWarning, match="on_lagged raised ValueError: no"):  # noqa: PT031, SIM117
        with broker.subscribe("firehose", held, on_lagged=bad) as s:
            broker.publish("firehose", b"first")
            assert entered.wait(WAIT)
            broker.publish_batch("firehose", [b"x" * 16] * 5000)
            gate.set()
            assert s.wait_idle(WAIT)
            assert s.stats().missed > 0
    with pytest.raises(TypeError):
        broker.subscribe("firehose", held, on_lagged=42)  # type: ignore[arg-type]


def test_wait_idle_from_its_own_handler_raises_instead_of_waiting_for_itself(broker: rill.Broker) -> None:
    import queue

    broker.create_topic("selfwait")
    answers: queue.Queue[object] = queue.Queue()
    me: list[rill.Subscription] = []

    def handler(m: rill.Message) -> None:
        for timeout in (None, 0.05):
            try:
                answers.put(me[0].wait_idle(timeout=timeout))
            except rill.RillError as e:
                answers.put(e)

    me.append(broker.subscribe("selfwait", handler))
    broker.publish("selfwait", b"x")
    for _ in range(2):
        got = answers.get(timeout=WAIT)  # raises queue.Empty if it hangs
        assert isinstance(got, rill.InvalidArgument), got
        assert "own handler" in str(got)
    assert me[0].wait_idle(timeout=WAIT) is True
    me[0].close()


def test_a_dead_letter_topic_the_own_pattern_matches_is_refused(broker: rill.Broker) -> None:
    broker.create_topic("orders/new")
    with pytest.raises(rill.InvalidArgument, match=r"orders/dead.*orders/\*\*"):
        broker.subscribe("orders/**", print, dead_letter_topic="orders/dead")
    with pytest.raises(rill.InvalidArgument, match=r"\$dlq/watcher"):
        broker.subscribe("$dlq/*", print, name="watcher")
    broker.subscribe("$dlq/*", print, name="watcher", dead_letter_topic="dead-watchers").close()
    broker.subscribe("orders/**", print, dead_letter_topic="dead/orders").close()
