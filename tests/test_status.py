"""``python -m sume_urllib3 status`` and ``pacing.status``: a host fleet's file read while a herd runs,
never changed, never in a writer's way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from sume_urllib3 import SumeSession
from sume_urllib3._cli import run
from sume_urllib3._policy import Policy
from sume_urllib3.pacing import HostFleet, LocalFleet, RetryBudget
from sume_urllib3.pacing import _core as pacing
from sume_urllib3.pacing.host import decode_state
from sume_urllib3.pacing.status import KeyStatus, read_status, render_json, render_table
from sume_urllib3.testing import FakeSume

from .pace_herd import BUSY_KEY, HERD, HOLD_KEY, RETRY_AFTER, HeldHerd

ROOT = Path(__file__).resolve().parent.parent
BUDGET = RetryBudget(ratio=0.5, window=10.0, min_per_second=1.0)


def _files(path: str) -> Dict[str, bytes]:
    """The file and its write-ahead log, byte for byte (the -shm holds readers' marks, not state)."""
    return {name: Path(name).read_bytes() for name in (path, path + "-wal") if os.path.exists(name)}


def _states(path: str) -> Dict[str, pacing.State]:
    """The fleet's own rows, decoded (the test's independent look at the file)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT kid, state FROM keys").fetchall()
    found = {kid.split(":", 1)[1]: decode_state(text) for kid, text in rows}
    return {kid: st for kid, st in found.items() if st is not None}


def _by_key(rows: List[KeyStatus]) -> Dict[str, KeyStatus]:
    return {row.key: row for row in rows}


def check_held(herd: HeldHerd, rows: List[KeyStatus], budget: bool) -> None:
    """The rows show what the held herd did: four in flight, a 30 s cooldown, half the stated pace."""
    held, busy = _by_key(rows)[herd.key_id(HOLD_KEY)], _by_key(rows)[herd.key_id(BUSY_KEY)]
    assert herd.refused_at is not None
    since = time.monotonic() - herd.refused_at
    assert len(herd.fake.requests_for("POST", "/v1/held")) - 1 == HERD == held.in_flight
    assert (held.cooldown, held.pace, held.last_refusal, held.throttle_rounds) == (0.0, None, None, 0)
    assert RETRY_AFTER - since - 0.5 <= busy.cooldown <= RETRY_AFTER
    assert busy.last_refusal == "429/503"
    assert busy.last_refusal_ago is not None
    assert 0 <= busy.last_refusal_ago <= since + 0.5
    assert (busy.pace_source, round(busy.pace or 0, 2)) == ("learned", 4.95)
    assert (busy.in_flight, busy.throttle_rounds) == (0, 1)
    assert (held.origin, busy.origin) == (herd.fake.url, None)  # the reader was told of HOLD_KEY only
    if budget:  # the floor: 1/s over 10 s; no error retry spent
        assert (busy.retries_left, busy.retries_room) == (10.0, 10.0)
    else:
        assert busy.retries_left is busy.retries_room is None


@pytest.mark.slow
def test_the_status_of_a_host_file_is_the_herds_and_reading_changes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "app.fleet")
    with HeldHerd(HostFleet(path, retry_budget=BUDGET)) as herd:
        before = _files(path)
        rows = read_status(HostFleet(path, retry_budget=BUDGET), base_url=herd.base_url, api_key=HOLD_KEY)
        assert _files(path) == before
        check_held(herd, rows, budget=True)
        # The fleet's own rows agree, field by field, with what the reader made of them.
        states = _states(path)
        busy = states[herd.key_id(BUSY_KEY)]
        now = HostFleet(path)._now()
        assert abs(_by_key(rows)[herd.key_id(BUSY_KEY)].cooldown - (busy.cooldown_until - now) / 1e6) < 0.5
        assert len(states[herd.key_id(HOLD_KEY)].flight) == HERD
        # Without the retry budget's configuration the reader shows none; unknown keys no origin.
        plain = read_status(HostFleet(path))
        assert {row.origin for row in plain} == {None}
        assert (plain[0].retries_left, plain[0].retries_room) == (None, None)
    assert not herd.errors
    after = _by_key(read_status(HostFleet(path)))[herd.key_id(HOLD_KEY)]
    assert after.in_flight == 0


def test_reading_never_holds_a_writer(tmp_path: Path) -> None:
    """Sixteen threads pacing through the file while another reads it without pause: no acquire
    fails open (waits out the 0.2 s lock timeout), and every reading is whole."""
    path = str(tmp_path / "app.fleet")
    fleet = HostFleet(path, rate="2000/s", burst=50)
    stop = threading.Event()
    readings: List[int] = []

    def read() -> None:
        while not stop.is_set():
            readings.append(len(read_status(HostFleet(path))))

    def pace(n: int) -> None:
        for _ in range(150):
            grant = fleet.acquire(f"k{n % 4:016x}", time_left=60.0)
            fleet.release(f"k{n % 4:016x}", grant, 200, {})

    pace(0)
    reader = threading.Thread(target=read)
    reader.start()
    workers = [threading.Thread(target=pace, args=(n,)) for n in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    reader.join()
    assert (fleet.fallbacks, fleet.errors) == (0, 0)
    assert len(readings) > 5
    assert set(readings) <= {1, 2, 3, 4}


@pytest.mark.slow
def test_the_command_line_prints_the_table_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "app.fleet")
    monkeypatch.setenv("SUME_API_KEY", HOLD_KEY)
    with HeldHerd(HostFleet(path), hold=10.0) as herd:  # held past a new process's start on a busy machine
        monkeypatch.setenv("SUME_API_BASE_URL", herd.base_url)
        command = [sys.executable, "-m", "sume_urllib3", "status", "--file", path, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rows = [KeyStatus(**row) for row in json.loads(done.stdout)["keys"]]
        check_held(herd, rows, budget=False)
        out, err = _streams()
        assert 0 == run(["status", "--file", path], Policy(), out, err)
    table = out.getvalue()
    header, *lines = table.splitlines()[1:]
    assert header.split() == ["origin", "key", "cooldown", "pace", "in", "flight", "retry", "budget", "last",
                              "429/503"]
    held = next(line for line in lines if herd.key_id(HOLD_KEY) in line)
    assert held.split()[:6] == [herd.fake.url, herd.key_id(HOLD_KEY), "-", "-", str(HERD), "-"]
    assert HOLD_KEY not in table
    assert BUSY_KEY not in table


@pytest.mark.slow
def test_watch_reads_again_until_interrupted(tmp_path: Path) -> None:
    path = str(tmp_path / "app.fleet")
    fleet = HostFleet(path)
    fleet.release("k" + "0" * 16, fleet.acquire("k" + "0" * 16, time_left=10.0), 503, {"Retry-After": "600"})
    command = [sys.executable, "-m", "sume_urllib3", "status", "--file", path, "--json", "--watch", "0.1"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        first, second = process.stdout.readline(), process.stdout.readline()
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    (before,), (after,) = json.loads(first)["keys"], json.loads(second)["keys"]
    assert 0 < after["cooldown"] < before["cooldown"] <= 600


def test_a_missing_file_is_an_error_and_stays_missing(tmp_path: Path) -> None:
    path = tmp_path / "none" / "app.fleet"
    out, err = _streams()
    assert 1 == run(["status", "--file", str(path)], Policy(), out, err)
    assert "no host fleet file at" in err.getvalue()
    assert not path.parent.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--file", "x", "--redis", "redis://localhost"], "not allowed with argument --file"),
        (["--rate", "fast"], "rate must be"),
        (["--watch", "0"], "--watch: must be a number of seconds"),
    ],
)
def test_bad_status_arguments_exit_2(argv: List[str], message: str) -> None:
    out, err = _streams()
    assert 2 == run(["status", *argv], Policy(), out, err)
    assert message in err.getvalue()
    assert not out.getvalue()


def test_a_local_fleet_in_this_process_is_read_too() -> None:
    """The admin page of a process paced alone shows that process's own fleet."""
    fleet = LocalFleet(retry_budget=BUDGET)
    with FakeSume() as fake:
        fake.script("GET", "/v1/me", 429)
        policy = Policy(max_retries=0)
        base_url = fake.url + "/v1"
        session = SumeSession(HOLD_KEY, base_url=base_url, fleet=fleet, policy=policy, raise_on_give_up=False)
        with session:
            assert session.get("/me").status_code == 429
        (row,) = read_status(fleet, base_url=fake.url + "/v1", api_key=HOLD_KEY)
    assert (row.origin, row.throttle_rounds, row.in_flight) == (fake.url, 1, 0)
    assert render_json([row]) == json.dumps({"keys": [row._asdict()]}, sort_keys=True) + "\n"


def test_the_table_renders_each_column() -> None:
    row = KeyStatus("https://sume.io", "k0123456789abcdef", 27.04, 2.5, "learned", 3, 4.6, 10, "429", 1.25, 1)
    assert render_table([row]) == (
        "origin           key                cooldown  pace           in flight  retry budget  last 429/503\n"
        "https://sume.io  k0123456789abcdef  27.0s     2.5/s learned  3          4 of 10       429 1.2s ago\n"
    )
    assert render_table([]) == "no keys\n"


def _streams() -> Any:
    import io

    return io.StringIO(), io.StringIO()


def test_the_guides_capture_is_in_the_tables_current_format() -> None:
    """benchmarks/status-capture.txt (the pacing guide's) is its JSON rendered by render_table now:
    ``python benchmarks/status_capture.py --render`` brings it back in step."""
    document = json.loads((ROOT / "benchmarks" / "status-capture.json").read_text(encoding="utf-8"))
    rows = [KeyStatus(**row) for row in document["keys"]]
    text = (ROOT / "benchmarks" / "status-capture.txt").read_text(encoding="utf-8")
    command, title, table = text.split("\n", 2)
    assert command == "$ python -m sume_urllib3 status"
    assert title == f"{document['fleet']}, {document['time']}"
    assert table == render_table(rows)
    assert rows
