"""Closing a broker while other threads are inside calls on it.

Broker.close used to free the cached C publishers (and the broker) at once,
while another thread could still be inside a publish through one of them: a
use-after-free. Now close() closes, and the C handles are freed when the
Broker object goes away, when no call can be running through it any more.
"""

import threading
import time
from collections.abc import Callable

import rill

ROUNDS = 20
THREADS = 3
LAG_LIMIT = 4


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def _publishers(b: rill.Broker, errors: list[BaseException]) -> list[threading.Thread]:
    def run() -> None:
        try:
            while True:
                b.publish("t", b"x")
        except rill.Closed:
            return
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    return threads


def test_closing_a_broker_while_threads_publish_ends_their_publishes_with_closed() -> None:
    for _ in range(ROUNDS):
        b = rill.Broker(worker_threads=1)
        b.create_topic("t")
        errors: list[BaseException] = []
        threads = _publishers(b, errors)
        _wait_for(lambda: b.topic_stats("t").publish_count >= 1000, "publishes")  # noqa: B023 - called at once
        b.close()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        assert errors == []
        # Still closed, and still safe, after the close.
        try:
            b.publish("t", b"late")
        except rill.Closed:
            pass
        else:
            raise AssertionError("a publish after close succeeded")


def test_closing_a_broker_while_a_publish_waits_for_a_block_subscriber() -> None:
    b = rill.Broker(worker_threads=1, publish_timeout=None)
    b.create_topic("t")
    release = threading.Event()
    handled = threading.Event()

    def slow(_m: rill.Message) -> None:
        handled.set()
        release.wait(10)

    sub = b.subscribe("t", slow, overflow="block", lag_limit=LAG_LIMIT)
    b.publish("t", b"first")
    handled.wait(10)
    errors: list[BaseException] = []
    threads = _publishers(b, errors)
    # Once the subscriber's lag reaches its limit, every further publish
    # waits for room behind the blocked handler.
    _wait_for(lambda: b.topic_stats("t").publish_count >= LAG_LIMIT, "the lag limit")
    closer = threading.Thread(target=b.close)
    closer.start()
    release.set()
    closer.join(10)
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a publish stayed blocked after the broker closed"
    assert errors == []
    sub.close()


def test_closing_a_subscription_while_another_thread_waits_for_it_to_be_idle() -> None:
    b = rill.Broker(worker_threads=1)
    b.create_topic("t")
    release = threading.Event()
    handled = threading.Event()

    def slow(_m: rill.Message) -> None:
        handled.set()
        release.wait(10)

    for _ in range(ROUNDS):
        handled.clear()
        release.clear()
        sub = b.subscribe("t", slow)
        b.publish("t", b"x")
        handled.wait(10)
        outcome: list[object] = []

        def wait(sub: rill.Subscription = sub, outcome: list[object] = outcome) -> None:
            try:
                outcome.append(sub.wait_idle(None))
            except rill.Closed as e:
                outcome.append(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        closer = threading.Thread(target=sub.close)
        closer.start()
        release.set()
        closer.join(10)
        waiter.join(10)
        assert not waiter.is_alive() and not closer.is_alive()
        # Idle before the close landed, or told it was closed: never a crash.
        assert outcome == [True] or isinstance(outcome[0], rill.Closed), outcome
    b.close()


def _closer(other: rill.Broker, barrier: threading.Barrier, done: threading.Event) -> Callable[[rill.Message], None]:
    """A handler that, on its first message, waits for the other handler to
    be in flight too, then closes ``other``."""
    fired = threading.Event()

    def handler(_m: rill.Message) -> None:
        if not fired.is_set():
            fired.set()
            barrier.wait(10)
            other.close()
            done.set()

    return handler


def test_two_handlers_that_close_each_others_broker_at_once_both_return() -> None:
    # Both handlers are in flight (the barrier), then each closes the other
    # broker: neither close may wait for the other handler's call.
    for dedicated in (False, True):
        brokers = [rill.Broker(), rill.Broker()]
        barrier = threading.Barrier(2)
        done = [threading.Event(), threading.Event()]
        subs = []
        for i, b in enumerate(brokers):
            b.create_topic("t")
            subs.append(b.subscribe("t", _closer(brokers[1 - i], barrier, done[i]), dedicated_thread=dedicated))
        for b in brokers:
            b.publish("t", b"go")
        assert all(d.wait(10) for d in done), f"a handler is stuck closing the other broker (dedicated: {dedicated})"
        for b in brokers:
            assert b.closed
            try:
                b.publish("t", b"late")
            except rill.Closed:
                pass
            else:
                raise AssertionError("a publish to a closed broker succeeded")
        for s in subs:
            s.close()
