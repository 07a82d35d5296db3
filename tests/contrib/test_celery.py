"""The Celery guide's tasks on a real worker: every task succeeds, no job runs twice.

A real ``celery worker`` (prefork, 4 processes) consumes from a real redis-server (the
broker and the JSON result backend) and posts to an independent loopback server
(tests/contrib/submit_server.py) that holds a 5/s quota and runs each job once per
Idempotency-Key, and (in all but the quota-only scenario) loses, slows or drops the first
answer of every job. Each batch prints what it took against the quota's ideal (the fewest
calls the quota must admit, at 5/s); with ``SUME_E2E_TASKS`` of 50 or more (100:
``SUME_E2E_TASKS=100 pytest -s tests/contrib/test_celery.py``) the guide's tasks must also
end within 1.5x of it. The tasks are the guide's, executed from docs/guide/background.md itself
(tests/contrib/celery_app.py), with a 1.5 s per-call deadline instead of 10 s; their
``RedisFleet`` lives on the broker's Redis, as the guide has it.
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from sume_urllib3 import SumeRetryError
from sume_urllib3.exceptions import SumeConnectionError

from ..redis_server import RedisServer
from .submit_server import SubmitServer

celery = pytest.importorskip("celery", reason="the Celery end-to-end test needs the celery extra")

ROOT = pathlib.Path(__file__).resolve().parents[2]
TASKS = int(os.environ.get("SUME_E2E_TASKS", "12"))
RATE = 5.0
DEADLINE = 1.5
CONCURRENCY = 4
#: Longest a run of TASKS may take before the test calls it stuck (12 tasks take ~10-25 s);
#: at least 90 s, and 7.5x the quota's ideal with lost answers (300 s for 100 tasks).
PATIENCE = float(os.environ.get("SUME_E2E_PATIENCE", max(90.0, 7.5 * 2 * TASKS / RATE)))
#: The guide pattern's time target, checked on batches big enough for it to mean anything
#: (a batch of 12 is over in a couple of its ideal seconds, most of them start-up).
ON_TIME, ON_TIME_FROM = 1.5, 50


@dataclass
class Run:
    """What one batch of tasks did, from the results and the server's own counts."""

    states: Dict[str, int]
    executions: List[int]
    twice: List[Tuple[str, int]]
    keyless: int
    calls: int
    refused: int
    retries: List[int]
    last_success: float
    faulted: Dict[str, int]
    faults: bool

    @property
    def ideal(self) -> float:
        """The quota's own limit: the fewest calls it must admit, at RATE per second.

        One call per job; two when the first answer is lost (the run, then the replay
        that answers), since the server counts a replay against the quota too.
        """
        return (2 if self.faults else 1) * TASKS / RATE


@pytest.fixture(scope="module")
def stack(redis_session_server: RedisServer) -> Iterator[Tuple[Any, SubmitServer]]:
    """A worker process, its broker and backend on redis-server, and the submit server."""
    redis_url = f"redis://127.0.0.1:{redis_session_server.port}"
    broker, backend = f"{redis_url}/11", f"{redis_url}/12"
    for db in ("11", "12"):
        redis_session_server.cli("-n", db, "FLUSHDB")
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    with SubmitServer(rate=RATE, faults=True) as server, tempfile.TemporaryFile() as log, \
            tempfile.TemporaryDirectory() as host:
        env = {
            **os.environ,
            "CELERY_BROKER_URL": broker,
            "CELERY_RESULT_BACKEND": backend,
            "SUME_API_KEY": "sk_e2e_celery",
            "SUME_API_BASE_URL": server.url,
            "SUME_E2E_DEADLINE": str(DEADLINE),
            "SUME_E2E_HOST_FLEET": os.path.join(host, "e2e.fleet"),  # a file of this worker's own
            "PYTHONPATH": str(ROOT),
        }
        worker = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "tests.contrib.celery_app", "worker",
                "-P", "prefork", "-c", str(CONCURRENCY), "-Q", queue, "-l", "WARNING",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        producer = celery.Celery("producer", broker=broker, backend=backend)
        producer.conf.update(
            task_serializer="json", result_serializer="json", accept_content=["json"],
            task_default_queue=queue, result_extended=True, broker_connection_retry_on_startup=True,
        )
        try:
            assert "pong" == producer.send_task("e2e.ping").get(timeout=60)
            yield producer, server
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace")[-20000:])
            raise
        finally:
            worker.send_signal(signal.SIGTERM)  # warm shutdown: the children finish and exit
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)
            # Sending a task subscribes to its result on Redis pub/sub, and an AsyncResult
            # unsubscribes when it is collected; results are in reference cycles, so collect
            # them now, while redis-server runs: after it stops, Celery 5.3 retries each
            # unsubscription for many seconds and the session ends in errors.
            gc.collect()


def run_batch(stack: Tuple[Any, SubmitServer], task: str, *, faults: bool = True) -> Run:
    """Send TASKS tasks at once, as .delay(payload) does, and wait for every one to end."""
    producer, server = stack
    server.reset(faults=faults)
    run = uuid.uuid4().hex[:8]
    started = time.monotonic()
    results = [
        producer.send_task(task, args=[{"type": "prompt", "name": "Ada", "run": run, "n": n}])
        for n in range(TASKS)
    ]
    states: Dict[str, int] = {}
    retries: List[int] = []
    finished: List[float] = []
    for n, result in enumerate(results):
        try:
            value = result.get(timeout=max(PATIENCE - (time.monotonic() - started), 1.0), propagate=False)
        except celery.exceptions.TimeoutError:
            states["TIMEOUT"] = states.get("TIMEOUT", 0) + 1
            continue
        states[result.state] = states.get(result.state, 0) + 1
        retries.append(int(result.retries or 0))
        if result.state == "SUCCESS":
            assert (run, n) == (value["data"]["run"], value["data"]["n"])  # its own job's answer
            finished.append(result.date_done.timestamp())
    unfinished = [result.id for result in results if not result.ready()]
    if unfinished:  # a stuck run must not post into the next one
        producer.control.revoke(unfinished, terminate=False)
    # date_done is the backend's wall clock: measure the last success from the first send.
    last = max(finished) - (time.time() - (time.monotonic() - started)) if finished else float("inf")
    with server.lock:
        executions = [server.executions[(run, n)] for n in range(TASKS)]
        counts = (server.keyless, server.calls, server.refused, dict(server.faulted))
    return Run(
        states, executions, server.twice(), counts[0], counts[1], counts[2], retries, last, counts[3], faults
    )


def report(name: str, run: Run) -> None:
    """Print the batch; with ``SUME_E2E_RESULTS`` (benchmarks/celery_e2e.py) also append it there."""
    results = os.environ.get("SUME_E2E_RESULTS")
    if results:
        with open(results, "a", encoding="utf-8") as out:
            out.write(json.dumps({
                "batch": name, "tasks": TASKS, "succeeded": run.states.get("SUCCESS", 0),
                "twice": len(run.twice), "keyless": run.keyless, "calls": run.calls, "refused": run.refused,
                "retries": sum(run.retries), "most_retries": max(run.retries, default=0),
                "last_success_s": run.last_success, "ideal_s": run.ideal,
            }) + "\n")
    print(
        f"\n{name}: {run.states}, executions {sum(run.executions)} for {TASKS} jobs, twice {len(run.twice)}, "
        f"keyless {run.keyless}, server calls {run.calls} ({run.refused} refused 429), "
        f"task retries {sum(run.retries)} (most {max(run.retries, default=0)}), faults {run.faulted}, "
        f"last success {run.last_success:.1f}s "
        f"(quota ideal {run.ideal:.1f}s, {run.last_success / run.ideal:.2f}x)"
    )


def assert_exactly_once(run: Run) -> None:
    assert {"SUCCESS": TASKS} == run.states
    assert [1] * TASKS == run.executions  # every job ran, none twice
    assert [] == run.twice
    assert 0 == run.keyless


def assert_on_time(run: Run) -> None:
    if TASKS >= ON_TIME_FROM:
        assert run.last_success <= ON_TIME * run.ideal


def test_readme_task_on_a_server_that_loses_the_first_answer(stack: Tuple[Any, SubmitServer]) -> None:
    """Lost, slow and dropped first answers under a 5/s quota: 100% succeed, 0 run twice."""
    run = run_batch(stack, "e2e_readme.create_avatar")
    report("README (RedisFleet), retry_later, faults", run)

    assert_exactly_once(run)
    assert sum(run.faulted.values()) == TASKS  # every job's first answer was lost one way or another
    assert sum(run.retries) > 0  # the slow answers outlived the deadline: the queue retried
    assert run.last_success < PATIENCE
    assert_on_time(run)


def test_autoretry_for_is_exactly_once_too(stack: Tuple[Any, SubmitServer]) -> None:
    """autoretry_for=(SumeRetryError,) retries with the same key: no job runs twice."""
    run = run_batch(stack, "e2e_readme.create_avatar_auto")
    report("README (RedisFleet), autoretry_for, faults", run)

    assert_exactly_once(run)
    assert sum(run.retries) > 0


def test_readme_task_with_the_fleet_off(stack: Tuple[Any, SubmitServer]) -> None:
    """fleet=None: the 429s and lost answers alone; still 100% and exactly once."""
    run = run_batch(stack, "e2e_nofleet.create_avatar")
    report("retry_later, fleet=None, faults", run)

    assert_exactly_once(run)


def test_the_default_fleet_paces_each_process_apart(stack: Tuple[Any, SubmitServer]) -> None:
    """SumeSession()'s default: a LocalFleet per worker process. Still 100% and exactly once,
    but each process learns the quota alone and their requests collide (the guide says so)."""
    run = run_batch(stack, "e2e_local.create_avatar", faults=False)
    report("SumeSession() (a LocalFleet per process), retry_later, quota only", run)

    assert_exactly_once(run)


def test_the_host_fleet_paces_every_process_together(stack: Tuple[Any, SubmitServer]) -> None:
    """A HostFleet built in the worker's parent: its forked processes share one pace through the
    file, so the batch ends as a shared Redis pace would, 100% and exactly once."""
    run = run_batch(stack, "e2e_host.create_avatar", faults=False)
    report("HostFleet (one file for the worker's processes), retry_later, quota only", run)

    assert_exactly_once(run)
    assert_on_time(run)


def test_readme_task_under_quota_pressure(stack: Tuple[Any, SubmitServer]) -> None:
    """Every answer arrives, but TASKS at once against a 5/s quota: 100% succeed, 0 run twice.

    Last of the guide's batches: its RedisFleet keeps the pace learned from the batches
    before (as a deployed worker would), and a pace learned from this batch's 429s would
    slow lossy batches after it.
    """
    run = run_batch(stack, "e2e_readme.create_avatar", faults=False)
    report("README (RedisFleet), retry_later, quota only", run)

    assert_exactly_once(run)
    assert {} == run.faulted
    assert run.calls >= TASKS  # every job was admitted once; refused calls come on top
    assert_on_time(run)


@pytest.mark.parametrize(
    ("outage", "cls"), [("503", SumeRetryError), ("drop", SumeConnectionError)], ids=["503", "drop"]
)
def test_a_give_up_survives_the_json_result_backend(
    stack: Tuple[Any, SubmitServer], outage: str, cls: type
) -> None:
    """A task ended by a SumeRetryError comes back from the JSON backend as that class, record kept."""
    producer, server = stack
    server.reset(faults=False)
    result = producer.send_task("e2e.give_up", args=[{"run": "x", "n": 0, "outage": outage}])

    error = result.get(timeout=30, propagate=False)

    assert "FAILURE" == result.state
    assert type(error) is cls
    assert isinstance(error, SumeRetryError)
    assert error.record.attempts >= 2
    assert error.retry_in is not None
    assert error.retry_in >= 0
    assert error.idempotency_key is not None
    assert 36 == len(error.idempotency_key)
    assert error.record.url.endswith("/v1/avatars")
    assert str(error).startswith(f"gave up after {error.record.attempts} attempts")
