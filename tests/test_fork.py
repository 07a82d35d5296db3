"""A forked process starts afresh, whether or not its fork ran Python's at-fork hooks.

uWSGI forks its workers from C (no ``os.register_at_fork`` hook runs); gunicorn and Celery
fork from Python (the hooks run). Both must leave a child with nothing the parent still uses.
"""

from __future__ import annotations

import os
from typing import Callable, List

import pytest

from sume_urllib3 import _fork
from sume_urllib3.testing import FakeSume

from .conftest import in_a_child_forked_from_c, in_a_forked_child

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
