#!/usr/bin/env bash
# The test command: set up (idempotent), then run the whole suite. Extra arguments go to pytest.
# The tests run in TT_MODELS_TEST_WORKERS processes (default 2, one per core of the CI machine; each test file runs
# whole in one of them, so a module's fixtures are built once), each computing with one thread: most tests are bound
# by Python, not by one op's arithmetic, and two single-threaded processes use two cores better than one process with
# two threads. Tests marked "alone" (deployments of several server processes with time bounds) run after them, by
# themselves but for the soak test (one server at light load for minutes, a twentieth of a core), which runs
# beside both phases. The parallel phase ends with its 20 slowest tests: where the suite's 15 minutes go.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
soak_log=$(mktemp)
.venv/bin/python -m pytest -m soak -p no:cacheprovider "$@" >"$soak_log" 2>&1 &
soak_pid=$!
.venv/bin/python -m pytest -n "${TT_MODELS_TEST_WORKERS:-2}" --dist loadfile -m "not alone and not soak" --durations=20 "$@"
parallel=$?
.venv/bin/python -m pytest -m alone "$@"
alone=$?
wait "$soak_pid"
soak=$?
echo "--- the soak test (run beside the others):"
cat "$soak_log"
rm -f "$soak_log"
status=0
for code in "$parallel" "$soak" "$alone"; do
  [ "$code" -ne 0 ] && [ "$code" -ne 5 ] && [ "$status" -eq 0 ] && status=$code  # 5: the arguments selected none
done
exit "$status"
