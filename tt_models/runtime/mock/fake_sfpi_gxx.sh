#!/bin/sh
# tt_models mock sfpi stand-in (MOCK devices only; see tt_models/runtime/mock)
PYTHON="@PYTHON@"
STAND_IN="@STAND_IN@"
# The front of fake_sfpi_gxx.py. A Python start costs ~30 ms and a cold kernel cache makes thousands of calls
# (about 1,100 for the Llama tests on a mock n150), so the common ones are answered here: a compile writes its
# empty object and its dependency file; a kernel link copies the ELF the stand-in made before for the same linker
# script and firmware symbols (the ELF depends on nothing else). Everything else goes to the stand-in, which also
# refuses to run outside a mock run and logs calls (TT_FAKE_GXX_LOG).
run_stand_in() { exec "$PYTHON" -S "$STAND_IN" "$@"; }
[ -n "$TT_METAL_MOCK_CLUSTER_DESC_PATH" ] && [ -z "$TT_FAKE_GXX_LOG" ] || run_stand_in "$@"

out= mf= script= symbols= compile= inputs=
parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      *" "*|--version|-dumpversion) return 1 ;;
      -o) out=$2; shift ;;
      -MF) mf=$2; shift ;;
      -include) inputs="$inputs $2"; shift ;;
      -c|c++-header) compile=1 ;;
      -T*) script=${1#-T} ;;
      -Wl,*--just-symbols=*) symbols="$symbols $1" ;;
      -*) ;;
      *) inputs="$inputs $1" ;;
    esac
    shift
  done
}
parse "$@" || run_stand_in "$@"

if [ -n "$mf" ]; then
  deps=
  for input in $inputs; do
    case "$input" in *.o|*.a) continue ;; esac
    [ -f "$input" ] || continue
    case "$input" in /*) ;; *) input="$PWD/$input" ;; esac
    deps="$deps $input"
  done
  printf '%s:%s\n' "$out" "${deps:- }" > "$mf" || exit 1
fi
if [ -n "$compile" ] || [ -z "$script" ]; then
  [ -z "$out" ] || : > "$out"
  exit
fi
case "${script##*/}" in kernel_*) ;; *) run_stand_in "$@" ;; esac
[ -n "$out" ] && [ -n "$TT_METAL_CACHE" ] || run_stand_in "$@"
memo="$TT_METAL_CACHE/fake-sfpi-kernel-elfs/$(printf '%s\n%s' "$script" "$symbols" | cksum | tr ' ' _).elf"
if [ -f "$memo" ]; then
  exec cp "$memo" "$out"
fi
"$PYTHON" -S "$STAND_IN" "$@" || exit
mkdir -p "${memo%/*}" && cp "$out" "$memo.$$" && mv "$memo.$$" "$memo"
