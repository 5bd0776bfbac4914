"""rill from asyncio.

    import asyncio, rill, rill.aio

    async def main() -> None:
        with rill.Broker() as broker:
            broker.create_topic("orders")

            async def settle(msg: rill.Message) -> rill.Ack:
                await asyncio.sleep(0)          # runs on this event loop
                return rill.Ack.SUCCESS         # the ack is what it returns

            sub = broker.subscribe("orders", settle, start="earliest")
            broker.publish("orders", b"hello")
            await rill.aio.wait_idle(sub, timeout=5.0)
            await rill.aio.close(sub)

            async with rill.aio.Consumer(broker.consumer("audit", "orders")) as consumer:
                print(await consumer.poll(timeout=1.0))
                async for msg in consumer:      # until the consumer is closed
                    ...

    asyncio.run(main())

Coroutine handlers need nothing from this module: :meth:`rill.Broker.subscribe`
takes a coroutine function and runs it on the event loop that subscribed,
awaiting it for the ack. This module holds what must not block the loop:
polling a consumer, waiting for a subscription to be idle, and closing.
The blocking calls run on the loop's default executor, one wait slice
(:data:`rill._broker.SLICE`) at a time, so cancelling an await never leaves a
thread blocked for long.
"""

from __future__ import annotations

import asyncio
import collections
import sys
from typing import TYPE_CHECKING

from ._broker import SLICE, Broker, Message, Subscription, _Deadline
from ._broker import Consumer as SyncConsumer
from ._errors import Closed

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Self
    else:
        from typing_extensions import Self

__all__ = ["Consumer", "close", "wait_idle"]


class Consumer:
    """The asyncio face of a :class:`rill.Consumer`: ``await poll()`` and
    ``async for``. The synchronous calls (commit, seek, position, ...) are on
    :attr:`sync`; they do not wait, so they are safe on the loop."""

    def __init__(self, consumer: SyncConsumer) -> None:
        self.sync = consumer
        self._buffer: collections.deque[Message] = collections.deque()
        # A poll slice running on the executor whose await was cancelled: the
        # next poll takes its messages, so cancelling never loses any.
        self._pending: asyncio.Future[list[Message]] | None = None

    async def poll(self, max_messages: int = 100, timeout: float | None = 1.0) -> list[Message]:
        """Up to ``max_messages`` messages, waiting up to ``timeout`` seconds
        (None: no limit) for the first, without blocking the event loop.
        Raises :class:`rill.Closed` once the consumer is closed."""
        deadline = _Deadline(timeout)
        loop = asyncio.get_running_loop()
        if self._pending is None:
            batch = self.sync.poll(max_messages, 0)  # what is there already, without a thread hop
            if batch or deadline.passed():
                return batch
        while True:
            if self._pending is None:
                wait = min(SLICE, deadline.next_ms() / 1000)
                self._pending = loop.run_in_executor(None, self.sync.poll, max_messages, wait)
            try:
                batch = await asyncio.shield(self._pending)
            finally:
                if self._pending.done():
                    self._pending = None
            if batch or deadline.passed():
                return batch

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message, waiting as long as it takes; the iteration ends
        when the consumer (or its broker) is closed."""
        while not self._buffer:
            try:
                self._buffer.extend(await self.poll(256, None))
            except Closed:
                raise StopAsyncIteration from None
        return self._buffer.popleft()

    async def close(self) -> None:
        """Closes the consumer; a poll waiting in another task raises
        :class:`rill.Closed` (and ``async for`` ends)."""
        await close(self.sync)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def wait_idle(subscription: Subscription, timeout: float | None = 5.0) -> bool:
    """:meth:`rill.Subscription.wait_idle` without blocking the event loop
    (so a coroutine handler on this loop can run while it waits)."""
    deadline = _Deadline(timeout)
    loop = asyncio.get_running_loop()
    while True:
        if await loop.run_in_executor(None, _idle_within, subscription, min(SLICE, deadline.next_ms() / 1000)):
            return True
        if deadline.passed():
            return False


def _idle_within(subscription: Subscription, seconds: float) -> bool:
    # Called on an executor thread, so the loop-thread guard does not apply.
    return subscription.wait_idle(seconds)


async def close(handle: Broker | Subscription | SyncConsumer) -> None:
    """Closes a broker, subscription or consumer without blocking the event
    loop: closing waits for handler calls in flight, which a coroutine
    handler on this loop could otherwise not finish."""
    await asyncio.get_running_loop().run_in_executor(None, handle.close)
