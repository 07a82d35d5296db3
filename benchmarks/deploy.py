"""A real deployment: gunicorn or uWSGI workers behind a Django view, one quota server, 60 requests at once.

Six ways to serve the minimal Django project in ``benchmarks/deploy_project/``, 4 worker
processes each: gunicorn ``--preload`` (``sync``, ``gthread --threads 8``, and ``gevent``, which
monkey-patches each worker after the fork), and uWSGI's
default prefork ``--master --processes 4`` (alone, with ``--threads 8``, and with
``--lazy-apps``). Except under ``--lazy-apps``, the app is loaded in the master, which builds the
session and uses it once (a GET of the quota server's stats page: a pooled keep-alive connection,
and with Redis a fleet client id, before any worker exists), then forks the workers; uWSGI forks
from C, so no at-fork hook runs in its workers. The view posts once through
``sume_urllib3.contrib.django.get_session()`` to a token-bucket quota server (10/s, burst 10,
written independently of FakeSume: ``RateLimit-Limit/-Remaining/-Reset`` with Reset in whole
seconds, no ``RateLimit-Policy``, 429 + Retry-After over the quota). A client of 60 threads,
held at a barrier, posts to the view all at once. Scenarios (``SUME["FLEET"]``):

- ``redis_configured``: ``{"REDIS_URL": ..., "RATE": "10/s", "BURST": 10}`` (the quota as the
  server has it: a user configures it so) on a real redis-server that this benchmark starts on a
  free loopback port;
- ``redis_learned``: ``{"REDIS_URL": ...}``, the pace learned from the server's replies;
- ``host_configured``: ``{"HOST": ..., "RATE": "10/s", "BURST": 10}``, a ``HostFleet`` on a file of its own
  per run (the deployment's; ``True`` in production picks the default path);
- ``host_learned``: ``{"HOST": ...}``;
- ``default``: no ``FLEET`` key, the library's default in Django: the host fleet at its default
  path (per user and per app, under ``$XDG_RUNTIME_DIR``).

Each run starts a fresh server, an empty Redis, a new host file and a full bucket: the default
scenario's too, without a ``FLEET`` key, because every run gives the server a new, empty
``XDG_RUNTIME_DIR`` (``HostFleet``'s default path lies under it). Per run: success (the view
answered 200 because Sume did), calls per request at the quota server, jobs executed twice
(Idempotency-Keys the server admitted more than once), 429s, and the time from the release to the
last success. Each scenario runs ``--runs`` times per worker class; the table gives the median and
the spread (lowest-highest run). A worker that read another's answer would show as a job
executed twice, a failure or extra calls per request.

    python benchmarks/deploy.py            # the full run (8-15 minutes), printed
    python benchmarks/deploy.py --write    # also record benchmarks/results/deploy.json
    python benchmarks/deploy.py --smoke    # CI: gunicorn gthread and uWSGI --threads 8, Redis
                                           # configured, 20 requests, 1 run; exits 1 unless
                                           # every request succeeded, no job twice

Needs gunicorn, gevent, uWSGI, Django and redis-py (``pip install gunicorn gevent uwsgi`` on top of
the test extra; the ``bench`` extra lists them) and redis-server on PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROJECT = os.path.join(HERE, "deploy_project")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import _results  # noqa: E402
import render  # noqa: E402
from _quota_servers import QuotaProcess  # noqa: E402

from tests.redis_server import RedisServer, free_port  # noqa: E402

WORKERS = 4
#: (id, label, server, the server's arguments beside the workers' count)
WORKER_CLASSES: Tuple[Tuple[str, str, str, Tuple[str, ...]], ...] = (
    ("sync", "gunicorn `--preload`, sync", "gunicorn", ("--worker-class", "sync")),
    ("gthread", "gunicorn `--preload`, gthread `--threads 8`", "gunicorn",
     ("--worker-class", "gthread", "--threads", "8")),
    ("gevent", "gunicorn `--preload`, gevent", "gunicorn", ("--worker-class", "gevent")),
    ("uwsgi", "uWSGI `--master`", "uwsgi", ()),
    ("uwsgi-threads", "uWSGI `--master --threads 8`", "uwsgi", ("--threads", "8")),
    ("uwsgi-lazy-apps", "uWSGI `--master --lazy-apps`", "uwsgi", ("--lazy-apps",)),
)
QUOTA = "token-bucket"  # 10/s burst 10, RateLimit-Limit/-Remaining/-Reset (whole seconds), no Policy
RATE, BURST = 10.0, 10  # the ideal last success follows from these: (REQUESTS - BURST) / RATE
#: (id, label, SUME["FLEET"] given the Redis URL and the host file; None leaves the key out)
SCENARIOS: Tuple[Tuple[str, str], ...] = (
    ("redis_configured", 'Redis, `"RATE": "10/s", "BURST": 10`'),
    ("redis_learned", "Redis, learned (no `RATE`)"),
    ("host_configured", 'host file, `"RATE": "10/s", "BURST": 10`'),
    ("host_learned", "host file, learned (no `RATE`)"),
    ("default", "none (library default)"),
)
REQUESTS, RUNS = 60, 5  # runs differ (a 2-core machine, 60 threads): the median of 5, and the spread
SMOKE = {
    "requests": 20, "runs": 1, "classes": ["gthread", "uwsgi-threads"], "scenarios": ["redis_configured"]
}
API_KEY = "sk_deploy_bench_0123456789"
# gunicorn kills a worker whose request runs past --timeout (uWSGI: --harakiri); gunicorn's default
# (30 s) is shorter than the library's own max_elapsed (90 s), so it would cut a slow run short
# instead of measuring it.
GUNICORN_TIMEOUT = 150
CLIENT_TIMEOUT = 200.0


def fleet_setting(scenario: str, redis_url: str, host: Any = True) -> Optional[Dict[str, Any]]:
    """``SUME["FLEET"]`` for a scenario; None for the library default (no key)."""
    if scenario == "redis_configured":
        return {"REDIS_URL": redis_url, "RATE": "10/s", "BURST": BURST}
    if scenario == "redis_learned":
        return {"REDIS_URL": redis_url}
    if scenario == "host_configured":
        return {"HOST": host, "RATE": "10/s", "BURST": BURST}
    if scenario == "host_learned":
        return {"HOST": host}
    if scenario == "default":
        return None
    raise ValueError(f"unknown scenario {scenario!r}")


# -- gunicorn and uWSGI --------------------------------------------------------------------------


def uwsgi_executable() -> Optional[str]:
    """The uwsgi next to this interpreter (``pip install uwsgi``), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "uwsgi")
    return beside if os.access(beside, os.X_OK) else shutil.which("uwsgi")


def _command(server: str, worker_args: Sequence[str], port: int, log_path: str) -> List[str]:
    if server == "gunicorn":
        return [
            sys.executable, "-m", "gunicorn", "--preload", "--workers", str(WORKERS), *worker_args,
            "--bind", f"127.0.0.1:{port}", "--chdir", PROJECT, "--timeout", str(GUNICORN_TIMEOUT),
            "--graceful-timeout", "5", "--log-level", "info", "--error-logfile", log_path,
            "deploy_site.wsgi:application",
        ]
    uwsgi = uwsgi_executable()
    if uwsgi is None:
        raise RuntimeError("uwsgi is not installed (pip install uwsgi)")
    command = [
        uwsgi, "--master", "--processes", str(WORKERS), *worker_args,
        "--http-socket", f"127.0.0.1:{port}", "--chdir", PROJECT, "--module", "deploy_site.wsgi:application",
        "--need-app", "--die-on-term", "--harakiri", str(GUNICORN_TIMEOUT), "--disable-logging",
        "--logto", log_path,
    ]
    if sys.prefix != sys.base_prefix:  # this interpreter's virtualenv, where the packages are
        command += ["--virtualenv", sys.prefix]
    return command


def _booted(server: str, worker_args: Sequence[str], log: str) -> bool:
    """Every worker has started, with the app loaded (in the master, or in each worker)."""
    if server == "gunicorn":
        return len(re.findall(r"Booting worker with pid", log)) >= WORKERS
    apps = WORKERS if "--lazy-apps" in worker_args else 1
    return (
        len(re.findall(r"spawned uWSGI worker \d+", log)) >= WORKERS
        and len(re.findall(r"WSGI app 0 \(mountpoint=''\) ready", log)) >= apps
    )


@contextlib.contextmanager
def serving(
    server: str, worker_args: Sequence[str], env: Mapping[str, str], log_path: str
) -> Iterator[str]:
    """gunicorn --preload, or uWSGI --master, serving the project on a free loopback port; its URL."""
    port = free_port()
    process = subprocess.Popen(
        _command(server, worker_args, port, log_path), env=dict(env), stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, server, worker_args, url, log_path)
        yield url
    finally:
        _stop(process)


def _wait_ready(
    process: subprocess.Popen[bytes], server: str, worker_args: Sequence[str], url: str, log_path: str,
    timeout: float = 60.0,
) -> None:
    """Until every worker has booted and the view answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{server} exited with {process.returncode}:\n{_tail(log_path)}")
        if _booted(server, worker_args, _read(log_path)):
            try:
                response = requests.get(url + "/ready", timeout=2)
            except requests.RequestException:
                response = None
            if response is not None and response.status_code == 200:
                library = response.json()["sume_urllib3"]
                # The figures are stamped with this checkout's commit: the workers must run its code.
                if os.path.realpath(library) != os.path.realpath(os.path.join(ROOT, "sume_urllib3")):
                    raise RuntimeError(f"{server}'s workers import sume_urllib3 from {library}, not {ROOT}")
                return
        time.sleep(0.1)
    raise RuntimeError(f"{server} did not serve within {timeout:.0f} s:\n{_tail(log_path)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the master (it stops its workers; uWSGI: --die-on-term); SIGKILL the group if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _read(log_path: str) -> str:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _tail(log_path: str, lines: int = 30) -> str:
    return "\n".join(_read(log_path).splitlines()[-lines:])


# -- the client --------------------------------------------------------------------------------


def herd(url: str, n: int) -> List[Dict[str, Any]]:
    """``n`` threads post to the view at one instant (a barrier); each one's outcome and end time."""
    start = [0.0]
    barrier = threading.Barrier(n, action=lambda: start.__setitem__(0, time.monotonic()))
    out: List[Dict[str, Any]] = [{} for _ in range(n)]

    def one(i: int) -> None:
        with requests.Session() as client:
            barrier.wait()
            try:
                response = client.post(url + "/generate", timeout=CLIENT_TIMEOUT)
                body = response.json() if response.headers.get("Content-Type", "").startswith(
                    "application/json") else {"reason": f"HTTP {response.status_code} from the server"}
                ok = response.status_code == 200 and bool(body.get("ok"))
            except (requests.RequestException, ValueError) as exc:
                ok, body = False, {"reason": f"{type(exc).__name__}: {exc}"[:200]}
            out[i] = {"ok": ok, "end": time.monotonic() - start[0], **body}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


# -- one run -----------------------------------------------------------------------------------


def run_once(
    scenario: str, server: str, worker_args: Sequence[str], n: int, quota: QuotaProcess,
    redis: RedisServer, workdir: str,
) -> Dict[str, Any]:
    """A fresh server, an empty Redis, a full bucket; 60 (``n``) requests; the row of this run."""
    redis.cli("FLUSHALL")
    quota.reset()
    # A new host file per run, as Redis is emptied: no run inherits another's pace.
    setting = fleet_setting(scenario, redis.url, os.path.join(workdir, f"fleet-{time.monotonic_ns()}.fleet"))
    runtime = os.path.join(workdir, f"run-{time.monotonic_ns()}")  # the default's file: new per run
    os.mkdir(runtime, 0o700)
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": runtime,
        "SUME_API_KEY": API_KEY,
        "SUME_API_BASE_URL": quota.url + "/v1",
        "DEPLOY_SUME_FLEET": "default" if setting is None else json.dumps(setting),
        # The master's one call: the quota server's stats page, which takes nothing from the bucket.
        "DEPLOY_WARM_UP_URL": quota.url + "/_stats",
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    log_path = os.path.join(workdir, f"{server}-{scenario}-{time.monotonic_ns()}.log")
    with serving(server, worker_args, env, log_path) as url:
        records = herd(url, n)
    stats = quota.stats()
    oks = [r for r in records if r["ok"]]
    log = _read(log_path)
    return {
        "succeeded": len(oks),
        "requests": n,
        "calls": stats.calls,
        "calls_per_request": stats.calls / n,
        "executed_twice": stats.executed_twice,
        "throttled": stats.throttled,
        "last_success_s": max((r["end"] for r in oks), default=None),
        "keys_at_server": len(stats.calls_per_key),
        "workers_served": len({r.get("pid") for r in records if r.get("pid")}),
        "redis_fallbacks": sum(int(r.get("fallbacks", 0)) for r in records),
        "worker_errors": len(re.findall(r"Traceback|\[CRITICAL\]|WORKER TIMEOUT|HARAKIRI", log)),
        "failures": sorted({str(r.get("reason", "")) for r in records if not r["ok"]})[:5],
    }


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Median and spread (lowest-highest run) of a scenario's runs."""

    def spread(key: str) -> Dict[str, Any]:
        values = [r[key] for r in runs if r[key] is not None]
        if not values:
            return {"median": None, "low": None, "high": None}
        return {"median": statistics.median(values), "low": min(values), "high": max(values)}

    return {
        "succeeded": spread("succeeded"),
        "calls_per_request": spread("calls_per_request"),
        "throttled": spread("throttled"),
        "last_success_s": spread("last_success_s"),
        "executed_twice_total": sum(r["executed_twice"] for r in runs),
        "redis_fallbacks_total": sum(r["redis_fallbacks"] for r in runs),
        "worker_errors_total": sum(r["worker_errors"] for r in runs),
        "all_succeeded": all(r["succeeded"] == r["requests"] for r in runs),
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the scenarios; print the table; with --write record results/deploy.json; --smoke checks."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record benchmarks/results/deploy.json")
    parser.add_argument("--smoke", action="store_true", help="CI: two classes, Redis configured, 20 requests")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs per scenario and worker class")
    parser.add_argument("--requests", type=int, default=REQUESTS, help="requests released at once")
    parser.add_argument("--classes", nargs="+", default=[c[0] for c in WORKER_CLASSES],
                        choices=[c[0] for c in WORKER_CLASSES], help="servers and worker classes")
    parser.add_argument("--scenarios", nargs="+", default=[s[0] for s in SCENARIOS],
                        choices=[s[0] for s in SCENARIOS], help="SUME['FLEET'] scenarios")
    args = parser.parse_args(argv)
    _results.refuse_partial(parser, args, "smoke", "runs", "requests", "classes", "scenarios")
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    if args.runs < 1 or args.requests < 1:
        parser.error("--runs and --requests must be at least 1")

    redis = RedisServer.find()
    if redis is None:
        parser.error("redis-server is not on PATH")
    classes = [c for c in WORKER_CLASSES if c[0] in args.classes]
    if any(c[2] == "uwsgi" for c in classes) and uwsgi_executable() is None:
        parser.error("uwsgi is not installed (pip install uwsgi; the bench extra lists it)")
    if any(c[0] == "gevent" for c in classes) and not _installed("gevent"):
        parser.error("gevent is not installed (pip install gevent; the bench extra lists it)")
    scenarios = [s for s in SCENARIOS if s[0] in args.scenarios]
    rows: List[Dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sume-deploy-") as workdir, redis, QuotaProcess(QUOTA) as quota:
        quota_description = quota.describe()
        for class_id, class_label, server, worker_args in classes:
            for scenario, scenario_label in scenarios:
                runs = []
                for i in range(args.runs):
                    run = run_once(scenario, server, worker_args, args.requests, quota, redis, workdir)
                    runs.append(run)
                    print(
                        f"{class_id:15} {scenario:17} run {i + 1}: {run['succeeded']}/{run['requests']} "
                        f"calls/req {run['calls_per_request']:.2f} 429s {run['throttled']} "
                        f"twice {run['executed_twice']} last {run['last_success_s'] or float('nan'):.2f} s"
                        + (f" failures: {run['failures']}" if run["failures"] else ""),
                        flush=True,
                    )
                rows.append({
                    "server": server, "worker_class": class_id, "worker_class_label": class_label,
                    "scenario": scenario, "scenario_label": scenario_label,
                    "fleet_setting": _shown_setting(scenario),
                    "summary": summarize(runs), "runs": runs,
                })
    print()
    print(render.deploy_table({"requests": args.requests, "rows": rows}))
    print(f"\n{time.monotonic() - started:.0f} s in all")

    if args.smoke:
        bad = [
            f"{r['worker_class']}/{r['scenario']}: {run['succeeded']}/{run['requests']} succeeded, "
            f"{run['executed_twice']} executed twice, failures {run['failures']}"
            for r in rows for run in r["runs"]
            if run["succeeded"] != run["requests"] or run["executed_twice"]
        ]
        if bad:
            print("deploy smoke FAILED:\n" + "\n".join(bad), file=sys.stderr)
            return 1
        print("deploy smoke passed: every request succeeded, no job executed twice")
    if args.write:
        _results.write("deploy", {
            "requests": args.requests,
            "runs": args.runs,
            "workers": WORKERS,
            "quota": quota_description,
            "ideal_last_success_s": (args.requests - BURST) / RATE,
            "gunicorn": _version("gunicorn"),
            "uwsgi": _version("uwsgi"),
            "django": _version("django"),
            "redis_py": _version("redis"),
            "gevent": _version("gevent"),
            "rows": rows,
        })
    return 0


def _shown_setting(scenario: str) -> Optional[Dict[str, Any]]:
    """The FLEET setting as the docs show it (a placeholder URL: the port changes every run)."""
    return fleet_setting(scenario, "redis://127.0.0.1:<port>/0")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _version(module: str) -> str:
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        return version(module)
    return "?"


if __name__ == "__main__":
    sys.exit(main())
