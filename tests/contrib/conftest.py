"""Fixtures for the contrib tests: a real redis-server for the Redis fleet."""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

from ..redis_server import HOW_TO_GET, RedisServer


def _missing(reason: str) -> None:
    # CI sets SUME_REQUIRE_REDIS=1 so a machine without Redis fails instead of skipping.
    if os.environ.get("SUME_REQUIRE_REDIS") == "1":
        pytest.fail(f"SUME_REQUIRE_REDIS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_session_server() -> Iterator[RedisServer]:
    """One redis-server per test session on a free 127.0.0.1 port (--save "" --appendonly no)."""
    try:
        import redis  # noqa: F401
    except ImportError:
        _missing("redis-py is not installed (pip install 'sume-urllib3[redis]')")
    server = RedisServer.find()
    if server is None:
        _missing(HOW_TO_GET)
        raise AssertionError("unreachable")  # pragma: no cover
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_server(redis_session_server: RedisServer) -> Iterator[RedisServer]:
    """The session's redis-server, running, empty, scripts flushed, no memory limit."""
    server = redis_session_server
    server.resume()
    server.start()
    client = _client(server)
    client.flushall()
    client.script_flush()
    client.config_set("maxmemory", 0)
    yield server
    server.resume()
    if server.alive():
        _client(server).config_set("maxmemory", 0)


def _client(server: RedisServer) -> Any:
    import redis
    return redis.Redis.from_url(server.url, socket_timeout=5)
