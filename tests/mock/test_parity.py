"""The host backend against the real ttnn on a mock device, op call by op call.

Every case in :mod:`tests.mock.valid_cases` and :mod:`tests.mock.invalid_cases` runs with the same arguments
on both: the outputs must agree in shape, padded shape, dtype, layout and memory config (values are not
compared: the mock device reads back zeros), and every invalid call must be rejected on both by the check the
case names: the host with a ``TTFatal`` naming the op and the condition, the real ttnn with a ``TT_FATAL`` on
that condition.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ttnn

from tests.mock import cases, invalid_cases, mesh_parity, valid_cases
from tt_models.runtime import close_device, host, open_device
from tt_models.runtime.host.errors import TTFatal

pytestmark = pytest.mark.mock

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", valid_cases.VALID, ids=lambda c: c.__name__)
def test_outputs_match(case, mock_device, host_device):
    expected = cases.describe_all(case(ttnn, mock_device))
    assert cases.describe_all(case(host, host_device)) == expected


@pytest.mark.parametrize("backend", ["mock", "host"])
@pytest.mark.parametrize("case", invalid_cases.INVALID, ids=lambda c: c.__name__)
def test_invalid_call_raises(case, backend, request):
    """Rejected by the check the case names: any other error (torch's own shape errors are RuntimeErrors too)
    would let a missing or misplaced check pass unnoticed."""
    expected = case.rejection
    api = ttnn if backend == "mock" else host
    call = case(api, request.getfixturevalue(f"{backend}_device"))  # building the inputs must work
    if backend == "host":
        with pytest.raises(TTFatal, match=rf"^{re.escape(expected.op)}: {expected.host}") as raised:
            call()
        assert type(raised.value) is TTFatal
    else:
        with pytest.raises(RuntimeError, match=r"^TT_(FATAL|THROW) @ ") as raised:
            call()
        assert expected.real in str(raised.value).split("\nbacktrace:")[0]


@pytest.fixture(scope="module")
def n300_result():
    """The mesh ops on a mock n300, in a fresh process (the mock cluster here is an n150)."""
    proc = subprocess.run([sys.executable, "-m", "tests.mock.mesh_parity"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout[-3000:]
    return json.loads(lines[0].removeprefix("RESULT "))


def test_n300_mesh_matches(n300_result):
    assert n300_result["num_devices"] == 2 and len(n300_result["submeshes"]) == 2
    mesh = open_device("host", mesh_shape=(1, 2))
    try:
        assert mesh_parity.run(host, mesh) == n300_result
    finally:
        close_device(mesh)
