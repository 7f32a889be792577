"""The broker with credentials, on a real Redis server: a password for the default user, an ACL user, TLS
(``rediss://``). Wrong credentials or no broker fail at startup within seconds, naming the broker with its password
masked; no password reaches a log line or an error."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from tests.certs import self_signed
from tests.disagg.redis_server import RedisServer
from tt_models.disagg import broker_connection
from tt_models.disagg.broker import Broker, Metadata, parse_message
from tt_models.disagg.broker_connection import BrokerTLS, BrokerUnavailable, masked_url
from tt_models.disagg.connector import Connector
from tt_models.testing.server_process import free_port

ADMIN_PASSWORD = "admin-Pw-5c1e"
USER, PASSWORD = "encoder", "user-Pw-9f3a"
WRONG = "wrong-Pw-7d2b"
STARTUP_BOUND_S = 5.0


@pytest.fixture(scope="module")
def secured():
    server = RedisServer(password=ADMIN_PASSWORD, users={USER: PASSWORD}).start()
    yield server
    server.stop()


def round_trip(url: str, tls: BrokerTLS = BrokerTLS(), password: str | None = None) -> None:
    broker_connection.check(url, tls, password)
    encode, decode = Broker(url, "E", "m", tls, password), Broker(url, "P", "m", tls, password)
    metadata = Metadata("r1", "E", 3, (3, 4), "bfloat16")
    encode.send_metadata("P", metadata)
    channel, payload = decode.receive(("metadata",), timeout=2)
    assert parse_message(channel, payload) == metadata


def test_acl_user_and_default_password_round_trip(secured, caplog):
    caplog.set_level(logging.DEBUG)
    url = secured.user_url(USER, PASSWORD)
    round_trip(url)
    round_trip(secured.url)  # the default user, with requirepass
    assert Broker(url, "E", "m").url == f"redis://{USER}:***@{secured.address}"
    assert PASSWORD not in caplog.text and ADMIN_PASSWORD not in caplog.text


def test_rediss_with_the_ca_round_trips_and_without_it_is_refused(tmp_path):
    certificate = self_signed(tmp_path)
    server = RedisServer(users={USER: PASSWORD}, tls=certificate).start()
    try:
        url = server.user_url(USER, PASSWORD)
        round_trip(url, BrokerTLS(ca_cert=str(certificate.certfile)))
        round_trip(f"{url}?ssl_ca_certs={certificate.certfile}")  # redis-py's URL parameter works as well
        with pytest.raises(BrokerUnavailable, match="CERTIFICATE_VERIFY_FAILED") as untrusted:
            broker_connection.check(url)
        assert PASSWORD not in str(untrusted.value)
        with pytest.raises(BrokerUnavailable, match="TLS files need a rediss:// URL"):
            broker_connection.check(url.replace("rediss://", "redis://"), BrokerTLS(ca_cert=str(certificate.certfile)))
    finally:
        server.stop()


@pytest.mark.parametrize("user, password", [(USER, WRONG), ("nobody", PASSWORD), ("", WRONG), (None, None)],
                         ids=["wrong-password", "wrong-user", "wrong-default-password", "no-password"])
def test_wrong_credentials_fail_fast_naming_the_masked_broker(secured, caplog, user, password):
    caplog.set_level(logging.DEBUG)
    url = f"redis://{secured.address}" if password is None else f"redis://{user}:{password}@{secured.address}"
    start = time.monotonic()
    with pytest.raises(BrokerUnavailable) as refused:
        broker_connection.check(url)
    assert time.monotonic() - start < STARTUP_BOUND_S
    message = str(refused.value)
    assert f"the broker {masked_url(url)} refused the credentials" in message, message
    for secret in (WRONG, PASSWORD, ADMIN_PASSWORD):
        assert secret not in message and secret not in caplog.text


def test_unreachable_broker_fails_fast():
    url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=f"the broker redis://{USER}:\\*\\*\\*@127.0.0.1:\\d+ is unreachable"):
        broker_connection.check(url)
    assert time.monotonic() - start < STARTUP_BOUND_S


def test_masked_url_hides_every_form_of_the_password():
    assert masked_url("rediss://u:p%40ss@h:6380/2?password=x&ssl_ca_certs=/ca.pem") == \
        "rediss://u:***@h:6380/2?password=***&ssl_ca_certs=/ca.pem"
    assert masked_url("redis://:pw@h:6379") == "redis://:***@h:6379"
    assert masked_url("redis://h:6379/0") == "redis://h:6379/0"


def test_connector_logs_a_refusal_with_the_masked_broker(secured, caplog):
    caplog.set_level(logging.DEBUG)
    connector = Connector(Broker(secured.user_url(USER, WRONG), "P", "m"), ("metadata",), tick=0.05)
    connector.start()
    try:
        deadline = time.monotonic() + 5
        while "unreachable" not in caplog.text:
            assert time.monotonic() < deadline, "the connector logged no outage"
            time.sleep(0.02)
    finally:
        connector.stop()
    assert f"broker redis://{USER}:***@{secured.address} unreachable" in caplog.text
    assert WRONG not in caplog.text


def test_serve_with_a_wrong_password_exits_at_startup(secured):
    url = secured.user_url(USER, WRONG)
    start = time.monotonic()
    # The broker is checked before any model loads: the model named here is never read.
    done = subprocess.run([sys.executable, "-m", "tt_models.server.cli", "serve", "whisper-tiny.en", "--role",
                           "encode", "--broker", url, "--port", str(free_port())],
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and time.monotonic() - start < 120
    assert f"the broker redis://{USER}:***@{secured.address} refused the credentials" in output, output
    assert WRONG not in output and "Traceback" not in output, output
