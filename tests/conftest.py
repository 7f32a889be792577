"""Test setup: the real ttnn runs against a mock n150 cluster in this process.

The mock cluster is a process singleton, so tests needing another board (n300) run in a subprocess.
The environment must be set before the first ttnn device or tensor is created (even host-side
``from_torch`` to a block-float dtype initializes the cluster).
"""

import os

import pytest

from tt_models.runtime import close_device, mock, open_device

# tt-metal logs every device open and close at info level, down to its exit handler (after pytest's
# summary): keep errors only.
os.environ.setdefault("TT_LOGGER_LEVEL", "error")
mock.activate("n150")


@pytest.fixture
def host_device():
    device = open_device("host")
    yield device
    close_device(device)


@pytest.fixture(scope="session")
def mock_device():
    device = open_device("mock", board="n150")
    yield device
    close_device(device)
