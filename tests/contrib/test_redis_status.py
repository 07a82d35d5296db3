"""``status --redis``: a RedisFleet's keys read while a herd runs, by read-only commands only."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from typing import Any, Dict, List

import pytest

if os.environ.get("SUME_REQUIRE_REDIS") != "1":  # CI requires redis-py: an ImportError fails there
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'sume-urllib3[redis]')")

import redis

from sume_urllib3._cli import run
from sume_urllib3._policy import Policy
from sume_urllib3.contrib.redis import RedisFleet
from sume_urllib3.pacing import RetryBudget
from sume_urllib3.pacing.status import KeyStatus, read_status

from ..pace_herd import BUSY_KEY, HOLD_KEY, HeldHerd
from ..redis_server import RedisServer
from ..test_status import check_held

BUDGET = RetryBudget(ratio=0.5, window=10.0, min_per_second=1.0)


def _dump(client: Any) -> Dict[bytes, Any]:
    """Every key's value and time to live (to the second): what a reading must leave as it was."""
    return {key: (client.dump(key), client.ttl(key)) for key in client.scan_iter()}


def _commands(server: RedisServer, during: Any) -> List[str]:
    """The commands Redis ran while ``during()`` did (MONITOR, on a connection of its own)."""
    seen: List[str] = []
    monitor = redis.Redis.from_url(server.url).monitor()
    ready = threading.Event()

    def watch() -> None:
        with monitor as m:
            ready.set()
            for event in m.listen():
                if event["command"] == "ECHO sume-status-done":
                    return
                seen.append(event["command"].split()[0].upper())

    thread = threading.Thread(target=watch)
    thread.start()
    ready.wait(5)
    during()
    redis.Redis.from_url(server.url).echo("sume-status-done")
    thread.join(10)
    return seen


@pytest.mark.slow
def test_a_redis_fleets_status_is_the_herds_and_reading_changes_nothing(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    with HeldHerd(RedisFleet(redis_server.url, prefix="herd", retry_budget=BUDGET, timeout=2.0)) as herd:
        before = _dump(client)
        reader = RedisFleet(redis_server.url, prefix="herd", retry_budget=BUDGET, timeout=2.0)
        rows: List[KeyStatus] = []
        commands = _commands(
            redis_server, lambda: rows.extend(read_status(reader, base_url=herd.base_url, api_key=HOLD_KEY))
        )
        assert _dump(client) == before
        # Reads, and a new connection's handshake (HELLO, CLIENT SETINFO): no EVAL, no write.
        assert set(commands) <= {"TIME", "SCAN", "HGETALL", "ZRANGE", "HELLO", "CLIENT"}, commands
        assert {"SCAN", "HGETALL", "ZRANGE"} <= set(commands)
        check_held(herd, rows, budget=True)
        # Another prefix is another fleet: none of these keys.
        assert read_status(RedisFleet(redis_server.url, prefix="other")) == []
        # The command line reads the same keys.
        out, err = io.StringIO(), io.StringIO()
        argv = ["status", "--redis", redis_server.url, "--prefix", "herd", "--json"]
        assert 0 == run(argv, Policy(), out, err), err.getvalue()
        assert {row["key"] for row in json.loads(out.getvalue())["keys"]} == {row.key for row in rows}
    assert not herd.errors
    assert BUSY_KEY not in out.getvalue()


def test_an_unreachable_redis_is_an_error(redis_server: RedisServer) -> None:
    url = f"redis://127.0.0.1:{redis_server.port + 1}/0"  # nobody listens there (the fixture's neighbour)
    out, err = io.StringIO(), io.StringIO()
    assert 1 == run(["status", "--redis", url], Policy(), out, err)
    assert "cannot read RedisFleet(" in err.getvalue()
    assert "ConnectionError" in err.getvalue()


def test_the_command_line_without_redis_py_says_what_to_install() -> None:
    code = "import sys; sys.modules['redis'] = None; from sume_urllib3._cli import main; " \
           "raise SystemExit(main(['status', '--redis', 'redis://localhost']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'sume-urllib3[redis]'" in done.stderr
