"""Test setup: the real ttnn runs against a mock n150 cluster in this process.

The mock cluster is a process singleton, so tests needing another board (n300) run in a subprocess.
The environment must be set before the first ttnn device or tensor is created (even host-side
``from_torch`` to a block-float dtype initializes the cluster).
"""

import os

import pytest
from hypothesis import settings

from tt_models.runtime import close_device, mock, open_device

# CI explores the same hypothesis examples on every run (a new counterexample shows up in local runs, and
# does not block a submission at random); deadlines are meaningless on a shared 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# tt-metal logs every device open and close at info level, down to its exit handler (after pytest's
# summary): keep errors only.
os.environ.setdefault("TT_LOGGER_LEVEL", "error")
mock.activate("n150")

# Warnings that report a bug, as errors: an exception in a finalizer or ``__del__`` (say, a trace released through
# the wrong backend), and one that ended a thread (an engine or server loop), which would otherwise only be printed.
BUG_WARNINGS = ("error::pytest.PytestUnraisableExceptionWarning", "error::pytest.PytestUnhandledThreadExceptionWarning")


def pytest_configure(config: pytest.Config) -> None:
    for line in BUG_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


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


# Directories whose modules share session fixtures (tests/server: the session's servers and their references): one
# worker runs them all, so those fixtures are built once.
SHARED_SCOPES = ("tests/server",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow modules first, the longest (speech, vllm: minutes each, and the server modules, which run together)
    ahead: each runs whole in one worker (``--dist loadfile``), and one that started last would keep that worker
    busy after the other ran out of work."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    slow |= {item.path for item in items if item.nodeid.startswith(SHARED_SCOPES)}
    order = {path: i for i, path in enumerate(sorted(slow, key=lambda p: (
        p.parent.name not in ("speech", "vllm", "server"), str(p))))}
    items.sort(key=lambda item: order.get(item.path, len(order)))  # (stable: a module's tests stay in order)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` with the modules of each of :data:`SHARED_SCOPES` in one work unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedScopes(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((scope for scope in SHARED_SCOPES if nodeid.startswith(f"{scope}/")),
                        super()._split_scope(nodeid))

    return SharedScopes(config, log)
