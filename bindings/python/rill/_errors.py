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
    """An argument was malformed or out of range."""


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


class OutOfRange(RillError, IndexError):
    """An offset outside the retained range."""


class Busy(RillError):
    """A subscription name or consumer group is already in use."""


class NotFound(RillError, LookupError):
    """A lookup found nothing (a partition, a committed offset)."""


class Panic(RillError):
    """The library panicked internally; the call had no reliable effect."""


_BY_STATUS: dict[int, type[RillError]] = {
    1: InvalidArgument,  # RILL_ERR_NULL_ARGUMENT: only reachable through a binding bug
    2: InvalidArgument,
    3: InvalidTopic,
    4: InvalidPattern,
    5: InvalidFilter,
    6: NoSuchTopic,
    7: TopicExists,
    8: MessageTooLarge,
    9: Full,
    10: Timeout,
    11: Closed,
    12: OutOfRange,
    13: Busy,
    14: NotFound,
    15: Panic,
}


def check(status: int) -> None:
    """Raises the exception for a non-zero status."""
    if status:
        raise _BY_STATUS.get(status, RillError)(_ffi.last_error(), status)
