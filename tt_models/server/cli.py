"""The ``tt-models`` command: ``tt-models serve MODEL [MODEL ...]`` runs the OpenAI-compatible server."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import uvicorn

from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server.app import create_app

logger = logging.getLogger("tt_models.server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tt-models", description="tt-models: TT-NN transformer models")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve models through an OpenAI-compatible HTTP API",
                                description="Serve models through an OpenAI-compatible HTTP API (one engine per "
                                            "model; requests pick one by its served name).")
    serve.add_argument("model", nargs="+", help="an HF directory, a local HF cache id, a .gguf file, a CTranslate2 "
                                                "Whisper directory or an alias (smollm2-135m-instruct, "
                                                "whisper-tiny.en, whisper-base)")
    serve.add_argument("--served-model-name", nargs="+", help="the name of each model in requests (default: as given)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 for every interface)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-num-seqs", type=int, default=32, help="sequences per decode step (at most 32)")
    serve.add_argument("--block-size", type=int, default=64, help="tokens per KV block (a multiple of 32)")
    serve.add_argument("--max-model-len", type=int, help="decoder context (default: the model's)")
    serve.add_argument("--num-kv-blocks", type=int, help="KV pool size in blocks (default: sized from 2 GiB)")
    serve.add_argument("--max-num-batched-tokens", type=int, help="prefill tokens per step")
    serve.add_argument("--max-num-waiting", type=int,
                       help="waiting requests per model beyond which new ones get 503 (default: unlimited)")
    serve.add_argument("--optimizations", choices=["accuracy", "performance"],
                       help="weight precision profile (default: the model's, performance)")
    serve.add_argument("--backend", choices=["ttnn", "mock", "host"],
                       help="where TT-NN runs (default: a TT device if present, else the host backend)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(run=serve_command)
    return parser


def build_engines(args: argparse.Namespace) -> dict[str, LLMEngine]:
    names = args.served_model_name or args.model
    if len(names) != len(args.model):
        raise SystemExit(f"--served-model-name gives {len(names)} names for {len(args.model)} models")
    if len(set(names)) != len(names):
        raise SystemExit(f"served model names must differ, got {names}")
    config = EngineConfig(max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len, block_size=args.block_size,
                          num_kv_blocks=args.num_kv_blocks, max_num_batched_tokens=args.max_num_batched_tokens,
                          max_num_waiting=args.max_num_waiting)
    engines: dict[str, LLMEngine] = {}
    try:
        for name, model in zip(names, args.model):
            logger.info("loading %s as %r", model, name)
            engines[name] = LLMEngine.from_model(model, config, backend=args.backend,
                                                 optimizations=args.optimizations)
    except BaseException:
        for engine in engines.values():
            engine.close()
        raise
    return engines


def serve_command(args: argparse.Namespace) -> None:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The app closes the engines at shutdown: after a graceful shutdown uvicorn re-raises the signal that
    # stopped it, so code after ``uvicorn.run`` never runs then.
    app = create_app(build_engines(args), close_engines=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
