"""pytest plugin for ``benchmarks/peers.py``: loopback only, the swap, and every outcome recorded.

Loaded into urllib3's and requests' own test runs with ``-p _peer_swap``. It

- keeps every run on this machine: a connection to anything but a loopback address fails
  with ``ENETUNREACH`` (the tests that need the Internet then skip themselves, plainly and
  swapped alike), and names other than ``localhost`` do not resolve, so no lookup leaves;
- with ``SUME_PEERS_SWAP=urllib3`` puts ``SumeRetry`` where the tests import ``Retry`` from
  (``urllib3.Retry``, ``urllib3.util.Retry``, ``urllib3.util.retry.Retry``) while the test
  modules are collected, then puts urllib3's own class back for urllib3's code to use;
- with ``SUME_PEERS_SWAP=requests`` puts ``SumeSession`` where ``requests.Session``,
  ``requests.session()`` and the ``requests.get``-style helpers find it;
- with ``SumeSession``, records the waits between retries instead of sleeping them (``no_sleep``);
- serves pytest-httpbin from one thread per connection, plainly and swapped (see
  ``_threaded_httpbin``);
- writes one JSON line per test (node id, outcome) to ``SUME_PEERS_OUT``: a test failed when
  any phase failed, and a module that cannot be imported is recorded as failed by its path.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import socketserver
from typing import Any, Dict, Generator, Optional, Tuple

import pytest

_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo
_LOCAL_NAMES = ("localhost", "localhost.", "localhost.localdomain")


def _loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    name = str(host).split("%", 1)[0].strip("[]")
    if name.lower() in _LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def _refuse(sock: socket.socket, address: Any) -> Optional[OSError]:
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return None  # a Unix socket or a socketpair stays on this machine
    if _loopback(address[0]):
        return None
    return OSError(errno.ENETUNREACH, f"peers run on loopback only, refused {address[0]}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    refusal = _refuse(self, address)
    if refusal is not None:
        raise refusal
    _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    refusal = _refuse(self, address)
    if refusal is not None:
        return errno.ENETUNREACH
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    if text is not None and not _is_literal(text) and str(text).lower() not in _LOCAL_NAMES:
        raise socket.gaierror(socket.EAI_NONAME, f"peers run on loopback only, {text!r} not looked up")
    return _getaddrinfo(host, *args, **kwargs)


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(str(host).split("%", 1)[0].strip("[]"))
    except ValueError:
        return False
    return True


def _guard() -> None:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo


def _urllib3_names() -> Tuple[Any, ...]:
    import urllib3
    import urllib3.util
    import urllib3.util.retry

    return (urllib3, urllib3.util, urllib3.util.retry)


def _swap(target: str) -> None:
    if target == "urllib3":
        return  # done around collection only, see pytest_collection
    if target == "requests":
        import requests
        import requests.sessions

        from sume_urllib3 import SumeSession

        def session() -> SumeSession:
            return SumeSession()

        for module in (requests, requests.sessions):
            module.Session = SumeSession  # type: ignore[attr-defined,misc]
            module.session = session  # type: ignore[attr-defined]
    elif target:
        raise ValueError(f"SUME_PEERS_SWAP={target!r}: use urllib3 or requests")


def _threaded_httpbin() -> None:
    """pytest-httpbin's server, one thread per connection (plainly and swapped alike).

    It answers one request at a time: a request the swap resends after a read timeout (a GET
    of ``/delay/10``) would queue ten-second answers in front of every test that follows.
    """
    try:
        import pytest_httpbin.serve as serve
    except ImportError:
        return
    original = serve.make_server

    def make_server(host: str, port: int, app: Any, server_class: Any = None, **kwargs: Any) -> Any:
        base = server_class or serve.WSGIServer
        threaded = type(
            "Threading" + base.__name__, (socketserver.ThreadingMixIn, base), {"daemon_threads": True}
        )
        return original(host, port, app, server_class=threaded, **kwargs)

    serve.make_server = make_server


_guard()
_threaded_httpbin()
_swap(os.environ.get("SUME_PEERS_SWAP", ""))


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: Any) -> Generator[None, None, None]:
    """``SumeRetry`` under urllib3's names while the test modules import, then urllib3's own back.

    The tests bind ``Retry`` when they import; urllib3's own code looks the name up in its
    module at call time (``isinstance(retries, Retry)`` in ``from_int``), and must keep
    finding its own class there, as it does for a user who passes ``SumeRetry``.
    """
    if os.environ.get("SUME_PEERS_SWAP") != "urllib3":
        yield
        return
    from sume_urllib3 import SumeRetry

    modules = _urllib3_names()
    originals = [module.Retry for module in modules]
    for module in modules:
        module.Retry = SumeRetry
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            module.Retry = original


_outcomes: Dict[str, Tuple[int, str]] = {}
_ORDER = {"passed": 0, "skipped": 1, "xfailed": 1, "failed": 2}


def _note(nodeid: str, outcome: str) -> None:
    rank = _ORDER.get(outcome, 2)
    if nodeid not in _outcomes or rank > _outcomes[nodeid][0]:
        _outcomes[nodeid] = (rank, outcome)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Generator[None, None, None]:
    """With SumeSession, the waits between retries are recorded, not slept (``no_sleep``).

    A requests test that reaches for a host the loopback guard refuses meets connection errors
    that the policy retries for up to ``max_elapsed``; sleeping those waits would only make the
    run long. Socket timeouts stay real. urllib3's tests patch ``time.sleep`` to see the waits,
    so there ``SumeRetry`` sleeps as it would for a user.
    """
    if os.environ.get("SUME_PEERS_SWAP") != "requests":
        yield
        return
    from sume_urllib3.testing import no_sleep

    with no_sleep():
        yield


def pytest_runtest_logreport(report: Any) -> None:
    """Remember the worst phase of each test (setup, call, teardown)."""
    if report.failed:
        _note(report.nodeid, "failed")
    elif report.skipped:
        _note(report.nodeid, "xfailed" if hasattr(report, "wasxfail") else "skipped")
    elif report.when == "call":
        _note(report.nodeid, "passed")


def pytest_collectreport(report: Any) -> None:
    """A module that does not import is one failure under its own path."""
    if report.failed:
        _note(report.nodeid or "<collection>", "failed")


def pytest_sessionfinish(session: Any) -> None:
    """Write the outcomes where ``peers.py`` reads them."""
    out = os.environ.get("SUME_PEERS_OUT")
    if not out:
        return
    with open(out, "w", encoding="utf-8") as f:
        for nodeid, (_, outcome) in sorted(_outcomes.items()):
            f.write(json.dumps({"id": nodeid, "outcome": outcome}) + "\n")
