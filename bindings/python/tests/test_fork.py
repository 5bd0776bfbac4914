"""Issue 40 #11: a child of os.fork() that ends with sys.exit(0) exits 0 quietly.

The child inherits the broker's object but none of rill's threads, and
shares its data directory with the parent. Its atexit hook used to close
the broker, which joined threads that do not exist there (a Rust panic
and backtrace on stderr) and would have flushed into the parent's
directory. Now the child finds every inherited handle closed, ends with no
output, and the parent's broker, its subscription, its consumer and its
directory carry on as if the child had never been."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import rill

# The directory holding the rill this test imported (installed or source), so
# the subprocess runs the same package and library.
PACKAGE = str(Path(rill.__file__).resolve().parents[1])

SCRIPT = """
    import os
    import sys
    import rill

    data_dir, child_err = sys.argv[1], sys.argv[2]
    b = rill.Broker(data_dir=data_dir)
    b.create_topic("orders")
    seen = []
    sub = b.subscribe("orders", lambda m: seen.append(m.offset), start="earliest", name="audit")
    for i in range(20):
        b.publish("orders", b"m%d" % i)
    c = b.consumer("billing", "orders")
    polled = 0
    while polled < 12:
        polled += len(c.poll(12 - polled, timeout=10))
    c.commit()
    assert sub.wait_idle(10)

    pid = os.fork()
    if pid == 0:
        # The child: its stderr goes to a file of its own. Every inherited
        # handle is closed here, and closing them again does nothing.
        fd = os.open(child_err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        assert b.closed and sub.closed and c.closed, (b.closed, sub.closed, c.closed)
        try:
            b.publish("orders", b"from the child")
        except rill.Closed as e:
            assert "fork" in str(e), str(e)
        else:
            raise AssertionError("publishing on an inherited broker did not raise Closed")
        c.close()
        sub.close()
        # Ends normally: the atexit hook and __del__ run.
        sys.exit(0)

    _, status = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(status))

    # The parent carries on: it still holds its directory...
    try:
        rill.Broker(data_dir=data_dir)
    except rill.Busy:
        pass
    else:
        raise AssertionError("a second broker opened the directory the parent holds")
    # ...publishes, delivers, and its consumer reads on.
    for i in range(5):
        b.publish("orders", b"after %d" % i)
    assert sub.wait_idle(10)
    assert seen == list(range(25)), seen
    while polled < 25:
        polled += len(c.poll(25 - polled, timeout=10))
    b.close()

    # And the directory has everything: messages and the group's commit.
    with rill.Broker(data_dir=data_dir) as again:
        assert again.topic_stats("orders").publish_count == 25
        assert again.group_stats("billing", "orders").partitions[0].position == 12
    print("ok")
"""


def test_a_forked_child_that_exits_leaves_the_parent_and_its_directory_alone(tmp_path: Path) -> None:
    child_err = tmp_path / "child.err"
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE + os.pathsep + env.get("PYTHONPATH", "")
    # Python 3.12+ warns on stderr about fork() in a threaded process;
    # this test checks what rill prints, not that.
    args = ["-W", "ignore::DeprecationWarning", "-c", textwrap.dedent(SCRIPT), str(tmp_path / "data"), str(child_err)]
    r = subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:2] == ["child exit 0", "ok"], r.stdout + r.stderr
    assert child_err.read_text() == ""
    assert "panicked" not in r.stderr and "Traceback" not in r.stderr, r.stderr
