"""``python -m sume_urllib3 demo`` tells each scripted story and ends with the counters."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from sume_urllib3.testing._demo import SCENARIOS, run
from sume_urllib3.testing._demo import run as run_demo


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

    run_demo(out, scale=0.01)

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
