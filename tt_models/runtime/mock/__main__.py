"""Command line: ``python -m tt_models.runtime.mock {install,uninstall,status,env}``.

``install`` puts the sfpi compiler stand-in into the ttnn package of the running interpreter
(the one-command setup of a virtualenv for mock-device tests) and prints where.
``env --board n300`` prints shell ``export`` lines for the mock environment.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from . import BOARDS, environment, install, is_installed, uninstall, _bin_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tt_models.runtime.mock",
        description="Mock Tenstorrent device support: sfpi compiler stand-in and environment.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="install the sfpi stand-in into ttnn (idempotent)")
    p_install.add_argument("--ttnn-dir", help="ttnn package directory (default: found via importlib)")
    p_install.add_argument("--python", help="interpreter the wrappers exec (default: this one)")
    p_uninstall = sub.add_parser("uninstall", help="remove the stand-in from ttnn")
    p_uninstall.add_argument("--ttnn-dir")
    p_status = sub.add_parser("status", help="print whether the stand-in is installed (exit 1 if not)")
    p_status.add_argument("--ttnn-dir")
    p_env = sub.add_parser("env", help="print `export` lines for a mock board")
    p_env.add_argument("--board", default="n150", choices=sorted(BOARDS))
    p_env.add_argument("--cache-dir")
    args = parser.parse_args(argv)

    if args.command == "install":
        path = install(args.ttnn_dir, args.python)
        print(f"installed mock sfpi compiler stand-in into {path}")
    elif args.command == "uninstall":
        print(f"removed mock sfpi compiler stand-in from {uninstall(args.ttnn_dir)}")
    elif args.command == "status":
        ok = is_installed(args.ttnn_dir)
        where = _bin_dir(args.ttnn_dir) if ok else "-"
        print(f"installed: {ok} ({where})")
        return 0 if ok else 1
    else:
        for key, value in environment(args.board, args.cache_dir).items():
            print(f"export {key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
