"""rill.aio as native asyncio (issue 45): a consumer's waits are woken by its
notify fd (no executor), ``async for`` over subscriptions and over a
consumer's batches, ``await publisher.publish`` that never blocks the loop,
``aclose()``, and cancellation that loses nothing.

The responsiveness tests count ticks of a ticker coroutine and assert the
ticker advanced *while* a delivery or a publish was pending: impossible if
that work had blocked the loop (the ticker could not run until it ended)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import selectors
import threading
from typing import Any

import pytest
from aio_helper import run_bounded, until
from conftest import WAIT

import rill
import rill.aio


class Ticker:
    """A coroutine that counts its turns on the loop."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class NoExecutor(concurrent.futures.ThreadPoolExecutor):
    """A default executor that refuses work: a test using it shows that
    nothing it runs went through ``run_in_executor``."""

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("rill.aio used the executor")


def publish_from_thread(broker: rill.Broker, topic: str, payloads: list[bytes]) -> threading.Thread:
    t = threading.Thread(target=lambda: [broker.publish(topic, p) for p in payloads], daemon=True)
    t.start()
    return t


# ---- the consumer's notify fd ----------------------------------------------------------


def test_the_notify_fd_is_readable_after_an_empty_poll_at_the_first_publish(broker: rill.Broker) -> None:
    broker.create_topic("t")
    with broker.consumer("g", "t") as consumer, selectors.DefaultSelector() as sel:
        fd = consumer.notify_fd()
        assert consumer.notify_fd() == fd
        sel.register(fd, selectors.EVENT_READ)
        assert consumer.poll(timeout=0) == []  # armed
        assert sel.select(0) == []
        publish_from_thread(broker, "t", [b"x"]).join(WAIT)
        assert sel.select(WAIT), "the publish did not make the fd readable"
        assert [m.payload for m in consumer.poll(timeout=0)] == [b"x"]  # empties it
        assert sel.select(0) == []
        sel.unregister(fd)
    with pytest.raises(rill.Closed):
        consumer.notify_fd()


def test_a_notify_fd_asked_for_after_the_empty_poll_is_armed(broker: rill.Broker) -> None:
    """The fd asked for lazily, after the poll that found nothing, is
    readable at the next publish all the same."""
    broker.create_topic("t")
    with broker.consumer("g", "t") as consumer, selectors.DefaultSelector() as sel:
        assert consumer.poll(timeout=0) == []
        sel.register(consumer.notify_fd(), selectors.EVENT_READ)
        assert sel.select(0) == []
        publish_from_thread(broker, "t", [b"late"]).join(WAIT)
        assert sel.select(WAIT), "the publish did not make the fd readable"
        assert [m.payload for m in consumer.poll(timeout=0)] == [b"late"]
        sel.unregister(consumer.notify_fd())


def test_a_waiting_poll_is_woken_by_the_fd_without_an_executor(broker: rill.Broker) -> None:
    broker.create_topic("t", partitions=2)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(NoExecutor())
        # Keepalive polls every 150 s: only the fd can end the wait in time.
        consumer = rill.aio.Consumer(broker.consumer("g", "t", session_timeout=600))
        for round_ in range(20):
            task = asyncio.create_task(consumer.poll(timeout=None))
            await until(lambda: consumer._ready is not None)  # armed, watching the fd
            publish_from_thread(broker, "t", [str(round_).encode()])
            msgs = await asyncio.wait_for(task, WAIT)
            assert [m.payload for m in msgs] == [str(round_).encode()]
        await consumer.aclose()

    asyncio.run(main())


def test_a_consumer_waits_again_under_a_new_event_loop(broker: rill.Broker) -> None:
    # A wait cancelled by the end of its loop leaves a reader on that
    # (closed) loop: the next loop must get a wait of its own.
    broker.create_topic("t")
    consumer = rill.aio.Consumer(broker.consumer("g", "t"))

    async def abandoned() -> None:
        task = asyncio.create_task(consumer.poll(timeout=None))
        await until(lambda: consumer._ready is not None)
        task.cancel()

    async def woken() -> list[bytes]:
        task = asyncio.create_task(consumer.poll(timeout=None))
        await until(lambda: consumer._ready is not None and consumer._ready.get_loop() is asyncio.get_running_loop())
        publish_from_thread(broker, "t", [b"again"])
        return [m.payload for m in await asyncio.wait_for(task, WAIT)]

    asyncio.run(abandoned())
    assert asyncio.run(woken()) == [b"again"]

    async def close() -> None:
        await consumer.aclose()

    asyncio.run(close())


def test_async_for_batches_over_a_consumer_until_it_is_closed(broker: rill.Broker) -> None:
    broker.create_topic("t", partitions=3)

    async def main() -> list[bytes]:
        got: list[bytes] = []
        async with contextlib.aclosing(rill.aio.Consumer(broker.consumer("g", "t"))) as consumer:
            publisher = publish_from_thread(broker, "t", [str(n).encode() for n in range(500)])
            async for batch in consumer.batches(64):
                assert batch and len(batch) <= 64
                got.extend(m.payload for m in batch)
                if len(got) == 500:
                    await consumer.aclose()  # ends the iteration
            publisher.join(WAIT)
        return got

    got = asyncio.run(main())
    assert sorted(got, key=int) == [str(n).encode() for n in range(500)]


def test_a_commit_in_async_for_commits_only_what_was_yielded(broker: rill.Broker) -> None:
    """``async for`` polls messages ahead; ``sync.commit()`` in its body
    gave the group the position past all of them, so a loop that stopped
    early lost the rest (found from outside). Each commit now covers the
    messages yielded, and the next member gets the others."""
    broker.create_topic("t", partitions=2)
    for n in range(40):
        broker.publish("t", str(n).encode(), key=str(n).encode())

    async def main() -> list[int]:
        handled: list[int] = []
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        async for m in consumer:
            handled.append(int(m.payload))
            consumer.sync.commit()
            # The next one the iteration yields, not the library's position.
            assert consumer.sync.position(m.partition) == m.offset + 1
            if len(handled) == 7:
                break
        await consumer.aclose()
        return handled

    handled = asyncio.run(main())
    second = broker.consumer("g", "t")
    rest = [int(m.payload) for m in second.poll(100, WAIT)]
    second.close()
    assert sorted(handled + rest) == list(range(40)), (handled, rest)


def test_a_seek_through_sync_drops_what_async_for_polled_ahead(broker: rill.Broker) -> None:
    broker.create_topic("t")
    for n in range(20):
        broker.publish("t", str(n).encode())

    async def main() -> list[int]:
        seen: list[int] = []
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        async for m in consumer:
            seen.append(int(m.payload))
            if len(seen) == 3:
                consumer.sync.seek(15)
            if seen[-1] == 19:
                break
        await consumer.aclose()
        return seen

    # Without the give back, the messages polled ahead (3..) came before 15.
    assert asyncio.run(main()) == [0, 1, 2, 15, 16, 17, 18, 19]


def test_a_cancelled_aclose_still_closes_and_frees_the_worker() -> None:
    """A caller of ``aclose`` cancelled (here by a timeout) before the
    close ended left the subscription open for good, its delivering thread
    (the pool's only worker) waiting for the loop, and a second ``aclose``
    returned at once (found from outside). The close now runs to its end."""

    async def main() -> None:
        broker = rill.Broker(worker_threads=1)
        try:
            broker.create_topic("t")
            for n in range(10):
                broker.publish("t", str(n).encode())
            sub = rill.aio.subscribe(broker, "t", start="earliest")
            await sub.__anext__()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sub.aclose(), 1e-5)
            await asyncio.wait_for(sub.aclose(), WAIT)
            assert sub.sync.closed
            got: list[bytes] = []
            other = broker.subscribe("t", lambda m: got.append(m.payload), start="earliest")
            assert await rill.aio.wait_idle(other, WAIT)
            assert len(got) == 10
        finally:
            await rill.aio.close(broker)

    run_bounded(main)


def test_aclose_ends_a_poll_waiting_in_another_task(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        waiting = asyncio.create_task(consumer.poll(timeout=None))
        await until(lambda: consumer._ready is not None)
        await consumer.aclose()
        with pytest.raises(rill.Closed):
            await asyncio.wait_for(waiting, WAIT)
        await consumer.aclose()  # idempotent
        await consumer.close()  # the old name

    asyncio.run(main())


def test_a_broker_closed_under_a_waiting_poll_wakes_it_with_closed() -> None:
    async def main() -> None:
        broker = rill.Broker()
        broker.create_topic("t")
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        waiting = asyncio.create_task(consumer.poll(timeout=None))
        await until(lambda: consumer._ready is not None)
        broker.close()
        with pytest.raises(rill.Closed):
            await asyncio.wait_for(waiting, WAIT)
        await consumer.aclose()

    asyncio.run(main())


# ---- async for over a push subscription ------------------------------------------------


def test_async_for_over_a_subscription_keeps_the_loop_responsive(broker: rill.Broker) -> None:
    broker.create_topic("t", partitions=2)
    payloads = [str(n).encode() for n in range(300)]

    async def main() -> list[bytes]:
        got: list[bytes] = []
        ticker = Ticker()
        async with rill.aio.subscribe(broker, "t", start="earliest") as sub:
            publisher = publish_from_thread(broker, "t", payloads)
            ticks_after_first = -1
            async for msg in sub:
                got.append(msg.payload)
                if len(got) == 1:
                    ticks_after_first = ticker.ticks
                if len(got) == len(payloads):
                    break
                if len(got) % 50 == 0:
                    await asyncio.sleep(0)  # a body that awaits, as real ones do
            publisher.join(WAIT)
            # The ticker ran while the subscription delivered.
            assert ticker.ticks > ticks_after_first >= 0
        await ticker.stop()
        return got

    got = asyncio.run(main())
    assert sorted(got, key=int) == payloads


def test_a_subscription_acks_what_the_loop_finished_and_redelivers_the_rest(broker: rill.Broker) -> None:
    broker.create_topic("t")
    for n in range(10):
        broker.publish("t", str(n))

    async def take(count: int) -> list[int]:
        got: list[int] = []
        async with rill.aio.subscribe(broker, "t", name="durable", start="earliest") as sub:
            async for msg in sub:
                got.append(msg.offset)
                if len(got) == count:
                    break  # the body did not finish with this one: not acked
        return got

    assert asyncio.run(take(3)) == [0, 1, 2]
    # Offsets 0 and 1 were acked (the loop asked for the next); 2 was not.
    assert asyncio.run(take(3)) == [2, 3, 4]


def test_a_cancelled_anext_loses_no_message(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        async with rill.aio.subscribe(broker, "t") as sub:
            waiting = asyncio.create_task(sub.__anext__())
            await until(lambda: sub._offered is not None)  # it waits for an offer
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            broker.publish("t", b"after")
            msg = await asyncio.wait_for(sub.__anext__(), WAIT)
            assert msg.payload == b"after"

    asyncio.run(main())


def test_closing_the_broker_on_the_loop_ends_an_async_for() -> None:
    # The loop's thread closes the broker (which waits for the delivering
    # thread) while that thread waits for the loop to take its run: the
    # delivering thread must let go, and the iteration end at once.
    async def main() -> None:
        broker = rill.Broker()
        broker.create_topic("t")
        sub = rill.aio.subscribe(broker, "t")
        broker.publish("t", b"one")

        async def read() -> list[bytes]:
            return [m.payload async for m in sub]

        reader = asyncio.create_task(read())
        await until(lambda: sub.stats().delivered == 1)
        broker.close()  # on the loop's own thread, with a run offered to it
        assert await asyncio.wait_for(reader, WAIT) in ([], [b"one"])
        await sub.aclose()

    run_bounded(main)


@pytest.mark.parametrize("published", [0, 1])
def test_rill_aio_close_of_the_broker_ends_an_async_for(monkeypatch: pytest.MonkeyPatch, published: int) -> None:
    # `rill.aio.close(broker)` closes on an executor thread: the iteration,
    # woken as the close begins, must end then, not at its next look for a
    # close the library made by itself (made an hour long here, so that
    # missing the wake fails the test on its hang guard).
    monkeypatch.setattr(rill.aio, "_CLOSED_CHECK", 3600.0)

    async def main() -> None:
        broker = rill.Broker()
        broker.create_topic("t")
        sub = rill.aio.subscribe(broker, "t")
        for _ in range(published):
            broker.publish("t", b"one")

        async def read() -> int:
            return len([m async for m in sub])

        reader = asyncio.create_task(read())
        await until(lambda: sub.stats().delivered == published)
        await rill.aio.close(broker)
        assert await asyncio.wait_for(reader, WAIT) <= published
        await sub.aclose()

    run_bounded(main)


def test_aclose_after_a_break_does_not_wait_for_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    # A loop that breaks out of `async for` holding a message: aclose waits
    # for the delivering thread to let go, which the close's stop must wake
    # (the slice it would otherwise wait for is made an hour long here, so
    # a missing wake fails the test on its hang guard).
    monkeypatch.setattr(rill.aio, "SLICE", 3600.0)

    async def main() -> None:
        broker = rill.Broker()
        broker.create_topic("t")
        for _ in range(3):
            sub = rill.aio.subscribe(broker, "t")
            broker.publish("t", b"x")
            async for _message in sub:
                break
            await asyncio.wait_for(sub.aclose(), WAIT)
        await rill.aio.close(broker)

    run_bounded(main)


def test_subscribe_refuses_a_handler_or_batch(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        with pytest.raises(TypeError, match="handler"):
            rill.aio.subscribe(broker, "t", handler=print)
        with pytest.raises(TypeError, match="batch"):
            rill.aio.subscribe(broker, "t", batch=True)

    asyncio.run(main())


# ---- await publisher.publish ----------------------------------------------------------


class BlockedSubscriber:
    """A ``block`` subscriber with a lag limit of 1 whose handler waits for
    ``release``: once it holds a message and the limit is reached, every
    publish to the topic must wait."""

    def __init__(self, broker: rill.Broker, topic: str) -> None:
        self.release = threading.Event()
        self.handled: list[bytes] = []

        def handler(msg: rill.Message) -> None:
            assert self.release.wait(WAIT), "the test never released the subscriber"
            self.handled.append(msg.payload)

        self.sub = broker.subscribe(topic, handler, overflow="block", lag_limit=1)
        # Fill it: publish without waiting until a publish would have to.
        for n in range(100):
            try:
                broker.try_publish(topic, f"fill {n}")
            except rill.Full:
                return
        raise AssertionError("the block subscriber never filled up")


def test_a_publish_waiting_on_a_block_subscriber_does_not_block_the_loop() -> None:
    async def main() -> None:
        with rill.Broker(publish_timeout=None) as broker:
            broker.create_topic("t")
            blocked = BlockedSubscriber(broker, "t")
            ticker = Ticker()
            async with rill.aio.Publisher(broker) as publisher:
                task = asyncio.create_task(publisher.publish("t", b"waits"))
                # The publish is handed to the publish thread and waits there.
                await until(lambda: publisher.pending == 1 and publisher._waiting.is_set())
                ticks = ticker.ticks
                await until(lambda: ticker.ticks >= ticks + 100)
                assert not task.done(), "the publish returned while the subscriber was full"
                blocked.release.set()
                position = await asyncio.wait_for(task, WAIT)
                assert position.partition == 0
                assert publisher.pending == 0
                # A publish with room completes on the loop, no thread hop.
                assert (await publisher.publish("t", b"free")).offset == position.offset + 1
            await ticker.stop()
            blocked.sub.close()
            assert b"waits" in blocked.handled

    asyncio.run(main())


def test_a_cancelled_publish_is_withdrawn_if_queued_and_published_if_started() -> None:
    async def main() -> None:
        with rill.Broker(publish_timeout=None) as broker:
            broker.create_topic("t")
            blocked = BlockedSubscriber(broker, "t")
            async with rill.aio.Publisher(broker) as publisher:
                started = asyncio.create_task(publisher.publish("t", b"started"))
                await until(lambda: publisher._waiting.is_set())
                queued = asyncio.create_task(publisher.publish("t", b"queued"))
                await until(lambda: publisher.pending == 2)
                for task in (started, queued):
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                assert publisher.pending == 1  # the queued one is withdrawn
                blocked.release.set()
                await asyncio.wait_for(publisher.flush(), WAIT)
                assert publisher.pending == 0
            assert rill.aio.Publisher(broker).pending == 0
            assert blocked.sub.wait_idle(WAIT)
            blocked.sub.close()
            assert b"started" in blocked.handled
            assert b"queued" not in blocked.handled

    asyncio.run(main())


def test_publish_batch_and_errors_come_back_to_the_awaiting_coroutine(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        async with rill.aio.Publisher(broker) as publisher:
            positions = await publisher.publish_batch("t", [b"a", b"b"])
            assert [p.offset for p in positions] == [0, 1]
            with pytest.raises(rill.NoSuchTopic):
                await publisher.publish_batch("nope", [b"x"])
            with pytest.raises(rill.NoSuchTopic):
                await publisher.publish("nope", b"x")
        with pytest.raises(rill.Closed):
            await publisher.publish("t", b"after close")

    asyncio.run(main())


def test_the_loop_stays_responsive_while_a_subscription_delivers_and_a_publish_waits() -> None:
    # The acceptance test: both at once, counted by one ticker.
    async def main() -> None:
        with rill.Broker(publish_timeout=None) as broker:
            broker.create_topic("t")
            broker.create_topic("events")
            blocked = BlockedSubscriber(broker, "t")
            ticker = Ticker()
            async with rill.aio.subscribe(broker, "events", start="earliest") as sub, rill.aio.Publisher(
                broker
            ) as publisher:
                waiting = asyncio.create_task(publisher.publish("t", b"waits"))
                await until(lambda: publisher._waiting.is_set())
                events = publish_from_thread(broker, "events", [str(n).encode() for n in range(100)])
                got = 0
                ticks = ticker.ticks
                async for _msg in sub:
                    got += 1
                    if got == 100:
                        break
                events.join(WAIT)
                assert not waiting.done(), "the publish finished while its subscriber was full"
                assert ticker.ticks > ticks, "the ticker never ran while messages were delivered"
                blocked.release.set()
                await asyncio.wait_for(waiting, WAIT)
            await ticker.stop()
            blocked.sub.close()

    asyncio.run(main())


# ---- wait_idle on the subscription's notify fd -----------------------------------------


def test_wait_idle_waits_on_the_fd_without_an_executor(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(NoExecutor())
        release = asyncio.Event()
        handled: list[bytes] = []

        async def handler(msg: rill.Message) -> None:
            await release.wait()  # on this loop: wait_idle must not block it
            handled.append(msg.payload)

        sub = broker.subscribe("t", handler)
        broker.publish("t", b"x")
        # Busy (the handler waits for the event): a bounded wait says so.
        assert await rill.aio.wait_idle(sub, timeout=0.05) is False
        # Two waiters at once; the loop runs the handler while they wait.
        waiters = [asyncio.create_task(rill.aio.wait_idle(sub, timeout=None)) for _ in range(2)]
        await until(lambda: len(rill.aio._idle_waiters.get(sub, ())) == 2)
        release.set()
        assert await asyncio.wait_for(asyncio.gather(*waiters), WAIT) == [True, True]
        assert handled == [b"x"]
        sub.close()  # (a close from the loop's thread: the handler is done)
        with pytest.raises(rill.Closed):
            await rill.aio.wait_idle(sub)

    asyncio.run(main())


def test_the_subscription_notify_fd_is_readable_when_it_goes_idle(broker: rill.Broker) -> None:
    broker.create_topic("t")
    release = threading.Event()
    sub = broker.subscribe("t", lambda _m: release.wait(WAIT))
    with selectors.DefaultSelector() as sel:
        fd = sub.notify_fd()
        sel.register(fd, selectors.EVENT_READ)
        broker.publish("t", b"x")
        assert not sub._idle_now()  # busy: armed
        release.set()
        assert sel.select(WAIT), "going idle did not make the fd readable"
        assert sub._idle_now()
        sel.unregister(fd)
    sub.close()
