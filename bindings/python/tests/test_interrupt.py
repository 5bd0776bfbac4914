"""Issue 14 #7: blocking calls give way to Ctrl-C, and closing a consumer
from another thread ends the poll blocked in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import rill

# The directory holding the rill this test imported (installed or source), so
# the subprocesses run the same package and library.
PACKAGE = str(Path(rill.__file__).resolve().parents[1])
PROMPT = 10.0  # seconds: generous for a loaded CI machine; a slice is 0.05 s

WAIT_IDLE = """
    import threading
    import rill
    b = rill.Broker()
    b.create_topic("t")
    release = threading.Event()
    def handler(m):
        print("ready", flush=True)
        release.wait()
    sub = b.subscribe("t", handler)
    b.publish("t", b"x")
    try:
        sub.wait_idle(timeout=None)   # the handler never finishes: waits for ever
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    release.set()
"""

POLL = """
    import rill
    b = rill.Broker()
    b.create_topic("t")
    c = b.consumer("g", "t")
    print("ready", flush=True)
    try:
        c.poll(timeout=None)          # no traffic: waits for ever
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


def main_thread_state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) state ..."; comm may hold spaces.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("code", [WAIT_IDLE, POLL], ids=["wait_idle", "poll"])
def test_ctrl_c_interrupts_a_call_waiting_without_limit(code: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        # Checked, not assumed: the main thread is asleep, and the only place
        # it can sleep now is inside the blocking call.
        while main_thread_state(p.pid) != "S":
            time.sleep(0.001)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("SIGINT did not interrupt the blocked call")
    assert "interrupted" in out, err
    assert p.returncode == 0, err


def test_closing_a_consumer_from_another_thread_ends_its_blocked_poll(broker: rill.Broker) -> None:
    broker.create_topic("t")
    consumer = broker.consumer("g", "t")
    raised: list[BaseException] = []

    def poll() -> None:
        try:
            consumer.poll(timeout=None)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            raised.append(e)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    # Checked, not assumed: the poll has waited a whole slice with no traffic.
    assert consumer._waiting.wait(PROMPT)
    assert poller.is_alive()
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(PROMPT)
    assert not closer.is_alive(), "close() hung behind the blocked poll"
    poller.join(PROMPT)
    assert not poller.is_alive(), "the poll did not end"
    assert len(raised) == 1 and isinstance(raised[0], rill.Closed), raised
    assert consumer.closed
