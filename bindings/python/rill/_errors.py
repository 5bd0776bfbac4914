"""Exceptions: every failing C call becomes one of these, with the library's text."""

from __future__ import annotations

from . import _ffi


class RillError(Exception):
    """Base of every rill error. ``status`` is the C ``rill_status`` value and
    ``message`` the library's explanation."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def status_name(self) -> str:
        return _ffi.status_name(self.status)


class InvalidArgument(RillError, ValueError):
    """An argument was malformed or out of range (the binding's own range
    checks raise it too, before anything reaches the library)."""

    def __init__(self, message: str, status: int = _ffi.STATUS["RILL_ERR_INVALID_ARGUMENT"]) -> None:
        super().__init__(message, status)


class InvalidTopic(InvalidArgument):
    """A topic name broke the naming rules."""


class InvalidPattern(InvalidArgument):
    """A subscription pattern broke the pattern rules."""


class InvalidFilter(InvalidArgument):
    """A filter did not parse; the message gives the byte position."""


class NoSuchTopic(RillError, LookupError):
    """The topic does not exist (and the broker does not create topics on demand)."""


class TopicExists(RillError):
    """The topic already exists."""


class MessageTooLarge(RillError, ValueError):
    """The message is larger than the topic accepts."""


class Full(RillError):
    """``try_publish``: a ``block`` subscriber is at its lag limit."""


class Timeout(RillError, TimeoutError):
    """A wait ran out of time."""


class Closed(RillError):
    """The broker, subscription or consumer is closed."""

    def __init__(self, message: str, status: int = _ffi.STATUS["RILL_ERR_CLOSED"]) -> None:
        super().__init__(message, status)


class OutOfRange(RillError, IndexError):
    """An offset outside the retained range."""


class Busy(RillError):
    """A subscription name or consumer group is already in use."""


class NotFound(RillError, LookupError):
    """A lookup found nothing (a partition, a committed offset)."""


class Panic(RillError):
    """The library panicked internally; the call had no reliable effect."""


class ResourceExhausted(RillError, MemoryError):
    """The system refused a resource the call needed (a thread, a memory
    mapping). A MemoryError too, so code that handles running out of memory
    handles this; the call had no effect and may succeed later."""


class StorageError(RillError, OSError):
    """A storage operation failed (``RILL_ERR_IO``): on the broker's data
    directory (disk full, permission denied, not a directory; the message
    names the path and has the operating system's error), or for the NATS
    bridge (the server could not be reached, refused the credentials, or a
    JetStream request failed). An OSError too, so code that handles file and
    connection errors handles this."""


class CorruptData(RillError):
    """Opening a data directory found damage that recovery will not silently
    drop; the message names the file and the byte offset. ``repair=True``
    truncates the partition there instead."""


class Reassigned(RillError):
    """A consumer group gave the partition to another member (a rebalance, or
    this member did not poll for its session timeout): its commit there was
    refused, and the new owner reads those messages again. Its other
    partitions were committed."""


class SchemaError(RillError):
    """A payload did not fit its topic's schema, whose ``on_invalid`` is
    ``"reject"``: nothing was published. The message is the validator's (for
    a JSON schema, the failing path and keyword; for a batch, the failing
    message's index first)."""


_BY_STATUS: dict[int, type[RillError]] = {
    _ffi.STATUS["RILL_ERR_NULL_ARGUMENT"]: InvalidArgument,  # only reachable through a binding bug
    _ffi.STATUS["RILL_ERR_INVALID_ARGUMENT"]: InvalidArgument,
    _ffi.STATUS["RILL_ERR_INVALID_TOPIC"]: InvalidTopic,
    _ffi.STATUS["RILL_ERR_INVALID_PATTERN"]: InvalidPattern,
    _ffi.STATUS["RILL_ERR_INVALID_FILTER"]: InvalidFilter,
    _ffi.STATUS["RILL_ERR_NO_SUCH_TOPIC"]: NoSuchTopic,
    _ffi.STATUS["RILL_ERR_TOPIC_EXISTS"]: TopicExists,
    _ffi.STATUS["RILL_ERR_MESSAGE_TOO_LARGE"]: MessageTooLarge,
    _ffi.STATUS["RILL_ERR_FULL"]: Full,
    _ffi.STATUS["RILL_ERR_TIMEOUT"]: Timeout,
    _ffi.STATUS["RILL_ERR_CLOSED"]: Closed,
    _ffi.STATUS["RILL_ERR_OUT_OF_RANGE"]: OutOfRange,
    _ffi.STATUS["RILL_ERR_BUSY"]: Busy,
    _ffi.STATUS["RILL_ERR_NOT_FOUND"]: NotFound,
    _ffi.STATUS["RILL_ERR_PANIC"]: Panic,
    _ffi.STATUS["RILL_ERR_RESOURCE_EXHAUSTED"]: ResourceExhausted,
    _ffi.STATUS["RILL_ERR_IO"]: StorageError,
    _ffi.STATUS["RILL_ERR_CORRUPT"]: CorruptData,
    _ffi.STATUS["RILL_ERR_REASSIGNED"]: Reassigned,
    _ffi.STATUS["RILL_ERR_SCHEMA"]: SchemaError,
}


def check(status: int) -> None:
    """Raises the exception for a non-zero status."""
    if status:
        raise _BY_STATUS.get(status, RillError)(_ffi.last_error(), status)
