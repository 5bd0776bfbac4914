"""rill.nats.Bridge against a real nats-server: two brokers bridged through
one stream, the counters, and the errors at start.

Skipped (saying why) when the loaded librill lacks the nats feature or
nats-server is not installed, unless RILL_REQUIRE_NATS=1, which makes either
a failure. .ci/test runs it with RILL_LIBRARY set to a librill built with
the feature.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest
from nats_helper import NatsServer, binary_or_skip

import rill
from rill import nats

WAIT = 60.0
N = 300


@pytest.fixture
def server() -> Iterator[NatsServer]:
    binary = binary_or_skip()
    s = NatsServer(binary)
    try:
        s.create_stream("RILL", ["rill.>"])
        yield s
    finally:
        s.stop()


def _broker() -> rill.Broker:
    b = rill.Broker()
    b.create_topic("orders/eu west", partitions=2)
    return b


def test_two_brokers_exchange_messages_intact_and_in_key_order(server: NatsServer) -> None:
    received: list[rill.Message] = []
    done = threading.Event()

    def handler(m: rill.Message) -> None:
        received.append(m)
        if len(received) == N:
            done.set()

    with _broker() as a, _broker() as b:
        sub = b.subscribe("orders/*", handler, start="earliest")
        with nats.Bridge(b, url=server.url, import_=nats.Import("RILL", subject_prefix="rill.py")) as importer:
            export = nats.Export("orders/*", stream="RILL", subject_prefix="rill.py")
            with nats.Bridge(a, url=server.url, export=export) as exporter:
                for i in range(N):
                    key = bytes([i % 3, 0, 255])
                    attributes = {"i": str(i), "odd = name": "v\u00e4l\nue"}
                    a.publish("orders/eu west", f"payload {i}".encode(), key=key, attributes=attributes)
                assert done.wait(WAIT), f"{len(received)} of {N} arrived"
                # Counted once its publish into rill returned, which may be
                # just after the subscription got the message.
                deadline = time.monotonic() + WAIT
                while importer.stats().imported < N and time.monotonic() < deadline:
                    time.sleep(0.01)
                stats = importer.stats()
                assert stats.imported == N and stats.rejected == 0 and stats.last_error is None
                assert isinstance(exporter.stats(), nats.BridgeStats)
            assert exporter.closed
        sub.close()
    last: dict[bytes, int] = {}
    seqs = set()
    for m in received:
        i = int(m.attributes["i"])
        assert m.topic == "orders/eu west"
        assert m.payload == f"payload {i}".encode()
        assert m.key == bytes([i % 3, 0, 255])
        assert m.attributes["odd = name"] == "v\u00e4l\nue"
        seqs.add(int(m.attributes["nats.seq"]))
        assert m.key not in last or last[m.key] < i, "per-key order broken"
        last[m.key] = i
    assert seqs == set(range(1, N + 1))
    with pytest.raises(rill.Closed):
        importer.stats()


def test_configuration_errors_at_start(server: NatsServer) -> None:
    with _broker() as a:
        with pytest.raises(rill.NotFound, match="NOPE"):
            nats.Bridge(a, url=server.url, export=nats.Export("orders/*", stream="NOPE"))
        with pytest.raises(rill.NotFound, match="NOPE"):
            nats.Bridge(a, url=server.url, import_=nats.Import("NOPE"))
        with pytest.raises(rill.InvalidArgument):
            nats.Bridge(a, url="nats://127.0.0.1:notaport", export=nats.Export("orders/*", stream="RILL"))
        with pytest.raises(rill.InvalidArgument):
            nats.Bridge(a, url=server.url)  # neither export nor import
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        with pytest.raises(rill.StorageError):
            nats.Bridge(
                a,
                url=f"nats://127.0.0.1:{dead}",
                export=nats.Export("orders/*", stream="RILL"),
                connect_timeout=2.0,
            )
        with pytest.raises(TypeError):
            nats.Bridge(a, url=server.url, export="orders/*")  # type: ignore[arg-type]
