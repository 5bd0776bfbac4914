"""Broker, Subscription, Consumer and Message: the Python face of librill."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import ctypes
import datetime
import enum
import inspect
import itertools
import json
import logging
import math
import operator
import os
import struct
import sys
import threading
import time
import warnings
import weakref
from array import array
from ctypes import byref, c_size_t, c_uint32, c_uint64, c_void_p, sizeof, string_at
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Literal, Mapping, NamedTuple, Protocol, Sequence, Union

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Self
    else:
        from typing_extensions import Self

from . import _ffi
from ._errors import Closed, InvalidArgument, NotFound, check

lib = _ffi.lib

Payload = Union[bytes, bytearray, memoryview, str]


class Ack(enum.IntEnum):
    """What a handler may return besides ``None``/``True`` (success)."""

    SUCCESS = _ffi.RILL_ACK_SUCCESS
    RETRY = _ffi.RILL_ACK_RETRY
    DEAD_LETTER = _ffi.RILL_ACK_DEAD_LETTER


class _Position(NamedTuple):
    partition: int
    offset: int


class Position(_Position):
    """Where a published message landed: ``(partition, offset)``, a tuple
    (``partition, offset = pos`` and ``pos == (0, 5)`` work as ever).

    ``duplicate`` is True when the message carried an id (``msg_id=``)
    that the topic had published within its ``dedupe_window_ms``: nothing
    was appended, and the position is the first message's.
    ``dead_lettered`` is True when the payload did not fit the topic's
    schema, whose ``on_invalid`` is ``"dead_letter"``: the message went to
    ``$dlq/<topic>`` and the position is there. Neither is part of the
    tuple, so equality and unpacking ignore them."""

    duplicate: bool = False
    dead_lettered: bool = False

    def __repr__(self) -> str:
        if self.duplicate or self.dead_lettered:
            return (
                f"Position(partition={self.partition}, offset={self.offset}, "
                f"duplicate={self.duplicate}, dead_lettered={self.dead_lettered})"
            )
        return f"Position(partition={self.partition}, offset={self.offset})"


def _position(partition: int, offset: int, flags: int) -> Position:
    pos: Position = tuple.__new__(Position, (partition, offset))
    if flags & _ffi.RILL_PUBLISHED_DUPLICATE:
        pos.duplicate = True
    if flags & _ffi.RILL_PUBLISHED_DEAD_LETTERED:
        pos.dead_lettered = True
    return pos


class Message:
    """A delivered or polled message. Everything is copied out of the broker,
    so a Message stays valid after the handler returns."""

    __slots__ = ("attempt", "attributes", "key", "offset", "partition", "payload", "timestamp_ns", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ns: int,
        key: bytes | None,
        payload: bytes,
        attributes: dict[str, str],
        attempt: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ns = timestamp_ns
        self.key = key
        self.payload = payload
        self.attributes = attributes
        self.attempt = attempt

    @property
    def schema_version(self) -> int:
        """The version of the topic's schema this message was checked against
        when it was published (:meth:`Broker.set_schema`); 0 if it was
        checked by none (the topic had no schema then, or its schema was a
        validator another process's broker runs)."""
        v = self.attributes.get(_ffi.SCHEMA_ATTRIBUTE)
        return int(v) if v is not None and v.isdigit() else 0

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"key={self.key!r}, payload={self.payload!r}, attributes={self.attributes!r}, attempt={self.attempt})"
        )


DEFAULT_PRIORITY = _ffi.RILL_PRIORITY_DEFAULT
"""The priority of a subscription that sets none, on a topic that sets none."""
MAX_PRIORITY = _ffi.RILL_PRIORITY_MAX
"""The highest priority (0 is the lowest)."""
PRIORITY_AGING_TAKES = _ffi.RILL_PRIORITY_AGING_TAKES
"""The aging bound: a ready subscription waits at most this many turns of
other subscriptions more than a first-come-first-served pool would make it
wait."""


def _priority(priority: int | None, what: str) -> int:
    """A ``priority`` argument as the C field: None is RILL_PRIORITY_UNSET."""
    if priority is None:
        return _ffi.RILL_PRIORITY_UNSET
    return _int(priority, what, _ffi.RILL_PRIORITY_MIN, _ffi.RILL_PRIORITY_MAX)


@dataclass(frozen=True)
class SubscriptionStats:
    """A snapshot of a subscription's counters."""

    delivered: int
    acked: int
    retried: int
    dead_lettered: int
    filtered: int
    dropped: int
    missed: int
    lag: int
    partitions: int
    state: State
    name: str = ""
    """Its name (generated for anonymous subscriptions)."""
    pattern: str = ""
    """The pattern it subscribed with."""
    last_error: str | None = None
    """The handler's latest failure (a retry, an exception or a dead letter,
    with the message's topic, partition, offset and the reason), or a dead
    letter that could not be published; None if there was none."""
    ack_timeouts: int = 0
    """Handler calls that ran past ``ack_timeout`` (each counted once)."""
    priority: int = DEFAULT_PRIORITY
    """Its priority in the worker pool (its own, or its topic's default)."""
    queue_waits: int = 0
    """Times it waited ready in the worker pool's queue since the last
    :meth:`Subscription.stats` (each of which starts the queue figures
    afresh; :meth:`Broker.subscriptions` leaves them; 0 on a dedicated
    thread)."""
    queue_wait_p50: float = 0.0
    """The median of those waits, in seconds (the upper edge of a
    power-of-two bucket of nanoseconds, so at most twice the wait)."""
    queue_wait_p99: float = 0.0
    """Their 99th percentile, likewise."""
    queue_wait_max_takes: int = 0
    """The longest of those waits in turns of other subscriptions: at most
    :data:`PRIORITY_AGING_TAKES` plus the subscriptions queued before it."""


@dataclass(frozen=True)
class PartitionLag:
    """Position and lag of one partition a subscription or consumer group reads."""

    topic: str
    partition: int
    position: int
    """The next offset to handle (a group's committed offset, or the oldest
    retained one while it has committed none)."""
    end: int
    """One past the newest offset published."""
    lag: int


@dataclass(frozen=True)
class GroupStats:
    """A consumer group's committed position on a topic, live consumer or not."""

    group: str
    topic: str
    lag: int
    partitions: list[PartitionLag]


@dataclass(frozen=True)
class NamedSubscription:
    """A durable (named) subscription and the process holding it, as
    :meth:`Broker.named_subscriptions` lists it."""

    name: str
    holder_pid: int | None
    """The pid of the process whose subscription holds the name now (this
    one's included); None if no live process holds it (its positions wait
    for the next subscriber of the name). 0 for a holder in a PID namespace
    this process cannot see."""


@dataclass(frozen=True)
class DirectorySubscription:
    """A live push subscription of the data directory and the process it
    lives in, as :meth:`Broker.directory_subscriptions` lists it."""

    pid: int
    """The pid of the process whose broker has it (0 for a process in a
    PID namespace this process cannot see)."""
    this_broker: bool
    """True if it is this broker's."""
    durable: bool
    """A durable (named, not shared) subscription."""
    shared: bool
    """A member of a shared subscription."""
    stats: SubscriptionStats
    """Its statistics. Another broker's are what that broker published at
    the end of the subscription's last drain round: counters, state and
    ``lag`` as that round left them; ``partitions`` is 0, ``last_error``
    None and the queue-wait figures 0 (they stay with its own process's
    :meth:`Subscription.stats`)."""


@dataclass(frozen=True)
class DirectoryConsumer:
    """A live pull consumer (a member of a consumer group) of the data
    directory and the process it lives in, as
    :meth:`Broker.directory_consumers` lists it."""

    pid: int
    """The pid of the process whose broker has it (0 for a process in a
    PID namespace this process cannot see)."""
    this_broker: bool
    """True if it is this broker's."""
    id: int
    """Its id, unique in its process: the :attr:`GroupMember.id` of the
    member it is."""
    group: str
    """Its consumer group."""
    topic: str
    """The topic it reads."""
    delivered: int
    """Messages its polls returned."""
    missed: int
    """Messages retention trimmed before it polled them."""
    lag: int
    """What the partitions it owned held past its position in them, at
    the end of its last poll (not the group's lag from its commits, which
    :meth:`Broker.group_stats` gives)."""


@dataclass(frozen=True)
class GroupMember:
    """A live member of a consumer group on one topic, as
    :meth:`Broker.group_members` lists it."""

    pid: int
    """The pid of the member's process."""
    id: int
    """The member's id, unique in its process."""
    partitions: list[int]
    """The partitions it owns, ascending. Across processes, ownership is
    known per process: when one process has several members of the group,
    each lists every partition their process owns."""


def _subscription_stats(
    s: _ffi.rill_subscription_stats, name: str, pattern: str, last_error: str | None
) -> SubscriptionStats:
    return SubscriptionStats(
        s.delivered,
        s.acked,
        s.retried,
        s.dead_lettered,
        s.filtered,
        s.dropped,
        s.missed,
        s.lag,
        s.partitions,
        _STATES.get(s.state, "unknown"),
        name,
        pattern,
        last_error,
        s.ack_timeouts,
        s.priority,
        s.queue_waits,
        s.queue_wait_p50_ns / 1e9,
        s.queue_wait_p99_ns / 1e9,
        s.queue_wait_max_takes,
    )


def _text_or_none(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def _collect_lags(fn: Callable[..., int], *args: object) -> list[PartitionLag]:
    """Calls a ``rill_*_partitions(..., each, user_data)`` listing."""
    out: list[PartitionLag] = []

    def each(_user: int | None, p: Any) -> None:
        lag = p.contents
        out.append(PartitionLag(lag.topic.decode(), lag.partition, lag.position, lag.end, lag.lag))

    check(fn(*args, _ffi.PARTITION_LAG_CALLBACK(each), None))
    return out


@dataclass(frozen=True)
class ConsumerStats:
    """A consumer's counters and its group's lag."""

    delivered: int
    missed: int
    lag: int
    partitions: int


@dataclass(frozen=True)
class TopicStats:
    """A snapshot of a topic."""

    partitions: int
    publish_count: int
    retained_bytes: int
    recovered_truncated_records: int = 0
    """Records recovery dropped from the torn or damaged ends of its
    partitions when the broker opened its data directory (0 in memory)."""
    recovered_truncated_bytes: int = 0
    """Bytes recovery dropped with them."""
    recovered_repaired_partitions: int = 0
    """Partitions cut at damage inside a sealed segment (``repair=True``)."""
    recovered_offsets_reset: int = 0
    """Consumer group commits and durable subscription positions that
    pointed past the end recovery left in their partition, reset to that
    end at the open so that later messages are delivered (each also
    logged as a warning)."""
    dedupe_duplicates: int = 0
    """Publishes answered as duplicates by the dedupe window (nothing
    appended)."""
    dedupe_ids: int = 0
    """Message ids in the dedupe window now. With ``sharing="processes"``
    each process has a window of its own, which learns the others' ids from
    the log at its own publishes with an id: 0 in a process that has
    published none."""
    dedupe_evicted: int = 0
    """Ids dropped from a full dedupe window before their window ended."""
    dedupe_waits: int = 0
    """Publishes that found their id being published by another publisher
    at that moment and waited for that publish."""
    compacted_messages: int = 0
    """Messages compaction removed (0 unless the topic is compacted)."""
    compacted_bytes: int = 0
    """Their bytes, as they took in the log."""
    compaction_passes: int = 0
    """Compaction passes run over its partitions."""
    compaction_keys: int = 0
    """Distinct keys with a message kept after the last pass (a tombstone
    not yet expired counts)."""


Handler = Callable[[Message], Any]
"""A per-message handler: returns None/True, False, or an :class:`Ack`."""
BatchHandler = Callable[[List[Message]], Any]
"""A ``batch=True`` handler: returns None/True, or a list of acks."""

# The string options, as types a checker can hold a call to.
Start = Literal["latest", "earliest"]
"""Where a subscription or a new consumer group starts (or an offset, an int)."""
Delivery = Literal["at_least_once", "at_most_once"]
"""``at_least_once`` retries a failed message; ``at_most_once`` drops it."""
Overflow = Literal["drop_oldest", "block", "disconnect"]
"""What happens when a subscriber falls ``lag_limit`` messages behind."""
Cleanup = Literal["delete", "compact", "compact_delete"]
"""What keeps a topic from growing without end: the size and age limits
(``delete``), log compaction (``compact``: the newest message of every
key), or both (``compact_delete``)."""
State = Literal["idle", "active", "backoff", "closed", "unknown"]
"""A subscription's lifecycle state in :class:`SubscriptionStats`."""

_STATES: dict[int, State] = {0: "idle", 1: "active", 2: "backoff", 3: "closed"}
_CLEANUP = {
    "delete": _ffi.RILL_CLEANUP_DELETE,
    "compact": _ffi.RILL_CLEANUP_COMPACT,
    "compact_delete": _ffi.RILL_CLEANUP_COMPACT_DELETE,
}
_STARTS = {"latest": _ffi.RILL_START_LATEST, "earliest": _ffi.RILL_START_EARLIEST}
_DELIVERY = {"at_least_once": _ffi.RILL_DELIVERY_AT_LEAST_ONCE, "at_most_once": _ffi.RILL_DELIVERY_AT_MOST_ONCE}
_OVERFLOW = {
    "drop_oldest": _ffi.RILL_OVERFLOW_DROP_OLDEST,
    "block": _ffi.RILL_OVERFLOW_BLOCK,
    "disconnect": _ffi.RILL_OVERFLOW_DISCONNECT,
}

# ---- decoding messages ------------------------------------------------------

_MESSAGE = _ffi.MESSAGE_FORMAT
_MESSAGE_SIZE = _MESSAGE.size


def _text(value: Payload, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, not {type(value).__name__}")


def _name(value: str, what: str) -> bytes:
    """A string for a C ``const char *``: topic and group names, patterns,
    filters, attribute keys and values, option strings. C reads it up to its
    first NUL, so one inside would silently cut it short (``"t\\0x"`` naming
    topic ``t``): refused."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgument(f"{what} contains a NUL character: {value!r}")
    return value.encode("utf-8", "surrogatepass")


def _attributes(msg: int, count: int) -> dict[str, str]:
    k, v = c_void_p(), c_void_p()
    kl, vl = c_size_t(), c_size_t()
    out: dict[str, str] = {}
    for i in range(count):
        check(lib.rill_message_attribute_at(msg, i, byref(k), byref(kl), byref(v), byref(vl)))
        key = string_at(k.value or 0, kl.value).decode("utf-8") if kl.value else ""
        out.setdefault(key, string_at(v.value or 0, vl.value).decode("utf-8") if vl.value else "")
    return out


def _decode(raw: bytes, at: int, base: int, topics: dict[int, str]) -> Message:
    """The message whose C struct starts at byte ``at`` of ``raw``, a copy of
    the structs at address ``base``."""
    topic_p, partition, offset, ts, key_p, key_len, payload_p, payload_len, attempt, attr_count, _ = (
        _MESSAGE.unpack_from(raw, at)
    )
    topic = topics.get(topic_p)
    if topic is None:
        topic = topics[topic_p] = ctypes.string_at(topic_p).decode("utf-8")
    return Message(
        topic,
        partition,
        offset,
        ts,
        string_at(key_p, key_len) if key_p else None,
        string_at(payload_p, payload_len) if payload_len else b"",
        _attributes(base + at, attr_count) if attr_count else {},
        attempt,
    )


def _decode_all(base: int, count: int, topics: dict[int, str]) -> list[Message]:
    raw = string_at(base, count * _MESSAGE_SIZE)
    return [_decode(raw, k * _MESSAGE_SIZE, base, topics) for k in range(count)]


# ---- handler trampolines ----------------------------------------------------
#
# C holds only an integer (user_data) naming an entry in _handlers; the two
# CFUNCTYPE objects below live as long as the module, so C never calls a
# collected callback. The destructor removes the entry once the subscription
# has ended, releasing the user's handler.


class _Entry:
    __slots__ = ("batch", "handler", "last_attempt", "on_dead_letter", "on_lagged", "topics")

    def __init__(
        self,
        handler: Callable[..., Any],
        batch: bool,
        on_lagged: Callable[..., Any] | None,
        on_dead_letter: Callable[..., Any] | None = None,
        last_attempt: int = 1,
    ) -> None:
        self.handler = handler
        self.batch = batch
        self.topics: dict[int, str] = {}
        self.on_lagged = on_lagged
        self.on_dead_letter = on_dead_letter
        # The attempt whose retry the library no longer retries: max_attempts
        # (it dead-letters the message), or 1 at most once (it drops it).
        self.last_attempt = last_attempt


_handlers: dict[int, _Entry] = {}
_ids = itertools.count(1)

# Validators (Broker.set_schema): C holds only an integer naming an entry
# here, and the two CFUNCTYPE objects below live as long as the module.
# An entry goes when the library lets go of its validator (its schema
# replaced or removed, its topic deleted, its broker freed, or the set
# failed): `_validator_free_py`, the validator's `user_free`.
_validators: dict[int, Callable[[bytes], Any]] = {}


def _write_reason(reason: int, reason_len: int, text: str) -> None:
    data = text.replace("\0", "\ufffd").encode("utf-8", "replace")[: max(reason_len - 1, 0)]
    if reason_len > 0:
        ctypes.memmove(reason, data + b"\0", len(data) + 1)


def _validate_py(user: int | None, payload: int | None, length: int, reason: int | None, reason_len: int) -> int:
    # Runs on a publishing thread; nothing may escape into C.
    try:
        validator = _validators.get(user or 0)
        if validator is None:
            text: str | None = "the validator was replaced while this publish ran"
        else:
            result = validator(string_at(payload or 0, length) if length else b"")
            if result is None or result is True:
                return 0
            text = result if isinstance(result, str) else f"the validator returned {result!r}"
    except BaseException as e:  # noqa: BLE001 - a raising validator means "invalid"
        text = f"validator raised {type(e).__name__}: {e}"
    try:
        if reason:
            _write_reason(reason, reason_len, text or "invalid")
    except BaseException:  # noqa: BLE001 - the verdict stands without its reason
        pass
    return 1


def _validator_free_py(user: int | None) -> None:
    # Any thread; the library calls it once no call of the validator runs.
    _validators.pop(user or 0, None)


_VALIDATOR_FN = _ffi.VALIDATOR(_validate_py)
_VALIDATOR_FREE = _ffi.DESTRUCTOR(_validator_free_py)


def _reason(msg: int, text: str) -> None:
    # Text from a handler's exception, which cannot be refused: a NUL in it
    # is replaced (as the library does with its own strings) rather than
    # cutting the reason short there.
    lib.rill_ack_reason(msg, text.replace("\0", "\ufffd").encode("utf-8", "replace"))


def _ack(result: Any) -> tuple[int, str | None]:
    """A handler's return value as (ack, reason if it was not understood)."""
    if result is None or result is True:
        return _ffi.RILL_ACK_SUCCESS, None
    if result is False:
        return _ffi.RILL_ACK_RETRY, None
    if isinstance(result, int) and result in (_ffi.RILL_ACK_SUCCESS, _ffi.RILL_ACK_RETRY, _ffi.RILL_ACK_DEAD_LETTER):
        return int(result), None
    return _ffi.RILL_ACK_RETRY, f"the handler returned {result!r}, which is not an Ack; retrying"


def _on_batch_py(user_data: int | None, msgs: int, count: int, acks: int) -> int:
    # Messages arrive in runs (one C call each, which is what makes Python
    # delivery fast); a per-message handler is called once per message and
    # the run stops at its first retry. Nothing may escape into C.
    handled = 0
    entry: _Entry | None = None
    messages: list[Message] = []
    try:
        entry = _handlers[user_data or 0]
        out = (ctypes.c_int32 * count).from_address(acks)
        messages = _decode_all(msgs, count, entry.topics)
        if entry.batch:
            result = entry.handler(messages)
            if result is None or result is True:
                return count
            if isinstance(result, (list, tuple)):
                for k, r in enumerate(result[:count]):
                    out[k], why = _ack(r)
                    if why:
                        _reason(msgs + k * _MESSAGE_SIZE, why)
                return min(len(result), count)
            out[0], why = _ack(result)
            _reason(msgs, why or "a batch handler returned a single ack; applied to the first message")
            return 1
        handler = entry.handler
        for k, m in enumerate(messages):
            handled = k
            try:
                ack, why = _ack(handler(m))
            except BaseException as e:  # noqa: BLE001 - a handler's exception must become a retry
                ack, why = _ffi.RILL_ACK_RETRY, f"{type(e).__name__}: {e}"
                _log_handler_exception(entry, m, why)
            if ack != _ffi.RILL_ACK_SUCCESS:
                out[k] = ack
                if why:
                    _reason(msgs + k * _MESSAGE_SIZE, why)
                if ack == _ffi.RILL_ACK_RETRY:
                    return k + 1
        return count
    except BaseException as e:  # noqa: BLE001 - never let anything reach C
        try:
            why = f"{type(e).__name__}: {e}"
        except BaseException:  # noqa: BLE001 - an exception whose str() raises
            why = type(e).__name__
        if entry is not None and handled < len(messages):
            # The failure falls on the message retried (a batch handler's:
            # the batch's first).
            _log_handler_exception(entry, messages[handled], why)
        else:
            try:  # noqa: SIM105 - no contextlib in a C callback that may run at interpreter exit
                _log.error("delivering messages to a handler raised %s", type(e).__name__, exc_info=True)
            except BaseException:  # noqa: BLE001 - e.g. a logging handler that raises
                pass
        try:
            _reason(msgs + handled * _MESSAGE_SIZE, why)
            (ctypes.c_int32 * count).from_address(acks)[handled] = _ffi.RILL_ACK_RETRY
        except BaseException:  # noqa: BLE001
            pass
        return handled + 1


def _on_lagged_py(user_data: int | None, topic: bytes, partition: int, missed: int) -> None:
    # Nothing may escape into C: an exception becomes a RuntimeWarning.
    try:
        entry = _handlers.get(user_data or 0)
        if entry is not None and entry.on_lagged is not None:
            entry.on_lagged(topic.decode("utf-8"), partition, missed)
    except BaseException as e:  # noqa: BLE001
        try:  # noqa: SIM105 - no contextlib in a C callback that may run at interpreter exit
            warnings.warn(f"on_lagged raised {type(e).__name__}: {e}", RuntimeWarning, stacklevel=1)
        except BaseException:  # noqa: BLE001 - e.g. warnings turned into errors
            pass


def _log_handler_exception(entry: _Entry, m: Message, why: str) -> None:
    """Logs the exception being handled to the "rill" logger (the message
    becomes a retry, with ``why`` as its reason).

    A poison message fails on every attempt, so a traceback per attempt
    would repeat one story ``max_attempts`` times: a retry logs one line at
    WARNING (its traceback at DEBUG), and the last attempt, after which the
    library dead-letters (or, at most once, drops) the message, logs the
    traceback at ERROR.
    """
    try:
        where = f"{m.topic} partition {m.partition} offset {m.offset} (attempt {m.attempt} of {entry.last_attempt})"
        if m.attempt >= entry.last_attempt:
            _log.error("a handler raised on %s, its last attempt: %s", where, why, exc_info=True)
        else:
            _log.warning("a handler raised on %s: %s; retrying", where, why)
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug("the traceback of the handler's failure on %s", where, exc_info=True)
    except BaseException:  # noqa: BLE001 - e.g. a logging handler that raises
        pass


def _on_dead_letter_py(user_data: int | None, msg: int | None, reason: bytes) -> None:
    # Nothing may escape into C: an exception is logged.
    try:
        entry = _handlers.get(user_data or 0)
        if entry is not None and entry.on_dead_letter is not None and msg:
            # A fresh topic cache: the topic string lives for this call only,
            # so its address may name another topic next time.
            [message] = _decode_all(msg, 1, {})
            entry.on_dead_letter(message, reason.decode("utf-8", "replace"))
    except BaseException:  # noqa: BLE001
        try:  # noqa: SIM105 - no contextlib in a C callback that may run at interpreter exit
            _log.error("on_dead_letter raised", exc_info=True)
        except BaseException:  # noqa: BLE001
            pass


def _on_free_py(user_data: int | None) -> None:
    _handlers.pop(user_data or 0, None)


# The C function pointers, alive as long as the module.
_on_batch = _ffi.BATCH_HANDLER(_on_batch_py)
_on_lagged = _ffi.LAG_CALLBACK(_on_lagged_py)
_on_dead_letter = _ffi.DEAD_LETTER_CALLBACK(_on_dead_letter_py)
_on_free = _ffi.DESTRUCTOR(_on_free_py)


# ---- range checks ------------------------------------------------------------
#
# ctypes stores an int into a fixed-width field by wrapping it modulo 2**bits,
# silently (2**32 + 2 partitions would become 2). Every integer is checked
# against its C field's range first; out of range raises InvalidArgument,
# which is a ValueError.

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1
SIZE_MAX = (1 << (8 * ctypes.sizeof(c_size_t))) - 1


def _int(value: object, what: str, low: int = 0, high: int = U64_MAX) -> int:
    """``value`` as an int in [low, high], for a C integer field. A bool is
    refused, as any other non-integer: ``priority=True`` is a mistake, not 1."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not low <= n <= high:
        raise InvalidArgument(f"{what} must be between {low} and {high}, not {n}")
    return n


def _seconds_ms(seconds: float, what: str, per_second: int = 1000) -> int:
    """A non-negative, finite duration in seconds as a whole number of
    1/per_second units (milliseconds by default) that fits a uint64_t."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise InvalidArgument(
            f"{what} must be a finite number of seconds >= 0, not {seconds}", _ffi.RILL_ERR_INVALID_ARGUMENT
        )
    unit = "milliseconds" if per_second == 1000 else f"1/{per_second} s"
    return _int(int(seconds * per_second), f"{what} in {unit}")


# Broker(fsync=...): the policy names and their RILL_FSYNC_* values.
_FSYNC = {
    "never": _ffi.RILL_FSYNC_NEVER,
    "interval": _ffi.RILL_FSYNC_INTERVAL,
    "always": _ffi.RILL_FSYNC_ALWAYS,
}

# Broker(sharing=...): who else may open the data directory, and the
# RILL_SHARING_* values.
_SHARING = {
    "exclusive": _ffi.RILL_SHARING_EXCLUSIVE,
    "processes": _ffi.RILL_SHARING_PROCESSES,
}

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _time_ns(when: object, what: str) -> int:
    """A datetime (naive: local time) or an int of nanoseconds since the epoch,
    as nanoseconds for C's int64_t (a time before 1970 is before every message)."""
    if isinstance(when, datetime.datetime):
        aware = when if when.tzinfo is not None else when.astimezone()
        ns = (aware - _EPOCH) // datetime.timedelta(microseconds=1) * 1000
        return max(-(2**63), min(ns, 2**63 - 1))
    if isinstance(when, int) and not isinstance(when, bool):
        return _int(when, what, -(2**63), 2**63 - 1)
    raise InvalidArgument(f"{what} must be a datetime or nanoseconds since the epoch, not {when!r}")


def _start(start: object) -> tuple[int, int]:
    """``start=`` as (RILL_START_*, start_offset)."""
    if isinstance(start, datetime.datetime):
        return _ffi.RILL_START_TIME, max(0, _time_ns(start, "start"))
    if isinstance(start, int) and not isinstance(start, bool):
        return _ffi.RILL_START_OFFSET, _int(start, "start offset")
    if isinstance(start, str) and start in _STARTS:
        return _STARTS[start], 0
    raise InvalidArgument(f"start must be 'latest', 'earliest', an offset or a datetime, not {start!r}")


def _timeout_ms(timeout: float | None, what: str = "timeout") -> int:
    """A timeout in seconds as the C ``int64_t`` milliseconds: None and
    infinity are -1 (no limit), as is any limit too long for an int64_t.
    ``what`` is the parameter's name, for errors."""
    if timeout is None:
        return -1
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"{what} must be a number of seconds or None, not {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"{what} must be >= 0 or None, not {timeout}")
    if math.isinf(timeout) or timeout * 1000 > I64_MAX:
        return -1
    return int(timeout * 1000)


# ---- waiting in slices -----------------------------------------------------------
#
# CPython runs signal handlers (Ctrl-C's KeyboardInterrupt) between bytecodes
# of the main thread, never while it sits in a C call, and rill's waits retry
# on EINTR. So a blocking call waits in slices of at most SLICE seconds and
# returns to Python between them: Ctrl-C interrupts it within a slice, and a
# consumer closed from another thread ends its poll within a slice.

SLICE = 0.05


class _Deadline:
    """The time left of a timeout, handed out one slice at a time."""

    __slots__ = ("end",)

    def __init__(self, timeout: float | None) -> None:
        ms = _timeout_ms(timeout)
        self.end = None if ms < 0 else time.monotonic() + ms / 1000

    def next_ms(self) -> int:
        """Milliseconds to wait next (0 once the time is up)."""
        if self.end is None:
            return int(SLICE * 1000)
        left = self.end - time.monotonic()
        return max(0, min(int(SLICE * 1000), math.ceil(left * 1000)))

    def passed(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end


def _partition(partition: int) -> int:
    return _int(partition, "partition", 0, U32_MAX)


# ---- handles -----------------------------------------------------------------


class _Handle:
    """A C handle with idempotent close, context-manager support and __del__."""

    _ptr: int | None = None
    # A handle whose close() closed it without freeing it (see Broker.close):
    # freed by __del__, once no call can be running through it.
    _closed_ptr: int | None = None
    # Set in a child of fork() on every handle it inherited (see _forget_inherited).
    _inherited = False

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self:
        handle = super().__new__(cls)
        _live_handles.add(handle)
        return handle

    def _free(self, ptr: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Releases the handle. Idempotent."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            self._free(ptr)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` released this handle. A subscription
        the library closed (its broker closed, its topic deleted, a
        ``disconnect`` limit) keeps its handle until then: see
        ``closed_reason`` and ``stats().state``."""
        return self._ptr is None

    def _handle(self) -> int:
        if self._ptr is None:
            if self._inherited:
                raise Closed(
                    f"this {type(self).__name__} was inherited across fork(): only the process that "
                    "made it can use it; make a new one in this process"
                )
            raise Closed(f"this {type(self).__name__} is closed")
        return self._ptr

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
            ptr, self._closed_ptr = self._closed_ptr, None
            if ptr:
                self._free(ptr)
        except Exception:  # noqa: BLE001 - never raise from __del__ (e.g. at interpreter exit)
            pass


class Subscription(_Handle):
    """A live push subscription; closing it (or leaving its ``with`` block)
    unsubscribes. Returned by :meth:`Broker.subscribe`."""

    def __init__(self, ptr: int, loop: asyncio.AbstractEventLoop | None = None, stop: _Stop | None = None) -> None:
        self._ptr = ptr
        # For a coroutine handler: the loop it runs on, and the flag that
        # tells a handler waiting for that loop to give up.
        self._loop = loop
        self._stop = stop
        self._pattern = ""

    def close(self) -> None:
        """Unsubscribes; returns once no handler call is in flight (at once
        from inside a handler). Idempotent. A call another thread is making
        on it meanwhile (``wait_idle``) raises :class:`Closed`; the C handle
        is freed when this object goes away, when no call can still be
        running through it."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            if self._stop is not None:
                self._stop.set()  # a handler waiting for a blocked loop lets go
            lib.rill_subscription_close(ptr)
            self._closed_ptr = ptr

    def _free(self, ptr: int) -> None:
        if self._stop is not None:
            self._stop.set()  # a handler waiting for a blocked loop lets go
        lib.rill_subscription_free(ptr)

    @property
    def name(self) -> str:
        """The subscription's name (generated for anonymous ones)."""
        return _ffi.read_str(lib.rill_subscription_name, self._handle())

    @property
    def closed_reason(self) -> str:
        """Why the library closed it (the broker closed, its topic was
        deleted, or it lagged past a ``disconnect`` limit); empty if it did
        not."""
        return _ffi.read_str(lib.rill_subscription_closed_reason, self._handle())

    def wait_idle(self, timeout: float | None = 5.0) -> bool:
        """Waits until everything published so far is handled and no handler
        call is in flight. True when idle, False on timeout. Raises
        :class:`Closed` if the subscription was closed by the library.
        ``None`` or ``math.inf`` waits without limit; Ctrl-C interrupts it.

        With a coroutine handler, do not call it on the handler's event loop
        (it would wait for the loop it blocks; RuntimeError): await
        :func:`rill.aio.wait_idle` there instead."""
        if self._loop is not None and _running_loop() is self._loop:
            raise RuntimeError(
                "wait_idle on the coroutine handler's own event loop would block it: use rill.aio.wait_idle"
            )
        deadline = _Deadline(timeout)
        while True:
            status = lib.rill_subscription_wait_idle(self._handle(), deadline.next_ms())
            if status != _ffi.RILL_ERR_TIMEOUT:
                check(status)
                return True
            if deadline.passed():
                return False

    def notify_fd(self) -> int:
        """A file descriptor that becomes readable when the subscription may
        have become idle, for an event loop that must not block in
        :meth:`wait_idle` (:func:`rill.aio.wait_idle` uses it). The
        subscription owns it: do not read, write or close it (``os.dup`` it
        to keep one of your own). The library closes it with the C handle,
        when this object goes away: after :meth:`close` it stays open, so
        its number is not reused for another file while this object lives.

        Use: ``wait_idle(0)``; while it returns False, wait until the fd is
        readable and call it again. Each call empties the fd first, and one
        that returns False arms it: it becomes readable at the first change
        that may have made the subscription idle (its delivery going idle or
        into a backoff, its close). A wake may find it still busy (wait
        again); none is lost. One waiter at a time."""
        fd = ctypes.c_int(-1)
        check(lib.rill_subscription_notify_fd(self._handle(), byref(fd)))
        return fd.value

    def _idle_now(self) -> bool:
        """``wait_idle(0)`` without the coroutine-loop guard (a zero timeout
        never waits for the loop): True if idle; raises :class:`Closed`."""
        status = lib.rill_subscription_wait_idle(self._handle(), 0)
        if status == _ffi.RILL_ERR_TIMEOUT:
            return False
        check(status)
        return True

    def stats(self) -> SubscriptionStats:
        """Counters and lag; works after the library closed it, too."""
        s = _ffi.rill_subscription_stats()
        check(lib.rill_subscription_get_stats_v1(self._handle(), byref(s), sizeof(s)))
        last_error = _ffi.read_str(lib.rill_subscription_last_error, self._handle())
        return _subscription_stats(s, self.name, self._pattern, last_error or None)

    def partition_lags(self) -> list[PartitionLag]:
        """Position and lag of every partition it reads (of every topic its
        pattern matched)."""
        return _collect_lags(lib.rill_subscription_partitions, self._handle())


class _Prefetch(Protocol):
    """Messages polled from a :class:`Consumer` ahead of their use (by
    :class:`rill.aio.Consumer`'s iteration), which the consumer's position
    in the library has passed."""

    def give_back(self) -> None:
        """Moves each partition holding such messages back to the first of
        them and forgets them: the next poll returns them again."""

    def first_held(self, partition: int) -> int | None:
        """The offset of the first such message of ``partition``, if any."""


class Consumer(_Handle):
    """A pull consumer of one topic for one group; use it from one thread at
    a time. Returned by :meth:`Broker.consumer`."""

    def __init__(self, ptr: int, topic: str, session_timeout: float = 10.0) -> None:
        self._ptr = ptr
        self._topic = topic
        # How long it may go without a poll before its group expels it.
        self.session_timeout = session_timeout
        self._topics: dict[int, str] = {}
        self._lock = threading.Lock()
        self._closing = False
        # Set when a poll goes into the library to wait for traffic (for tests).
        self._waiting = threading.Event()
        # The rill.aio.Consumer iterating this one, which holds messages it
        # polled ahead and has not yielded yet: the calls that commit or
        # move positions give them back to the library first (see
        # ``_Prefetch``), so they commit only what was yielded.
        self._prefetch: _Prefetch | None = None

    def _give_back(self) -> None:
        if self._prefetch is not None:
            self._prefetch.give_back()

    def _free(self, ptr: int) -> None:
        lib.rill_consumer_free(ptr)

    def close(self) -> None:
        """Closes the consumer and frees its group for another consumer.
        From another thread, a poll in progress raises :class:`Closed`
        within one wait slice (SLICE seconds)."""
        self._closing = True
        with self._lock:
            super().close()

    @property
    def partitions(self) -> int:
        return int(lib.rill_consumer_partition_count(self._handle()))

    def notify_fd(self) -> int:
        """A file descriptor that becomes readable when :meth:`poll` has
        something to return, for an event loop that must not block in
        ``poll`` (``selectors``, ``loop.add_reader``; :class:`rill.aio.Consumer`
        uses it). The consumer owns it: do not read, write or close it
        (``os.dup`` it to keep one of your own); :meth:`close` closes it.

        Use: ``poll(timeout=0)`` until it returns ``[]``, then wait until the
        fd is readable, and repeat. Each poll empties the fd first, and a
        poll that returns nothing arms it: it becomes readable at the first
        publish to a partition this member owns, rebalance, close of the
        broker or deletion of the topic. A poll that returns messages
        disarms it, so poll again before waiting. A wake may find nothing
        (wait again); none is lost. Waiting on it is not polling: poll within
        ``session_timeout`` to stay in the group."""
        fd = ctypes.c_int(-1)
        self._call(lib.rill_consumer_notify_fd, byref(fd))
        return fd.value

    def poll(self, max_messages: int = 100, timeout: float | None = 1.0) -> list[Message]:
        """Up to ``max_messages`` messages, waiting up to ``timeout`` seconds
        (``None`` or ``math.inf``: no limit) for the first. Payloads are
        copied. Ctrl-C interrupts the wait; :meth:`close` from another thread
        ends it with :class:`Closed`."""
        max_messages = _int(max_messages, "max_messages", 0, SIZE_MAX)
        deadline = _Deadline(timeout)
        msgs, count = c_void_p(), c_size_t()
        with self._lock:
            while True:
                if self._closing:
                    raise Closed(f"this {type(self).__name__} is closed")
                wait_ms = deadline.next_ms()
                if wait_ms and max_messages:
                    self._waiting.set()
                check(lib.rill_consumer_poll(self._handle(), max_messages, wait_ms, byref(msgs), byref(count)))
                n = count.value
                if n:
                    return _decode_all(msgs.value or 0, n, self._topics)
                if max_messages == 0 or deadline.passed():
                    return []

    def __iter__(self) -> Iterator[Message]:
        """Yields messages as they arrive, blocking, until the consumer (or
        its broker) is closed."""
        while not self._closing:
            try:
                batch = self.poll(256, 0.1)
            except Closed:
                return
            yield from batch

    def stats(self) -> ConsumerStats:
        """Messages polled, messages retention trimmed first, and the group's lag."""
        s = _ffi.rill_consumer_stats()
        self._call(lib.rill_consumer_get_stats, byref(s))
        return ConsumerStats(s.delivered, s.missed, s.lag, s.partitions)

    def _call(self, fn: Callable[..., int], *args: object) -> None:
        with self._lock:
            check(fn(self._handle(), *args))

    def commit(self) -> None:
        """Commits the position of every partition it owns for the group.
        :class:`Reassigned` if partitions it polled were given to another
        member since its last commit (their messages go to the new owner
        again); its other partitions are committed all the same. Under a
        :class:`rill.aio.Consumer`, the position is that of the last message
        its iteration yielded: what it polled ahead is not committed."""
        self._give_back()
        self._call(lib.rill_consumer_commit)

    def commit_offset(self, offset: int, partition: int = 0) -> None:
        """Commits ``offset`` for one partition (:class:`Reassigned` if it
        belongs to another member now)."""
        self._call(lib.rill_consumer_commit_offset, _partition(partition), _int(offset, "offset"))

    def nack(self, partition: int, offset: int) -> bool:
        """Handling the message at ``offset`` of ``partition`` (one this member
        polled) failed. The group counts the attempt: below ``max_attempts``
        the message comes again in the next poll (with those after it, in
        order) and this returns False; at ``max_attempts`` it is published to
        the dead-letter topic with ``rill.dlq.*`` attributes and skipped (the
        next poll returns those after it again, in order), and this returns
        True. :class:`Reassigned` for a partition of another
        member, :class:`OutOfRange` for an offset not polled."""
        dead = ctypes.c_bool()
        self._give_back()
        self._call(lib.rill_consumer_nack, _partition(partition), _int(offset, "offset"), byref(dead))
        return dead.value

    def seek(self, offset: int, partition: int = 0) -> None:
        """Moves one partition to a retained offset (:class:`OutOfRange` otherwise)."""
        self._give_back()
        self._call(lib.rill_consumer_seek, _partition(partition), _int(offset, "offset"))

    def seek_to_time(self, when: datetime.datetime | int, partition: int = 0) -> None:
        """Moves one partition to the first message published at or after
        ``when``: a ``datetime`` (a naive one is local time) or nanoseconds
        since the Unix epoch. A time before every message moves to the oldest,
        a time after all of them to the end. Messages published at once from
        several threads may be stamped slightly out of order; the seek then
        lands where the stamps cross the time (see the C documentation of
        ``rill_consumer_seek_time``)."""
        self._give_back()
        self._call(lib.rill_consumer_seek_time, _partition(partition), _time_ns(when, "when"))

    def seek_to_beginning(self) -> None:
        self._give_back()
        self._call(lib.rill_consumer_seek_to_beginning)

    def seek_to_end(self) -> None:
        self._give_back()
        self._call(lib.rill_consumer_seek_to_end)

    def rollback(self) -> None:
        """Moves back to the committed offsets, to replay what was not committed."""
        self._give_back()
        self._call(lib.rill_consumer_rollback)

    def position(self, partition: int = 0) -> int:
        """The next offset ``poll`` returns from ``partition`` (under a
        :class:`rill.aio.Consumer`, the next its iteration yields)."""
        if self._prefetch is not None:
            held = self._prefetch.first_held(partition)
            if held is not None:
                return held
        out = c_uint64()
        self._call(lib.rill_consumer_position, _partition(partition), byref(out))
        return out.value

    def assignment(self) -> list[int]:
        """The partitions this member of its group owns now, ascending. The
        group divides the topic's partitions among its live members."""
        with self._lock:
            handle = self._handle()
            cap = int(lib.rill_consumer_partition_count(handle))
            out, count = (c_uint32 * max(cap, 1))(), c_size_t()
            check(lib.rill_consumer_assignment(handle, out, cap, byref(count)))
            return list(out[: min(count.value, cap)])

    def committed(self, partition: int = 0) -> int | None:
        """The group's committed offset for ``partition``, or None."""
        out = c_uint64()
        try:
            self._call(lib.rill_consumer_committed, _partition(partition), byref(out))
        except NotFound:
            with self._lock:
                if partition >= lib.rill_consumer_partition_count(self._handle()):
                    raise
            return None
        return out.value


_POSITIONS = struct.Struct("@IQ")
_FLAGS = struct.Struct("@I")
_SIZE_T_CODE = "Q" if ctypes.sizeof(c_size_t) == 8 else "I"
_publish_bytes = lib.rill_publisher_publish_bytes_outcome
_NO_SUCH_TOPIC = _ffi.STATUS["RILL_ERR_NO_SUCH_TOPIC"]

# How many fork()s this process is from the one that imported rill: a cached
# publisher made before a fork belongs to the parent (see _forget_inherited).
_fork_generation = 0


class _Publisher(int):
    """A broker's cached rill_publisher: the pointer itself, so ctypes passes
    it as it passes an int and the fast path pays nothing for the wrapper.

    It frees the C publisher when the last reference to it goes. The cache
    holds one, and every publish through it holds another, in a local
    variable, for as long as it is inside the C call; so a publisher dropped
    from the cache (its topic deleted) is freed once no thread can be using
    it, by the thread that lets go of it last. That is what releases a
    deleted topic's memory, which lives as long as its last publisher. The
    count is the interpreter's own reference count: the lookup in the cache
    hands the publishing thread its reference in the same step (with the
    GIL, and without it, where a dict takes the reference safely against a
    concurrent removal), so there is no moment in which a publish has the
    pointer but not the reference, and the publish pays nothing it did not
    already pay."""

    generation: int

    def __new__(cls, ptr: int) -> Self:
        p = super().__new__(cls, ptr)
        p.generation = _fork_generation
        return p

    def __del__(self) -> None:
        try:
            # One inherited across fork() is the parent's, leaked by design.
            if self.generation == _fork_generation:
                lib.rill_publisher_free(self)
        except Exception:  # noqa: BLE001 - never raise from __del__ (e.g. at interpreter exit)
            pass


class _Out(threading.local):
    """A per-thread rill_position for out-parameters, so the hot path neither
    allocates one nor builds a byref per call."""

    def __init__(self) -> None:
        self.pos = _ffi.rill_position()
        self.ref = byref(self.pos)
        self.flags = c_uint32()
        self.flags_ref = byref(self.flags)

    def get(self) -> Position:
        pos = self.pos
        if self.flags.value:
            return _position(pos.partition, pos.offset, self.flags.value)
        return tuple.__new__(Position, (pos.partition, pos.offset))


_out = _Out()


def _out_position() -> _Out:
    return _out


class Broker(_Handle):
    """An in-process broker. Closing it (or leaving its ``with`` block, or
    dropping it) closes its subscriptions and consumers: their calls then
    raise :class:`Closed`.

    A child of ``os.fork()`` can only drop the brokers (and subscriptions
    and consumers) it inherited: there they are closed, and closing them
    does nothing (the parent still owns them; see the README's "fork").

    ``worker_threads=None`` runs one handler thread per CPU core;
    ``publish_timeout`` bounds how long ``publish`` waits for ``block``
    subscribers (``None``: no limit).

    ``data_dir`` keeps topics, messages, group commits and durable
    subscription positions in that directory across restarts (``None``: in
    memory). ``fsync`` says when they reach stable storage: ``"always"``
    (before ``publish`` and ``commit`` return), ``"interval"`` (every
    ``fsync_interval`` seconds) or ``"never"`` (when the OS decides); a
    process crash loses nothing acknowledged under any of them. A directory
    open in another broker raises :class:`Busy`, one that cannot be used
    :class:`StorageError`, damage recovery will not drop :class:`CorruptData`
    (``repair=True`` truncates there instead).

    ``sharing="processes"`` lets any number of brokers, in this process and
    others (``multiprocessing`` workers, say), open the same ``data_dir`` at
    once: a message published by any of them reaches the subscriptions of
    all, and an idle one is woken without polling. It needs a ``data_dir``
    (else :class:`InvalidArgument`); a directory open one way refuses the
    other with :class:`Busy`. A named subscription's name is held by one
    process at a time (:class:`Busy` elsewhere until it closes or its
    process dies; the next holder resumes after its acks). Consumer groups
    and shared subscriptions split partitions across processes; what is not
    shared yet is in the README's "Several processes".
    The default, ``"exclusive"``: one broker at a time."""

    def __init__(
        self,
        auto_create_topics: bool = False,
        worker_threads: int | None = None,
        publish_timeout: float | None = 10.0,
        data_dir: str | os.PathLike[str] | None = None,
        fsync: str = "interval",
        fsync_interval: float = 0.1,
        repair: bool = False,
        sharing: Literal["exclusive", "processes"] = "exclusive",
    ) -> None:
        o = _ffi.rill_broker_options()
        lib.rill_broker_options_init_v1(byref(o), sizeof(o))
        o.auto_create_topics = bool(auto_create_topics)
        if worker_threads is not None:
            o.worker_threads = _int(worker_threads, "worker_threads", 1, U32_MAX)
        o.publish_timeout_ms = _timeout_ms(publish_timeout, "publish_timeout")
        if fsync not in _FSYNC:
            raise InvalidArgument(f"fsync must be one of {sorted(_FSYNC)}, not {fsync!r}")
        o.fsync = _FSYNC[fsync]
        interval_ms = _timeout_ms(fsync_interval, "fsync_interval")
        if not 1 <= interval_ms <= U32_MAX:
            raise InvalidArgument(f"fsync_interval must be at least 0.001 seconds, not {fsync_interval!r}")
        o.fsync_interval_ms = interval_ms
        o.repair = bool(repair)
        if sharing not in _SHARING:
            raise InvalidArgument(f"sharing must be one of {sorted(_SHARING)}, not {sharing!r}")
        o.sharing = _SHARING[sharing]
        # Kept referenced until rill_broker_new has copied it.
        path = None if data_dir is None else os.fsencode(data_dir)
        if path is not None and b"\0" in path:
            raise InvalidArgument("data_dir contains a NUL byte")
        o.data_dir = path
        ptr = c_void_p()
        check(lib.rill_broker_new_v1(byref(o), byref(ptr)))
        self._ptr = ptr.value
        self._publishers: dict[str, _Publisher] = {}
        # The validators this handle set, by topic, kept alive while C
        # holds them.
        self._publishers_lock = threading.Lock()
        self._stops: weakref.WeakSet[_Stop] = weakref.WeakSet()
        _live_brokers.add(self)

    def close(self) -> None:
        """Closes the broker: its subscriptions and consumers (their calls
        then raise :class:`Closed`), its threads, and its data directory,
        which another broker can open at once. Idempotent.

        Other threads may be inside calls on it meanwhile (a publish waiting
        for a ``block`` subscriber, :class:`rill.aio.Publisher`'s thread):
        those calls, and any later ones, raise :class:`Closed`. So the
        memory behind the C handles is freed only when this object goes
        away, when no call can still be running through it."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            _stop_coroutine_handlers(self)
            lib.rill_broker_close(ptr)
            self._closed_ptr = ptr

    def _free(self, ptr: int) -> None:
        _stop_coroutine_handlers(self)
        with self._publishers_lock:
            publishers, self._publishers = self._publishers, {}
        # No call can be running through this broker now, so this frees the
        # cached publishers (_Publisher.__del__) before the broker. One still
        # referenced elsewhere (an exception's traceback) is freed later,
        # which rill.h allows.
        publishers.clear()
        lib.rill_broker_free(ptr)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        retention_bytes: int | None = None,
        retention_messages: int | None = None,
        max_message_bytes: int | None = None,
        retention: float | None = None,
        dedupe_window_ms: int | None = None,
        cleanup: Cleanup = "delete",
        delete_retention_ms: int | None = None,
        min_compaction_lag_ms: int | None = None,
        priority: int | None = None,
        segment_bytes: int | None = None,
    ) -> None:
        """Creates a topic. ``retention_bytes=None`` keeps the default (256 MiB
        per partition); 0 keeps everything. ``retention`` is an age limit in
        seconds: whole log segments are dropped once their newest message is
        older, also while nobody publishes (``None`` or 0: no age limit).
        ``dedupe_window_ms`` is how long the topic remembers the ids of
        messages published with ``msg_id=``: a second message with the same
        id within it is not appended (``None``: the default, 120000; 0 turns
        the check off).

        ``cleanup="compact"`` makes a compacted topic, which keeps the newest
        message of every key: publishing without a key raises
        :class:`InvalidArgument`; a keyed message with an empty payload is a
        tombstone that deletes its key and is removed itself once older than
        ``delete_retention_ms`` (default 24 h; a reader that gets to its
        offset only after that may see the key's older value and miss the
        delete). A background thread compacts
        sealed segments (never the one being written, nor messages younger
        than ``min_compaction_lag_ms``, default 0); offsets never change, so
        a reader from the beginning sees the newest message of each key in
        offset order, with gaps. Under ``"compact"`` the size and age limits
        are not applied, so memory grows with the number of distinct keys;
        ``"compact_delete"`` applies them too. On a broker with a
        ``data_dir`` compaction rewrites segment files so that a crash at any
        moment loses no message it keeps; with ``sharing="processes"`` one
        process at a time compacts a partition and the others map the
        rebuilt files.

        ``priority`` (0 to 7) is the default priority of subscriptions to this
        one topic that set none (``None``: theirs is 4); a durable topic keeps
        it.

        ``segment_bytes`` is the size of a partition's log segments (``None``:
        4 MiB, or a quarter of ``retention_bytes`` if that is smaller; at
        least 4096, at most half of ``retention_bytes``). On a broker with a
        ``data_dir`` each segment file is allocated whole, so a topic that
        stays small costs less disk (memory, on tmpfs) with smaller segments."""
        o = _ffi.rill_topic_options()
        lib.rill_topic_options_init_v1(byref(o), sizeof(o))
        o.partitions = _int(partitions, "partitions", 0, U32_MAX)
        if retention_bytes is not None:
            o.retention_bytes = _int(retention_bytes, "retention_bytes")
        if retention_messages is not None:
            o.retention_messages = _int(retention_messages, "retention_messages")
        if max_message_bytes is not None:
            o.max_message_bytes = _int(max_message_bytes, "max_message_bytes")
        if retention is not None:
            o.retention_ms = _seconds_ms(retention, "retention")
        if dedupe_window_ms is not None:
            o.dedupe_window_ms = _int(dedupe_window_ms, "dedupe_window_ms")
        if cleanup not in _CLEANUP:
            raise InvalidArgument(f"cleanup must be one of {sorted(_CLEANUP)}, not {cleanup!r}")
        o.cleanup = _CLEANUP[cleanup]
        if delete_retention_ms is not None:
            o.delete_retention_ms = _int(delete_retention_ms, "delete_retention_ms")
        if min_compaction_lag_ms is not None:
            o.min_compaction_lag_ms = _int(min_compaction_lag_ms, "min_compaction_lag_ms")
        o.priority = _priority(priority, "priority")
        if segment_bytes is not None:
            o.segment_bytes = _int(segment_bytes, "segment_bytes")
        check(lib.rill_topic_create_v1(self._handle(), _name(name, "topic name"), byref(o)))

    def delete_topic(self, name: str) -> None:
        """Deletes a topic (:class:`NoSuchTopic` if there is none).
        Subscriptions naming exactly this topic are closed (their
        ``closed_reason`` is "topic deleted"); wildcard subscriptions stop
        reading it; publishing to it and consumers of it raise
        :class:`NoSuchTopic`; groups' and durable subscriptions' positions in
        it are forgotten. Created again, it starts at offset 0."""
        check(lib.rill_topic_delete(self._handle(), _name(name, "topic name")))
        # The cached publisher of the deleted topic now only raises; a topic
        # created again under the name gets a new one. It keeps the deleted
        # topic's memory alive, so it is dropped here; another thread may be
        # publishing through it right now, so it is freed when that publish
        # lets go of it (see _Publisher), not necessarily here.
        with self._publishers_lock:
            publisher = self._publishers.pop(name, None)
        del publisher

    def delete_durable(self, name: str) -> None:
        """Forgets a durable subscription's saved position: :class:`Busy`
        while a subscription of that name is live, :class:`NotFound` if none
        saved a position."""
        check(lib.rill_durable_delete(self._handle(), _name(name, "subscription name")))

    def delete_group(self, group: str, topic: str) -> None:
        """Forgets a consumer group's committed offsets on ``topic``:
        :class:`Busy` while it has a live consumer there, :class:`NotFound`
        if it has none."""
        check(lib.rill_group_delete(self._handle(), _name(group, "group"), _name(topic, "topic")))

    def topics(self) -> list[str]:
        """Every topic's name, sorted (the broker's own ``$`` topics included)."""
        out: list[str] = []
        check(
            lib.rill_topic_list(self._handle(), _ffi.TOPIC_CALLBACK(lambda _u, name: out.append(name.decode())), None)
        )
        return out

    def subscriptions(self) -> list[SubscriptionStats]:
        """The stats of every live subscription, sorted by name."""
        out: list[SubscriptionStats] = []

        def each(_user: int | None, p: Any) -> None:
            s = p.contents
            out.append(_subscription_stats(s, s.name.decode(), s.pattern.decode(), _text_or_none(s.last_error)))

        check(lib.rill_subscription_list(self._handle(), _ffi.SUBSCRIPTION_CALLBACK(each), None))
        return out

    def groups(self) -> list[tuple[str, str]]:
        """Every ``(group, topic)`` the broker keeps committed offsets for
        (live consumer or not), sorted."""
        out: list[tuple[str, str]] = []

        def each(_user: int | None, group: bytes, topic: bytes) -> None:
            out.append((group.decode(), topic.decode()))

        check(lib.rill_group_list(self._handle(), _ffi.GROUP_CALLBACK(each), None))
        return out

    def named_subscriptions(self) -> list[NamedSubscription]:
        """Every durable (named) subscription and the pid of the process
        holding it, sorted by name.

        With ``sharing="processes"``, the whole data directory: every name
        any process has taken, held now or not (``holder_pid`` None: its
        holder closed it or died). It is read without taking any lock, so
        asking never makes a subscriber of the name fail (Linux only:
        elsewhere no name reads as held). Otherwise this broker's live ones."""
        out: list[NamedSubscription] = []

        def each(_user: int | None, p: Any) -> None:
            n = p.contents
            out.append(NamedSubscription(n.name.decode(), n.holder_pid if n.held else None))

        check(lib.rill_named_subscription_list(self._handle(), _ffi.NAMED_SUBSCRIPTION_CALLBACK(each), None))
        return out

    def directory_subscriptions(self) -> list[DirectorySubscription]:
        """Every live push subscription of the data directory, in every
        process, each with its process's pid, sorted by (pid, name).

        With ``sharing="processes"``, every process's: this broker's as
        :meth:`subscriptions` gives them, the others' from what their
        brokers published (see :class:`DirectorySubscription`); a process
        that died is left out at once, and nothing another process waits on
        is locked to read them (Linux only for other processes: elsewhere,
        this broker's). Otherwise this broker's, as :meth:`subscriptions`
        (which stays per broker in either mode)."""
        out: list[DirectorySubscription] = []

        def each(_user: int | None, p: Any) -> None:
            d = p.contents
            s = d.stats.contents
            stats = _subscription_stats(s, s.name.decode(), s.pattern.decode(), _text_or_none(s.last_error))
            out.append(DirectorySubscription(d.pid, d.this_broker, d.durable, d.shared, stats))

        check(lib.rill_directory_subscription_list(self._handle(), _ffi.DIRECTORY_SUBSCRIPTION_CALLBACK(each), None))
        return out

    def directory_consumers(self) -> list[DirectoryConsumer]:
        """Every live pull consumer of the data directory (a member of a
        consumer group), in every process, each with its process's pid, its
        group, topic and counters, sorted by (pid, id).

        With ``sharing="processes"``, every process's: this broker's with
        the counters their last poll left, the others' as their brokers
        published them at the end of each poll; a process that died is
        left out at once, and nothing another process waits on is locked
        to read them (Linux only for other processes: elsewhere, this
        broker's). Otherwise this broker's."""
        out: list[DirectoryConsumer] = []

        def each(_user: int | None, p: Any) -> None:
            c = p.contents
            group, topic = c.group.decode(), c.topic.decode()
            out.append(DirectoryConsumer(c.pid, c.this_broker, c.id, group, topic, c.delivered, c.missed, c.lag))

        check(lib.rill_directory_consumer_list(self._handle(), _ffi.DIRECTORY_CONSUMER_CALLBACK(each), None))
        return out

    def group_members(self, group: str, topic: str) -> list[GroupMember]:
        """The live members of consumer group ``group`` on ``topic``, each
        with its process's pid and the partitions it owns, sorted by (pid,
        id); empty if none is live. Raises :class:`NoSuchTopic` if there is
        no such topic.

        With ``sharing="processes"``, the members of every process, read
        without taking any lock (Linux only: elsewhere no member reads as
        live); a member whose process died is gone at once. Otherwise this
        broker's consumers of the group."""
        out: list[GroupMember] = []

        def each(_user: int | None, p: Any) -> None:
            m = p.contents
            out.append(GroupMember(m.pid, m.id, m.partitions[: m.partition_count] if m.partition_count else []))

        check(
            lib.rill_group_member_list(
                self._handle(),
                _name(group, "group"),
                _name(topic, "topic"),
                _ffi.GROUP_MEMBER_CALLBACK(each),
                None,
            )
        )
        return out

    def group_stats(self, group: str, topic: str) -> GroupStats:
        """A consumer group's committed position and lag on ``topic``, per
        partition. Raises :class:`NotFound` if the group never consumed it."""
        lags = _collect_lags(lib.rill_group_partitions, self._handle(), _name(group, "group"), _name(topic, "topic"))
        return GroupStats(group, topic, sum(p.lag for p in lags), lags)

    def topic_stats(self, name: str) -> TopicStats:
        """A topic's size and progress, and what recovery dropped from its
        partitions when the broker opened its data directory."""
        s = _ffi.rill_topic_stats()
        check(lib.rill_topic_get_stats_v1(self._handle(), _name(name, "topic name"), byref(s), sizeof(s)))
        return TopicStats(
            s.partitions,
            s.publish_count,
            s.retained_bytes,
            s.recovered_truncated_records,
            s.recovered_truncated_bytes,
            s.recovered_repaired_partitions,
            s.recovered_offsets_reset,
            s.dedupe_duplicates,
            s.dedupe_ids,
            s.dedupe_evicted,
            s.dedupe_waits,
            s.compacted_messages,
            s.compacted_bytes,
            s.compaction_passes,
            s.compaction_keys,
        )

    def _publisher(self, topic: str) -> int:
        p = self._publishers.get(topic)
        if p is None:
            with self._publishers_lock:
                p = self._publishers.get(topic)
                if p is None:
                    out = c_void_p()
                    check(lib.rill_publisher_new(self._handle(), _name(topic, "topic"), byref(out)))
                    p = self._publishers[topic] = _Publisher(out.value or 0)
        return p

    def _renew_publisher(self, topic: str, stale: int) -> int:
        """The publisher to retry with once ``stale``, the cached publisher of
        ``topic``, failed with NoSuchTopic: a new one, looked up by name.

        A cached publisher is bound to the topic it was made for, and this
        broker's own delete_topic is not the only way that topic goes: a
        broker of another process deletes it too, and maybe creates another
        under the name. The cached one then raises NoSuchTopic for ever, so
        it is dropped (unless another thread replaced it already) and the
        name looked up again, as a publish by name does: NoSuchTopic again
        only if no topic has the name now. A publisher reports NoSuchTopic
        only for a publish it did not append, so the retry publishes nothing
        twice; it is tried once, so a topic deleted again meanwhile raises
        rather than loops."""
        with self._publishers_lock:
            if self._publishers.get(topic) is stale:
                del self._publishers[topic]
        return self._publisher(topic)

    def set_schema(
        self,
        topic: str,
        json_schema: str | Mapping[str, Any] | bool | None = None,
        validator: Callable[[bytes], Any] | None = None,
        on_invalid: Literal["reject", "dead_letter"] = "reject",
    ) -> int:
        """Sets (or replaces) ``topic``'s schema; returns its version (1 for
        the topic's first, then one more per change). Give one of:

        - ``json_schema``: a JSON Schema (draft 2020-12), as text or as a
          dict; payloads must be JSON it accepts. Stored with a durable
          topic, so it survives a restart. One that does not compile raises
          :class:`InvalidArgument` with the compiler's message.
        - ``validator``: a callable taking the payload (``bytes``) and
          returning ``None``/``True`` if it is valid, ``False`` or a reason
          (``str``) if not; an exception it raises makes the payload invalid
          with the exception's text. It may be called on any publishing
          thread. It lives with this broker only, not on disk.

        ``on_invalid="reject"`` makes publishing an invalid payload raise
        :class:`SchemaError` (nothing published); ``"dead_letter"`` sends it
        to ``$dlq/<topic>`` with the reason in ``rill.dlq.reason``, and the
        position returned is there, with ``dead_lettered`` set."""
        if (json_schema is None) == (validator is None):
            raise InvalidArgument("give one of json_schema= and validator=")
        mode = {"reject": _ffi.RILL_ON_INVALID_REJECT, "dead_letter": _ffi.RILL_ON_INVALID_DEAD_LETTER}.get(on_invalid)
        if mode is None:
            raise InvalidArgument(f"on_invalid is {on_invalid!r}: use 'reject' or 'dead_letter'")
        name = _name(topic, "topic")
        with self._publishers_lock:
            if validator is not None:
                if not callable(validator):
                    raise InvalidArgument("validator must be callable")
                key = next(_ids)
                _validators[key] = validator
                # The library calls _VALIDATOR_FREE with `key` once it lets
                # go of the validator, and if this call fails.
                check(
                    lib.rill_topic_set_validator_with_free(
                        self._handle(), name, _VALIDATOR_FN, key, _VALIDATOR_FREE, mode
                    )
                )
            else:
                doc = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
                check(lib.rill_topic_set_schema_json(self._handle(), name, _name(doc, "json_schema"), mode))
        return self.schema_version(topic)

    def remove_schema(self, topic: str) -> None:
        """Removes ``topic``'s schema (from the disk too, for a durable
        topic): later publishes are not checked."""
        with self._publishers_lock:
            check(lib.rill_topic_remove_schema(self._handle(), _name(topic, "topic")))

    def schema_version(self, topic: str) -> int:
        """The version of ``topic``'s schema in force; 0 if it has none.
        On a directory shared by processes, the directory's: a validator set
        in another process reads its version here, though only that process
        runs it (see ``rill_topic_schema_version``)."""
        v = c_uint64()
        check(lib.rill_topic_schema_version(self._handle(), _name(topic, "topic"), byref(v)))
        return v.value

    def _record(
        self,
        payload: Payload,
        key: Payload | None,
        attributes: Mapping[str, str] | None,
        msg_id: str | None = None,
    ) -> tuple[_ffi.rill_record, object]:
        data = _text(payload, "payload")
        k = None if key is None else _text(key, "key")
        attrs = [(_name(a, "attribute key"), _name(v, "attribute value")) for a, v in (attributes or {}).items()]
        if msg_id is not None:
            attrs.insert(0, (_ffi.RILL_ATTR_ID.encode(), _name(msg_id, "msg_id")))
        arr = (_ffi.rill_attribute * len(attrs))(*[_ffi.rill_attribute(a, v) for a, v in attrs])
        rec = _ffi.rill_record(
            ctypes.cast(ctypes.c_char_p(k), c_void_p) if k is not None else None,
            len(k) if k is not None else 0,
            ctypes.cast(ctypes.c_char_p(data), c_void_p),
            len(data),
            arr if attrs else None,
            len(attrs),
        )
        return rec, (data, k, attrs, arr)  # the second part keeps the buffers alive

    def publish(
        self,
        topic: str,
        payload: Payload,
        key: Payload | None = None,
        attributes: Mapping[str, str] | None = None,
        msg_id: str | None = None,
    ) -> Position:
        """Publishes one message; ``str`` payloads are UTF-8 encoded. Waits
        for ``block`` subscribers up to the broker's ``publish_timeout``.

        ``msg_id`` (1 to 128 bytes) is the message's id: if the topic
        published a message with this id within its ``dedupe_window_ms``,
        nothing is appended and the first message's position comes back with
        ``duplicate`` set; publishers racing with one id publish it once. A
        retried publish (after a timeout, a crash) with the same id is
        therefore safe.

        The attribute ``rill.schema`` is the broker's: it holds the version
        of the topic's schema a message was checked against
        (:attr:`Message.schema_version`), and one in ``attributes`` is
        dropped, so a message read back can be published again as it is."""
        if attributes or msg_id is not None:
            return self._publish_record(lib.rill_publish_outcome, topic, payload, key, attributes, msg_id)
        # The hot path: one call, no record struct, a per-thread out buffer.
        if type(payload) is not bytes:
            payload = _text(payload, "payload")
        if key is not None and type(key) is not bytes:
            key = _text(key, "key")
        publisher = self._publishers.get(topic) or self._publisher(topic)
        out = _out_position()
        # The _outcome call: a schema set since (by any broker of the data
        # directory) that dead-letters the message says so in the flags.
        status = _publish_bytes(
            publisher, payload, len(payload), key, 0 if key is None else len(key), out.ref, out.flags_ref
        )
        if status:
            if status == _NO_SUCH_TOPIC:
                publisher = self._renew_publisher(topic, publisher)
                status = _publish_bytes(
                    publisher, payload, len(payload), key, 0 if key is None else len(key), out.ref, out.flags_ref
                )
            check(status)
        return out.get()

    def try_publish(
        self,
        topic: str,
        payload: Payload,
        key: Payload | None = None,
        attributes: Mapping[str, str] | None = None,
        msg_id: str | None = None,
    ) -> Position:
        """Like :meth:`publish`, but raises :class:`Full` at once instead of
        waiting for a ``block`` subscriber."""
        return self._publish_record(lib.rill_try_publish_outcome, topic, payload, key, attributes, msg_id)

    def _publish_record(
        self,
        fn: Callable[..., int],
        topic: str,
        payload: Payload,
        key: Payload | None,
        attributes: Mapping[str, str] | None,
        msg_id: str | None = None,
    ) -> Position:
        """Publishes through a rill_record (needed for attributes and ids)
        with an _outcome call, which says whether it was a duplicate or
        dead-lettered."""
        rec, _keep = self._record(payload, key, attributes, msg_id)
        out = _out_position()
        flags = c_uint32()
        check(fn(self._handle(), _name(topic, "topic"), byref(rec), out.ref, byref(flags)))
        pos = out.pos
        return _position(pos.partition, pos.offset, flags.value)

    def publish_batch(
        self, topic: str, payloads: Sequence[Payload], msg_ids: Sequence[str | None] | None = None
    ) -> list[Position]:
        """Publishes many messages in one call (much cheaper per message);
        returns their positions in order. Nothing is published on error.

        ``msg_ids``, one per payload (``None`` for a message without one),
        are the messages' ids as :meth:`publish`'s ``msg_id``: a message
        whose id the topic published within its window (or earlier in the
        batch) is not appended, and its position has ``duplicate`` set."""
        n = len(payloads)
        if n == 0:
            if msg_ids:
                raise InvalidArgument(f"{len(msg_ids)} msg_ids given for 0 payloads")
            return []
        if msg_ids is not None:
            return self._publish_batch_with_ids(topic, payloads, msg_ids)
        try:
            # Succeeds only if every item is bytes-like; then len() is its size.
            data = b"".join(payloads)  # type: ignore[arg-type]
            items: Sequence[Payload] = payloads
        except TypeError:
            items = [_text(p, "payload") for p in payloads]
            data = b"".join(items)  # type: ignore[arg-type]
        lengths = array(_SIZE_T_CODE, map(len, items))
        out = ctypes.create_string_buffer(n * _POSITIONS.size)
        # A word of flags each: all zero, unless a schema (set since, by any
        # broker of the data directory) dead-lettered some.
        flags = (c_uint32 * n)()
        publisher = self._publishers.get(topic) or self._publisher(topic)
        status = lib.rill_publisher_publish_packed_outcome(publisher, data, lengths.buffer_info()[0], n, out, flags)
        if status:
            if status == _NO_SUCH_TOPIC:
                publisher = self._renew_publisher(topic, publisher)
                status = lib.rill_publisher_publish_packed_outcome(
                    publisher, data, lengths.buffer_info()[0], n, out, flags
                )
            check(status)
        raw = bytes(flags)
        if raw.count(0) != len(raw):
            words = (f for (f,) in _FLAGS.iter_unpack(raw))
            return [_position(p, o, f) for (p, o), f in zip(_POSITIONS.iter_unpack(out.raw), words)]
        new = tuple.__new__
        return [new(Position, t) for t in _POSITIONS.iter_unpack(out.raw)]

    def _publish_batch_with_ids(
        self, topic: str, payloads: Sequence[Payload], msg_ids: Sequence[str | None]
    ) -> list[Position]:
        """:meth:`publish_batch` with ids: rill_records, and a flags word each."""
        n = len(payloads)
        if len(msg_ids) != n:
            raise InvalidArgument(f"{len(msg_ids)} msg_ids given for {n} payloads: give one per payload (or None)")
        built = [self._record(p, None, None, i) for p, i in zip(payloads, msg_ids)]
        records = (_ffi.rill_record * n)(*[rec for rec, _ in built])
        out = ctypes.create_string_buffer(n * _POSITIONS.size)
        flags = (c_uint32 * n)()
        publisher = self._publishers.get(topic) or self._publisher(topic)
        status = lib.rill_publisher_publish_batch_outcome(publisher, records, n, out, flags)
        if status == _NO_SUCH_TOPIC:
            publisher = self._renew_publisher(topic, publisher)
            status = lib.rill_publisher_publish_batch_outcome(publisher, records, n, out, flags)
        check(status)
        return [_position(p, o, f) for (p, o), f in zip(_POSITIONS.iter_unpack(out.raw), flags)]

    def subscribe(
        self,
        pattern: str,
        handler: Handler | BatchHandler,
        filter: str | None = None,  # noqa: A002 - the contract's name
        name: str | None = None,
        start: Start | int | datetime.datetime = "latest",
        delivery: Delivery = "at_least_once",
        max_attempts: int = 5,
        backoff: tuple[float, ...] = (0.01, 10.0),
        dead_letter_topic: str | None = None,
        overflow: Overflow = "drop_oldest",
        lag_limit: int | None = None,
        dedicated_thread: bool = False,
        batch: bool = False,
        idle_spin: float | None = None,
        on_lagged: Callable[[str, int, int], Any] | None = None,
        on_dead_letter: Callable[[Message, str], Any] | None = None,
        shared: bool = False,
        ack_timeout: float | None = None,
        priority: int | None = None,
    ) -> Subscription:
        """Calls ``handler(message)`` for every message on topics matching
        ``pattern`` (``*`` one segment, ``**`` any number), one call at a time.

        The handler returns None or True for success, ``Ack.RETRY`` (or False)
        to be called again after a backoff, ``Ack.DEAD_LETTER`` to give up; an
        exception is a retry whose type and text become the reason recorded
        with the message (``rill.dlq.reason`` once dead-lettered); it is also
        logged to ``logging.getLogger("rill")``: one line at WARNING while
        the message will be retried (the traceback at DEBUG), the traceback at
        ERROR on its last attempt (then it is dead-lettered, or at most once
        dropped).
        ``start`` is "latest", "earliest", an offset, or a ``datetime`` (the
        first message published at or after it); ``backoff`` is
        (initial, max[, multiplier]) in seconds.

        ``idle_spin`` (seconds, with ``dedicated_thread``) is how long the
        thread polls for messages before parking; longer means lower latency.
        ``None`` (the default) spins briefly, yields, then parks; while the
        awake dedicated threads are at least as many as the cores it sleeps
        instead, in naps of about 50 µs, and parks after two empty ones (at
        once if its last park outlasted two naps).

        ``on_lagged(topic, partition, missed)`` is called (on the delivering
        thread) when retention trimmed ``missed`` messages before this
        subscription read them; ``stats().missed`` counts them either way.

        ``on_dead_letter(message, reason)`` is called (on the delivering
        thread) once per message dead-lettered: the alert that it failed for
        good.
        ``shared=True`` (with a ``name``, on one topic without wildcards)
        makes this a competing member: live shared subscriptions with the same
        name divide the topic's partitions, each delivered by one member in
        order, and a member closing hands its partitions to the others from
        where it was. A non-shared subscription with the name is ``Busy``.

        ``ack_timeout`` (seconds; None, the default: no deadline): a handler
        call that runs longer is a stall. A shared member then gives its
        partitions to the other live members, which deliver again from the
        last acked offset (the stuck message comes again, once, to another
        member); the late call's ack is discarded, and the member holds no
        partitions until a later join or leave gives it some back. With no
        other member to take over nothing moves, nor with
        ``sharing="processes"``, where members in every process split the
        partitions: there a stalled member keeps its partitions. Either way
        ``stats().ack_timeouts`` counts it and it is logged; ``close`` still
        waits for the call to return. The deadline covers one delivery of a
        batch (with ``batch=True``, your call; otherwise the messages the
        library hands over at once, which on the shared pool shrink to one
        while handlers are slow).

        ``priority`` (0 to 7, higher runs first; ``None``, the default: the
        topic's priority if ``pattern`` names one topic that has one, else
        4): when more subscriptions are ready than the shared worker pool
        has threads, higher ones are delivered first, with aging, so a ready
        subscription waits at most :data:`PRIORITY_AGING_TAKES` turns of
        other subscriptions more than it would with no priorities: priority
        reorders, it never starves. ``dedicated_thread`` subscriptions and
        consumers have threads of their own and ignore it. Out of range is
        :class:`InvalidArgument`. ``stats()`` shows the queue waits.

        With ``batch=True`` the handler receives a list of consecutive
        messages of one partition (up to 64; on the shared worker pool the
        first call gets one and later ones are sized to about 250 µs of your
        handler's time) and returns None/True (all
        handled) or a list of acks, one per message it handled, in order;
        messages past the end of that list are delivered again."""
        if not callable(handler):
            raise TypeError("handler must be callable")
        loop: asyncio.AbstractEventLoop | None = None
        stop: _Stop | None = None
        if inspect.iscoroutinefunction(handler):
            loop = _running_loop()
            if loop is None:
                raise RuntimeError("a coroutine handler is run on the caller's event loop: subscribe from inside it")
            stop = _Stop()
            self._stops.add(stop)
            handler = _on_loop(handler, loop, stop)
        o = _ffi.rill_subscription_options()
        lib.rill_subscription_options_init_v1(byref(o), sizeof(o))
        keep = []
        for field, value in (("name", name), ("filter", filter), ("dead_letter_topic", dead_letter_topic)):
            if value is not None:
                encoded = _name(value, field)
                keep.append(encoded)
                setattr(o, field, encoded)
        o.start, o.start_offset = _start(start)
        if delivery not in _DELIVERY:
            raise InvalidArgument(f"delivery must be one of {sorted(_DELIVERY)}, not {delivery!r}")
        o.delivery = _DELIVERY[delivery]
        if overflow not in _OVERFLOW:
            raise InvalidArgument(f"overflow must be one of {sorted(_OVERFLOW)}, not {overflow!r}")
        o.overflow = _OVERFLOW[overflow]
        o.max_attempts = _int(max_attempts, "max_attempts", 1, U32_MAX)
        if not 2 <= len(backoff) <= 3 or any(b < 0 for b in backoff):
            raise InvalidArgument(f"backoff must be (initial, max[, multiplier]) in seconds, not {backoff!r}")
        o.backoff_initial_ms = _seconds_ms(backoff[0], "backoff initial")
        o.backoff_max_ms = _seconds_ms(backoff[1], "backoff max")
        if len(backoff) == 3:
            o.backoff_multiplier = float(backoff[2])
        if lag_limit is not None:
            o.lag_limit = _int(lag_limit, "lag_limit", 1, U64_MAX)
        o.dedicated_thread = bool(dedicated_thread)
        o.shared = bool(shared)
        o.priority = _priority(priority, "priority")
        if ack_timeout is not None:
            ms = _seconds_ms(ack_timeout, "ack_timeout")
            if ms == 0 and ack_timeout > 0:
                ms = 1  # under a millisecond: the shortest deadline there is
            o.ack_timeout_ms = _int(ms, "ack_timeout in ms", 1, U32_MAX)
        if idle_spin is not None:
            o.idle_spin_us = _seconds_ms(idle_spin, "idle_spin", 1_000_000)
        if on_lagged is not None:
            if not callable(on_lagged):
                raise TypeError("on_lagged must be callable")
            o.on_lagged = _on_lagged
        if on_dead_letter is not None:
            if not callable(on_dead_letter):
                raise TypeError("on_dead_letter must be callable")
            o.on_dead_letter = _on_dead_letter
        o.user_data_free = _on_free
        handler_id = next(_ids)
        last_attempt = 1 if delivery == "at_most_once" else o.max_attempts
        _handlers[handler_id] = _Entry(handler, batch, on_lagged, on_dead_letter, last_attempt)
        out = c_void_p()
        # On failure the library calls _on_free, which drops the entry.
        check(
            lib.rill_subscribe_batch_v1(
                self._handle(), _name(pattern, "pattern"), byref(o), _on_batch, handler_id, byref(out)
            )
        )
        sub = Subscription(out.value or 0, loop, stop)
        sub._pattern = pattern
        return sub

    def consumer(
        self,
        group: str,
        topic: str,
        start: Start | int | datetime.datetime = "earliest",
        session_timeout: float = 10.0,
        max_attempts: int = 5,
        dead_letter_topic: str | None = None,
    ) -> Consumer:
        """A pull consumer of ``topic``, a new member of ``group``. The group
        divides the topic's partitions among its live members (see
        :meth:`Consumer.assignment`); each resumes from the group's committed
        offset, or starts at ``start``: "earliest", "latest", an offset, or a
        ``datetime`` (the first message published at or after it). A member
        that has not polled for ``session_timeout`` seconds is expelled and its
        partitions go to the others; its next call rejoins. A message
        :meth:`Consumer.nack`-ed ``max_attempts`` times goes to
        ``dead_letter_topic`` (default ``$dlq/<group>``) and is skipped."""
        o = _ffi.rill_consumer_options()
        lib.rill_consumer_options_init_v1(byref(o), sizeof(o))
        o.session_timeout_ms = _int(
            _seconds_ms(session_timeout, "session_timeout"), "session_timeout in ms", 1, U32_MAX
        )
        o.max_attempts = _int(max_attempts, "max_attempts", 1, U32_MAX)
        if dead_letter_topic is not None:
            o.dead_letter_topic = _name(dead_letter_topic, "dead_letter_topic")
        o.start, o.start_offset = _start(start)
        out = c_void_p()
        check(
            lib.rill_consumer_new_v1(self._handle(), _name(group, "group"), _name(topic, "topic"), byref(o), byref(out))
        )
        return Consumer(out.value or 0, topic, session_timeout)


# ---- coroutine handlers ---------------------------------------------------------
#
# A coroutine handler runs on the event loop that subscribed. The broker
# thread that delivers a message submits the coroutine to that loop
# (run_coroutine_threadsafe) and waits for its result, which is the ack:
# one message at a time per subscription, as for any handler.
#
# The broker thread must never wait for a loop that cannot run it, or the
# wait is a deadlock: the loop's thread may itself be blocked in a call that
# waits for this handler (closing the subscription or the broker waits for
# handler calls in flight), or the loop may have stopped or closed
# (asyncio.run returned). So it waits in slices, and between slices gives up
# (cancelling the coroutine, and raising, which makes the message a retry
# with the reason recorded) once the subscription or broker is closing or
# the loop is no longer running. Closing sets the stop flag *before* it
# calls into the library, so the handler it waits for lets go within a slice.


class _Stop:
    """Set when the handler must stop waiting for its loop (a threading.Event
    that can live in a WeakSet)."""

    __slots__ = ("__weakref__", "event")

    def __init__(self) -> None:
        self.event = threading.Event()

    def set(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _stop_coroutine_handlers(broker: Broker) -> None:
    for stop in list(broker._stops):
        stop.set()


def _on_loop(handler: Callable[[Any], Any], loop: asyncio.AbstractEventLoop, stop: _Stop) -> Callable[[Any], Any]:
    """A plain handler that runs coroutine ``handler`` on ``loop`` and
    returns what it returns (see the essay above)."""

    def run(arg: Any) -> Any:
        if loop.is_closed():
            raise RuntimeError("the coroutine handler's event loop is closed")
        coro = handler(arg)
        gate = _Gate()

        async def guarded() -> Any:
            # A call given up before the loop ran it is not run when the
            # loop comes back: its message is a retry already, and running
            # it too would handle it twice.
            if not gate.start():
                coro.close()
                return None
            return await coro

        try:
            future = asyncio.run_coroutine_threadsafe(guarded(), loop)
        except RuntimeError:  # the loop closed just now
            coro.close()
            raise
        while True:
            try:
                return future.result(SLICE)
            except concurrent.futures.TimeoutError:
                if stop.is_set() or loop.is_closed() or not loop.is_running():
                    future.cancel()
                    if gate.give_up():
                        raise RuntimeError(
                            "the coroutine handler was not started: its subscription is closing or its "
                            "event loop is not running"
                        ) from None
                    raise RuntimeError(
                        "the coroutine handler was cancelled: its subscription is closing or its event loop "
                        "stopped while it ran"
                    ) from None

    return run


class _Gate:
    """Whether a coroutine handler's call started on its loop or was given
    up first by the thread waiting for it: whichever comes first wins."""

    __slots__ = ("given_up", "lock", "started")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.given_up = False

    def start(self) -> bool:
        """On the loop: true if the call may run (not given up)."""
        with self.lock:
            self.started = not self.given_up
            return self.started

    def give_up(self) -> bool:
        """On the waiting thread: true if the call had not started, and
        now never will."""
        with self.lock:
            self.given_up = not self.started
            return self.given_up


# ---- interpreter exit ---------------------------------------------------------
#
# While the interpreter finalizes, a thread that is not the main thread and
# asks for the GIL is ended by CPython (3.8 to 3.13) with pthread_exit, which
# on glibc is a *forced unwind*. On a rill thread that unwind climbs through
# Rust frames that catch unwinds (the panic boundary around every handler
# call, and the root of every thread std spawns); catching a forced unwind
# makes glibc abort the process ("FATAL: exception not rethrown", SIGABRT).
# Rust cannot let a forced unwind through a std thread's root, so the only
# sound rule is that no rill thread calls into Python once finalization has
# begun. atexit callbacks run before it begins (after non-daemon threads are
# joined, while daemon threads still run), so this hook closes every broker
# still alive: rill_broker_close stops deliveries and waits for the handler
# calls in flight, and nothing calls back into Python afterwards. It closes
# without freeing, because a daemon thread may still be inside a call on the
# broker; that call, and later ones, fail with Closed.

_live_brokers: weakref.WeakSet[Broker] = weakref.WeakSet()


def _close_all_brokers() -> None:
    for broker in list(_live_brokers):
        ptr = broker._ptr
        if ptr:
            _stop_coroutine_handlers(broker)
            lib.rill_broker_close(ptr)


# ---- fork ----------------------------------------------------------------------------
#
# A child of os.fork() inherits every handle's object but none of rill's
# threads, and shares a broker's data directory (and its lock) with the
# parent. Closing an inherited handle there would join threads that do not
# exist and write to the parent's directory, so the child forgets them all
# as it starts: every handle alive at the fork is marked inherited and its
# pointer dropped, leaked by design (the parent still owns what it points
# to). In the child they then behave as closed: close() and __del__ do
# nothing, the atexit hook skips them, and any other call raises Closed.
# Their Python locks are replaced too: one a parent thread held at the fork
# would stay held in the child forever. Handles the child makes itself are
# its own.

_live_handles: weakref.WeakSet[_Handle] = weakref.WeakSet()


def _forget_inherited() -> None:
    global _fork_generation
    # Before the brokers drop their cached publishers below, so that those
    # (and any other thread's, left behind) are leaked, not freed.
    _fork_generation += 1
    for handle in list(_live_handles):
        handle._inherited = True
        handle._ptr = None
        handle._closed_ptr = None
        if isinstance(handle, Broker):
            # Publishing goes through the cached publishers, not _handle().
            handle._publishers = {}
            handle._publishers_lock = threading.Lock()
        elif isinstance(handle, Consumer):
            handle._closing = True
            handle._lock = threading.Lock()
    _live_handles.clear()


os.register_at_fork(after_in_child=_forget_inherited)


# ---- the library's log ------------------------------------------------------------
#
# rill's log records go to Python's logging: the logger "rill" and its
# children named after the part of rill that logged ("rill.subscription",
# "rill.log", "rill.broker"). The callback is set at import and unset at
# exit, after the brokers are closed, so C never calls into a finalizing
# interpreter; records come from rill's threads, which take the GIL.

_log = logging.getLogger("rill")
# A library's logger: nothing is printed unless the application configures
# logging (Python's last-resort handler would print warnings to stderr).
_log.addHandler(logging.NullHandler())
_LEVELS = {
    _ffi.RILL_LOG_ERROR: logging.ERROR,
    _ffi.RILL_LOG_WARN: logging.WARNING,
    _ffi.RILL_LOG_INFO: logging.INFO,
    _ffi.RILL_LOG_DEBUG: logging.DEBUG,
    _ffi.RILL_LOG_TRACE: 5,
}


def _on_log_py(user_data: int | None, level: int, target: bytes, message: bytes) -> None:
    # Nothing may escape into C.
    try:
        name = target.decode("utf-8", "replace").replace("::", ".")
        logger = logging.getLogger(name) if name.startswith("rill.") else _log
        logger.log(_LEVELS.get(level, logging.ERROR), "%s", message.decode("utf-8", "replace"))
    except BaseException:  # noqa: BLE001 - logging must never break the library's thread
        pass


_on_log = _ffi.LOG_CALLBACK(_on_log_py)


def set_log_level(level: int) -> None:
    """The most detailed of rill's own log records passed to Python's logging,
    as a ``logging`` level (default ``logging.INFO``; ``logging.DEBUG`` adds
    rollovers, retention trims and handler retries). Python's logging then
    filters as configured."""
    if level <= 5:
        rill_level = _ffi.RILL_LOG_TRACE
    elif level <= logging.DEBUG:
        rill_level = _ffi.RILL_LOG_DEBUG
    elif level <= logging.INFO:
        rill_level = _ffi.RILL_LOG_INFO
    elif level <= logging.WARNING:
        rill_level = _ffi.RILL_LOG_WARN
    elif level <= logging.ERROR:
        rill_level = _ffi.RILL_LOG_ERROR
    else:
        rill_level = _ffi.RILL_LOG_OFF
    check(lib.rill_set_log_level(rill_level))


def _unset_log() -> None:
    lib.rill_set_log_callback(_ffi.LOG_CALLBACK(), None)  # a NULL callback


# BUSY means the process already has a logger for Rust's log facade (a Rust
# program embedding this interpreter): rill logs through that one.
lib.rill_set_log_callback(_on_log, None)
# Runs after _close_all_brokers (atexit runs functions last-in, first-out).
atexit.register(_unset_log)
atexit.register(_close_all_brokers)


def version() -> str:
    """The library's version."""
    return str(lib.rill_version().decode())
