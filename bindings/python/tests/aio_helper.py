"""Helpers of the asyncio tests: waiting on the loop for a condition, and
running a test's loop so that a deadlock fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine

from conftest import WAIT


async def until(condition: Callable[[], bool]) -> None:
    """Lets the loop run until ``condition()`` holds; fails after WAIT
    seconds (a hang guard, not a timing check)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT
    while not condition():
        assert loop.time() < end, "timed out waiting for a condition"
        await asyncio.sleep(0.001)


def run_bounded(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """asyncio.run(main()) on a daemon thread, failing (not hanging) if it
    does not finish: a deadlock blocks the loop, so asyncio.wait_for could
    not fire."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WAIT)
    assert not t.is_alive(), "deadlock: the event loop never came back"
    if errors:
        raise errors[0]
