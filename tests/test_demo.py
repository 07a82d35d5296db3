"""The demo (``examples/demo.py``, ``python -m sume_urllib3 demo``) tells each scripted story and
ends with the counters."""

from __future__ import annotations

import io
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from sume_urllib3._cli import DEMO
from sume_urllib3._cli import run as cli
from sume_urllib3._policy import Policy

ROOT = Path(__file__).resolve().parent.parent
# The script as `python -m sume_urllib3 demo` loads it: by path, as a module that is not __main__.
_demo = runpy.run_path(str(ROOT / "examples" / "demo.py"), run_name="examples_demo")
SCENARIOS, run = _demo["SCENARIOS"], _demo["run"]


@pytest.mark.slow
def test_the_demo_runs_every_scenario_and_prints_the_counters() -> None:
    """Exit 0; one outcome line per scenario, the give-up names its ids, counters at the end."""
    out = io.StringIO()

    code = run(out, scale=0)

    text = out.getvalue()
    outcomes = [line.split(":")[0].strip() for line in text.splitlines() if line.strip().startswith("=>")]
    assert 0 == code
    assert ["=> retried_ok", "=> retried_ok", "=> fix", "=> retried_ok", "=> gave_up", "=> poll"] == outcomes
    assert len(SCENARIOS) == len(outcomes)
    assert "raised SumeRetryError: gave up after 4 attempts" in text
    assert "request ids: req_" in text
    assert "outcomes: ok=0, retried_ok=3, gave_up=1, fix=1, no_retry=0, poll=1" in text
    assert "same Idempotency-Key on every attempt: NO" not in text


@pytest.mark.slow
def test_the_demo_prints_policy_waits_beside_the_scaled_sleep_and_the_real_time() -> None:
    """Each scenario line gives the policy's waits, what was slept at the demo's scale, and the real time."""
    out = io.StringIO()

    run(out, scale=0.01)

    lines = re.findall(
        r"policy waits (\d+\.\d\d)s \(slept (\d+\.\d\d)s, call took (\d+\.\d\d)s\)", out.getvalue()
    )
    assert lines
    assert any(float(policy) > 0 for policy, _, _ in lines)
    for policy, slept, took in lines:
        assert float(slept) == pytest.approx(float(policy) * 0.01, abs=0.011)
        assert float(took) + 0.011 >= float(slept)


def test_importing_the_package_loads_no_test_code() -> None:
    """The demo and the fake server it runs on are loaded only by ``python -m sume_urllib3 demo``."""
    code = "import sys, sume_urllib3; print([m for m in sys.modules if m.startswith('sume_urllib3.testing')])"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == shown.stdout.strip()


def test_the_cli_runs_the_demo_of_the_source_checkout() -> None:
    """From a source checkout, the README's ``python -m sume_urllib3 demo`` runs ``examples/demo.py``."""
    assert ROOT / "examples" / "demo.py" == DEMO
    assert (ROOT / "setup.cfg").is_file()


@pytest.mark.slow
def test_the_cli_prints_the_demo_to_its_stream() -> None:
    """``demo --scale 0`` through the command line tells every story on the stream it was given."""
    out, err = io.StringIO(), io.StringIO()

    code = cli(["demo", "--scale", "0"], Policy(), out, err)

    assert 0 == code
    assert out.getvalue().startswith("sume_urllib3 demo: a fake Sume API on 127.0.0.1; waits are scaled x0 ")
    assert len(SCENARIOS) == out.getvalue().count("\n   => ")
    assert "\ncounters (session.metrics.snapshot()):\n" in out.getvalue()


@pytest.mark.slow
def test_the_script_runs_on_its_own() -> None:
    """``python examples/demo.py --scale 0`` is a plain script on the public API: exit 0, the same story."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--scale", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert 0 == done.returncode, done.stderr
    assert "=> gave_up: 503 queue_full" in done.stdout
    assert "outcomes: ok=0, retried_ok=3, gave_up=1, fix=1, no_retry=0, poll=1" in done.stdout


@pytest.mark.parametrize("scale", ["5", "-0.1", "nan", "fast"])
def test_the_script_refuses_a_scale_outside_0_to_1(scale: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``python examples/demo.py --scale 5`` exits 2 naming the option, before any server starts."""
    with pytest.raises(SystemExit) as exited:
        _demo["main"](["--scale", scale])

    assert 2 == exited.value.code
    shown = capsys.readouterr()
    assert "" == shown.out
    assert shown.err.splitlines()[-1].startswith("python examples/demo.py: error: argument --scale: ")
