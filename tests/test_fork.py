"""A forked process starts afresh, whether or not its fork ran Python's at-fork hooks.

uWSGI forks its workers from C (no ``os.register_at_fork`` hook runs); gunicorn and Celery
fork from Python (the hooks run). Both must leave a child with nothing the parent still uses.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from typing import Any, Callable, Dict, List

import pytest

from sume_urllib3 import _fork
from sume_urllib3.pacing import RetryBudget
from sume_urllib3.testing import FakeSume

from .conftest import in_a_child_forked_from_c, in_a_forked_child
from .raw_server import (
    raw_session,
    status_503_once_on_warm,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _counting(calls: List[int]) -> Callable[[], None]:
    def callback() -> None:
        calls.append(os.getpid())

    return callback


def test_check_runs_the_child_callbacks_once_in_a_child_forked_from_c() -> None:
    """In a child no hook ran for, the first check() resets, and later checks do nothing."""
    calls: List[int] = []
    _fork.in_child(_counting(calls))
    try:

        def child() -> str:
            before = len(calls)
            _fork.check()
            _fork.check()
            return f"{before} {len(calls)} {calls[-1] == os.getpid()}"

        assert in_a_child_forked_from_c(child) == "0 1 True"
        assert calls == []  # the parent resets nothing
    finally:
        _fork._callbacks.pop()


def test_the_at_fork_hook_resets_once_and_check_then_does_nothing() -> None:
    """After a Python fork the hook has reset already; check() does not reset twice."""
    calls: List[int] = []
    _fork.in_child(_counting(calls))
    try:

        def child() -> str:
            after_hook = len(calls)
            _fork.check()
            return f"{after_hook} {len(calls)}"

        assert in_a_forked_child(child) == "1 1"
    finally:
        _fork._callbacks.pop()


def test_a_failed_reset_is_logged_naming_the_logger_once() -> None:
    """A reset that raises is logged (the others still run), and the line does not repeat
    the logger's name under a format that shows it."""
    lines: List[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    class Failing:
        def _after_fork(self) -> None:
            raise RuntimeError("boom")

    handler = Lines()
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    logger = logging.getLogger("sume_urllib3")
    logger.addHandler(handler)
    failing, calls = Failing(), []  # type: ignore[var-annotated]
    _fork.track(failing)
    _fork.in_child(_counting(calls))
    try:
        said = in_a_forked_child(lambda: f"{len(calls)}|" + "\n".join(lines))
    finally:
        logger.removeHandler(handler)
        _fork._callbacks.pop()
        _fork._tracked.discard(failing)

    ran, _, text = said.partition("|")
    assert "1" == ran
    assert text.startswith("sume_urllib3: ERROR: resetting "), text
    assert "sume_urllib3: sume_urllib3" not in text


def test_a_session_used_before_a_c_fork_opens_its_own_connection_in_the_child(
    fake: FakeSume, make_session: Callable[..., object]
) -> None:
    """The master's pooled keep-alive socket is never read by a worker forked from C."""
    fake.script("GET", "/v1/ping", 200, 200, 200)
    session = make_session()
    assert session.get("/ping").status_code == 200  # type: ignore[attr-defined]
    assert fake.connections == 1

    def child() -> str:
        response = session.get("/ping")  # type: ignore[attr-defined]
        return f"{response.status_code} {response.sume.outcome.value}"

    assert in_a_child_forked_from_c(child) == "200 ok"
    assert fake.connections == 2  # the child connected anew
    assert session.get("/ping").status_code == 200  # type: ignore[attr-defined]
    assert fake.connections == 2  # and the parent still has its own connection


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_its_own_connections_and_fresh_counters(raw_server: Any) -> None:
    """Parent and child call at once after a fork: every body matches its request; the child counts from 0."""
    api = raw_server(status_503_once_on_warm)
    session = raw_session(api, retry_budget=RetryBudget())
    session.get("/warm")  # a retry, then a pooled keep-alive connection
    fresh_balance = RetryBudget().balance
    assert session.retry_budget is not None
    assert session.retry_budget.balance < fresh_balance
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12 warns on fork with threads
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            os.close(read_end)
            report: Dict[str, Any] = {"mismatched": 0, "errors": []}
            for i in range(30):
                try:
                    if session.get(f"/child/{i}").text != f"/v1/child/{i}":
                        report["mismatched"] += 1
                except Exception as exc:
                    report["errors"].append(type(exc).__name__)
            report["total"] = session.metrics.total
            report["balance"] = session.retry_budget.balance if session.retry_budget else None
            os.write(write_end, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    parent_mismatched = sum(session.get(f"/parent/{i}").text != f"/v1/parent/{i}" for i in range(30))
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as pipe:
        child = json.loads(pipe.read() or b"{}")

    assert 0 == status
    assert {"mismatched": 0, "errors": [], "total": 30, "balance": fresh_balance} == child
    assert 0 == parent_mismatched
    assert 31 == session.metrics.total
    warm = {seen.conn for seen in api.requests if seen.path == "/v1/warm"}
    child_conns = {seen.conn for seen in api.requests if seen.path.startswith("/v1/child/")}
    assert not warm & child_conns
