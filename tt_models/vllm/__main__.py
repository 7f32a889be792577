"""``python -m tt_models.vllm bundle OUT_DIR``: write one TT vLLM EXTRA_MODELS_DIR bundle per generator class."""

from __future__ import annotations

import argparse
from pathlib import Path

from tt_models.vllm.bundle import write_bundles


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tt_models.vllm", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    bundle = commands.add_parser("bundle", help="write EXTRA_MODELS_DIR bundles (one folder per class)")
    bundle.add_argument("out_dir", type=Path, help="the folder to serve as EXTRA_MODELS_DIR")
    args = parser.parse_args(argv)
    for folder in write_bundles(args.out_dir):
        print(folder)
    print(f"serve with EXTRA_MODELS_DIR={args.out_dir.resolve()}")


if __name__ == "__main__":
    main()
