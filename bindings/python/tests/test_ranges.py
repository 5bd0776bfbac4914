"""Issue 14 #12: integers are range-checked before they reach a ctypes field
(which would wrap them modulo 2**bits); out of range is InvalidArgument, a
ValueError. Timeouts of None or infinity mean no limit."""

from __future__ import annotations

import math
from typing import Any

import pytest

import rill


def test_partitions_beyond_uint32_are_refused(broker: rill.Broker) -> None:
    with pytest.raises(rill.InvalidArgument, match="partitions"):
        broker.create_topic("t", partitions=2**32 + 2)
    with pytest.raises(rill.NoSuchTopic):
        broker.topic_stats("t")  # nothing was created with 2 partitions


@pytest.mark.parametrize("field", ["retention_bytes", "retention_messages", "max_message_bytes"])
def test_topic_sizes_beyond_uint64_are_refused(broker: rill.Broker, field: str) -> None:
    too_large: dict[str, Any] = {field: 2**64 + 1}
    negative: dict[str, Any] = {field: -1}
    with pytest.raises(rill.InvalidArgument, match=field):
        broker.create_topic("t", **too_large)
    with pytest.raises(ValueError, match=field):
        broker.create_topic("t", **negative)


def test_a_start_offset_beyond_uint64_is_refused(broker: rill.Broker) -> None:
    broker.create_topic("t")
    with pytest.raises(rill.InvalidArgument, match="start offset"):
        broker.subscribe("t", lambda m: None, start=2**64 + 3)
    with pytest.raises(rill.InvalidArgument, match="start offset"):
        broker.consumer("g", "t", start=2**64 + 3)


@pytest.mark.parametrize(
    "option",
    [
        {"max_attempts": 2**32 + 1},
        {"max_attempts": 0},
        {"lag_limit": 2**64 + 1},
        {"lag_limit": 0},
        {"backoff": (2.0**64, 1.0)},
        {"backoff": (0.1, math.inf)},
        {"backoff": (math.nan, 1.0)},
        {"idle_spin": 2.0**60},
    ],
)
def test_subscription_options_out_of_range_are_refused(broker: rill.Broker, option: dict[str, object]) -> None:
    broker.create_topic("t")
    with pytest.raises(rill.InvalidArgument):
        broker.subscribe("t", lambda m: None, **option)  # type: ignore[arg-type]


def test_worker_threads_beyond_uint32_are_refused() -> None:
    with pytest.raises(rill.InvalidArgument, match="worker_threads"):
        rill.Broker(worker_threads=2**32 + 1)


def test_consumer_offsets_and_partitions_out_of_range_are_refused(broker: rill.Broker) -> None:
    broker.create_topic("t")
    broker.publish("t", b"x")
    with broker.consumer("g", "t") as c:
        with pytest.raises(rill.InvalidArgument):
            c.seek(2**64, partition=0)
        with pytest.raises(rill.InvalidArgument):
            c.seek(0, partition=2**32)  # would wrap to partition 0
        with pytest.raises(rill.InvalidArgument):
            c.commit_offset(2**64 + 1)
        with pytest.raises(rill.InvalidArgument):
            c.position(2**32)
        with pytest.raises(rill.InvalidArgument):
            c.poll(max_messages=2**64)
        assert c.committed(0) is None  # nothing was committed by a wrapped value


def test_non_integers_are_a_type_error(broker: rill.Broker) -> None:
    with pytest.raises(TypeError):
        broker.create_topic("t", partitions=1.5)  # type: ignore[arg-type]


def test_an_infinite_timeout_means_no_limit(broker: rill.Broker) -> None:
    broker.create_topic("t")
    sub = broker.subscribe("t", lambda m: None, start="earliest")
    broker.publish("t", b"x")
    assert sub.wait_idle(timeout=math.inf)
    assert sub.wait_idle(timeout=1e300)
    with pytest.raises(rill.InvalidArgument):
        sub.wait_idle(timeout=math.nan)
    rill.Broker(publish_timeout=math.inf).close()
    with broker.consumer("g", "t") as c:
        assert len(c.poll(timeout=math.inf)) == 1


@pytest.mark.parametrize("field", ["publish_timeout", "fsync_interval"])
def test_a_broker_timeout_that_is_not_a_number_names_its_option(tmp_path: Any, field: str) -> None:
    options: dict[str, Any] = {field: math.nan}
    with pytest.raises(rill.InvalidArgument, match=field):
        rill.Broker(data_dir=str(tmp_path), **options)


def test_a_message_size_limit_out_of_the_segment_names_its_option(broker: rill.Broker) -> None:
    with pytest.raises(rill.InvalidArgument, match="max_message_bytes must be between"):
        broker.create_topic("t", max_message_bytes=1)
    with pytest.raises(rill.NoSuchTopic):
        broker.topic_stats("t")
