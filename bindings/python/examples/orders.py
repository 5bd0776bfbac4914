"""An example rill program: orders flow through a topic to a push
subscription that settles them and a pull consumer that audits them.

    python examples/orders.py

It runs as CI runs it (and mypy --strict checks it): it exits non-zero if
an order goes missing.
"""

from __future__ import annotations

import sys

import rill

ORDERS = 1000


def main() -> int:
    settled: list[int] = []

    def settle(msg: rill.Message) -> rill.Ack:
        if msg.attributes.get("region") == "moon":
            return rill.Ack.DEAD_LETTER  # we do not ship there
        settled.append(int(msg.payload))
        return rill.Ack.SUCCESS

    overflow: rill.Overflow = "block"
    with rill.Broker() as broker:
        broker.create_topic("orders", partitions=4)
        broker.create_topic("orders.dead")
        with broker.subscribe(
            "orders", settle, start="earliest", overflow=overflow, lag_limit=512, dead_letter_topic="orders.dead"
        ) as sub:
            for n in range(ORDERS):
                broker.publish("orders", str(n), key=f"customer-{n % 7}", attributes={"region": "IN"})
            broker.publish("orders", b"-1", attributes={"region": "moon"})
            if not sub.wait_idle(timeout=30.0):
                print("the subscription did not catch up", file=sys.stderr)
                return 1
            stats = sub.stats()
        with broker.consumer("audit", "orders") as audit:
            seen = 0
            while batch := audit.poll(max_messages=256, timeout=0.0):
                seen += len(batch)
            audit.commit()
        dead = broker.topic_stats("orders.dead").publish_count
    print(f"settled {len(settled)}, dead-lettered {dead}, audited {seen}, state {stats.state}")
    return 0 if sorted(settled) == list(range(ORDERS)) and dead == 1 and seen == ORDERS + 1 else 1


if __name__ == "__main__":
    sys.exit(main())
