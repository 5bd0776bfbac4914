"""Fan-out with filters: every subscription sees every message of its
topics, and an attribute filter narrows that down without a line of code in
the handler.

    python examples/fan_out.py

Three services read one stream of orders: shipping for Europe only, an
alerting service for urgent orders in any region, and an audit log of
everything. Each has its own position, so a slow one holds up no other. The
program exits non-zero if a service saw the wrong orders.
"""

from __future__ import annotations

import sys

import rill

ORDERS = [
    ("shop/orders", "order-1", "eu-west", "normal"),
    ("shop/orders", "order-2", "us-east", "high"),
    ("shop/orders", "order-3", "eu-north", "high"),
    ("shop/returns", "return-4", "eu-west", "high"),
    ("shop/orders", "order-5", "ap-south", "normal"),
]


def main() -> int:
    # What each service saw. A handler is called one message at a time per
    # subscription, on the broker's threads.
    seen: dict[str, list[str]] = {"shipping": [], "alerts": [], "audit": []}

    def collect(service: str) -> rill.Handler:
        def handler(msg: rill.Message) -> None:
            seen[service].append(msg.payload.decode())

        return handler

    with rill.Broker() as broker:
        broker.create_topic("shop/orders", partitions=2)
        broker.create_topic("shop/returns")
        # Pub/Sub's filter syntax: =, !=, attributes:key (present),
        # hasPrefix(...), NOT, AND, OR and parentheses.
        subs = [
            broker.subscribe("shop/orders", collect("shipping"), filter='hasPrefix(attributes.region, "eu-")'),
            broker.subscribe("shop/*", collect("alerts"), filter='attributes.priority = "high"'),
            # `**` matches any number of segments: every topic under shop/.
            broker.subscribe("shop/**", collect("audit")),
        ]
        for topic, order_id, region, priority in ORDERS:
            broker.publish(topic, order_id, key=order_id, attributes={"region": region, "priority": priority})
        # Handlers run on the broker's threads: wait until each caught up.
        if not all(s.wait_idle(timeout=10.0) for s in subs):
            print("a subscription did not catch up", file=sys.stderr)
            return 1
        filtered = subs[0].stats().filtered

    # Partitions are delivered in parallel (order holds per partition).
    got = {service: sorted(ids) for service, ids in seen.items()}
    for service, ids in got.items():
        print(f"{service:9} {' '.join(ids)}")
    print(f"shipping's filter skipped {filtered} orders")
    want = {
        "shipping": ["order-1", "order-3"],
        "alerts": ["order-2", "order-3", "return-4"],
        "audit": ["order-1", "order-2", "order-3", "order-5", "return-4"],
    }
    if got != want:
        print(f"a service saw the wrong orders: expected {want}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
