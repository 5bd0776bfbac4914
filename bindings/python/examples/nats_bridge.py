"""The NATS JetStream bridge: two brokers, standing for two services on
different machines, exchange orders through a JetStream stream.

    RILL_CARGO_FEATURES=nats pip install ./bindings/python
    nats-server -js &
    nats stream add ORDERS --subjects 'shop.>' --defaults
    python examples/nats_bridge.py

It needs the package built with the bridge (``rill.nats.AVAILABLE``), and a
nats-server with JetStream at $RILL_NATS_URL (default
nats://127.0.0.1:4222) with a stream ORDERS that captures ``shop.>``. (The
tests run it beside a server of their own: tests/test_examples.py.)

The shop's broker exports its topics ``orders/*``; each message is stored
on subject ``shop.orders.<region>`` and acknowledged to rill only once
JetStream has it. The warehouse's broker imports the stream into the same
topic names, with key and attributes as they were. The program exits
non-zero if the warehouse did not get every order.
"""

from __future__ import annotations

import os
import sys
import threading

import rill
from rill.nats import Bridge, Export, Import

ORDERS = [("orders/eu", "order-1"), ("orders/us", "order-2"), ("orders/eu", "order-3")]
DEADLINE = 30.0  # seconds the orders may take to cross


def main() -> int:
    url = os.environ.get("RILL_NATS_URL", "nats://127.0.0.1:4222")
    got: list[str] = []
    arrived = threading.Condition()

    def receive(msg: rill.Message) -> None:
        # The import adds the stream sequence as the nats.seq attribute.
        line = f"{msg.topic} {msg.payload.decode()} region={msg.attributes.get('region')}"
        print(f"warehouse got {line} (stream sequence {msg.attributes.get('nats.seq')})")
        with arrived:
            got.append(line)
            arrived.notify_all()

    with rill.Broker() as shop, rill.Broker() as warehouse:
        for broker in (shop, warehouse):
            broker.create_topic("orders/eu")
            broker.create_topic("orders/us")
        # Export is a durable subscription on the pattern: a bridge started
        # again on this broker resumes where the last one got to, and while
        # the server is away the orders wait in rill's log. Import is a durable JetStream consumer
        # ("rill-import"): the server remembers what the warehouse acknowledged.
        sub = warehouse.subscribe("orders/*", receive)
        exporter = Bridge(shop, url=url, export=Export("orders/*", stream="ORDERS", subject_prefix="shop"))
        importer = Bridge(warehouse, url=url, import_=Import("ORDERS", subject_prefix="shop"))
        with sub, exporter, importer:  # leaving it stops the bridges, then the subscription
            for topic, order_id in ORDERS:
                shop.publish(topic, order_id, key=order_id, attributes={"region": topic.split("/")[1]})
            # The network takes a moment: wait for the orders, with a deadline.
            with arrived:
                arrived.wait_for(lambda: len(got) >= len(ORDERS), timeout=DEADLINE)
            print(f"shop exported {exporter.stats().exported}, warehouse imported {importer.stats().imported}")

    want = ["orders/eu order-1 region=eu", "orders/eu order-3 region=eu", "orders/us order-2 region=us"]
    if sorted(got) != want:
        print(f"expected {want}, the warehouse got {sorted(got)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
