"""rill from asyncio, natively: nothing here parks a thread to wait for
messages, and nothing blocks the event loop.

    import asyncio, rill, rill.aio

    async def main() -> None:
        with rill.Broker() as broker:
            broker.create_topic("orders")

            # Push: async iteration over a subscription.
            async with rill.aio.subscribe(broker, "orders", start="earliest") as sub:
                async with rill.aio.Publisher(broker) as publisher:
                    await publisher.publish("orders", b"hello")   # never blocks the loop
                async for msg in sub:
                    print(msg.payload)                             # acked when the loop asks for the next
                    break

            # Pull: a consumer group member.
            async with rill.aio.Consumer(broker.consumer("audit", "orders")) as consumer:
                async for batch in consumer.batches():            # lists, until it is closed
                    print(batch)                                  # or: await consumer.poll()
                    break

    asyncio.run(main())

How each part waits:

* :class:`Consumer` waits on the consumer's notify file descriptor
  (:meth:`rill.Consumer.notify_fd`, an eventfd the library signals) with
  ``loop.add_reader``: a publish wakes the loop directly. Between waits it
  polls without waiting.
* :func:`subscribe` returns a :class:`Subscription` whose messages arrive on
  rill's delivering thread and are handed to the loop with
  ``call_soon_threadsafe``; the delivering thread waits, off the loop, until
  the iteration is done with them (that is the backpressure), not the other
  way round.
* :class:`Publisher` publishes at once when it can; a publish that must wait
  for a ``block`` subscriber is handed to the publisher's own thread, whose
  completion wakes the loop.

Coroutine handlers need nothing from this module: :meth:`rill.Broker.subscribe`
takes a coroutine function and runs it on the event loop that subscribed,
awaiting it for the ack. :func:`wait_idle` waits on the subscription's
notify fd (:meth:`rill.Subscription.notify_fd`). :func:`close` of a broker or
a :class:`rill.Subscription` runs the close (which waits for handler calls
in flight) on the loop's default executor, once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import queue
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping, Sequence

from ._broker import SLICE, Ack, Broker, Message, Payload, Position, SubscriptionStats, _Stop
from ._broker import Consumer as SyncConsumer
from ._broker import Subscription as SyncSubscription
from ._errors import Closed, Full, RillError

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Self
    else:
        from typing_extensions import Self

__all__ = ["Consumer", "Publisher", "Subscription", "close", "subscribe", "wait_idle"]

_log = logging.getLogger("rill")

# A waiting consumer polls at least this often per session timeout, so its
# group keeps it (a wait on the fd is not a poll) and it expels idle
# members as a blocked poll would.
_KEEPALIVES_PER_SESSION = 4

# Most messages ``async for`` over a Consumer polls ahead of what it yields
# (one library call for many messages). A commit, seek or nack through
# :attr:`Consumer.sync` gives back what is held (see ``give_back``) and
# divides the next poll ahead by ``_PREFETCH_SHRINK``, so a loop that
# commits after every message soon polls one at a time and gives back
# nothing; a run of messages yielded with no such call doubles it again.
_PREFETCH_MAX = 256
_PREFETCH_SHRINK = 4


# ---- pull: Consumer ---------------------------------------------------------------


class Consumer:
    """The asyncio face of a :class:`rill.Consumer`: ``await poll()``,
    ``async for message in consumer``, ``async for batch in
    consumer.batches()``. The synchronous calls (commit, seek, position, ...)
    are on :attr:`sync`; they do not wait, so they are safe on the loop.

    Waiting is native: the consumer's notify fd (an eventfd) is watched with
    ``loop.add_reader``, and a publish to a partition this member owns wakes
    the loop. While it waits it polls once every quarter of its
    ``session_timeout`` (without waiting), to stay in its group.

    Cancelling an ``await`` loses nothing: messages are taken from the
    library only by a poll that returns them at once, never across an
    ``await``. Messages :meth:`__anext__` polled ahead but has not yielded
    yet stay buffered for the next ``poll`` or iteration; a commit, seek,
    rollback or nack through :attr:`sync` first gives them back to the
    library (their partitions move back to the first of them), so
    ``sync.commit()`` in the body of ``async for`` commits exactly the
    messages yielded, and ``sync.position()`` is the next one the iteration
    yields. Use it from one event loop."""

    def __init__(self, consumer: SyncConsumer) -> None:
        self.sync = consumer
        self._buffer: collections.deque[Message] = collections.deque()
        self._ahead = _PREFETCH_MAX
        consumer._prefetch = self
        self._closed = False
        # Our own duplicate of the library's eventfd (the library closes
        # its own when the consumer is freed, which may be before we stop
        # watching ours), and the loop watching it.
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Resolved when the fd is readable (or the consumer is closed); a
        # reader is registered while it is pending.
        self._ready: asyncio.Future[None] | None = None

    def _take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` from the buffer, then from the library
        without waiting (which empties the fd and, if it finds nothing,
        arms it)."""
        if self._closed:
            raise Closed("this rill.aio.Consumer is closed")
        if self._buffer:
            n = min(max_messages, len(self._buffer))
            return [self._buffer.popleft() for _ in range(n)]
        if self._fd is None:
            # Made before the poll: only a poll after the fd exists arms it.
            self._fd = os.dup(self.sync.notify_fd())
        batch = self.sync.poll(max_messages, 0)
        if batch:
            # Another task of this loop may wait on the fd, which this poll
            # just disarmed: let it look again.
            self._wake()
        return batch

    def _watch(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """The future the next readiness resolves, watching the fd if no
        wait is already pending (tasks waiting at once share it)."""
        if self._ready is not None and not self._ready.done() and self._ready.get_loop() is loop:
            return self._ready
        if self._loop is None or (loop is not self._loop and self._loop.is_closed()):
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("a rill.aio.Consumer is used from one running event loop at a time")
        assert self._fd is not None, "made by the poll that found nothing"
        self._ready = loop.create_future()
        loop.add_reader(self._fd, self._wake)
        return self._ready

    def _wake(self) -> None:
        """The fd is readable (or the consumer closed, or another task took
        messages): stop watching and let the waiters poll."""
        ready, self._ready = self._ready, None
        if ready is not None and self._fd is not None and self._loop is not None:
            self._loop.remove_reader(self._fd)
            if not ready.done():
                ready.set_result(None)

    async def poll(self, max_messages: int = 100, timeout: float | None = 1.0) -> list[Message]:
        """Up to ``max_messages`` messages, waiting up to ``timeout`` seconds
        (None: no limit) for the first, without blocking the event loop.
        Raises :class:`rill.Closed` once the consumer (or its broker) is
        closed."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + max(0.0, float(timeout))
        keepalive = self.sync.session_timeout / _KEEPALIVES_PER_SESSION
        while True:
            batch = self._take(max_messages)
            if batch or max_messages == 0:
                return batch
            # Nothing, and the bell is armed: wait for the fd.
            left = keepalive if end is None else min(keepalive, end - loop.time())
            if left <= 0:
                return []
            ready = self._watch(loop)
            # asyncio.wait: a timeout or a cancellation of this task leaves
            # the shared future (and the reader) for the other waiters.
            await asyncio.wait([ready], timeout=left)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message, waiting as long as it takes; the iteration ends
        when the consumer (or its broker) is closed."""
        while not self._buffer:
            try:
                self._buffer.extend(await self.poll(self._ahead, None))
            except Closed:
                raise StopAsyncIteration from None
        message = self._buffer.popleft()
        if not self._buffer:
            # All it polled ahead was yielded, none given back.
            self._ahead = min(_PREFETCH_MAX, self._ahead * 2)
        return message

    def give_back(self) -> None:
        """Called by :attr:`sync` before a call that commits or moves its
        positions: each partition with messages polled ahead and not yielded
        moves back to the first of them, and they are forgotten (the next
        poll returns them again). One no longer this member's is left to its
        new owner, which reads from the group's committed offset."""
        if not self._buffer:
            return
        first: dict[int, int] = {}
        for m in self._buffer:
            first.setdefault(m.partition, m.offset)
        # Cleared first: the seeks below call back here, with nothing held.
        self._buffer.clear()
        self._ahead = max(1, self._ahead // _PREFETCH_SHRINK)
        for partition, offset in first.items():
            with contextlib.suppress(RillError):
                self.sync.seek(offset, partition)

    def first_held(self, partition: int) -> int | None:
        """The offset of the first message of ``partition`` polled ahead and
        not yielded, if any (:meth:`rill.Consumer.position` reports it)."""
        return next((m.offset for m in self._buffer if m.partition == partition), None)

    async def batches(self, max_messages: int = 256) -> AsyncIterator[list[Message]]:
        """``async for batch in consumer.batches()``: non-empty lists of up
        to ``max_messages`` messages as they arrive, until the consumer (or
        its broker) is closed."""
        while True:
            try:
                batch = await self.poll(max_messages, None)
            except Closed:
                return
            if batch:
                yield batch

    async def aclose(self) -> None:
        """Closes the consumer (and frees its group for another consumer);
        a poll waiting in another task raises :class:`rill.Closed` (and
        ``async for`` ends). Messages polled but not committed are polled
        again by the group's next owner of their partition. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        # Brief: no poll of ours waits inside the library.
        self.sync.close()

    async def close(self) -> None:
        """:meth:`aclose` (kept for programs written against it)."""
        await self.aclose()

    def __del__(self) -> None:
        # Only reached with no reader registered (a registered reader holds
        # this object), so the duplicate fd is no loop's business any more.
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ---- push: subscribe() and Subscription ---------------------------------------------


class _Run:
    """The run of messages the delivering thread offers the loop, and how
    far the loop got with it. Guarded by ``cond``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Message] = []
        # Yielded to the iterating coroutine, and finished with by it (it
        # asked for the next one): the acked prefix.
        self.taken = 0
        self.done = 0
        self.closing = False
        # The delivering thread is inside a call; and it is parked there,
        # closing with nothing of its run finished (that call returns no
        # acks: the close rewinds to its first message).
        self.in_call = False
        self.parked = False


class Subscription:
    """A push subscription read with ``async for message in subscription``
    (made by :func:`subscribe`). :attr:`sync` is the :class:`rill.Subscription`
    (stats, name, ...).

    Delivery and acks: rill's delivering thread hands each run of messages
    (up to 64 consecutive ones of a partition) to the loop and waits, off
    the loop, until the iteration has finished with all of them; only then
    does it ack them and fetch the next run. So at most one run is between
    the library and your code (that is the backpressure), and a message is
    acked when the loop asks for the next one, i.e. once the body of the
    ``async for`` finished with it.

    Nothing is lost to cancellation or close: cancelling a waiting
    ``__anext__`` takes nothing. :meth:`aclose` acks exactly the messages
    the iteration finished with; the message the body was handling when it
    stopped (``break``, an exception, a cancellation) and the rest of the
    run are not acked, so a named subscription delivers them again, from
    the first of them, when it is subscribed again under its name (an
    anonymous one ends with its close, as does what it had not read).

    The delivering thread waits for your loop: with many subscriptions
    whose loop bodies are slow, pass ``dedicated_thread=True`` so they do
    not hold the broker's shared worker threads. Close it (``async with``
    or :meth:`aclose`) before its event loop ends."""

    def __init__(self, broker: Broker, pattern: str, loop: asyncio.AbstractEventLoop, options: dict[str, Any]) -> None:
        self._run = _Run()
        self._loop = loop
        # Resolved (on the loop) when a run is offered or it is closing.
        self._offered: asyncio.Future[None] | None = None
        # Resolved when the delivering thread parks or returns (aclose).
        self._settled: asyncio.Future[None] | None = None
        self._closed = False
        # The close, once begun (see aclose).
        self._closing: asyncio.Future[None] | None = None
        run = self._run
        # Set when the subscription or its broker closes (as for coroutine
        # handlers): a delivering thread waiting for this loop lets go, even
        # if the loop's own thread is the one closing and waiting for it.
        stop = _WakingStop(self._on_offer, loop, run.cond)
        self._stop = stop

        def post(callback: Callable[[], None]) -> None:
            # A closed loop raises: nobody is there to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback)

        def deliver(messages: list[Message]) -> list[Ack]:
            # On rill's delivering thread: offer the run, wake the loop, wait
            # until the loop finished with it, ack that (closing: see aclose).
            with run.cond:
                run.messages, run.taken, run.done = messages, 0, 0
                run.in_call = True
            post(self._on_offer)
            with run.cond:
                while not (stop.is_set() or loop.is_closed() or not loop.is_running()):
                    if run.closing:
                        if run.done > 0:
                            break  # ack them while the subscription is open
                        if not run.parked:
                            run.parked = True
                            post(self._on_settled)
                    elif run.done >= len(messages):
                        break
                    run.cond.wait(SLICE)
                done = run.done
                run.messages, run.taken, run.done = [], 0, 0
                run.in_call = run.parked = False
            post(self._on_settled)
            # Fewer acks than messages: the rest come again at once; none
            # (the loop is gone) is a retry of the first, after a backoff.
            return [Ack.SUCCESS] * done

        self.sync = broker.subscribe(pattern, deliver, batch=True, **options)
        self.sync._stop = stop
        broker._stops.add(stop)

    def _on_offer(self) -> None:
        offered, self._offered = self._offered, None
        if offered is not None and not offered.done():
            offered.set_result(None)

    def _on_settled(self) -> None:
        settled, self._settled = self._settled, None
        if settled is not None and not settled.done():
            settled.set_result(None)

    def _quiet(self) -> bool:
        """After a delivering call returned: true if the library has
        nothing in flight (its acks are settled) or closed the
        subscription; otherwise it calls again soon (and parks)."""
        try:
            return self.sync.closed or self.sync._idle_now()
        except Closed:
            return True

    @property
    def name(self) -> str:
        return self.sync.name

    def stats(self) -> SubscriptionStats:
        return self.sync.stats()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message; the one yielded before is acked now (the loop
        body finished with it). Ends when the subscription is closed (by
        :meth:`aclose`, or by the library: its broker closed, its topic was
        deleted)."""
        run = self._run
        while True:
            with run.cond:
                if run.done < run.taken:
                    run.done = run.taken
                    if run.done == len(run.messages):
                        run.cond.notify_all()  # the delivering thread acks the run
                if self._closed:
                    raise StopAsyncIteration
                if run.taken < len(run.messages):
                    message = run.messages[run.taken]
                    run.taken += 1
                    return message
            # The stop is set as a close of the subscription or its broker
            # begins, on whichever thread closes (`rill.aio.close` runs a
            # broker's on an executor thread, which may not have reached
            # the library yet when the iteration wakes).
            if self._stop.is_set() or self.sync.closed or self.sync.stats().state == "closed":
                raise StopAsyncIteration
            if self._offered is None or self._offered.done():
                self._offered = self._loop.create_future()
            # A closing library does not offer again: wake at least once a
            # slice to notice it.
            await asyncio.wait([self._offered], timeout=_CLOSED_CHECK)

    async def aclose(self) -> None:
        """Stops the iteration and closes the subscription without blocking
        the loop: acks what the iteration finished with, leaves the rest
        unacked (see the class documentation). Idempotent. The close runs
        in a task of its own: cancelling a caller (a timeout around it, or a
        task cancelled in ``async with``) leaves it running to its end, and
        another ``aclose`` waits for the same close."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        run = self._run
        with run.cond:
            run.closing = True
            run.cond.notify_all()
        self._on_offer()
        # Closing: the delivering thread returns the acks of what the loop
        # finished, and the close waits until they are settled: the thread
        # is parked in a later call (holding only unfinished messages, for
        # which it returns no acks, so they come again), or nothing is in
        # flight.
        loop = asyncio.get_running_loop()
        while True:
            self._settled = loop.create_future()
            with run.cond:
                if run.parked or (not run.in_call and self._quiet()):
                    break
            # Woken when the thread parks or returns; a slice bounds the
            # wait for a library that went idle with nothing to tell.
            await asyncio.wait([self._settled], timeout=SLICE)
        self._settled = None
        await close(self.sync)

    async def close(self) -> None:
        """:meth:`aclose`."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# How often a waiting iteration looks whether the library closed the
# subscription by itself (its topic was deleted, or it lagged past a
# `disconnect` limit), which offers nothing to wake it. Closes made through
# Python (the subscription's, its broker's) wake it at once (`_WakingStop`).
_CLOSED_CHECK = 1.0


class _WakingStop(_Stop):
    """The stop flag of an async subscription: setting it (closing the
    subscription or its broker, from any thread) also wakes the iteration,
    and the delivering thread waiting on `cond` for the loop (which the
    close waits for)."""

    __slots__ = ("cond", "loop", "wake")

    def __init__(self, wake: Callable[[], None], loop: asyncio.AbstractEventLoop, cond: threading.Condition) -> None:
        super().__init__()
        self.wake = wake
        self.loop = loop
        self.cond = cond

    def set(self) -> None:
        super().set()
        with self.cond:
            self.cond.notify_all()
        # A closed loop raises: nobody iterates any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.wake)


def subscribe(broker: Broker, pattern: str, **options: Any) -> Subscription:
    """A push subscription to ``pattern`` read with ``async for``, on the
    running event loop. ``options`` are :meth:`rill.Broker.subscribe`'s
    (``filter``, ``name``, ``start``, ``delivery``, ``max_attempts``,
    ``backoff``, ``dead_letter_topic``, ``overflow``, ``lag_limit``,
    ``dedicated_thread``, ``shared``, ``ack_timeout``, ``priority``, ...) except the
    handler and ``batch``. See :class:`Subscription` for when messages are
    acked."""
    for refused in ("handler", "batch"):
        if refused in options:
            raise TypeError(f"rill.aio.subscribe takes no {refused!r}: the async iteration is the handler")
    return Subscription(broker, pattern, asyncio.get_running_loop(), options)


# ---- publishing: Publisher --------------------------------------------------------

_QUEUED, _STARTED, _WITHDRAWN = range(3)


class _Job:
    """A publish handed to a publish thread, and what to call (on the loop)
    with its result."""

    __slots__ = ("args", "fn", "future", "lock", "settle", "state")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        future: asyncio.Future[Any],
        settle: Callable[[_Job, Any, BaseException | None], None],
    ) -> None:
        self.fn = fn
        self.args = args
        self.future = future
        self.settle = settle
        self.lock = threading.Lock()
        self.state = _QUEUED


def _publish_thread(jobs: queue.SimpleQueue[_Job | None], waiting: threading.Event) -> None:
    """A publisher's thread: runs the jobs in order until it takes None.
    It holds no reference to its Publisher (only a queued job does), so an
    idle Publisher that is dropped ends it (``Publisher.__del__``)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        with job.lock:
            if job.state == _WITHDRAWN:
                continue
            job.state = _STARTED
        waiting.set()
        try:
            result, error = job.fn(*job.args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            result, error = None, e
        finally:
            waiting.clear()
        # A closed loop raises: nobody awaits the result.
        with contextlib.suppress(RuntimeError):
            job.future.get_loop().call_soon_threadsafe(job.settle, job, result, error)
        del job


class Publisher:
    """``await publisher.publish(...)`` that never blocks the event loop.

    A publish that can complete at once (no ``block`` subscriber is full)
    does, on the loop, with no thread hop. One that would wait, and every
    :meth:`publish_batch`, is handed to this publisher's own thread, which
    makes the blocking call (waiting up to the broker's ``publish_timeout``)
    and wakes the loop with the result; publishes handed over complete in
    the order they were made, and a later publish does not overtake them.

    Cancelling an ``await publish(...)``: if the publish was still queued
    behind another one it is withdrawn, not published; if the thread had
    started it, it is published all the same (or fails with ``Full`` /
    ``Timeout``), and only its result is dropped (a failure is logged to the
    "rill" logger). :attr:`pending` counts publishes handed over and not
    finished; ``await`` :meth:`flush` waits for all of them, so after it a
    cancelled publish is either in the log or withdrawn."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._closed = False
        # Set while the thread is inside a blocking call (for tests).
        self._waiting = threading.Event()

    @property
    def pending(self) -> int:
        """Publishes handed to the publish thread and not finished yet."""
        return self._pending

    async def publish(
        self,
        topic: str,
        payload: Payload,
        key: Payload | None = None,
        attributes: Mapping[str, str] | None = None,
        msg_id: str | None = None,
    ) -> Position:
        """Publishes one message (see :meth:`rill.Broker.publish`, and its
        ``msg_id``) and returns where it landed (``duplicate`` set if the id
        was a duplicate), waiting for ``block`` subscribers off the loop.
        (A publish with an id waits on the loop, briefly, only for another
        publisher's publish of the same id in progress at that moment.)"""
        if self._closed:
            raise Closed("this rill.aio.Publisher is closed")
        if self._pending == 0:
            try:
                return self.broker.try_publish(topic, payload, key, attributes, msg_id)
            except Full:
                pass  # a full block subscriber: wait for it off the loop
        return await self._hand_over(self.broker.publish, topic, payload, key, attributes, msg_id)  # type: ignore[no-any-return]

    async def publish_batch(
        self, topic: str, payloads: Sequence[Payload], msg_ids: Sequence[str | None] | None = None
    ) -> list[Position]:
        """:meth:`rill.Broker.publish_batch` off the loop (all or nothing),
        with its ``msg_ids``."""
        if self._closed:
            raise Closed("this rill.aio.Publisher is closed")
        return await self._hand_over(self.broker.publish_batch, topic, payloads, msg_ids)  # type: ignore[no-any-return]

    async def flush(self) -> None:
        """Waits until every publish handed over so far has finished."""
        if self._pending:
            await self._hand_over(_nothing)

    async def _hand_over(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        job = _Job(fn, args, loop.create_future(), self._settle)
        self._start()
        self._pending += 1
        self._jobs.put(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            with job.lock:
                if job.state == _QUEUED:
                    job.state = _WITHDRAWN
                    self._pending -= 1
            raise

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=_publish_thread, args=(self._jobs, self._waiting), name="rill.aio.Publisher", daemon=True
            )
            self._thread.start()

    def _settle(self, job: _Job, result: Any, error: BaseException | None) -> None:
        self._pending -= 1
        if job.future.cancelled():
            if error is not None:
                _log.warning("a publish whose await was cancelled failed: %s: %s", type(error).__name__, error)
        elif error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    async def aclose(self) -> None:
        """Refuses new publishes (:class:`rill.Closed`), waits for those
        handed over (see :meth:`flush`), then stops the publish thread.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush()
        finally:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._jobs.put(None)
        if thread is not None:
            # Flushed, and nothing new was accepted: it has only the None
            # left to take, so this does not block the loop.
            thread.join()

    def __del__(self) -> None:
        # An idle publish thread holds no reference to us: end it.
        if getattr(self, "_thread", None) is not None:
            self._jobs.put(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _nothing() -> None:
    return None


# ---- waiting for and closing handles ---------------------------------------------


async def wait_idle(subscription: SyncSubscription | Subscription, timeout: float | None = 5.0) -> bool:
    """:meth:`rill.Subscription.wait_idle` without blocking the event loop
    (so a coroutine handler on this loop can run while it waits): True once
    everything published so far is handled and no handler call is in
    flight, False if ``timeout`` seconds (None: no limit) pass first.
    Raises :class:`rill.Closed` if the subscription is closed. Takes a
    :class:`rill.Subscription` or a :class:`rill.aio.Subscription`.

    Native: it looks without waiting and, while the subscription is busy,
    waits on its notify fd (:meth:`rill.Subscription.notify_fd`) with
    ``loop.add_reader``; the library wakes it when the delivery goes idle.
    Several tasks may wait at once: one that finds it idle wakes the others."""
    sync = subscription.sync if isinstance(subscription, Subscription) else subscription
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + max(0.0, float(timeout))
    waiters: set[asyncio.Future[None]] = _idle_waiters.setdefault(sync, set())
    # Our own duplicate: the library closes its fd when the subscription
    # is freed, which may happen while we still watch ours.
    fd = os.dup(sync.notify_fd())
    try:
        while True:
            try:
                idle = sync._idle_now()  # empties the fd; arms it if busy
            except Closed:
                _wake_all(waiters)
                raise
            if idle:
                # Another task's look may have emptied the fd of its wake.
                _wake_all(waiters)
                return True
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return False
            ready: asyncio.Future[None] = loop.create_future()
            waiters.add(ready)
            loop.add_reader(fd, _resolve, ready)
            try:
                await asyncio.wait([ready], timeout=left)
            finally:
                loop.remove_reader(fd)
                waiters.discard(ready)
    finally:
        os.close(fd)


# The futures of the wait_idle calls waiting on each subscription.
_idle_waiters: weakref.WeakKeyDictionary[SyncSubscription, set[asyncio.Future[None]]] = weakref.WeakKeyDictionary()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _wake_all(futures: set[asyncio.Future[None]]) -> None:
    for future in list(futures):
        _resolve(future)


async def close(handle: Broker | SyncSubscription | SyncConsumer | Subscription | Consumer) -> None:
    """Closes a broker, subscription or consumer without blocking the event
    loop: closing waits for handler calls in flight, which a coroutine
    handler on this loop could otherwise not finish."""
    if isinstance(handle, (Subscription, Consumer)):
        await handle.aclose()
        return
    await asyncio.get_running_loop().run_in_executor(None, handle.close)
