"""The NATS JetStream bridge: rill topics mirrored into a stream (export) and a
stream's messages published into rill topics (import)::

    import rill
    from rill.nats import Bridge, Export, Import

    with rill.Broker() as broker, Bridge(
        broker,
        url="nats://127.0.0.1:4222",
        export=Export("orders/*", stream="ORDERS", subject_prefix="rill"),
    ) as bridge:
        broker.publish("orders/eu", b"...")  # stored on subject rill.orders.eu
        print(bridge.stats())

A message is acknowledged on one side only after the other stored it, so
nothing is lost while the server is away (exported messages wait in rill's
log, ``stats().export_lag``); see include/rill_nats.h for the mapping and the
bounds on duplicates. Needs a librill built with the ``nats`` feature
(``ffi/install.sh --with-nats``, or ``RILL_CARGO_FEATURES=nats`` when
installing the package): :data:`AVAILABLE` says whether the loaded one is.
"""

from __future__ import annotations

from ctypes import byref, c_void_p, sizeof
from dataclasses import dataclass

from . import _ffi
from ._broker import Broker, _Handle, _name
from ._errors import InvalidArgument, check

AVAILABLE: bool = _ffi.HAS_NATS
"""Whether the loaded librill has the bridge."""

_U32_MAX = 2**32 - 1


@dataclass(frozen=True)
class Export:
    """rill -> JetStream: the topics matching ``pattern`` go to ``stream`` on
    subjects ``subject_prefix.<topic segments>``, through the durable rill
    subscription ``subscription`` (default ``"nats-export"``)."""

    pattern: str
    stream: str
    subject_prefix: str = ""
    subscription: str | None = None


@dataclass(frozen=True)
class Import:
    """JetStream -> rill: ``stream``'s subjects under ``subject_prefix``
    (or ``subject_filter``) are published into the topics they map to, after
    ``topic_prefix``, read through the durable pull consumer ``consumer``
    (default ``"rill-import"``)."""

    stream: str
    subject_prefix: str = ""
    subject_filter: str | None = None
    topic_prefix: str | None = None
    consumer: str | None = None
    batch: int | None = None
    ack_wait: float | None = None


@dataclass(frozen=True)
class BridgeStats:
    """A snapshot of a bridge's counters."""

    exported: int
    imported: int
    in_flight: int
    reconnects: int
    rejected: int
    export_lag: int
    last_error: str | None


def _ms(seconds: float | None, what: str) -> int:
    if seconds is None:
        return 0
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds * 1000 <= _U32_MAX:
        raise InvalidArgument(f"{what} must be a positive number of seconds, not {seconds!r}")
    return max(1, int(seconds * 1000))


class Bridge(_Handle):
    """A running bridge between ``broker`` and the NATS server at ``url``.
    Everything is checked at start: a malformed value raises
    :class:`rill.InvalidArgument`, a missing stream :class:`rill.NotFound`, a
    server that cannot be reached or refuses the credentials :class:`rill.StorageError`.
    ``close()`` (or leaving the ``with`` block) stops it."""

    def __init__(
        self,
        broker: Broker,
        url: str = "nats://127.0.0.1:4222",
        export: Export | None = None,
        import_: Import | None = None,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        broker_id: str | None = None,
        connect_timeout: float | None = None,
        request_timeout: float | None = None,
    ) -> None:
        if not AVAILABLE:
            raise RuntimeError(
                "this librill was built without the NATS bridge: build it with `ffi/install.sh --with-nats` "
                "(or install the package with RILL_CARGO_FEATURES=nats)"
            )
        if not isinstance(broker, Broker):
            raise TypeError(f"broker must be a rill.Broker, not {type(broker).__name__}")
        o = _ffi.rill_nats_options()
        _ffi.lib.rill_nats_options_init_v1(byref(o), sizeof(o))
        # The encoded strings must outlive the call; ctypes keeps c_char_p
        # fields' bytes alive through the structure.
        o.url = _name(url, "url")
        for field, value in (("user", user), ("password", password), ("token", token), ("broker_id", broker_id)):
            if value is not None:
                setattr(o, field, _name(value, field))
        o.connect_timeout_ms = _ms(connect_timeout, "connect_timeout")
        o.request_timeout_ms = _ms(request_timeout, "request_timeout")
        if export is not None:
            if not isinstance(export, Export):
                raise TypeError(f"export must be a rill.nats.Export, not {type(export).__name__}")
            o.export_pattern = _name(export.pattern, "export pattern")
            o.export_stream = _name(export.stream, "export stream")
            o.export_subject_prefix = _name(export.subject_prefix, "export subject_prefix")
            if export.subscription is not None:
                o.export_subscription = _name(export.subscription, "export subscription")
        if import_ is not None:
            if not isinstance(import_, Import):
                raise TypeError(f"import_ must be a rill.nats.Import, not {type(import_).__name__}")
            o.import_stream = _name(import_.stream, "import stream")
            o.import_subject_prefix = _name(import_.subject_prefix, "import subject_prefix")
            if import_.subject_filter is not None:
                o.import_subject_filter = _name(import_.subject_filter, "import subject_filter")
            if import_.topic_prefix is not None:
                o.import_topic_prefix = _name(import_.topic_prefix, "import topic_prefix")
            if import_.consumer is not None:
                o.import_consumer = _name(import_.consumer, "import consumer")
            if import_.batch is not None:
                if (
                    isinstance(import_.batch, bool)
                    or not isinstance(import_.batch, int)
                    or not 0 < import_.batch <= _U32_MAX
                ):
                    raise InvalidArgument(f"import batch must be a positive int, not {import_.batch!r}")
                o.import_batch = import_.batch
            o.import_ack_wait_ms = _ms(import_.ack_wait, "import ack_wait")
        out = c_void_p()
        check(_ffi.lib.rill_nats_bridge_new(broker._handle(), byref(o), byref(out)))
        self._ptr = out.value
        # Kept so the broker outlives the bridge's use of it from Python.
        self._broker = broker

    def _free(self, ptr: int) -> None:
        _ffi.lib.rill_nats_bridge_free(ptr)

    def stats(self) -> BridgeStats:
        """The counters now."""
        s = _ffi.rill_nats_stats()
        handle = self._handle()
        check(_ffi.lib.rill_nats_bridge_get_stats(handle, byref(s)))
        error = _ffi.read_str(_ffi.lib.rill_nats_bridge_last_error, handle) if s.has_error else None
        return BridgeStats(s.exported, s.imported, s.in_flight, s.reconnects, s.rejected, s.export_lag, error)

    def __repr__(self) -> str:
        state = "closed" if self.closed else repr(self.stats())
        return f"<rill.nats.Bridge {state}>"


__all__ = ["AVAILABLE", "Bridge", "BridgeStats", "Export", "Import"]
