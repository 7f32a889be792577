"""CORS, with vLLM's flags: ``--allowed-origins`` (a JSON list, as vLLM takes it, or one origin per use),
``--allowed-methods``, ``--allowed-headers``, ``--allow-credentials``, as Starlette's CORSMiddleware takes them.

Unlike vLLM, whose default lets every origin in, no ``--allowed-origins`` means no CORS headers at all: browsers then
keep other sites' pages from reading the server's answers, which is the safe default for a server holding API keys.
"""

from __future__ import annotations

import argparse
import json



def _names(text: str) -> list[str]:
    """A flag's value: a JSON list of strings, or one string."""
    if not text.lstrip().startswith("["):
        return [text]
    try:
        names = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON list: {error}") from None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON list of strings")
    return names


def add_cors_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("CORS", "cross-origin requests from browsers (default: none allowed)")
    group.add_argument("--allowed-origins", type=_names, action="extend", metavar="ORIGIN",
                       help='origins whose pages may call the server: a JSON list (\'["https://a.example"]\', '
                            '\'["*"]\') or one per use')
    group.add_argument("--allowed-methods", type=_names, action="extend", metavar="METHOD",
                       help="methods those origins may use (default: all)")
    group.add_argument("--allowed-headers", type=_names, action="extend", metavar="HEADER",
                       help="request headers those origins may send (default: all)")
    group.add_argument("--allow-credentials", action="store_true",
                       help="let those origins send cookies and HTTP authentication")


def cors_options(args: argparse.Namespace) -> dict[str, object] | None:
    """CORSMiddleware's options from the flags; None without ``--allowed-origins`` (no CORS headers at all)."""
    if not args.allowed_origins:
        if args.allowed_methods or args.allowed_headers or args.allow_credentials:
            raise SystemExit("--allowed-methods, --allowed-headers and --allow-credentials need --allowed-origins")
        return None
    return {"allow_origins": args.allowed_origins, "allow_methods": args.allowed_methods or ["*"],
            "allow_headers": args.allowed_headers or ["*"], "allow_credentials": args.allow_credentials}
