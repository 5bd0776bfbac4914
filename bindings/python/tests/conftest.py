from __future__ import annotations

from typing import Iterator

import pytest

import rill


@pytest.fixture
def broker() -> Iterator[rill.Broker]:
    with rill.Broker() as b:
        yield b


WAIT = 20.0
