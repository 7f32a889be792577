#!/usr/bin/env bash
# The test command: set up (idempotent), then run the suite. Extra arguments go to pytest.
#
#   bash scripts/test.sh              the suite: every test but the extended group, then the numerics-sensitive tests
#                                     again on AVX2 kernels
#   bash scripts/test.sh --extended   the extended group (CI runs it after the suite): the tests that need the machine
#                                     to themselves or minutes of wall time
#
# The tests run in TT_MODELS_TEST_WORKERS processes (default 2, one per core of the CI machine; each test file runs
# whole in one of them, so a module's fixtures are built once), each computing with one thread: most tests are bound
# by Python, not by one op's arithmetic, and two single-threaded processes use two cores better than one process with
# two threads. The first phase ends with its 20 slowest tests: where the suite's minutes go.
#
# Torch picks its kernels by CPU (AVX-512 or AVX2 ATen and oneDNN paths, which round differently): the tests marked
# "numerics" (greedy tokens and logits compared across summation orders) run a second time with AVX2 kernels
# (REDUCED_ISA), so a machine with AVX-512 checks what an AVX2-only one computes too (docs/testing.md).
#
# The extended group: the tests marked "alone" (deployments of server processes with time bounds) by themselves,
# then the "heavy" ones (most of the machine for a minute: 64 streams at once, a 70B layer's weights), while the soak
# test (one server at light load for minutes, a twentieth of a core) runs beside them.
set -uo pipefail
cd "$(dirname "$0")/.."
extended=0
if [ "${1:-}" = "--extended" ]; then extended=1; shift; fi
bash scripts/setup.sh || exit
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
REDUCED_ISA=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
workers=(-n "${TT_MODELS_TEST_WORKERS:-2}" --dist loadfile)

status=0
record() {  # the first failure's exit code; 5 (the arguments selected no test) is no failure
  [ "$1" -ne 0 ] && [ "$1" -ne 5 ] && [ "$status" -eq 0 ] && status=$1
}

if [ "$extended" -eq 1 ]; then
  soak_log=$(mktemp)
  .venv/bin/python -m pytest -m soak -p no:cacheprovider "$@" >"$soak_log" 2>&1 &
  soak_pid=$!
  .venv/bin/python -m pytest -m alone "$@"; record $?
  .venv/bin/python -m pytest -m heavy "$@"; record $?
  wait "$soak_pid"; soak=$?
  echo "--- the soak test (run beside the others):"
  cat "$soak_log"
  rm -f "$soak_log"
  record "$soak"
  exit "$status"
fi
.venv/bin/python -m pytest "${workers[@]}" -m "not alone and not soak and not heavy" --durations=20 "$@"; record $?
echo "--- the numerics-sensitive tests again, on AVX2 kernels (${REDUCED_ISA[*]}):"
# Only their files are collected (a worker's 6 s), unless the arguments name tests: then theirs. A marked test in a
# helper module (shared cases) runs from the test files that import that module.
numerics=()
while read -r marked; do
  case "$(basename "$marked")" in
    test_*) numerics+=("$marked") ;;
    *) mapfile -t -O "${#numerics[@]}" numerics < <(grep -rlw --include='test_*.py' "$(basename "$marked" .py)" tests) ;;
  esac
done < <(grep -rl --include='*.py' "pytest.mark.numerics" tests)
mapfile -t numerics < <(printf '%s\n' "${numerics[@]}" | sort -u)
for arg in "$@"; do [ -e "${arg%%::*}" ] && numerics=() && break; done
env "${REDUCED_ISA[@]}" .venv/bin/python -m pytest "${workers[@]}" -m "numerics and not alone and not soak and not heavy" \
  "${numerics[@]}" "$@"; record $?
exit "$status"
