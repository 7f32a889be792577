"""vLLM's CORS flags (``--allowed-origins`` ...) and TLS flags (``--ssl-keyfile``, ``--ssl-certfile``) of ``tt-models
serve`` and ``tt-models proxy``: CORS on the proxy's app in-process (the same wiring as serve's), TLS with a real
proxy in front of fake instances (no model) and a certificate made in the test."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.certs import self_signed
from tests.disagg.fake_instance import MODEL, FakeInstance
from tt_models.disagg.proxy import Proxy, create_proxy_app
from tt_models.server import cli
from tt_models.server.auth import api_keys
from tt_models.server.cors import cors_options
from tt_models.testing.server_process import free_port, wait_healthy

OK, OTHER_OK, FOREIGN = "https://ok.example", "https://two.example", "https://evil.example"
PREFLIGHT = {"access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type"}


def proxy_app(*flags: str) -> TestClient:
    """The proxy's app as ``tt-models proxy`` guards it, its lifespan (discovery) not run: CORS and key checks
    answer before any instance would be asked."""
    args = cli._parser().parse_args(["proxy", "--encode", "http://127.0.0.1:9", "--prefill-decode",
                                     "http://127.0.0.1:9", *flags])
    app = create_proxy_app(Proxy(args.encode, args.prefill_decode))
    return TestClient(cli.guard(app, api_keys(args.api_key), cors_options(args)))


def test_allowed_origins_get_cors_headers_and_others_do_not():
    client = proxy_app("--allowed-origins", f'["{OK}"]', "--allowed-origins", OTHER_OK, "--api-key", "k")
    for origin in (OK, OTHER_OK):  # from the JSON list and from a second use of the flag
        allowed = client.options("/v1/chat/completions", headers={"origin": origin, **PREFLIGHT})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == origin
        assert "POST" in allowed.headers["access-control-allow-methods"]
    foreign = client.options("/v1/chat/completions", headers={"origin": FOREIGN, **PREFLIGHT})
    assert foreign.status_code == 400 and "access-control-allow-origin" not in foreign.headers
    # The key's refusal carries the CORS headers too: the allowed page can read why it was refused.
    refused = client.get("/v1/models", headers={"origin": OK})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == OK
    metrics = client.get("/metrics", headers={"origin": FOREIGN})
    assert metrics.status_code == 200 and "access-control-allow-origin" not in metrics.headers


def test_restricted_methods_and_no_cors_without_origins():
    client = proxy_app("--allowed-origins", OK, "--allowed-methods", '["GET"]')
    assert client.options("/v1/chat/completions", headers={"origin": OK, **PREFLIGHT}).status_code == 400
    closed = proxy_app().options("/v1/chat/completions", headers={"origin": OK, **PREFLIGHT})
    assert closed.status_code == 405 and "access-control-allow-origin" not in closed.headers
    with pytest.raises(SystemExit, match="need --allowed-origins"):
        cors_options(cli._parser().parse_args(["proxy", "--encode", "x", "--prefill-decode", "y",
                                               "--allow-credentials"]))


def test_proxy_serves_https_with_the_given_certificate(tmp_path):
    certificate = self_signed(tmp_path)
    encode, decode = FakeInstance("encode").start(), FakeInstance("prefill_decode").start()
    port, log = free_port(), tmp_path / "proxy.log"
    url = f"https://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tt_models.server.cli", "proxy", "--encode", encode.url, "--prefill-decode",
               decode.url, "--port", str(port), "--ssl-keyfile", str(certificate.keyfile), "--ssl-certfile",
               str(certificate.certfile), "--allowed-origins", OK]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    trust = ssl.create_default_context(cafile=certificate.certfile)
    try:
        wait_healthy(url, process, log, seconds=60, verify=trust)
        with httpx.Client(verify=trust, timeout=10) as client:
            reply = client.post(f"{url}/v1/completions", json={"model": MODEL, "max_tokens": 2, "stream": True},
                                headers={"origin": OK})
            assert reply.status_code == 200 and reply.text.endswith("data: [DONE]\n\n")
            assert reply.headers["access-control-allow-origin"] == OK
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/health", timeout=5)  # the system's CAs do not know it
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)  # no plain HTTP on that port
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        encode.stop()
        decode.stop()
    assert "Traceback" not in log.read_text(), log.read_text()
