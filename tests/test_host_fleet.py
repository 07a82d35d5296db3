"""HostFleet: one pace per key for every process of a host, through a local file; forks, deaths, failures."""

from __future__ import annotations

import inspect
import logging
import math
import multiprocessing
import os
import pickle
import shutil
import signal
import sqlite3
import stat
import tempfile
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

from sume_urllib3 import ConfigurationError
from sume_urllib3.pacing import HostFleet, RetryBudget
from sume_urllib3.pacing import _core as pacing
from sume_urllib3.pacing._fleet import Grant, fleet_key
from sume_urllib3.pacing.host import QUEUE_TIMEOUT, decode_state, default_app, default_path, encode_state

from .conftest import VirtualTime, in_a_child_forked_from_c, in_a_forked_child

KEY = fleet_key("sk_live_SECRET_0123456789abcdef")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def path(tmp_path: Any) -> str:
    return str(tmp_path / "app.fleet")


def slot(grant: Grant) -> int:
    """The turn a grant holds, on the file's clock (µs)."""
    assert isinstance(grant.token, pacing.Turn), grant
    return grant.token.slot


# -- one pace for the host -----------------------------------------------------------------


def _take_turns(path: str, count: int, out: Any) -> None:
    # timeout: the lock is shared, not contested here; a loaded machine may park its holder.
    fleet = HostFleet(path, rate="50/s", timeout=5.0)
    slots = [slot(fleet.acquire(KEY, time_left=60.0)) for _ in range(count)]
    out.put((slots, fleet.fallbacks))


@needs_fork
def test_processes_of_one_host_share_one_configured_pace(path: str) -> None:
    """Four processes taking five turns each at 50/s get twenty turns 20 ms apart, none shared."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = [context.Process(target=_take_turns, args=(path, 5, out)) for _ in range(4)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(10)
    slots = sorted(s for got, _ in results for s in got)
    assert [fallbacks for _, fallbacks in results] == [0, 0, 0, 0]
    assert len(slots) == 20
    assert min(b - a for a, b in zip(slots, slots[1:])) >= 20_000


def test_threads_of_one_process_share_the_pace(path: str) -> None:
    """Eight threads of one process, each with its own HostFleet on the file, never share a turn."""
    slots: List[int] = []
    lock = threading.Lock()

    def take() -> None:
        fleet = HostFleet(path, rate="100/s", timeout=5.0)
        got = [slot(fleet.acquire(KEY, time_left=60.0)) for _ in range(5)]
        with lock:
            slots.extend(got)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots.sort()
    assert len(slots) == 40
    assert min(b - a for a, b in zip(slots, slots[1:])) >= 10_000


@pytest.mark.slow  # real time: runs in CI's slow step
def test_workers_opening_a_new_file_at_once_all_share_it(tmp_path: Any) -> None:
    """Every worker's first request at once: none of them fails open while the file is made.

    SQLite refuses a change of journal mode that meets another connection's lock at once, without
    its busy handler; about one round in thirty of eight openers lost the race before it was polled.
    """
    fallbacks = []
    for round_ in range(50):
        path = str(tmp_path / f"{round_}.fleet")
        start = threading.Barrier(8)

        def first_request(path: str = path, start: threading.Barrier = start) -> None:
            fleet = HostFleet(path, timeout=5.0)
            start.wait()
            fleet.acquire(KEY, time_left=60.0)
            fallbacks.append(fleet.fallbacks)

        threads = [threading.Thread(target=first_request) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert fallbacks == [0] * 400


@needs_fork
@pytest.mark.parametrize("fork", [in_a_forked_child, in_a_child_forked_from_c], ids=["os.fork", "C fork"])
def test_a_fleet_used_before_a_fork_paces_parent_and_child_together(path: str, fork: Any) -> None:
    """gunicorn --preload, uWSGI: the parent's fleet, used before the fork, paces the child with it."""
    fleet = HostFleet(path, rate="1/s")
    assert fleet.acquire(KEY, time_left=60.0).wait == 0.0

    def child() -> str:
        grant = fleet.acquire(KEY, time_left=60.0)
        return repr((round(grant.wait), grant.fallback, fleet.errors))

    assert fork(child) == repr((1, False, 0))
    after = fleet.acquire(KEY, time_left=60.0)  # the parent's connection survived the child's exit
    assert (round(after.wait), after.fallback, fleet.errors) == (2, False, 0)


def _hold_the_window(path: str, ready: Any) -> None:
    fleet = HostFleet(path)
    first = time.monotonic()
    while not fleet.acquire(KEY, time_left=60.0).again:  # until the window is full
        pass
    ready.put((first, time.monotonic()))
    time.sleep(60)  # pragma: no cover - killed before


@pytest.mark.slow  # real time: runs in CI's slow step
@needs_fork
def test_a_process_killed_with_attempts_in_flight_holds_nobody_past_the_lease(path: str) -> None:
    """A worker SIGKILLed holding the whole slow-start window frees it when the leases end (1 s here)."""
    fleet = HostFleet(path)
    grant = fleet.acquire(KEY, time_left=60.0)
    time.sleep(0.01)
    fleet.release(KEY, grant, 200, {})  # a response time of ~10 ms: leases of a second (rule 6)
    context = multiprocessing.get_context("fork")
    ready = context.Queue()
    worker = context.Process(target=_hold_the_window, args=(path, ready))
    worker.start()
    first, last = ready.get(timeout=30)  # the child's grants came between these
    os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
    worker.join(10)
    held = fleet.acquire(KEY, time_left=60.0)
    assert (held.again, held.source) == (True, "slow_start")
    while held.again:
        time.sleep(held.wait)
        held = fleet.acquire(KEY, time_left=60.0)
    sent_at = time.monotonic() + held.wait
    assert held.token is not None
    assert first + 1.0 <= sent_at <= last + 1.0 + 0.5  # the lease, and one pause of asking again


# -- failing open ---------------------------------------------------------------------------


def test_a_file_locked_past_the_timeout_paces_locally_then_the_file_again(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Locked past timeout: a fallback grant at once, one WARNING, counted; after the backoff, the file."""
    clock = VirtualTime()
    fleet = HostFleet(path, timeout=0.05, clock=clock, rng=lambda: 0.5)
    assert fleet.acquire(KEY, time_left=60.0).fallback is False
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer, stuck
    with caplog.at_level(logging.WARNING, logger="sume_urllib3"):
        started = time.monotonic()
        grants = [fleet.acquire(KEY, time_left=60.0) for _ in range(3)]
        took = time.monotonic() - started
    assert [g.fallback for g in grants] == [True, True, True]
    assert took < 0.5  # one timeout, then the backoff: the other two never touch the file
    assert (fleet.fallbacks, fleet.errors, fleet.healthy) == (3, 1, False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert path in warnings[0]
    assert "locked" in warnings[0]
    for grant in grants:
        fleet.release(KEY, grant, 200, {})  # to the local fleet that granted it
    other.execute("ROLLBACK")
    other.close()
    clock.advance(1.0)  # the backoff: a second, times 0.5 + rng
    assert fleet.acquire(KEY, time_left=60.0).fallback is False
    assert fleet.healthy


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_file_locked_at_a_process_first_open_is_waited_for_once_in_pythons_sleep(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is held by another process's writer when this one first opens it: the set-up waits
    up to QUEUE_TIMEOUT once, polling in ``time.sleep`` (gevent's, once patched: the hub serves
    every other greenlet meanwhile), never inside SQLite's busy handler, then paces locally."""
    HostFleet(path).acquire(KEY, time_left=60.0)  # an earlier process made the file
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer, stuck
    slept: List[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: (slept.append(seconds), real_sleep(seconds)))
    fleet = HostFleet(path, timeout=0.05)
    try:
        started = time.monotonic()
        grant = fleet.acquire(KEY, time_left=60.0)
        took = time.monotonic() - started
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert grant.fallback
    assert (fleet.fallbacks, fleet.errors) == (1, 1)
    assert QUEUE_TIMEOUT <= took < QUEUE_TIMEOUT + 0.5  # once: not again by the transaction's polling
    assert sum(slept) >= QUEUE_TIMEOUT / 2  # most of it (each try runs a few statements)


@pytest.mark.slow  # real time: runs in CI's slow step
def test_the_first_open_of_a_locked_file_never_holds_the_fleets_lock_while_it_waits(path: str) -> None:
    """Between its tries at a file another process holds, the first open lets go of the fleet's
    thread lock: in a gevent worker that lock may be a real one (made at the fork, before gevent
    patched), and a greenlet waiting under it would stop every other."""
    HostFleet(path).acquire(KEY, time_left=60.0)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    fleet = HostFleet(path, timeout=0.05)
    thread = threading.Thread(target=fleet.acquire, args=(KEY,), kwargs={"time_left": 60.0})
    thread.start()
    try:
        time.sleep(0.2)  # the open is polling now
        taken = []
        for _ in range(5):
            taken.append(fleet._lock.acquire(timeout=0.05))
            if taken[-1]:
                fleet._lock.release()
    finally:
        thread.join()
        other.execute("ROLLBACK")
        other.close()
    assert all(taken)


def test_a_thread_queued_behind_its_own_process_waits_its_turn(path: str) -> None:
    """Waiting for another thread of the process (not the file) past timeout is no outage: no fallback."""
    fleet = HostFleet(path, timeout=0.05)
    fleet.acquire(KEY, time_left=60.0)  # the connection is open
    grants: List[Grant] = []
    with fleet._lock:  # another thread of this process in a transaction, slowed (the GIL, a stall)
        thread = threading.Thread(target=lambda: grants.append(fleet.acquire(KEY, time_left=60.0)))
        thread.start()
        time.sleep(0.2)
    thread.join()
    assert [g.fallback for g in grants] == [False]
    assert fleet.errors == 0


def test_a_corrupt_file_never_blocks_a_request(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """A file that is not a database: the request is paced locally and the WARNING names the file."""
    with open(path, "wb") as f:
        f.write(b"not a database, " * 4096)
    fleet = HostFleet(path)
    with caplog.at_level(logging.WARNING, logger="sume_urllib3"):
        grant = fleet.acquire(KEY, time_left=60.0)
    assert (grant.fallback, grant.wait, grant.refused) == (True, 0.0, None)
    assert fleet.errors == 1
    assert any(path in r.getMessage() and "DatabaseError" in r.getMessage() for r in caplog.records)


def test_a_path_that_cannot_be_created_never_blocks_a_request(tmp_path: Any) -> None:
    """A path under a regular file (no directory can be made there): paced locally, counted."""
    (tmp_path / "plain").write_text("")
    fleet = HostFleet(str(tmp_path / "plain" / "app.fleet"))
    grant = fleet.acquire(KEY, time_left=60.0)
    assert (grant.fallback, grant.refused, fleet.fallbacks, fleet.errors) == (True, None, 1, 1)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_file_never_blocks_a_request(path: str) -> None:
    """A file the process may not write: paced locally, counted."""
    HostFleet(path).acquire(KEY, time_left=60.0)
    os.chmod(path, 0o400)
    fleet = HostFleet(path)
    grant = fleet.acquire(fleet_key("another key"), time_left=60.0)
    assert (grant.fallback, fleet.errors) == (True, 1)


def test_a_full_file_fails_open_then_sheds_its_least_recently_used_keys(path: str) -> None:
    """At max_size a new key fails open; the least recently used quarter leaves; the file serves again."""
    clock = VirtualTime()
    fleet = HostFleet(path, max_size=64 * 1024, clock=clock, rng=lambda: 0.5)
    stored = 0  # keys in the file when it filled up
    for i in range(2000):
        clock.advance(0.001)
        if fleet.acquire(fleet_key(f"key {i}"), time_left=60.0).fallback:
            stored = i
            break
    assert stored > 100
    assert os.path.getsize(path) <= 64 * 1024
    assert fleet.errors == 1
    clock.advance(2.0)  # past the backoff
    grant = fleet.acquire(fleet_key("a new key"), time_left=60.0)
    assert grant.fallback is False
    assert fleet.entries == stored - stored // 4 + 1  # the keys in it, less a quarter, and the new one


def test_a_damaged_row_starts_its_key_afresh(path: str) -> None:
    """A row that is not a state (another writer's, a bit flip) is replaced, not failed on."""
    fleet = HostFleet(path, rate="1/s")
    fleet.acquire(KEY, time_left=60.0)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE keys SET state = '[1, \"two\"]'")
    db.close()
    grant = fleet.acquire(KEY, time_left=60.0)
    assert (grant.fallback, grant.wait, fleet.errors) == (False, 0.0, 0)


# -- per user, per app, bounded --------------------------------------------------------------


def test_the_default_path_is_per_user_and_per_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Under $XDG_RUNTIME_DIR, else the temp dir with the uid; the app's name in the file's."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_path("shop") == str(tmp_path / "sume_urllib3" / "shop.fleet")
    assert default_path() == str(tmp_path / "sume_urllib3" / f"{default_app()}.fleet")
    assert default_path("shop") != default_path("blog")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    user = str(os.getuid()) if hasattr(os, "getuid") else ""
    assert default_path("shop") == os.path.join(tempfile.gettempdir(), f"sume_urllib3-{user}", "shop.fleet")


def test_the_default_app_is_the_deployment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Processes started from one directory and environment share a name; another project does not."""
    (tmp_path / "shop").mkdir()
    (tmp_path / "blog").mkdir()
    monkeypatch.chdir(tmp_path / "shop")
    shop = default_app()
    assert shop.startswith("shop-")
    assert default_app() == shop
    monkeypatch.chdir(tmp_path / "blog")
    assert default_app() != shop


def test_the_file_is_the_users_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The default directory is made 0700 and the file 0600, whatever the umask."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    old = os.umask(0)
    try:
        fleet = HostFleet(app="shop")
        assert fleet.acquire(KEY, time_left=60.0).fallback is False
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(fleet.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(fleet.path)).st_mode) == 0o700


def test_a_default_directory_others_may_write_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Another user could swap the file for theirs: the fleet paces locally instead of using it."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    shared = tmp_path / "sume_urllib3"
    shared.mkdir()
    shared.chmod(0o777)
    fleet = HostFleet(app="shop")
    assert fleet.acquire(KEY, time_left=60.0).fallback is True
    assert not os.path.exists(fleet.path)


def test_an_idle_key_leaves_the_file(path: str) -> None:
    """A key unused for ttl seconds is swept by a later acquire; a key in use stays."""
    clock = VirtualTime()
    fleet = HostFleet(path, ttl=60.0, clock=clock)
    fleet.acquire(KEY, time_left=60.0)
    other = fleet_key("another key")
    for _ in range(5):
        clock.advance(20.0)
        fleet.acquire(other, time_left=60.0)
    assert fleet.entries == 1
    db = sqlite3.connect(path)
    assert [row[0].endswith(other) for row in db.execute("SELECT kid FROM keys")] == [True]
    db.close()


def test_the_state_is_stored_field_by_field(path: str) -> None:
    """Every field of the core's State goes into the file and comes back; anything else is refused."""
    st = pacing.State()
    for number, name in enumerate(st.__dataclass_fields__, start=1):
        value = getattr(st, name)
        setattr(st, name, {"1:a": number} if isinstance(value, dict) else type(value)(number))
    assert decode_state(encode_state(st)) == st
    assert decode_state("[1, 2]") is None
    assert decode_state("not json") is None


# -- configuration ------------------------------------------------------------------------------


def test_a_pickled_default_fleet_names_the_same_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Unpickled where the working directory differs, a default-path fleet still uses its file."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    fleet = HostFleet()
    pickled = pickle.dumps(fleet)
    monkeypatch.chdir(tmp_path)
    assert pickle.loads(pickled).path == fleet.path != HostFleet().path


def test_a_path_of_your_own_gets_its_directory(tmp_path: Any) -> None:
    """A path in a directory that does not exist yet: the directory is made (0700), the file used."""
    fleet = HostFleet(str(tmp_path / "run" / "app" / "sume.fleet"))
    assert fleet.acquire(KEY, time_left=60.0).fallback is False
    assert stat.S_IMODE(os.stat(tmp_path / "run" / "app").st_mode) == 0o700


def test_pickling_keeps_the_configuration(path: str) -> None:
    """A pickled fleet (a Celery task's argument) is the same file and pace, with fresh counters."""
    fleet = HostFleet(path, rate="10/s", burst=2, retry_budget=RetryBudget(0.2, 10, 1))
    copy = pickle.loads(pickle.dumps(fleet))
    assert isinstance(copy, HostFleet)
    assert (copy.path, repr(copy)) == (fleet.path, repr(fleet))
    assert copy.acquire(KEY, time_left=60.0).fallback is False


#: Each argument of HostFleet with values it cannot use (and the argument the refusal names).
BAD_SETTINGS: List[Tuple[Dict[str, Any], str]] = [
    ({"path": 42}, "path"),
    ({"path": ""}, "path"),
    ({"rate": "fast"}, "rate"),
    ({"rate": -1}, "rate"),
    ({"burst": 2}, "burst"),
    ({"rate": "10/s", "burst": 0}, "burst"),
    ({"app": "a/b"}, "app"),
    ({"app": ""}, "app"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": math.nan}, "timeout"),
    ({"initial_window": 0}, "initial_window"),
    ({"initial_window": 4.0}, "initial_window"),
    ({"retry_budget": 3}, "retry_budget"),
    ({"ttl": 0.5}, "ttl"),
    ({"ttl": math.inf}, "ttl"),
    ({"max_size": 1024}, "max_size"),
    ({"max_size": 2.0**30}, "max_size"),
    ({"backoff": 0}, "backoff"),
    ({"max_backoff": math.inf}, "max_backoff"),
    ({"clock": 3}, "clock"),
    ({"clock": lambda: "now"}, "clock"),
    ({"wall": None}, "wall"),
    ({"rng": "seed"}, "rng"),
]


def test_the_bad_settings_cover_every_argument() -> None:
    """Every named parameter of HostFleet has rows in BAD_SETTINGS."""
    named = set(inspect.signature(HostFleet.__init__).parameters) - {"self"}
    assert named == {field for _kwargs, field in BAD_SETTINGS}


@pytest.mark.parametrize(("kwargs", "field"), BAD_SETTINGS)
def test_a_bad_setting_is_refused_at_once_naming_it(kwargs: Dict[str, Any], field: str) -> None:
    """Each bad argument raises ConfigurationError naming it, when the fleet is built, never at a request."""
    with pytest.raises(ConfigurationError, match=field):
        HostFleet(**kwargs)


def test_path_and_app_are_exclusive(path: str) -> None:
    """app names the default path: with a path of your own there is nothing for it to name."""
    with pytest.raises(ConfigurationError, match="path or app"):
        HostFleet(path, app="shop")


def test_an_acquire_and_release_cost_well_under_a_millisecond(path: str) -> None:
    """The file's transaction is tens of microseconds: a single process is not slowed by it."""
    fleet = HostFleet(path)
    took: List[float] = []
    for _ in range(200):
        started = time.perf_counter()
        grant = fleet.acquire(KEY, time_left=60.0)
        fleet.release(KEY, grant, 200, {})
        took.append(time.perf_counter() - started)
    took.sort()
    assert took[len(took) // 2] < 0.001


@needs_fork
def test_an_open_key_costs_no_transaction_until_another_process_writes(path: str) -> None:
    """A key with nothing to pace answers from the change counter; another process's 429 closes it."""
    fleet = HostFleet(path)
    for _ in range(70):  # slow start: the window grows by one per success, and stops counting at 64
        fleet.release(KEY, fleet.acquire(KEY, time_left=60.0), 200, {})
    opened = fleet.acquire(KEY, time_left=60.0)
    assert opened.token is None  # the open path: nothing reserved, nothing to release
    fleet.release(KEY, opened, 200, {})

    def meet_a_429() -> str:
        grant = fleet.acquire(KEY, time_left=60.0)
        fleet.release(KEY, grant, 429, {"Retry-After": "30"})
        return repr(fleet.errors)

    assert in_a_forked_child(meet_a_429) == "0"
    held = fleet.acquire(KEY, time_left=60.0)
    assert held.source == "cooldown"
    assert held.wait > 29.0


# -- issue 48: the file under faults, and test isolation ----------------------------------------

_PEER = """
import sys
from sume_urllib3.pacing import HostFleet
fleet = HostFleet(app="deploy", rate="1/s")
grant = fleet.acquire(sys.argv[1], time_left=60.0)
fleet.release(sys.argv[1], grant, 429, {"Retry-After": "30"})
print(fleet.path, fleet.errors)
"""


def _peer(env: Dict[str, str], kid: str) -> List[str]:
    """A new process of the deployment: a 429 with Retry-After 30 for ``kid``, through the default file."""
    import subprocess
    import sys

    command = [sys.executable, "-c", _PEER, kid]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_deleted_runtime_dir_is_noticed_and_the_file_made_where_new_processes_look(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """$XDG_RUNTIME_DIR removed (at logout): a running process says so once, counts it, and opens the
    file where a process started now looks; a cooldown one of them starts holds the other."""
    import shutil

    run, temp = tmp_path / "run", tmp_path / "tmp"
    run.mkdir()
    temp.mkdir()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run), "TMPDIR": str(temp)}
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    fleet = HostFleet(app="deploy", rate="1/s")
    assert fleet.acquire(KEY, time_left=60.0).fallback is False
    assert fleet.path.startswith(str(run))
    shutil.rmtree(run)
    caplog.set_level(logging.WARNING, logger="sume_urllib3")

    peer_path, peer_errors = _peer(env, KEY)
    deadline = time.monotonic() + 10.0
    grant = fleet.acquire(KEY, time_left=60.0)
    while grant.refused is None and time.monotonic() < deadline:  # noticed within a second or so
        time.sleep(0.2)
        grant = fleet.acquire(KEY, time_left=5.0)
    assert (fleet.path, peer_errors) == (peer_path, "0")
    assert peer_path.startswith(str(temp))
    assert grant.refused is not None
    assert grant.wait > 25.0
    assert fleet.errors == 1
    said = f"host fleet file deleted or replaced; opening {peer_path} again"
    assert [r.getMessage() for r in caplog.records].count(said) == 1


@pytest.mark.slow  # real time: runs in CI's slow step
def test_a_deleted_file_is_made_again_and_shared_without_disk_errors(path: str) -> None:
    """Only the file deleted (its -wal and -shm left): a process started now uses a new file at once
    (no 'disk I/O error'), and the running one joins it at its next use within a second."""
    import subprocess
    import sys

    fleet = HostFleet(path, rate="1/s")
    assert fleet.acquire(KEY, time_left=60.0).fallback is False
    os.remove(path)
    code = (
        "import sys; from sume_urllib3.pacing import HostFleet; f = HostFleet(sys.argv[1], rate='1/s'); "
        "g = f.acquire(sys.argv[2], time_left=60.0); f.release(sys.argv[2], g, 429, {'Retry-After': '30'}); "
        "print(f.errors, g.fallback)"
    )
    done = subprocess.run([sys.executable, "-c", code, path, KEY], capture_output=True, text=True, timeout=60)
    assert (done.stdout.split(), done.stderr) == (["0", "False"], "")
    time.sleep(1.1)
    grant = fleet.acquire(KEY, time_left=5.0)
    assert grant.refused is not None
    assert grant.wait > 25.0
    assert (fleet.errors, grant.fallback) == (1, False)


_READ_ONLY = """
import logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from sume_urllib3.pacing import HostFleet  # before the mounts: a checkout may live under /tmp
for tmp in ("/tmp", "/var/tmp", "/usr/tmp"):  # tempfile's candidates, and the working directory
    if os.path.isdir(tmp):
        assert os.system(f"mount -t tmpfs -o ro tmpfs {tmp}") == 0
os.chdir("/tmp")
fleet = HostFleet(app="deploy", rate="1/s")
grants = [fleet.acquire("k" + "0" * 16, time_left=60.0) for _ in range(2)]
print([g.fallback for g in grants], fleet.errors, [round(g.wait, 1) for g in grants])
"""


@pytest.mark.skipif(os.name != "posix" or not shutil.which("unshare") or os.geteuid(), reason="root")
def test_no_writable_temp_dir_fails_open_instead_of_raising() -> None:
    """A read-only root (every temp dir candidate and the working directory read-only, in a mount
    namespace of its own): HostFleet() builds, and paces locally with a WARNING and a counted error."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP", "XDG_RUNTIME_DIR")}
    command = ["unshare", "-m", "--propagation", "private", sys.executable, "-c", _READ_ONLY]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    if "unshare failed" in done.stderr or "Operation not permitted" in done.stderr:
        pytest.skip("no mount namespaces here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("]")[0] == "[True, True"
    assert "unavailable" in done.stderr
    assert "Read-only file system" in done.stderr
    assert done.stdout.split("] ")[1].split()[0] == "1"


@pytest.mark.slow  # real time: runs in CI's slow step
def test_threads_failing_in_one_outage_double_the_backoff_once(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight threads meet a file another process holds for 0.5 s: one outage, one backoff (the one
    the WARNING names), and the fleet is back on the file after it, not after eight doublings."""
    import subprocess
    import sys

    fleet = HostFleet(path, timeout=0.05, rng=lambda: 0.3, clock=time.monotonic)
    assert fleet.acquire(KEY, time_left=60.0).fallback is False  # the file is set up
    hold = "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], isolation_level=None); " \
        "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(0.5); db.execute('COMMIT')"
    holder = subprocess.Popen([sys.executable, "-c", hold, path], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        caplog.set_level(logging.WARNING, logger="sume_urllib3")
        threads = [threading.Thread(target=lambda: fleet.acquire(KEY, time_left=60.0)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        holder.wait(10)
    warned = time.monotonic()
    while fleet.acquire(KEY, time_left=60.0).fallback and time.monotonic() - warned < 5.0:
        time.sleep(0.02)
    assert time.monotonic() - warned < 0.8 + 0.5
    assert fleet.healthy
    assert fleet.errors >= 2
    (message,) = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert message.endswith("trying it again in 0.8s")


def test_reset_fleets_forgets_a_host_fleets_cooldown(path: str) -> None:
    """A 429 in one test must not refuse the next test's request: reset_fleets() (the testing kit's
    hook) clears the file's keys for every process, and what this process saw open."""
    from sume_urllib3.pacing import reset_fleets

    fleet, other = HostFleet(path), HostFleet(path)
    fleet.release(KEY, fleet.acquire(KEY, time_left=60.0), 429, {"Retry-After": "30"})
    assert other.acquire(KEY, time_left=5.0).refused is not None
    reset_fleets()
    assert other.acquire(KEY, time_left=5.0).refused is None
    assert fleet.entries == 1
