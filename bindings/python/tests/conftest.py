import pytest

import rill


@pytest.fixture
def broker():
    with rill.Broker() as b:
        yield b


WAIT = 20.0
