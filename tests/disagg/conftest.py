import pytest

from tests.disagg.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()
