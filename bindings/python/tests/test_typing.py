"""The package's types as a checker sees them: ``with`` keeps the handle's
own type (``__enter__`` returns ``Self``), and the string options are
``Literal`` types that refuse a misspelt value before the program runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

mypy = pytest.importorskip("mypy")
PACKAGE = Path(__file__).resolve().parents[1]

SNIPPET = """
    import rill

    with rill.Broker() as broker:
        reveal_type(broker)
        with broker.subscribe("t", lambda m: None) as sub:
            reveal_type(sub)
        with broker.consumer("g", "t") as consumer:
            reveal_type(consumer)
        reveal_type(sub.stats().state)
        broker.subscribe("t", print, delivery="exactly_once")
        broker.subscribe("t", print, overflow="drop_newest")
        broker.consumer("g", "t", start="yesterday")
"""


def test_with_keeps_the_type_and_literals_refuse_misspellings(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(SNIPPET))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(program),
        ],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        env={"MYPYPATH": str(PACKAGE), "PATH": ""},
    )
    out = r.stdout
    assert 'Revealed type is "rill._broker.Broker"' in out, out
    assert 'Revealed type is "rill._broker.Subscription"' in out, out
    assert 'Revealed type is "rill._broker.Consumer"' in out, out
    state = next(line for line in out.splitlines() if "program.py:10:" in line)
    assert all(f"Literal['{s}']" in state for s in ("idle", "active", "backoff", "closed", "unknown")), state
    for wrong in ("exactly_once", "drop_newest", "yesterday"):
        assert f"\"Literal['{wrong}']\"" in out, (wrong, out)
    assert "Found 3 errors" in out, out
