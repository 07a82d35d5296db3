"""Under a real uWSGI, a session used in the master before the fork is safe in every worker.

uWSGI loads the app in its master and forks the workers from C: no ``os.register_at_fork``
hook runs in them, so only the pid check in ``SumeAdapter.send`` can make a worker drop the
master's pooled keep-alive connection and the fleet's client id. The app
(``uwsgi_app.py``) builds its session at import and posts once there; 48 callers, released
together, each get a view that posts its own id through that session to an echo server on
127.0.0.1, which answers after a short random delay with the id it was sent. So an answer
read by the wrong worker names another caller's id.

To see the failure these tests guard against, run them with the check switched off in the
app (``UWSGI_APP_NO_PID_CHECK=1 python -m pytest tests/contrib/test_uwsgi.py``): answers
cross, and workers retry after transport errors (a job may then run twice). ``RedisFleet``
compares pids on each acquire too, so its client ids stay apart even then.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
import requests

from ..redis_server import RedisServer, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APP = os.path.join(HERE, "uwsgi_app.py")
API_KEY = "sk_uwsgi_test_0123456789"
CALLERS = 48
PROCESSES = 4
MODES: Dict[str, Tuple[str, ...]] = {
    "prefork": (),
    "prefork-threads": ("--threads", "4"),
    "lazy-apps": ("--lazy-apps",),
}


def _uwsgi() -> Optional[str]:
    """The uwsgi next to this interpreter (``pip install uwsgi``), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "uwsgi")
    return beside if os.access(beside, os.X_OK) else shutil.which("uwsgi")


UWSGI = _uwsgi()
if UWSGI is None and os.environ.get("SUME_REQUIRE_UWSGI") == "1":  # CI: fail rather than skip
    raise RuntimeError("SUME_REQUIRE_UWSGI=1 but uwsgi is not installed (pip install uwsgi)")
pytestmark = [
    pytest.mark.skipif(UWSGI is None, reason="uwsgi is not installed (pip install uwsgi; the bench extra)"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="uWSGI forks its workers"),
]


# -- the backend: an echo server on 127.0.0.1 --------------------------------------------------


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # 16 worker threads connect at once; the default backlog is 5
    daemon_threads = True


class EchoServer:
    """``POST /v1/echo`` answers 201 ``{"id": <the id posted>}`` after 2-20 ms; records every request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: List[Dict[str, Any]] = []  # {"id", "key", "peer"} per request, in arrival order
        self._httpd = _Server(("127.0.0.1", 0), _echo_handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL a SumeSession is given."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> EchoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _echo_handler(server: EchoServer) -> Any:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the master's connection stays open

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            with server.lock:
                server.seen.append(
                    {"id": body.get("id"), "key": self.headers.get("Idempotency-Key"),
                     "peer": self.client_address[1]}
                )
            time.sleep(random.uniform(0.002, 0.02))  # answers overtake each other across connections
            data = json.dumps({"id": body.get("id")}).encode()
            head = (
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            self.wfile.write(head + data)  # one send

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


# -- uWSGI ---------------------------------------------------------------------------------------


class Uwsgi:
    """A running ``uwsgi --master --processes 4`` serving ``uwsgi_app.py``: its URL, master pid, log."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log_path: str) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path

    def log(self) -> str:
        """What uWSGI and the app wrote so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


@contextlib.contextmanager
def uwsgi(mode_args: Sequence[str], env: Dict[str, str], log_path: str) -> Iterator[Uwsgi]:
    """uWSGI on a free 127.0.0.1 port until every worker is spawned and a view answers."""
    assert UWSGI is not None
    port = free_port()
    command = [
        UWSGI, "--master", "--processes", str(PROCESSES), *mode_args,
        "--http-socket", f"127.0.0.1:{port}", "--wsgi-file", APP, "--need-app", "--die-on-term",
        "--pythonpath", ROOT, "--logto", log_path, "--disable-logging",
    ]
    if sys.prefix != sys.base_prefix:  # this test's virtualenv, where sume_urllib3 is installed
        command += ["--virtualenv", sys.prefix]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                               start_new_session=True)
    server = Uwsgi(process, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # --die-on-term: the master stops its workers
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _wait_ready(server: Uwsgi, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"uwsgi exited with {server.process.returncode}:\n{server.log()[-3000:]}")
        log = server.log() if os.path.exists(server.log_path) else ""
        if len(re.findall(r"spawned uWSGI worker \d+", log)) >= PROCESSES:
            with contextlib.suppress(requests.RequestException):
                ready = requests.get(server.url + "/ready", timeout=5)
                if ready.status_code == 200:
                    library = ready.json()["sume_urllib3"]
                    assert os.path.realpath(library) == os.path.realpath(os.path.join(ROOT, "sume_urllib3"))
                    return
        time.sleep(0.05)
    raise RuntimeError(f"uwsgi did not serve within {timeout:.0f} s:\n{server.log()[-3000:]}")


def call_at_once(url: str, n: int = CALLERS) -> List[Dict[str, Any]]:
    """``n`` callers, released together, each GET ``/call?id=<its own id>``; what each view answered."""
    barrier = threading.Barrier(n)
    out: List[Dict[str, Any]] = [{} for _ in range(n)]

    def one(i: int) -> None:
        barrier.wait()
        try:
            response = requests.get(f"{url}/call", params={"id": f"caller-{i}"}, timeout=120)
            out[i] = response.json()
        except (requests.RequestException, ValueError) as exc:
            out[i] = {"sent": f"caller-{i}", "error": f"uWSGI: {type(exc).__name__}: {exc}"[:300]}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def _environment(backend: EchoServer, redis_url: Optional[str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UWSGI")}
    env.update(SUME_API_KEY=API_KEY, SUME_API_BASE_URL=backend.url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    if redis_url:
        env["UWSGI_APP_REDIS_URL"] = redis_url
    if os.environ.get("UWSGI_APP_NO_PID_CHECK") == "1":  # to see the failure (the module docstring)
        env["UWSGI_APP_NO_PID_CHECK"] = "1"
    return env


def summary(answers: List[Dict[str, Any]], backend: EchoServer) -> Dict[str, Any]:
    """What went wrong, counted: crossed answers, errors, retries, jobs run twice."""
    posts = [r for r in backend.seen if not str(r["id"]).startswith("warm-up")]
    return {
        "crossed": sorted(f"{a['sent']} got {a['answered']}" for a in answers
                          if "answered" in a and a["answered"] != a["sent"]),
        "errors": sorted(a["error"] for a in answers if "error" in a),
        "retried": sorted(a["sent"] for a in answers if a.get("attempts") not in (None, 1)),
        "not_ok": sorted(a["sent"] for a in answers
                         if "status" in a and (a["status"], a["outcome"]) != (201, "ok")),
        "fell_back": sorted(a["sent"] for a in answers if a.get("fallbacks")),
        "keys_twice": sorted(k for k, n in Counter(r["key"] for r in posts).items() if n > 1),
        "ids_twice": sorted(i for i, n in Counter(r["id"] for r in posts).items() if n > 1),
        "posts": len(posts),
    }


def counted(found: Dict[str, Any]) -> str:
    """The summary as numbers, for the test's output."""
    return ", ".join(f"{k} {len(v) if isinstance(v, list) else v}" for k, v in found.items())


def _workers(answers: List[Dict[str, Any]]) -> List[int]:
    return sorted({int(a["pid"]) for a in answers if "pid" in a})


def _clients_in_redis(redis_url: str) -> List[str]:
    """Every client id Redis records as sharing an API key (the fleet's ``{prefix:kid}:c`` sets)."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5, decode_responses=True)
    members: List[str] = []
    for key in client.scan_iter(match="*:c"):
        members += [str(member) for member in client.zrange(key, 0, -1)]
    return sorted(members)


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_uwsgi_workers_never_read_each_others_answers(mode: str, tmp_path: Any) -> None:
    """Every caller gets its own answer, first time, and every job reaches the server once."""
    log_path = str(tmp_path / "uwsgi.log")
    with EchoServer() as backend, uwsgi(MODES[mode], _environment(backend, None), log_path) as server:
        answers = call_at_once(server.url)
        log = server.log()
    found = summary(answers, backend)
    print(f"{mode}: {len(_workers(answers))} workers served; {counted(found)}")
    assert found["crossed"] == []
    assert found["errors"] == []
    assert found["retried"] == [], json.dumps([a for a in answers if a["sent"] in found["retried"]])
    assert found["not_ok"] == []
    assert found["keys_twice"] == []
    assert found["ids_twice"] == []
    assert found["posts"] == CALLERS
    assert all(a["fork_pid"] == a["pid"] for a in answers)  # each worker started afresh
    assert len(_workers(answers)) >= 2, "the callers must reach more than one worker"
    assert "Traceback" not in log


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_uwsgi_workers_present_their_own_client_ids_to_redis(
    mode: str, tmp_path: Any, redis_server: RedisServer
) -> None:
    """With a RedisFleet built in the master, Redis counts each worker as its own process."""
    with EchoServer() as backend:
        env = _environment(backend, redis_server.url)
        with uwsgi(MODES[mode], env, str(tmp_path / "uwsgi.log")) as server:
            master = server.process.pid
            answers = call_at_once(server.url)
            log = server.log()
    found = summary(answers, backend)
    workers = _workers(answers)
    ids = {int(a["pid"]): a["client_id"] for a in answers if "pid" in a}
    in_redis = _clients_in_redis(redis_server.url)
    print(f"{mode}: workers {workers}, client ids {ids}, in Redis {in_redis}; {counted(found)}")
    assert found["crossed"] == []
    assert found["errors"] == []
    assert found["retried"] == []
    assert found["keys_twice"] == []
    assert found["posts"] == CALLERS
    assert found["fell_back"] == []  # every turn came from Redis
    assert len(workers) >= 2, "the callers must reach more than one worker"
    # One client id per worker, named by the worker's pid, and each one is in Redis.
    assert all(a["client_id"] == ids[int(a["pid"])] for a in answers)
    assert all(client_id.startswith(f"{pid}-") for pid, client_id in ids.items())
    assert len(set(ids.values())) == len(workers)
    assert set(ids.values()) <= set(in_redis)
    # Redis knows no process twice: the master's warm-up (preforking) and one id per worker.
    pids = [int(member.split("-")[0]) for member in in_redis]
    assert len(pids) == len(set(pids))
    assert set(pids) <= {master, *_spawned_workers(log)}
    assert "Traceback" not in log


def _spawned_workers(log: str) -> List[int]:
    return [int(pid) for pid in re.findall(r"spawned uWSGI worker \d+ \(pid: (\d+)", log)]


@pytest.mark.slow
def test_uwsgi_runs_no_at_fork_hook_in_its_workers(tmp_path: Any) -> None:
    """Without the pid check the library in uWSGI's workers still holds the master's pid: no hook ran."""
    with EchoServer() as backend:
        env = _environment(backend, None)
        env["UWSGI_APP_NO_PID_CHECK"] = "1"
        with uwsgi(MODES["prefork"], env, str(tmp_path / "uwsgi.log")) as server:
            master = server.process.pid
            answers = call_at_once(server.url)
    served = [a for a in answers if "pid" in a]
    print(f"without the check: {len(_workers(answers))} workers served; {counted(summary(answers, backend))}")
    assert len(_workers(answers)) >= 2
    assert master not in _workers(answers)
    assert {a["fork_pid"] for a in served} == {master}
