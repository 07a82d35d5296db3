"""Issue 12, item by item: each behaviour checked on a real loopback socket.

The server here is independent of FakeSume on purpose: it writes raw bytes and pauses
where a test says (a body that trickles or stalls, a redirect to another port), so each
test controls exactly what crosses the socket and when.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import os
import pickle
import random
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import pytest
import requests
import urllib3

from sume_urllib3 import (
    ConfigurationError,
    Outcome,
    Policy,
    RetryBudget,
    SumeAdapter,
    SumeRetry,
    SumeRetryError,
    SumeSession,
    __version__,
    sume_record,
)
from sume_urllib3._demo import run as run_demo

from .conftest import VirtualTime

KEY = "sk_live_HARDENING_0123456789abcdef"
BEARER = "Bearer " + KEY
# Backoff without jitter: every retry in these tests waits exactly what the test says.
QUICK = Policy(backoff_base=0.05, jitter=(1.0, 1.0))


# -- an independent loopback server ---------------------------------------------------

CLOSE = object()  # a handler step: close the connection now
Step = Union[bytes, float, object]


@dataclass
class Seen:
    """One request as it arrived: method, path, lower-cased headers, body, time, connection."""

    method: str
    path: str
    headers: Dict[str, str]
    body: bytes
    at: float
    conn: int


Handler = Callable[[Seen, int], Iterable[Step]]


def reply(
    status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None, length: Any = None
) -> bytes:
    """One whole HTTP/1.1 response, head and body in one piece (one send, no Nagle delay)."""
    lines = [f"HTTP/1.1 {status} X"]
    fields = {"Content-Length": str(len(body) if length is None else length)}
    fields.update(headers or {})
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def echo(seen: Seen, n: int) -> Iterable[Step]:
    """Answer 200 with the request's path as the body."""
    yield reply(200, seen.path.encode())


class Loopback:
    """A raw HTTP/1.1 server on 127.0.0.1: a handler yields bytes to send and pauses (floats).

    The handler gets the request and how many requests to the same path came before it.
    Connections are kept alive; ``CLOSE`` ends one. Stopping interrupts every pause.
    """

    def __init__(self, handler: Handler = echo) -> None:
        self.handler = handler
        self.requests: List[Seen] = []
        self._counts: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: List[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()

    def paths(self) -> List[str]:
        return [seen.path for seen in self.requests]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.append(conn)
                number = len(self._conns)
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        reader = conn.makefile("rb")
        try:
            while not self._stop.is_set():
                seen = self._read(reader, number)
                if seen is None:
                    return
                with self._lock:
                    self.requests.append(seen)
                    route = seen.path.split("?")[0]
                    n = self._counts.get(route, 0)
                    self._counts[route] = n + 1
                for step in self.handler(seen, n):
                    if step is CLOSE:
                        return
                    if isinstance(step, bytes):
                        conn.sendall(step)
                    elif isinstance(step, (int, float)) and self._stop.wait(step):
                        return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _read(reader: Any, number: int) -> Optional[Seen]:
        line = reader.readline()
        if not line.strip():
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: Dict[str, str] = {}
        while True:
            field = reader.readline().decode("latin-1")
            if field in ("\r\n", "\n", ""):
                break
            name, _, value = field.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = reader.read(int(headers.get("content-length", "0") or 0))
        return Seen(method, path, headers, body, time.monotonic(), number)


@pytest.fixture
def server() -> Iterator[Callable[[Handler], Loopback]]:
    """Start loopback servers for a test; every one is stopped at its end."""
    started: List[Loopback] = []

    def start(handler: Handler = echo) -> Loopback:
        started.append(Loopback(handler))
        return started[-1]

    yield start
    for one in started:
        one.stop()


def session_on(srv: Loopback, **kwargs: Any) -> SumeSession:
    """A session whose base URL is ``srv``'s /v1, real time, seeded jitter, no pacing."""
    kwargs.setdefault("policy", QUICK)
    kwargs.setdefault("fleet", None)
    kwargs.setdefault("rng", random.Random(7))
    return SumeSession(kwargs.pop("api_key", KEY), base_url=srv.url + "/v1", **kwargs)


def auth_headers(seen: Seen) -> Dict[str, str]:
    return {k: v for k, v in seen.headers.items() if k in ("x-api-key", "authorization")}


# -- 1. the key goes only to the base URL's origin -----------------------------------


@pytest.mark.parametrize("mode", ["x-api-key", "bearer"])
def test_1_key_goes_to_the_base_origin_and_never_to_an_absolute_url_elsewhere(server: Any, mode: str) -> None:
    """A PUT to another port (a presigned upload) carries no auth header; the API still gets the key."""
    api, storage = server(), server()
    session = session_on(api, auth_header=mode)

    session.put(storage.url + "/bucket/upload?sig=abc", data=b"file bytes")
    session.get("/jobs")

    assert {} == auth_headers(storage.requests[0])
    assert b"file bytes" == storage.requests[0].body
    expected = {"x-api-key": KEY} if mode == "x-api-key" else {"authorization": BEARER}
    assert expected == auth_headers(api.requests[0])


def test_1_key_goes_to_an_absolute_url_on_the_base_origin(server: Any) -> None:
    """An absolute URL on the base URL's own scheme, host and port is the API: it gets the key."""
    api = server()
    session = session_on(api)

    session.get(api.url + "/v1/jobs")

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])


def test_1_a_session_header_key_set_by_the_user_is_stripped_for_another_origin(server: Any) -> None:
    """``session.headers["x-api-key"] = key`` still reaches the API, and never another origin."""
    api, storage = server(), server()
    session = session_on(api, api_key=None)
    session.headers["x-api-key"] = KEY

    session.get("/jobs")
    session.put(storage.url + "/upload", data=b"x")

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])
    assert {} == auth_headers(storage.requests[0])


def test_1_a_redirect_from_the_api_to_another_origin_carries_no_key(server: Any) -> None:
    """The API answers 302 to another port: the hop there has neither auth header."""
    storage = server()
    api = server(_redirect_to(storage.url + "/landing"))
    session = session_on(api, auth_header="bearer")

    session.get("/start")

    assert {"authorization": BEARER} == auth_headers(api.requests[0])
    assert {} == auth_headers(storage.requests[0])


def test_1_the_callers_own_authorization_for_another_origin_is_kept(server: Any) -> None:
    """A presigned upload with its own Authorization keeps it; only the session's key is removed."""
    api, storage = server(), server()
    session = session_on(api, auth_header="bearer")

    session.put(storage.url + "/upload", data=b"x", headers={"Authorization": "AWS4-HMAC-SHA256 sig"})

    assert {"authorization": "AWS4-HMAC-SHA256 sig"} == auth_headers(storage.requests[0])


# -- 2. max_elapsed bounds the wall time ---------------------------------------------


def _trickling_503(seen: Seen, n: int) -> Iterable[Step]:
    if n == 0:
        # 30 bytes over 3 s: each read succeeds, the whole body takes far past the deadline.
        yield reply(503, b"", length=30)
        for _ in range(15):
            yield 0.2
            yield b"xx"
    else:
        yield reply(200, b"{}")


def test_2a_a_503_whose_body_trickles_sends_no_retry_after_the_deadline(server: Any) -> None:
    """max_elapsed=1 and a 503 body that takes 3 s: no retry after 1 s, the call ends by 1.5 s."""
    api = server(_trickling_503)
    session = session_on(api, policy=QUICK.replace(max_elapsed=1.0))

    started = time.monotonic()
    with contextlib.suppress(requests.RequestException):
        session.get("/slow")
    took = time.monotonic() - started

    late = [seen for seen in api.requests if seen.at > started + 1.0]
    assert [] == late
    assert took <= 1.5


def _slow_retry(seen: Seen, n: int) -> Iterable[Step]:
    if n == 0:
        yield reply(503, b'{"error":{"code":"busy"}}')
    else:
        yield 5.0
        yield reply(200, b"{}")


@pytest.mark.slow
def test_2b_a_slow_retry_is_cut_at_the_deadline_not_at_its_read_timeout(server: Any) -> None:
    """timeout (1, 4), max_elapsed=2, the retry's answer takes 5 s: the call ends by 2.5 s."""
    api = server(_slow_retry)
    session = session_on(api, policy=QUICK.replace(max_elapsed=2.0))

    started = time.monotonic()
    with pytest.raises(requests.RequestException):
        session.get("/work", timeout=(1, 4))
    took = time.monotonic() - started

    assert 2 == len(api.requests)  # the retry was sent, and cut short
    assert took <= 2.5


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose accept queue is full: a connect there hangs until its timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)  # takes the one slot
    probe = socket.socket()
    probe.settimeout(0.2)
    try:
        probe.connect(("127.0.0.1", port))
    except OSError:
        pass
    else:
        pytest.skip("this kernel accepts past a full backlog: no way to make a connect hang here")
    finally:
        probe.close()
    yield port
    filler.close()
    listener.close()


@pytest.mark.slow
def test_2c_connect_timeouts_and_their_retry_end_by_the_deadline(unanswered_port: int) -> None:
    """Connect timeout 1.5 s, max_elapsed=2: the retried connect is cut, the call ends by 2.5 s."""
    session = SumeSession(
        KEY,
        base_url=f"http://127.0.0.1:{unanswered_port}/v1",
        policy=QUICK.replace(max_elapsed=2.0),
        fleet=None,
    )

    started = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        session.get("/jobs", timeout=(1.5, 5))
    took = time.monotonic() - started

    assert took <= 2.5


# -- 3. a body that fails mid-read ---------------------------------------------------

FULL = b"a" * 1000


def _short_then_full(after: Step) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        if n == 0:
            yield reply(200, FULL[:20], length=1000)
            yield after  # stall (seconds) or CLOSE
        else:
            yield reply(200, FULL)

    return handler


@pytest.mark.parametrize("after", [3.0, CLOSE], ids=["stalls", "closes"])
def test_3_a_get_whose_body_breaks_mid_read_is_retried(server: Any, after: Step) -> None:
    """200 with Content-Length 1000 that sends 20 bytes: the GET is resent and the caller gets all 1000."""
    api = server(_short_then_full(after))
    session = session_on(api)

    response = session.get("/file", timeout=(1, 0.5))

    record = sume_record(response)
    assert FULL == response.content
    assert 2 == len(api.requests)
    assert record is not None
    assert Outcome.RETRIED_OK is record.outcome
    assert 2 == record.attempts
    assert {"retried_ok": 1} == {k: v for k, v in session.metrics.snapshot()["outcomes"].items() if v}


def _always_short(seen: Seen, n: int) -> Iterable[Step]:
    yield reply(200, FULL[:20], length=1000)
    yield 3.0


def test_3_a_body_that_breaks_and_is_not_retried_is_recorded_not_counted_ok(server: Any) -> None:
    """No retry left: the ConnectionError carries ``exc.sume`` with an outcome that is not ok."""
    api = server(_always_short)
    session = session_on(api, policy=QUICK.replace(max_retries=0))

    with pytest.raises(requests.ConnectionError) as caught:
        session.get("/file", timeout=(1, 0.5))

    record = sume_record(caught.value)
    assert record is not None
    assert Outcome.OK is not record.outcome
    assert record.error
    outcomes = session.metrics.snapshot()["outcomes"]
    assert 0 == outcomes["ok"]
    assert 1 == sum(outcomes.values())


def _stalling_503(seen: Seen, n: int) -> Iterable[Step]:
    yield reply(503, b'{"error":{"code":"que', length=1000)
    yield 3.0


def test_3_a_give_up_503_whose_body_stalls_is_recorded_not_counted_ok(server: Any) -> None:
    """raise_on_give_up=False, a 503 whose body stalls: whatever the caller gets carries the record."""
    api = server(_stalling_503)
    session = session_on(api, policy=QUICK.replace(max_retries=0), raise_on_give_up=False)

    started = time.monotonic()
    try:
        response = session.get("/jobs", timeout=(1, 0.5))
        record = sume_record(response)
    except requests.RequestException as exc:
        record = sume_record(exc)
    took = time.monotonic() - started

    assert record is not None
    assert Outcome.OK is not record.outcome
    outcomes = session.metrics.snapshot()["outcomes"]
    assert 0 == outcomes["ok"]
    assert 1 == sum(outcomes.values())
    assert took < 2.5


def test_3_a_give_up_503_whose_body_stalls_raises_the_retry_error(server: Any) -> None:
    """By default the stalled 503 still ends in SumeRetryError, within the read timeout."""
    api = server(_stalling_503)
    session = session_on(api, policy=QUICK.replace(max_retries=0))

    started = time.monotonic()
    with pytest.raises(SumeRetryError) as caught:
        session.get("/jobs", timeout=(1, 0.5))

    assert Outcome.GAVE_UP is caught.value.record.outcome
    assert time.monotonic() - started < 2.0


# -- 4. x-api-key is stripped on cross-host redirects outside SumeSession -------------


def _redirect_to(target: str) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        if "/start" in seen.path:
            yield reply(302, b"", {"Location": target})
        else:
            yield reply(200, b"landed")

    return handler


@pytest.mark.skipif(
    "response.retries" not in inspect.getsource(urllib3.PoolManager.urlopen),
    reason="this urllib3's PoolManager follows redirects with Retry.DEFAULT, not its own retries= "
    "(pass retries=SumeRetry() per call there; the per-call test covers it)",
)
def test_4_pool_manager_with_sume_retry_strips_the_key_on_a_cross_host_redirect(server: Any) -> None:
    """PoolManager(retries=SumeRetry()): a redirect to another port arrives without x-api-key."""
    other = server()
    api = server(_redirect_to(other.url + "/landing"))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK))

    response = http.request("GET", api.url + "/start", headers={"x-api-key": KEY, "Authorization": BEARER})

    assert 200 == response.status
    assert {"x-api-key": KEY, "authorization": BEARER} == auth_headers(api.requests[0])
    assert {} == auth_headers(other.requests[0])


def test_4_a_per_call_sume_retry_strips_the_key_on_a_cross_host_redirect(server: Any) -> None:
    """http.request(..., retries=SumeRetry()): the redirect to another port arrives without x-api-key."""
    other = server()
    api = server(_redirect_to(other.url + "/landing"))
    http = urllib3.PoolManager()

    response = http.request("GET", api.url + "/start", headers={"x-api-key": KEY}, retries=SumeRetry(QUICK))

    assert 200 == response.status
    assert {} == auth_headers(other.requests[0])


def test_4_pool_manager_keeps_the_key_on_a_same_host_redirect(server: Any) -> None:
    """A redirect that stays on the same host and port keeps x-api-key."""
    api = server(_redirect_to("/landing"))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK))

    http.request("GET", api.url + "/start", headers={"x-api-key": KEY})

    assert ["/start", "/landing"] == api.paths()
    assert {"x-api-key": KEY} == auth_headers(api.requests[1])


def test_4_plain_requests_session_with_sume_adapter_strips_the_key_on_a_cross_host_redirect(
    server: Any,
) -> None:
    """A requests.Session with SumeAdapter mounted: the redirect to another port gets neither auth header."""
    other = server()
    api = server(_redirect_to(other.url + "/landing"))
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    response = session.get(api.url + "/start", headers={"x-api-key": KEY, "Authorization": BEARER})

    assert b"/landing" == response.content
    assert {} == auth_headers(other.requests[0])


# -- 5. urllib3 Retry arguments are honoured or refused -------------------------------


def _status_then_ok(status: int, headers: Optional[Dict[str, str]] = None) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield reply(status, b"", headers) if n == 0 else reply(200, b"ok")

    return handler


def test_5_status_forcelist_retries_a_status_the_policy_has_no_row_for(server: Any) -> None:
    """SumeRetry(status_forcelist=[502]): a 502 is retried, then the 200 is returned."""
    api = server(_status_then_ok(502))
    waits: List[float] = []
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, status_forcelist=[502], sleep=waits.append))

    response = http.request("GET", api.url + "/v1/jobs")

    assert 200 == response.status
    assert 2 == len(api.requests)
    assert [0.05] == waits


def test_5_without_status_forcelist_a_502_is_not_retried(server: Any) -> None:
    """The contrast: the default policy returns a 502 as it came."""
    api = server(_status_then_ok(502))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, sleep=lambda s: None))

    assert 502 == http.request("GET", api.url + "/v1/jobs").status
    assert 1 == len(api.requests)


def test_5_allowed_methods_none_is_refused() -> None:
    """allowed_methods=None would resend a POST without a key: ConfigurationError."""
    with pytest.raises(ConfigurationError, match="allowed_methods"):
        SumeRetry(allowed_methods=None)


def test_5_allowed_methods_narrows_what_is_resent(server: Any) -> None:
    """allowed_methods=["GET"]: a PUT answered 503 is not resent."""
    api = server(_status_then_ok(503))
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, allowed_methods=["GET"], sleep=lambda s: None))

    assert 503 == http.request("PUT", api.url + "/v1/jobs/1", body=b"{}").status
    assert 1 == len(api.requests)


def test_5_respect_retry_after_header_false_waits_the_backoff_instead(server: Any) -> None:
    """respect_retry_after_header=False: a 503 with Retry-After: 30 waits the 0.05 s backoff."""
    api = server(_status_then_ok(503, {"Retry-After": "30"}))
    waits: List[float] = []
    http = urllib3.PoolManager(
        retries=SumeRetry(QUICK, respect_retry_after_header=False, sleep=waits.append), timeout=2
    )

    response = http.request("GET", api.url + "/v1/jobs")

    assert 200 == response.status
    assert [0.05] == waits


@pytest.mark.parametrize(
    ("argument", "field"),
    [("backoff_factor", "backoff_base"), ("backoff_max", "backoff_max"), ("backoff_jitter", "jitter")],
)
def test_5_backoff_arguments_are_refused_naming_the_policy_field(argument: str, field: str) -> None:
    """SumeRetry(backoff_factor=0.5) raises ConfigurationError naming Policy.backoff_base."""
    kwargs: Dict[str, Any] = {argument: 7.5}
    with pytest.raises(ConfigurationError, match=f"Policy\\({field}="):
        SumeRetry(**kwargs)


def test_5_a_lone_sume_retry_leaves_no_request_state_behind_on_its_thread(server: Any) -> None:
    """After a PoolManager retry, a SumeAdapter POST on the same thread is its own request (key, attempts)."""
    api = server(_fork_server)  # /v1/warm: 503 then 200; everything else 200
    http = urllib3.PoolManager(retries=SumeRetry(QUICK, sleep=lambda s: None))
    assert 200 == http.request("GET", api.url + "/v1/warm").status
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    response = session.post(api.url + "/v1/jobs", json={})

    record = sume_record(response)
    assert record is not None
    assert "idempotency-key" in api.requests[-1].headers
    assert Outcome.OK is record.outcome
    assert 1 == record.attempts
    assert "POST" == record.method


# -- 6. fork --------------------------------------------------------------------------


def _fork_server(seen: Seen, n: int) -> Iterable[Step]:
    if seen.path == "/v1/warm" and n == 0:
        yield reply(503, b'{"error":{"code":"busy"}}')
    else:
        yield reply(200, seen.path.encode())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_6_a_forked_child_gets_its_own_connections_and_fresh_counters(server: Any) -> None:
    """Parent and child call at once after a fork: every body matches its request; the child counts from 0."""
    api = server(_fork_server)
    session = session_on(api, retry_budget=RetryBudget())
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


# -- 7. pickle and copy keep mounts; a second SumeAdapter counts in session.metrics ----


@pytest.mark.parametrize(
    "clone",
    [lambda s: pickle.loads(pickle.dumps(s)), copy.copy, copy.deepcopy],
    ids=["pickle", "copy", "deepcopy"],
)
def test_7_pickle_and_copy_keep_a_custom_mount(server: Any, clone: Callable[[Any], Any]) -> None:
    """A SumeAdapter mounted on a prefix is still mounted there, and still used, on the copy."""
    api, other = server(), server()
    session = session_on(api)
    session.mount(other.url + "/special/", SumeAdapter(QUICK, fleet=None, pool_maxsize=3))

    copied = clone(session)

    mounted = copied.adapters.get(other.url + "/special/")
    assert isinstance(mounted, SumeAdapter)
    assert copied.adapters["http://"] is copied.adapter
    assert b"/special/x" == copied.get(other.url + "/special/x").content
    assert b"/v1/jobs" == copied.get("/jobs").content


def test_7_a_second_sume_adapter_on_a_prefix_counts_in_session_metrics(server: Any) -> None:
    """Requests through an extra SumeAdapter are counted once in session.metrics, outcome by outcome."""
    api, other = server(), server(_status_then_ok(503))
    session = session_on(api)
    session.mount(other.url + "/", SumeAdapter(QUICK, fleet=None))

    session.get(other.url + "/v1/x")
    session.get("/jobs")

    outcomes = session.metrics.snapshot()["outcomes"]
    assert 1 == outcomes["retried_ok"]
    assert 1 == outcomes["ok"]
    assert 2 == session.metrics.total


# -- 8. close closes each adapter once ------------------------------------------------


class CountingProxyManager(urllib3.ProxyManager):
    """A real ProxyManager that counts clear() calls (requests' test_session_close_proxy_clear)."""

    cleared = 0

    def clear(self) -> None:
        self.cleared += 1
        super().clear()


def test_8_session_close_clears_each_proxy_manager_once(server: Any) -> None:
    """The default adapter is mounted on two prefixes; close() still clears its proxy managers once."""
    session = session_on(server())
    one, two = CountingProxyManager("http://127.0.0.1:1"), CountingProxyManager("http://127.0.0.1:2")
    session.adapters["http://"].proxy_manager.update({"one": one, "two": two})  # type: ignore[attr-defined]

    session.close()

    assert (1, 1) == (one.cleared, two.cleared)


def test_8_session_close_closes_every_mounted_adapter(server: Any) -> None:
    """An extra mounted adapter is closed too (its pools emptied)."""
    api = server()
    session = session_on(api)
    extra = SumeAdapter(QUICK, fleet=None)
    session.mount(api.url + "/extra/", extra)
    session.get(api.url + "/extra/x")
    assert extra.poolmanager.pools

    session.close()

    assert not extra.poolmanager.pools
    assert not session.adapter.poolmanager.pools


# -- 9. typing: tests/typing/readme_example.py is checked by mypy --strict -------------


def test_9_the_readme_example_is_in_the_typing_tests() -> None:
    """The README's "Use it" block and tests/typing/readme_example.py make the same calls."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "tests", "typing", "readme_example.py"), encoding="utf-8") as f:
        typed = f.read()
    for call in (
        "SumeSession()",
        'session.post("/avatars"',
        "except SumeRetryError as error",
        "sume_record(",
    ):
        assert call in typed


# -- 10. timeouts in every form requests accepts --------------------------------------


def _slow(seconds: float) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield seconds
        yield reply(200, b"late")

    return handler


@pytest.mark.parametrize(
    "timeout",
    [(5, None), (None, 5), urllib3.Timeout(connect=2, read=3), urllib3.Timeout(total=4), 7, 2.5],
    ids=["read-unlimited", "connect-unlimited", "Timeout", "Timeout-total", "int", "float"],
)
def test_10_every_timeout_form_requests_accepts_works_in_the_constructor_and_per_call(
    server: Any, timeout: Any
) -> None:
    """(5, None), urllib3.Timeout(...) and plain seconds: accepted by SumeSession and by a call."""
    api = server()
    session = session_on(api, timeout=timeout)

    assert timeout is session.timeout
    assert b"/v1/a" == session.get("/a").content
    assert b"/v1/b" == session.request("GET", "/b", timeout=timeout).content


@pytest.mark.parametrize("bad", [0, -1, (1, 2, 3), "5", (0, 5), float("nan"), True])
def test_10_a_timeout_requests_would_refuse_is_a_configuration_error(bad: Any) -> None:
    """Zero, negative, three values, text, NaN, bool: ConfigurationError naming timeout."""
    with pytest.raises(ConfigurationError, match="timeout"):
        SumeSession(KEY, timeout=bad)


def test_10_a_urllib3_timeout_in_the_constructor_is_applied(server: Any) -> None:
    """SumeSession(timeout=Timeout(read=0.3)): a 2 s answer times out in well under 2 s."""
    api = server(_slow(2.0))
    session = session_on(
        api, timeout=urllib3.Timeout(connect=1, read=0.3), policy=QUICK.replace(max_retries=0)
    )

    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        session.get("/slow")
    assert time.monotonic() - started < 1.5


def test_10_an_explicit_timeout_none_per_call_means_the_session_default(server: Any) -> None:
    """As documented: session.get(url, timeout=None) uses the session's timeout (here a 0.3 s read)."""
    api = server(_slow(2.0))
    session = session_on(api, timeout=(1, 0.3), policy=QUICK.replace(max_retries=0))

    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        session.get("/slow", timeout=None)
    assert time.monotonic() - started < 1.5


# -- 11. per-call policy, retry_in, idempotency_key -----------------------------------


def _always(status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None) -> Handler:
    def handler(seen: Seen, n: int) -> Iterable[Step]:
        yield reply(status, body, headers)

    return handler


def test_11_a_per_call_policy_gives_that_call_a_shorter_deadline(server: Any) -> None:
    """A per-call policy with max_elapsed=2.5: 503s with Retry-After 1 stop at 3 attempts."""
    api = server(_always(503, b"", {"Retry-After": "1"}))
    vt = VirtualTime()
    session = session_on(api, sleep=vt.sleep, clock=vt.clock)

    with pytest.raises(SumeRetryError) as caught:
        # The issue's own spelling; mypy needs typed get/post overrides to accept policy= there.
        session.post("/jobs", json={}, policy=session.policy.replace(max_elapsed=2.5))  # type: ignore[call-arg]

    assert 3 == caught.value.record.attempts
    assert 3 == len(api.requests)
    assert 120.0 == session.policy.max_elapsed  # the session's own policy is untouched


def test_11_a_per_call_policy_must_be_a_policy(server: Any) -> None:
    """policy={"max_elapsed": 10} is a ConfigurationError before anything is sent."""
    api = server()
    session = session_on(api)

    with pytest.raises(ConfigurationError, match="policy"):
        session.request("GET", "/jobs", policy={"max_elapsed": 10})  # type: ignore[arg-type]
    assert [] == api.requests


def test_11_retry_in_is_the_server_retry_after_left_and_the_key_is_the_one_sent(server: Any) -> None:
    """Give-up on 503 Retry-After 1 (virtual time): retry_in is 1.0, idempotency_key is the header sent."""
    api = server(_always(503, b"", {"Retry-After": "1"}))
    vt = VirtualTime()
    session = session_on(api, sleep=vt.sleep, clock=vt.clock, policy=QUICK.replace(max_elapsed=1.5))

    with pytest.raises(SumeRetryError) as caught:
        session.post("/jobs", json={})

    error = caught.value
    assert 1.0 == error.retry_in
    assert error.idempotency_key is not None
    assert {error.idempotency_key} == {seen.headers["idempotency-key"] for seen in api.requests}


def test_11_retry_in_is_the_next_backoff_without_retry_after(server: Any) -> None:
    """A give-up on 503s without Retry-After after 1 retry: retry_in is the next backoff (2 x 0.05 s)."""
    api = server(_always(503))
    vt = VirtualTime()
    session = session_on(api, sleep=vt.sleep, clock=vt.clock, policy=QUICK.replace(max_retries=1))

    with pytest.raises(SumeRetryError) as caught:
        session.get("/jobs")

    assert 0.1 == pytest.approx(caught.value.retry_in)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"error":{"code":"bad_request"}}'),
        (409, b'{"error":{"code":"x","next_action":"poll the job"}}'),
    ],
    ids=["fix", "poll"],
)
def test_11_retry_in_is_none_when_retrying_cannot_help(server: Any, status: int, body: bytes) -> None:
    """fix and poll outcomes: retry_in is None (sending the same request again will not work)."""
    api = server(_always(status, body, {"Content-Type": "application/json"}))
    session = session_on(api)

    response = session.post("/jobs", json={})

    record = sume_record(response)
    assert record is not None
    assert record.outcome in (Outcome.FIX, Outcome.POLL)
    assert record.retry_in is None


# -- 12. smaller items ----------------------------------------------------------------


def test_12_a_netrc_entry_for_the_api_host_is_ignored(server: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """~/.netrc with the API host: the call sends the key alone, no Authorization, no error."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    api, other = server(), server()
    session = session_on(api)

    session.get("/jobs")
    requests_alone = requests.get(other.url + "/x", timeout=2)  # the netrc file really is read

    assert {"x-api-key": KEY} == auth_headers(api.requests[0])
    assert 200 == requests_alone.status_code
    assert other.requests[0].headers.get("authorization", "").startswith("Basic ")


def test_12_prepare_request_resolves_a_relative_url_against_the_base(server: Any) -> None:
    """session.prepare_request(Request("POST", "/jobs")) targets base_url + /jobs, with the key."""
    api = server()
    session = session_on(api)

    prepared = session.prepare_request(requests.Request("POST", "/jobs", json={"a": 1}))
    response = session.send(prepared)

    assert api.url + "/v1/jobs" == prepared.url
    assert b"/v1/jobs" == response.content
    assert KEY == api.requests[0].headers["x-api-key"]


def _see_other(seen: Seen, n: int) -> Iterable[Step]:
    if seen.method == "POST":
        yield reply(303, b"", {"Location": "/v1/jobs/1"})
    else:
        yield reply(200, b"{}")


def test_12_a_303_that_turns_a_post_into_a_get_drops_the_idempotency_key(server: Any) -> None:
    """POST (with a key) -> 303 -> GET: the GET carries no Idempotency-Key but still the API key."""
    api = server(_see_other)
    session = session_on(api)

    session.post("/jobs", json={})

    post, get = api.requests
    assert ("POST", "GET") == (post.method, get.method)
    assert "idempotency-key" in post.headers
    assert "idempotency-key" not in get.headers
    assert KEY == get.headers["x-api-key"]


def test_12_a_303_through_a_plain_session_with_sume_adapter_drops_the_idempotency_key(server: Any) -> None:
    """requests.Session + SumeAdapter: POST -> 303 -> GET, and the GET carries no Idempotency-Key."""
    api = server(_see_other)
    session = requests.Session()
    session.mount("http://", SumeAdapter(QUICK, fleet=None))

    session.post(api.url + "/v1/jobs", json={})

    post, get = api.requests
    assert "idempotency-key" in post.headers
    assert "idempotency-key" not in get.headers


def test_12_an_observer_with_no_hook_is_refused() -> None:
    """observers=[object()] is a ConfigurationError naming the hooks."""
    with pytest.raises(ConfigurationError, match="on_outcome"):
        SumeSession(KEY, observers=[object()])  # type: ignore[list-item]


def test_12_the_cli_prints_its_version() -> None:
    """python -m sume_urllib3 --version prints the package version and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "sume_urllib3", "--version"], capture_output=True, text=True, timeout=30
    )

    assert 0 == done.returncode
    assert __version__ in done.stdout


@pytest.mark.slow
def test_12_the_demo_prints_policy_waits_beside_the_scaled_sleep_and_the_real_time() -> None:
    """Each scenario line gives the policy's waits, what was slept at the demo's scale, and the real time."""
    out = io.StringIO()

    run_demo(out, scale=0.01)

    lines = re.findall(
        r"policy waits (\d+\.\d\d)s \(slept (\d+\.\d\d)s, call took (\d+\.\d\d)s\)", out.getvalue()
    )
    assert lines
    assert any(float(policy) > 0 for policy, _, _ in lines)
    for policy, slept, took in lines:
        assert float(slept) == pytest.approx(float(policy) * 0.01, abs=0.011)
        assert float(took) + 0.011 >= float(slept)
