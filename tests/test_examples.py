"""The examples run as a user runs them: a real process against the fake Sume API."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any, Dict, List

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def json_objects(text: str) -> List[Dict[str, Any]]:
    """The JSON objects printed one after another (the console exporter's spans)."""
    decoder = json.JSONDecoder()
    found: List[Dict[str, Any]] = []
    index = 0
    while True:
        start = text.find("{\n", index)
        if start < 0:
            return found
        value, index = decoder.raw_decode(text, start)
        found.append(value)


@pytest.mark.slow  # real time: runs in CI's slow step
def test_the_observability_example_traces_a_view_and_workers() -> None:
    """Each Sume call is a CLIENT span under its view or task span; the counters add up across threads."""
    pytest.importorskip("django")
    pytest.importorskip("opentelemetry.sdk")

    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "observability.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )

    assert 0 == done.returncode, done.stderr
    spans = json_objects(done.stdout)
    calls = [s for s in spans if s["name"] == "POST"]
    parents = {s["context"]["span_id"]: s["name"] for s in spans if s["name"] != "POST"}
    assert 5 == len(calls)
    expected = ["POST /avatars/new"] + ["task generate_avatar"] * 4
    assert expected == sorted(parents[c["parent_id"]] for c in calls)
    assert {"SpanKind.CLIENT"} == {c["kind"] for c in calls}
    (retried,) = [c for c in calls if c["attributes"]["sume.outcome"] == "retried_ok"]
    assert ["retry", "retry"] == [e["name"] for e in retried["events"]]
    assert "sk_example" not in done.stdout
    metrics = json.loads(done.stdout.rsplit("metrics: ", 1)[1])
    assert 5 == sum(metrics["outcomes"].values())
