"""The broker's password from a file (``--broker-password-file``) or the environment (``$TT_MODELS_BROKER_PASSWORD``)
instead of the URL, where the process list shows it: it authenticates the URL's user (or the default one), a wrong
one fails at startup within seconds naming the masked broker, and a second password beside the URL's is refused."""

from __future__ import annotations

import time

import pytest

from tests.disagg.redis_server import RedisServer
from tests.disagg.test_broker_auth import STARTUP_BOUND_S, round_trip
from tt_models.disagg import broker_connection
from tt_models.disagg.broker_connection import PASSWORD_ENV, BrokerTLS, BrokerUnavailable, broker_password
from tt_models.server import cli

ADMIN_PASSWORD = "admin-Pw-41b7"
USER, PASSWORD = "encoder", "user-Pw-e83c"
WRONG = "wrong-Pw-2a6d"


@pytest.fixture(scope="module")
def secured():
    server = RedisServer(password=ADMIN_PASSWORD, users={USER: PASSWORD}).start()
    yield server
    server.stop()


def password_file(tmp_path, password: str) -> str:
    path = tmp_path / "broker-password"
    path.write_text(password + "\n")  # as `echo` writes it: the line break is not part of the password
    return str(path)


def test_a_password_file_or_the_environment_authenticates(secured, tmp_path, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    user_url = f"redis://{USER}@{secured.address}"
    round_trip(user_url, password=broker_password(password_file(tmp_path, PASSWORD)))  # the ACL user
    monkeypatch.setenv(PASSWORD_ENV, ADMIN_PASSWORD)
    assert broker_password(None) == ADMIN_PASSWORD
    round_trip(f"redis://{secured.address}", password=broker_password(None))  # the default user
    round_trip(secured.user_url(USER, PASSWORD), password=None)  # the URL's password still works


def test_a_wrong_password_from_a_file_fails_fast_naming_the_masked_broker(secured, tmp_path):
    url = f"redis://{USER}@{secured.address}"
    start = time.monotonic()
    with pytest.raises(BrokerUnavailable) as refused:
        broker_connection.check(url, BrokerTLS(), broker_password(password_file(tmp_path, WRONG)))
    assert time.monotonic() - start < STARTUP_BOUND_S
    assert f"the broker {url} refused the credentials" in str(refused.value)
    assert WRONG not in str(refused.value)


def test_two_passwords_unreadable_and_empty_files_are_refused(secured, tmp_path):
    with pytest.raises(BrokerUnavailable, match=r"its URL has a password, and another one was given") as both:
        broker_connection.check(secured.user_url(USER, PASSWORD), password=PASSWORD)
    assert f"redis://{USER}:***@{secured.address}" in str(both.value) and PASSWORD not in str(both.value)
    with pytest.raises(BrokerUnavailable, match="cannot be read"):
        broker_password(str(tmp_path / "missing"))
    with pytest.raises(BrokerUnavailable, match="is empty"):
        broker_password(password_file(tmp_path, ""))


def test_serve_with_a_wrong_password_file_exits_before_loading(secured, tmp_path):
    url = f"redis://{USER}@{secured.address}"
    # In this process (test_broker_auth.py runs `tt-models serve` itself; the check's time is bounded above): the
    # broker is checked before any model loads, so the model named here is never read.
    args = cli._parser().parse_args(["serve", "whisper-tiny.en", "--role", "encode", "--broker", url,
                                     "--broker-password-file", password_file(tmp_path, WRONG)])
    with pytest.raises(SystemExit) as exited:
        cli.build_engines(args)
    assert str(exited.value).startswith(f"tt-models serve: the broker {url} refused the credentials")
    assert WRONG not in str(exited.value)
