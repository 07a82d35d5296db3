"""The Celery app a real worker runs in tests/contrib/test_celery.py: the guide's tasks, as written.

The Celery example of docs/guide/background.md is executed here as it stands, up to the line
that runs a task in the example's own process, once per fleet variant (each under its own
module name, so each variant's tasks have their own names). Two things differ from the guide,
both set from the environment the test gives the worker, after the example has run:

- the per-call deadline, ``quick``: ``SUME_E2E_DEADLINE`` seconds instead of 10, so a lost
  answer costs a test seconds, not minutes;
- the session's fleet in the ``nofleet`` (``fleet=None``), ``local`` (``SumeSession()``'s
  default, a ``LocalFleet`` per process) and ``host`` (a ``HostFleet`` on the file
  ``SUME_E2E_HOST_FLEET``, shared by the worker's processes) variants; ``readme`` keeps the
  guide's ``RedisFleet`` on the broker's Redis.

The broker, result backend, API key and base URL come from the usual variables
(``CELERY_BROKER_URL``, ``CELERY_RESULT_BACKEND``, ``SUME_API_KEY``, ``SUME_API_BASE_URL``).
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Dict

from celery import Celery

from sume_urllib3 import SumeSession
from sume_urllib3.pacing import HostFleet

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "background.md"
#: The guide example's line that runs a task in its own process: the worker stops before it.
RUN_HERE = "# Here the task runs in this process"
VARIANTS = ("readme", "local", "nofleet", "host")

app = Celery("sume_e2e")
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_extended=True,
)


def readme_tasks() -> str:
    """The guide's Celery example, up to the line that runs a task in place."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    found = [block for block in blocks if "sume_urllib3.contrib.celery" in block]
    if len(found) != 1:
        raise RuntimeError(f"{GUIDE.name}: expected one Celery example, found {len(found)}")
    source = found[0]
    if RUN_HERE not in source:
        raise RuntimeError(f"{GUIDE.name}: the Celery example has no line {RUN_HERE!r}")
    return source[: source.index(RUN_HERE)]


def _session(variant: str) -> SumeSession:
    if variant == "host":  # built in the worker's parent, used in its forked children
        return SumeSession(fleet=HostFleet(os.environ.get("SUME_E2E_HOST_FLEET")))
    return SumeSession(fleet=None) if variant == "nofleet" else SumeSession()


def load(variant: str) -> Dict[str, Any]:
    """Run the guide's example as the module ``e2e_<variant>``; its tasks register on ``app``."""
    namespace: Dict[str, Any] = {"__name__": f"e2e_{variant}"}
    exec(compile(readme_tasks(), str(GUIDE), "exec"), namespace)
    deadline = float(os.environ.get("SUME_E2E_DEADLINE", "10"))
    if variant != "readme":
        namespace["session"] = _session(variant)
    namespace["quick"] = namespace["session"].policy.replace(max_elapsed=deadline)
    return namespace


@app.task(name="e2e.ping")
def ping() -> str:
    """Answers once the worker consumes: the test waits for it before timing anything."""
    return "pong"


@app.task(name="e2e.give_up")
def give_up(payload: Dict[str, Any]) -> Dict[str, Any]:
    """Lets a SumeRetryError end the task, for what the JSON result backend keeps of it."""
    session = SumeSession(fleet=None)
    policy = session.policy.replace(max_elapsed=0.5, max_retries=2, backoff_base=0.05)
    return dict(session.post("/avatars", json=payload, policy=policy).json())


TASKS = {variant: load(variant) for variant in VARIANTS}
