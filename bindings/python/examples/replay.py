"""Durable replay from a point in time: a broker on a data directory keeps
its messages across restarts, and a consumer can go back to the first
message published at or after a given time.

    python examples/replay.py

A sensor feed is written by one run of the broker; the broker is closed (a
restart); a second run reopens the directory, finds the moment an incident
began and replays everything from then on. The program exits non-zero if
the replay is not exactly the readings from that moment.
"""

from __future__ import annotations

import sys
import tempfile

import rill

READINGS = ["21.0", "21.2", "21.1", "48.9", "49.5", "22.0"]
# The reading at which the incident began (in a real program: a time an
# operator gives; seek_to_time and start= also take a datetime).
INCIDENT = 3


def open_broker(data_dir: str) -> rill.Broker:
    # "interval" (the default) syncs every fsync_interval seconds; "always"
    # returns from a publish only once the message is on stable storage.
    return rill.Broker(data_dir=data_dir, fsync="always")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="rill-replay-example-") as data_dir:
        # The first run: publish the feed; leaving the block closes the broker.
        with open_broker(data_dir) as broker:
            broker.create_topic("sensors/boiler")
            for reading in READINGS:
                broker.publish("sensors/boiler", reading)

        # The second run: topics, messages and their publish times are back.
        with open_broker(data_dir) as broker, broker.consumer("incident-review", "sensors/boiler") as reader:
            everything = reader.poll(max_messages=100, timeout=1.0)
            print(f"after the restart: {len(everything)} readings")
            if len(everything) != len(READINGS):
                print(f"expected {len(READINGS)} readings after the restart", file=sys.stderr)
                return 1
            # Every message carries its publish time in nanoseconds since the
            # Unix epoch; here the incident's start is its first reading's.
            incident_began = everything[INCIDENT].timestamp_ns

            # Go back to the first message published at or after that time,
            # in partition 0 (the only one here).
            reader.seek_to_time(incident_began, partition=0)
            # (A new group or a subscription can start at a time as well:
            # start=<a datetime>. An int there is an offset.)
            replayed = [m.payload.decode() for m in reader.poll(max_messages=100, timeout=1.0)]
            print(f"replayed from the incident: {replayed}")

    if replayed != READINGS[INCIDENT:]:
        print(f"expected {READINGS[INCIDENT:]} from the incident on", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
