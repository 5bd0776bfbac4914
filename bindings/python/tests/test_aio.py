"""rill from asyncio (plain asyncio.run, no third-party loop): async
iteration and polling of a consumer that never block the loop, coroutine
handlers run on the subscribing loop with their result as the ack, and no
deadlock when the loop is blocked or gone."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aio_helper import run_bounded, until
from conftest import WAIT

import rill
import rill.aio


async def ticking(counter: list[int], stop: asyncio.Event) -> None:
    """Counts loop iterations: proof that the loop ran while something waited."""
    while not stop.is_set():
        counter[0] += 1
        await asyncio.sleep(0.001)


def test_async_for_over_a_consumer_until_it_is_closed(broker: rill.Broker) -> None:
    broker.create_topic("t", partitions=2)

    async def main() -> list[bytes]:
        got: list[bytes] = []
        async with rill.aio.Consumer(broker.consumer("g", "t")) as consumer:

            async def publish() -> None:
                for n in range(200):
                    broker.publish("t", str(n), key=str(n))
                    if n % 50 == 0:
                        await asyncio.sleep(0.001)

            publisher = asyncio.create_task(publish())
            async for msg in consumer:
                got.append(msg.payload)
                if len(got) == 200:
                    await consumer.close()  # ends the iteration
            await publisher
        return got

    got = asyncio.run(main())
    assert sorted(got, key=int) == [str(n).encode() for n in range(200)]


def test_await_poll_waits_without_blocking_the_loop(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        ticks, stop = [0], asyncio.Event()
        ticker = asyncio.create_task(ticking(ticks, stop))
        assert await consumer.poll(timeout=0.2) == []  # times out empty
        asyncio.get_running_loop().call_later(0.1, broker.publish, "t", b"late")
        before = ticks[0]
        msgs = await consumer.poll(timeout=None)
        assert [m.payload for m in msgs] == [b"late"]
        assert ticks[0] > before, "the loop did not run while poll waited"
        stop.set()
        await ticker
        await consumer.close()
        with pytest.raises(rill.Closed):
            await consumer.poll(timeout=0)

    asyncio.run(main())


def test_a_cancelled_poll_loses_no_message(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        consumer = rill.aio.Consumer(broker.consumer("g", "t"))
        task = asyncio.create_task(consumer.poll(timeout=None))
        # Checked, not assumed: the poll found nothing and waits on the fd.
        await until(lambda: consumer._ready is not None)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        broker.publish("t", b"after")  # may land in the cancelled poll's slice
        msgs = await consumer.poll(timeout=WAIT)
        assert [m.payload for m in msgs] == [b"after"]
        await consumer.close()

    asyncio.run(main())


def test_a_coroutine_handler_runs_on_the_loop_and_its_result_is_the_ack(broker: rill.Broker) -> None:
    broker.create_topic("jobs")
    broker.create_topic("jobs.dead")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        on_loop: list[bool] = []
        attempts: dict[bytes, int] = {}

        async def handler(msg: rill.Message) -> Any:
            await asyncio.sleep(0)
            on_loop.append(asyncio.get_running_loop() is loop and threading.current_thread() is threading.main_thread())
            attempts[msg.payload] = msg.attempt
            if msg.payload == b"retry-once" and msg.attempt == 1:
                return rill.Ack.RETRY
            if msg.payload == b"poison":
                raise ValueError("cannot parse")
            return None

        sub = broker.subscribe("jobs", handler, max_attempts=2, backoff=(0.001, 0.002), dead_letter_topic="jobs.dead")
        for payload in (b"ok", b"retry-once", b"poison"):
            broker.publish("jobs", payload)
        assert await rill.aio.wait_idle(sub, WAIT)
        stats = sub.stats()
        await rill.aio.close(sub)
        assert all(on_loop) and len(on_loop) == 5, on_loop  # ok, retry-once x2, poison x2
        assert attempts == {b"ok": 1, b"retry-once": 2, b"poison": 2}
        assert (stats.acked, stats.retried, stats.dead_lettered) == (2, 2, 1)

    asyncio.run(main())
    with broker.consumer("audit", "jobs.dead") as dead:
        msgs = dead.poll(timeout=WAIT)
        assert [m.payload for m in msgs] == [b"poison"]
        assert "ValueError: cannot parse" in msgs[0].attributes.get("rill.dlq.reason", "")


def test_a_batch_coroutine_handler(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> list[bytes]:
        got: list[bytes] = []

        async def handler(msgs: list[rill.Message]) -> None:
            await asyncio.sleep(0)
            got.extend(m.payload for m in msgs)

        sub = broker.subscribe("t", handler, batch=True, start="earliest")
        broker.publish_batch("t", [b"a", b"b", b"c"])
        assert await rill.aio.wait_idle(sub, WAIT)
        await rill.aio.close(sub)
        return got

    assert asyncio.run(main()) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("closing", ["subscription", "broker"])
def test_closing_from_the_blocked_loop_does_not_deadlock(closing: str) -> None:
    # The loop's thread calls a blocking close() while a coroutine handler
    # waits for that very loop: the handler must let go, not wait for ever.
    async def main() -> None:
        broker = rill.Broker()
        broker.create_topic("t")
        started = threading.Event()
        never = asyncio.Event()

        async def handler(msg: rill.Message) -> None:
            started.set()
            await never.wait()

        sub = broker.subscribe("t", handler)
        broker.publish("t", b"x")
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, WAIT)
        # Now the handler's coroutine is parked on this loop and the broker
        # thread waits for it; close() on the loop thread waits for the broker thread.
        if closing == "subscription":
            sub.close()  # returns: the handler gave up within a slice
            assert sub.closed
        else:
            broker.close()
            assert sub.stats().state == "closed"
        broker.close()

    run_bounded(main)


def test_wait_idle_on_the_handlers_own_loop_is_refused(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def main() -> None:
        async def handler(msg: rill.Message) -> None:
            pass

        sub = broker.subscribe("t", handler)
        with pytest.raises(RuntimeError, match=r"rill\.aio\.wait_idle"):
            sub.wait_idle(1.0)
        await rill.aio.close(sub)

    asyncio.run(main())


def test_a_coroutine_handler_needs_a_running_loop(broker: rill.Broker) -> None:
    broker.create_topic("t")

    async def handler(msg: rill.Message) -> None:
        pass

    with pytest.raises(RuntimeError, match="event loop"):
        broker.subscribe("t", handler)


def test_messages_after_the_loop_is_gone_are_retried_not_hung(broker: rill.Broker) -> None:
    broker.create_topic("t")
    handled: list[bytes] = []

    async def main() -> rill.Subscription:
        async def handler(msg: rill.Message) -> None:
            handled.append(msg.payload)

        sub = broker.subscribe("t", handler, backoff=(0.001, 0.002), max_attempts=1000)
        broker.publish("t", b"in time")
        assert await rill.aio.wait_idle(sub, WAIT)
        return sub

    sub = asyncio.run(main())  # the loop is closed when this returns
    broker.publish("t", b"too late")
    # The broker thread must not wait for the dead loop: the message becomes
    # retries, each with the reason, and closing returns.
    deadline = threading.Event()
    while sub.stats().retried < 2:
        assert not deadline.wait(0.001)
    closer = threading.Thread(target=sub.close)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert handled == [b"in time"]


def test_a_call_given_up_while_the_loop_is_stopped_never_runs_later(broker: rill.Broker) -> None:
    """A loop driven in steps, stopped while a message arrives: each call
    the broker thread gives up (a retry) used to run anyway once the loop
    came back, so the handler ran once per given-up attempt (found from
    outside). Now the message is handled once, by the attempt that finds
    the loop running."""
    broker.create_topic("t")
    loop = asyncio.new_event_loop()
    runs: list[int] = []

    async def handler(msg: rill.Message) -> None:
        runs.append(msg.attempt)

    async def setup() -> rill.Subscription:
        return broker.subscribe("t", handler, backoff=(0.001, 0.002), max_attempts=1000)

    sub = loop.run_until_complete(setup())
    broker.publish("t", b"while stopped")
    hang_guard = threading.Event()
    for _ in range(int(WAIT / 0.001)):
        if sub.stats().retried >= 3:
            break
        hang_guard.wait(0.001)
    assert sub.stats().retried >= 3

    async def settle() -> None:
        assert await rill.aio.wait_idle(sub, WAIT)
        await rill.aio.close(sub)

    loop.run_until_complete(settle())
    loop.close()
    assert len(runs) == 1 and runs[0] > 3, runs
