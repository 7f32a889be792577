"""A scenario script of these tests (``*_scenario.py``: vLLM driven as a TT engineer drives it) run in a fresh
process: vLLM's platform, registry and environment cache are process-global, and the plugin reads ``MESH_DEVICE`` and
``TT_MODELS_BACKEND`` when it opens the device.

The process starts from a directory outside the checkout, with this environment less what this suite sets up for
itself (``PYTHONPATH``, ``VLLM_PLUGINS``, ``MESH_DEVICE``, ``TT_VISIBLE_DEVICES``, ``TT_MODELS_BACKEND`` and the mock
cluster of this suite's conftest, under which the real ttnn would open a mock device) plus the scenario's own.
A scenario prints its report as one ``RESULT <json>`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tt_models.runtime import BACKEND_ENV, mock

MARKER = "RESULT "
SCRUBBED = ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", BACKEND_ENV, mock.MOCK_ENV_VAR)


def run_scenario(script: Path, arguments: dict[str, Any], workdir: Path, env: dict[str, str], *, timeout: int = 400,
                 meanwhile: Callable[[], Any] | None = None) -> tuple[Any, str, str]:
    """``script '<json arguments>'`` from ``workdir`` with ``env``; ``meanwhile`` (e.g. the references) is called
    here while it runs. Its report, its stdout (vLLM's log) and stderr; the test fails if the process does."""
    environ = {k: v for k, v in os.environ.items() if k not in SCRUBBED} | env
    # Files, not pipes: a log longer than a pipe's buffer would stop vLLM until ``meanwhile`` returned.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        with subprocess.Popen([sys.executable, str(script), json.dumps(arguments)], cwd=workdir, env=environ,
                              stdout=out, stderr=err, text=True) as process:
            try:
                if meanwhile is not None:
                    meanwhile()
                process.wait(timeout=timeout)
            except BaseException:
                process.kill()
                raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert process.returncode == 0, f"vLLM failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    assert lines, stdout[-3000:]
    return json.loads(lines[-1].removeprefix(MARKER)), stdout, stderr
