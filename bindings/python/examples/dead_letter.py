"""Dead letters: a message that keeps failing is retried a few times with a
backoff, then set aside on a dead-letter topic with the reason, and the
subscription moves on to the messages after it.

    python examples/dead_letter.py

A payment service cannot process a payment with a malformed amount.
Retrying will not help, but it cannot tell that from a passing fault, so it
retries; after the last attempt the message goes to ``payments/dead``, an
alert callback fires, and an operator's tool reads the dead letters with
their reasons. The program exits non-zero if the good payments were not all
settled or the bad one was not set aside.
"""

from __future__ import annotations

import logging
import sys

import rill


def main() -> int:
    # A raising handler is logged to the "rill" logger: one line per retry,
    # and the traceback once, on the last attempt.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settled: list[int] = []
    alerts: list[str] = []

    def settle(msg: rill.Message) -> None:
        # An exception is a retry, its type and text the reason that travels
        # with the dead letter. (Returning rill.Ack.RETRY retries without
        # one; rill.Ack.DEAD_LETTER gives up at once.)
        text = msg.payload.decode()
        if not text.isdigit():
            raise ValueError(f"amount {text!r} is not a number")
        settled.append(int(text))

    def alert(msg: rill.Message, reason: str) -> None:
        # Called once per dead letter, on the delivering thread.
        alerts.append(f"offset {msg.offset}: {reason}")

    with rill.Broker() as broker:
        broker.create_topic("payments")
        with broker.subscribe(
            "payments",
            settle,
            name="settlement",
            start="earliest",
            max_attempts=3,  # three deliveries in all,
            backoff=(0.001, 0.05),  # 1 ms, then 2 ms apart (at most 50 ms)
            dead_letter_topic="payments/dead",  # default: $dlq/<name>
            on_dead_letter=alert,
        ) as sub:
            for amount in ["120", "75", "12,50", "300"]:
                broker.publish("payments", amount, attributes={"customer": "c-42"})
            if not sub.wait_idle(timeout=10.0):
                print("the subscription did not catch up", file=sys.stderr)
                return 1
            stats = sub.stats()
        print(f"settled {sorted(settled)}, retried {stats.retried}, dead-lettered {stats.dead_lettered}")
        print(f"alerts: {alerts}")

        # The operator's side: dead letters are ordinary messages, with the
        # original payload and attributes plus rill.dlq.* attributes that say
        # where they came from and why.
        with broker.consumer("operator", "payments/dead") as dead:
            letters = dead.poll(max_messages=10, timeout=1.0)
        for letter in letters:
            a = letter.attributes
            print(
                f"dead letter {letter.payload!r} of {a['customer']} from {a['rill.dlq.topic']} offset "
                f"{a['rill.dlq.offset']} after {a['rill.dlq.attempts']} attempts: {a['rill.dlq.reason']}"
            )

    ok = (
        sorted(settled) == [75, 120, 300]
        and stats.dead_lettered == 1
        and len(alerts) == 1
        and len(letters) == 1
        and letters[0].payload == b"12,50"
        and letters[0].attributes.get("customer") == "c-42"
        and "amount '12,50' is not a number" in letters[0].attributes.get("rill.dlq.reason", "")
    )
    if not ok:
        print("expected 3 payments settled and 12,50 dead-lettered after 3 attempts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
