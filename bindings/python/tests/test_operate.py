"""Operating a broker: listing and describing topics, subscriptions and
consumer groups; deleting them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import WAIT

import rill


def test_topics_subscriptions_and_groups_are_listed(broker: rill.Broker) -> None:
    broker.create_topic("orders/eu", partitions=2)
    broker.create_topic("orders/us")
    assert broker.topics() == ["orders/eu", "orders/us"]

    def handler(m: rill.Message) -> Any:
        if m.payload == b"bad":
            raise ValueError("unparseable order")
        return True

    sub = broker.subscribe("orders/*", handler, name="billing", start="earliest", max_attempts=1)
    broker.publish("orders/us", b"good")
    broker.publish("orders/us", b"bad")
    assert sub.wait_idle(WAIT)

    [listed] = broker.subscriptions()
    assert isinstance(listed, rill.SubscriptionStats)
    assert (listed.name, listed.pattern, listed.delivered, listed.state) == ("billing", "orders/*", 2, "idle")
    assert listed.last_error is not None and "unparseable order" in listed.last_error
    assert "orders/us partition 0 offset 1" in listed.last_error
    # The handle's own stats say the same.
    assert sub.stats() == listed

    lags = sub.partition_lags()
    assert len(lags) == 3
    us = [p for p in lags if p.topic == "orders/us"]
    assert us == [rill.PartitionLag("orders/us", 0, 2, 2, 0)]

    assert broker.groups() == []
    c = broker.consumer("reports", "orders/us")
    assert len(c.poll(1, timeout=0)) == 1
    c.commit()
    c.close()
    assert broker.groups() == [("reports", "orders/us")]
    g = broker.group_stats("reports", "orders/us")
    assert g == rill.GroupStats("reports", "orders/us", 1, [rill.PartitionLag("orders/us", 0, 1, 2, 1)])
    with pytest.raises(rill.NotFound):
        broker.group_stats("nobody", "orders/us")
    with pytest.raises(rill.NoSuchTopic):
        broker.group_stats("reports", "missing")

    sub.close()
    assert broker.subscriptions() == []


def test_a_subscription_without_failures_has_no_last_error(broker: rill.Broker) -> None:
    broker.create_topic("t")
    sub = broker.subscribe("t", lambda m: None, start="earliest")
    broker.publish("t", b"x")
    assert sub.wait_idle(WAIT)
    stats = sub.stats()
    assert stats.last_error is None and stats.name == sub.name and stats.pattern == "t"
