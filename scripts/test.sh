#!/usr/bin/env bash
# The test command: set up (idempotent), then run the whole suite. Extra arguments go to pytest.
# The tests run in TT_MODELS_TEST_WORKERS processes (default 2, one per core of the CI machine; each test file runs
# whole in one of them, so a module's fixtures are built once), each computing with one thread: most tests are bound by Python, not by one op's arithmetic, and
# two single-threaded processes use two cores better than one process with two threads. Tests marked "alone"
# (deployments of several server processes with time bounds) run afterwards, by themselves.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
.venv/bin/python -m pytest -n "${TT_MODELS_TEST_WORKERS:-2}" --dist loadfile -m "not alone" "$@"
parallel=$?
.venv/bin/python -m pytest -m alone "$@"
alone=$?
[ "$alone" -eq 5 ] && alone=0  # the arguments selected none of them
[ "$parallel" -eq 5 ] && parallel=0
exit $(( parallel != 0 ? parallel : alone ))
