"""The ``tt-models`` command: ``tt-models serve MODEL [MODEL ...]`` runs the OpenAI-compatible server (``--role``
makes it an instance of a disaggregated deployment); ``tt-models proxy`` runs that deployment's front."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from tt_models.disagg import broker_connection
from tt_models.disagg.broker_connection import BrokerTLS
from tt_models.disagg.proxy import Proxy, create_proxy_app
from tt_models.server.auth import API_KEY_ENV, BearerAuth, api_keys
from tt_models.server.cors import add_cors_flags, cors_options
from tt_models.server.engine_thread import build_on_own_thread
from tt_models.server.media_policy import add_media_flags, media_policy
from tt_models.server.shutdown import fail_engines, serve
from tt_models.server.tool_parsers import add_tool_flags

if TYPE_CHECKING:
    from tt_models.disagg.encode_engine import EncodeEngine
    from tt_models.engine.llm_engine import LLMEngine

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
    serve.add_argument("--num-kv-blocks", type=int, help="KV pool size in blocks (default: 90%% of the DRAM left "
                                                         "after the weights; 1 GiB on the host backend)")
    serve.add_argument("--max-num-batched-tokens", type=int, help="prefill tokens per step")
    serve.add_argument("--mesh-shape", type=_mesh_shape, metavar="RxC",
                       help="the device mesh, e.g. 1x8 for a T3K (default: 1x<data-parallel-size>); each replica is "
                            "tensor-parallel over its submesh")
    serve.add_argument("--data-parallel-size", type=int, default=1,
                       help="model replicas, one per submesh of the mesh (or of a host mesh); --max-num-seqs is "
                            "shared among them and --num-kv-blocks is per replica")
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                       help="prompts starting with cached full KV blocks take them instead of recomputing them "
                            "(vLLM's automatic prefix caching; default: on)")
    serve.add_argument("--async-decode", action="store_true",
                       help="issue each decode step before detokenizing the previous one (hides host work behind the "
                            "device's; same outputs)")
    serve.add_argument("--sample-on-device", action="store_true",
                       help="decode steps of greedy requests sample on the device: 32 tokens come back instead of "
                            "[32, vocab] logits (same tokens)")
    add_tool_flags(serve)
    serve.add_argument("--max-num-waiting", type=int,
                       help="waiting requests per model beyond which new ones get 503 (default: unlimited)")
    serve.add_argument("--optimizations", choices=["accuracy", "performance"],
                       help="weight precision profile (default: the model's, performance)")
    serve.add_argument("--backend", choices=["ttnn", "mock", "host"],
                       help="where TT-NN runs (default: a TT device if present, else the host backend)")
    _add_http_flags(serve)
    add_media_flags(serve)
    disagg = serve.add_argument_group("encoder disaggregation", "an instance of a deployment behind `tt-models proxy`")
    disagg.add_argument("--role", choices=["both", "encode", "prefill_decode"], default="both",
                        help="encode: run encoders only; prefill_decode: decode with encoder outputs received through "
                             "the broker; both: everything here (default)")
    disagg.add_argument("--broker", help="the broker of encode and prefill-decode instances: "
                                         "redis://[[USER]:PASSWORD@]HOST:PORT[/DB], rediss://... for TLS")
    disagg.add_argument("--broker-password-file", metavar="PATH",
                        help="a file holding the broker's password, for the URL's user (default: "
                             f"${broker_connection.PASSWORD_ENV}; a password in --broker's URL shows in the process "
                             "list)")
    disagg.add_argument("--broker-ca-cert", metavar="PATH", help="rediss://: the CA of the broker's certificate "
                                                                  "(default: the system's)")
    disagg.add_argument("--broker-certfile", metavar="PATH", help="rediss://: this instance's client certificate")
    disagg.add_argument("--broker-keyfile", metavar="PATH", help="rediss://: the key of --broker-certfile")
    disagg.add_argument("--instance-name", help="this instance's name on the broker (default: role-host-port-pid)")
    disagg.add_argument("--transfer-timeout", type=float, default=30.0,
                        help="seconds an encoder output may take between the instances before its request fails and "
                             "its blocks are freed")
    serve.set_defaults(run=serve_command)

    proxy = commands.add_parser("proxy", help="the OpenAI-compatible front of encode and prefill-decode instances",
                                description="Send encoder-decoder requests to an encode instance, then to a "
                                            "prefill-decode instance; decoder-only requests to a prefill-decode "
                                            "instance (least outstanding requests).")
    proxy.add_argument("--encode", nargs="+", required=True, metavar="URL", help="encode instances")
    proxy.add_argument("--prefill-decode", nargs="+", required=True, metavar="URL", help="prefill-decode instances")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8000)
    proxy.add_argument("--encode-timeout", type=float, default=300.0,
                       help="seconds an encode instance may take for a request before the client gets 504")
    _add_http_flags(proxy)
    proxy.add_argument("--upstream-api-key", metavar="KEY", help="the key the proxy sends to the instances")
    proxy.set_defaults(run=proxy_command)
    return parser


def _add_http_flags(parser: argparse.ArgumentParser) -> None:
    """The flags serve and proxy share: logging, stop, API keys, TLS, CORS."""
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--shutdown-timeout", type=float, default=30.0,
                        help="seconds running requests may take to finish after SIGTERM/SIGINT before they are ended "
                             "with an error")
    parser.add_argument("--api-key", action="append", metavar="KEY",
                        help=f"require 'Authorization: Bearer KEY' on every /v1 route (repeatable; default: "
                             f"${API_KEY_ENV}; none: open)")
    parser.add_argument("--ssl-keyfile", metavar="PATH", help="serve HTTPS with this key (and --ssl-certfile)")
    parser.add_argument("--ssl-certfile", metavar="PATH", help="serve HTTPS with this certificate chain")
    add_cors_flags(parser)


def _mesh_shape(text: str) -> tuple[int, int]:
    rows, sep, cols = text.lower().partition("x")
    if not (sep and rows.isdigit() and cols.isdigit() and int(rows) > 0 and int(cols) > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a mesh shape such as 1x8")
    return int(rows), int(cols)


def build_engines(args: argparse.Namespace) -> dict[str, LLMEngine | EncodeEngine]:
    # The engine (and torch) load here, not with this module: `tt-models proxy` starts in a second without them.
    from tt_models.disagg.broker import Broker
    from tt_models.disagg.encode_engine import EncodeEngine
    from tt_models.disagg.prefill_decode import attach_encoder_inbox
    from tt_models.engine.config import EngineConfig
    from tt_models.engine.llm_engine import LLMEngine

    names = args.served_model_name or args.model
    if len(names) != len(args.model):
        raise SystemExit(f"--served-model-name gives {len(names)} names for {len(args.model)} models")
    if len(set(names)) != len(names):
        raise SystemExit(f"served model names must differ, got {names}")
    config = EngineConfig(max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len, block_size=args.block_size,
                          num_kv_blocks=args.num_kv_blocks, max_num_batched_tokens=args.max_num_batched_tokens,
                          max_num_waiting=args.max_num_waiting, data_parallel_size=args.data_parallel_size,
                          async_decode=args.async_decode, sample_on_device=args.sample_on_device,
                          enable_prefix_caching=args.enable_prefix_caching)
    role = getattr(args, "role", "both")
    if (role != "both") != bool(getattr(args, "broker", None)):
        raise SystemExit("--broker redis://HOST:PORT is what --role encode / prefill_decode need, and only they")
    tls = BrokerTLS(getattr(args, "broker_ca_cert", None), getattr(args, "broker_certfile", None),
                    getattr(args, "broker_keyfile", None))
    password = None
    if role != "both":
        try:  # before any model loads: a wrong password or a broker down fails within seconds
            password = broker_connection.broker_password(getattr(args, "broker_password_file", None))
            broker_connection.check(args.broker, tls, password)
        except broker_connection.BrokerUnavailable as error:
            raise SystemExit(f"tt-models serve: {error}") from None
    engines: dict[str, LLMEngine | EncodeEngine] = {}
    try:
        for name, model in zip(names, args.model):
            logger.info("loading %s as %r (%s)", model, name, role)
            kwargs = dict(backend=args.backend, optimizations=args.optimizations, mesh_shape=args.mesh_shape)
            if role == "encode":
                broker = Broker(args.broker, args.instance_name, name, tls, password)
                engines[name] = build_on_own_thread(partial(EncodeEngine.from_model, model, config, broker,
                                                            transfer_timeout=args.transfer_timeout, **kwargs), name)
                continue
            engines[name] = build_on_own_thread(partial(LLMEngine.from_model, model, config, **kwargs), name)
            if role == "prefill_decode" and engines[name].runner.uses_cross:
                attach_encoder_inbox(engines[name], Broker(args.broker, args.instance_name, name, tls, password),
                                     timeout=args.transfer_timeout)
    except BaseException:
        for engine in engines.values():
            engine.close()
        raise
    return engines


def serve_command(args: argparse.Namespace) -> None:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The app closes the engines at shutdown (its lifespan), after the drain of tt_models.server.shutdown.
    if args.role != "both" and not args.instance_name:
        args.instance_name = f"{args.role}-{socket.gethostname()}-{args.port}-{os.getpid()}"
    from tt_models.server.app import create_app
    from tt_models.server.tools import tool_settings

    keys = api_keys(args.api_key)  # checked before the models load
    cors = _checked_http_flags(args)
    tools = tool_settings(args)
    media = media_policy(args)
    app = create_app(build_engines(args), close_engines=True, role=args.role, instance=args.instance_name,
                     media_policy=media, tool_settings=tools)
    _serve(app, keys, cors, fail_engines(app.state.engines.values()), args)


def proxy_command(args: argparse.Namespace) -> None:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    keys = api_keys(args.api_key)
    cors = _checked_http_flags(args)
    proxy = Proxy(args.encode, args.prefill_decode, encode_timeout=args.encode_timeout,
                  upstream_api_key=args.upstream_api_key)
    _serve(create_proxy_app(proxy), keys, cors, proxy.abort, args)


def _checked_http_flags(args: argparse.Namespace) -> dict[str, object] | None:
    """Refuse inconsistent TLS and CORS flags (before any model loads); the CORS options."""
    if bool(args.ssl_keyfile) != bool(args.ssl_certfile):
        raise SystemExit("--ssl-keyfile and --ssl-certfile go together")
    for path in (args.ssl_keyfile, args.ssl_certfile):
        if path and not os.path.isfile(path):
            raise SystemExit(f"{path} is not a file")
    return cors_options(args)


def guard(app: FastAPI, keys: list[str], cors: dict[str, object] | None) -> FastAPI:
    """``app`` behind its API keys (if any) and CORS (if ``cors``, the options of :func:`cors_options`)."""
    if keys:
        app.add_middleware(BearerAuth, keys=keys)
    if cors:  # added last, so outside the keys' check: a browser's preflight carries no key
        app.add_middleware(CORSMiddleware, **cors)
    return app


def _serve(app: FastAPI, keys: list[str], cors: dict[str, object] | None, abort: Callable[[str], None],
           args: argparse.Namespace) -> None:
    guard(app, keys, cors)
    serve(app, abort, host=args.host, port=args.port, log_level=args.log_level,
          shutdown_timeout=args.shutdown_timeout, ssl_keyfile=args.ssl_keyfile, ssl_certfile=args.ssl_certfile)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
