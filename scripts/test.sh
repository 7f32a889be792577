#!/usr/bin/env bash
# The test command: set up (idempotent), then run the whole suite. Extra arguments go to pytest.
# The tests run in TT_MODELS_TEST_WORKERS processes (default 2, one per core of the CI machine; longest-waiting
# work is stolen by idle workers), each computing with one thread: most tests are bound by Python, not by one
# op's arithmetic, and two single-threaded processes use two cores better than one process with two threads.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec .venv/bin/python -m pytest -n "${TT_MODELS_TEST_WORKERS:-2}" --dist worksteal "$@"
