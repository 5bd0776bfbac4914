"""Issue 40 #4: a string holding a NUL never reaches C, where it would be cut short.

C reads a ``const char *`` up to its first NUL, so ``delete_topic("t\\0x")``
used to delete topic ``t``. Every public method refuses such a string with
InvalidArgument, and the thing the truncated name names is left as it was."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from conftest import WAIT

import rill
import rill.nats


def refused(call: Callable[[], Any]) -> None:
    with pytest.raises(rill.InvalidArgument, match="NUL"):
        call()


@pytest.fixture
def broker() -> Any:
    with rill.Broker() as b:
        b.create_topic("t")
        b.create_topic("u")
        b.publish("t", b"one")
        with b.consumer("g", "t") as c:
            assert len(c.poll(1, timeout=WAIT)) == 1
            c.commit()
        with b.subscribe("t", lambda m: None, name="d", start="earliest") as s:
            assert s.wait_idle(WAIT)
        yield b


def test_topic_calls_refuse_a_nul_and_leave_the_truncated_topic_alone(broker: rill.Broker) -> None:
    topics = broker.topics()
    assert "t" in topics and "u" in topics
    refused(lambda: broker.create_topic("v\0x"))
    refused(lambda: broker.delete_topic("t\0x"))
    refused(lambda: broker.topic_stats("t\0x"))
    refused(lambda: broker.publish("t\0x", b"two"))
    refused(lambda: broker.publish("t\0x", b"two", attributes={"a": "b"}))
    refused(lambda: broker.try_publish("t\0x", b"two"))
    refused(lambda: broker.publish_batch("t\0x", [b"two", b"three"]))
    refused(lambda: broker.create_topic("u\0x"))
    assert broker.topics() == topics
    assert broker.topic_stats("t").publish_count == 1


def test_attributes_with_a_nul_are_refused(broker: rill.Broker) -> None:
    refused(lambda: broker.publish("t", b"two", attributes={"a\0b": "c"}))
    refused(lambda: broker.publish("t", b"two", attributes={"a": "b\0c"}))
    refused(lambda: broker.try_publish("t", b"two", attributes={"a": "b\0c"}))
    assert broker.topic_stats("t").publish_count == 1


def test_group_and_durable_calls_refuse_a_nul(broker: rill.Broker) -> None:
    refused(lambda: broker.delete_group("g\0x", "t"))
    refused(lambda: broker.delete_group("g", "t\0x"))
    refused(lambda: broker.group_stats("g\0x", "t"))
    refused(lambda: broker.group_stats("g", "t\0x"))
    refused(lambda: broker.delete_durable("d\0x"))
    refused(lambda: broker.consumer("g\0x", "t"))
    refused(lambda: broker.consumer("g", "t\0x"))
    refused(lambda: broker.consumer("h", "t", dead_letter_topic="dl\0x"))
    assert broker.groups() == [("g", "t")]
    assert broker.group_stats("g", "t").partitions[0].position == 1
    # The durable subscription's saved position is still there to delete.
    broker.delete_durable("d")


def test_subscribe_refuses_a_nul_in_every_string(broker: rill.Broker) -> None:
    def handler(m: rill.Message) -> None:
        pass

    refused(lambda: broker.subscribe("t\0x", handler))
    refused(lambda: broker.subscribe("t", handler, name="s\0x"))
    refused(lambda: broker.subscribe("t", handler, filter="a = 'b'\0x"))
    refused(lambda: broker.subscribe("t", handler, dead_letter_topic="dl\0x"))
    assert broker.subscriptions() == []


def test_a_handler_exception_text_with_a_nul_is_kept_whole_as_the_reason() -> None:
    with rill.Broker() as b:
        b.create_topic("t")
        dead: list[str] = []

        def fail(m: rill.Message) -> None:
            raise ValueError("before\0after")

        with b.subscribe(
            "t", fail, start="earliest", max_attempts=1, on_dead_letter=lambda m, why: dead.append(why)
        ) as s:
            b.publish("t", b"x")
            assert s.wait_idle(WAIT)
        assert len(dead) == 1
        assert "before\ufffdafter" in dead[0], dead


@pytest.mark.skipif(not rill.nats.AVAILABLE, reason="librill built without the NATS bridge")
def test_the_nats_bridge_refuses_a_nul_before_connecting(broker: rill.Broker) -> None:
    refused(lambda: rill.nats.Bridge(broker, url="nats://127.0.0.1:4222\0x"))
    refused(lambda: rill.nats.Bridge(broker, user="a\0b", password="c"))
    refused(lambda: rill.nats.Bridge(broker, export=rill.nats.Export(pattern="t\0x", stream="S")))
