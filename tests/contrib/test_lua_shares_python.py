"""The Lua port reads every number, code and field it shares with Python from ``_pacing``.

``_scripts.header()`` writes ``_pacing``'s upper-case numbers and ``State``'s fields in front of
the scripts; these tests fail if Redis reads a different value from that header than Python
holds, if a script types a number of its own, or if it names one the header does not define.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set

import redis

from sume_urllib3.contrib.redis import _scripts
from sume_urllib3.pacing import _core as _pacing
from sume_urllib3.pacing import _fleet

from ..redis_server import RedisServer

LUA = Path(_scripts.__file__).parent
SCRIPTS = sorted(LUA.glob("*.lua"))
#: The numbers a script may type: none of them is a setting (halving, doubling, percent, the
#: middle of a random draw, and the HTTP statuses the rules are about).
ALLOWED_NUMBERS = {"0", "1", "2", "0.5", "100", "400", "429", "503"}
#: Upper-case names a script may use without the header defining them.
REDIS_NAMES = {"KEYS", "ARGV", "TIME", "HMGET", "HSET", "PEXPIRE", "ZADD", "ZREM", "ZCARD", "ZRANGE",
               "ZREMRANGEBYSCORE"}


def code_of(path: Path) -> str:
    """A script without its comments, string literals and argument indexes (ARGV[6])."""
    text = re.sub(r"--[^\n]*", "", path.read_text(encoding="utf-8"))
    text = re.sub(r"\b(KEYS|ARGV)\[\d+\]", r"\1[]", text)
    return re.sub(r"'[^'\n]*'", "''", text)


def read_back(server: RedisServer, names: List[str]) -> List[str]:
    """What Redis reads for each name after the header (floats to the last bit)."""
    body = "local out = {}\n" + "".join(
        f"out[#out + 1] = string.format('%.17g', {name})\n" for name in names
    ) + "return out\n"
    client = redis.Redis.from_url(server.url)
    try:
        return [v.decode() for v in client.eval(_scripts.header() + body, 0)]
    finally:
        client.close()


def test_redis_reads_every_constant_as_python_holds_it(redis_server: RedisServer) -> None:
    constants: Dict[str, float] = dict(_scripts.constants())
    assert {"OPEN_WINDOW", "MAX_COOLDOWN_US", "SEND", "NO_BUDGET", "SLOW_START", "ERROR"} <= set(constants)
    got = read_back(redis_server, list(constants))
    assert {name: float(value) for name, value in zip(constants, got)} == {
        name: float(value) for name, value in constants.items()
    }


def test_redis_reads_state_fields_and_defaults_as_python_declares_them(redis_server: RedisServer) -> None:
    defaults = _scripts.fields()
    assert list(defaults) == [name for name in vars(_pacing.State()) if name != "flight"]
    got = read_back(redis_server, [f"DEFAULTS[FIELDS[{i + 1}]]" for i in range(len(defaults))])
    assert [float(v) for v in got] == [float(v) for v in defaults.values()]
    count = read_back(redis_server, ["#FIELDS"])
    assert int(count[0]) == len(defaults)


def test_no_script_types_a_number_python_owns() -> None:
    assert SCRIPTS, LUA
    for path in SCRIPTS:
        numbers = set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])", code_of(path)))
        assert numbers <= ALLOWED_NUMBERS, (path.name, sorted(numbers - ALLOWED_NUMBERS))


def test_no_script_defines_or_guesses_a_shared_name() -> None:
    defined: Set[str] = set(_scripts.constants()) | {"FIELDS", "DEFAULTS"}
    for path in SCRIPTS:
        code = code_of(path)
        assert not re.search(r"local\s+[A-Z][A-Z_0-9]*\b", code), path.name  # header names are Python's
        used = set(re.findall(r"\b[A-Z][A-Z_0-9]+\b", code))
        assert used - REDIS_NAMES <= defined, (path.name, sorted(used - REDIS_NAMES - defined))


def test_code_tables_exist_once() -> None:
    names = {"SOURCES", "RETRY_KINDS", "_SOURCES", "_KINDS"}
    for module in (_fleet, _scripts):
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        assert not re.search(r'^\w*\s*=\s*\(None, "pace"', source, re.M), module.__name__
        assert not any(re.search(rf"^{name}\s*=", source, re.M) for name in names), module.__name__
