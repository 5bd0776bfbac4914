"""The examples gallery (examples/, listed in the README's "Examples"): each
runs as a user would run it, in a process of its own, and checks its own
result, so a non-zero exit here is an example that stopped doing what it
teaches.

The NATS bridge's example needs a librill with the bridge and a
nats-server: it gets a server of its own (JetStream, a free loopback port, a
temporary store, the stream ORDERS its docstring asks for) and is skipped,
saying why, like test_nats.py, unless RILL_REQUIRE_NATS=1. .ci/test runs it
with the NATS library.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats_helper import NatsServer, binary_or_skip

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Generous: each takes well under a second on an idle machine; the bound
# only turns a hang into a failure.
TIMEOUT_S = 120.0


def _run(name: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert result.returncode == 0, f"{name}.py exited {result.returncode}\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("name", ["work_queue", "fan_out", "replay", "dead_letter"])
def test_example(name: str) -> None:
    _run(name)


def test_nats_bridge_example() -> None:
    binary = binary_or_skip()
    server = NatsServer(binary)
    try:
        server.create_stream("ORDERS", ["shop.>"])
        _run("nats_bridge", {"RILL_NATS_URL": server.url})
    finally:
        server.stop()


def test_every_example_is_run_here() -> None:
    # A new example must be added above (orders.py is run by .ci/test,
    # worker_processes.py by test_processes_groups.py).
    run = {"work_queue", "fan_out", "replay", "dead_letter", "nats_bridge", "orders", "worker_processes"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == run
