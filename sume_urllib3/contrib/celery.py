"""Celery tasks that retry a Sume call as the same logical request (extra ``celery``).

Two functions for a bound task (``@app.task(bind=True)``)::

    from sume_urllib3 import SumeRetryError
    from sume_urllib3.contrib.celery import retry_later, task_idempotency_key

    @app.task(bind=True, max_retries=60)
    def create_avatar(self, payload):
        key = task_idempotency_key(self)  # the same on every retry of this task
        try:
            response = session.post("/avatars", json=payload, headers={"Idempotency-Key": key})
        except SumeRetryError as error:
            raise retry_later(self, error)
        ...

The key comes from the task's id, which Celery keeps across ``self.retry()``,
``autoretry_for`` and a redelivery after a lost worker (``acks_late``), so no argument
carries it and every retry is the same request to the server. The retry is sent with the
task's own arguments, never with ``args=``/``kwargs=``; Celery 5.3 to 5.7 are tested the same way.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Callable, Union

try:
    import celery  # noqa: F401 - fail here, naming the extra, when Celery is missing
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sume_urllib3.contrib.celery needs Celery: pip install 'sume-urllib3[celery]'"
    ) from exc

from .. import idempotency_key_for
from ..exceptions import ConfigurationError, SumeRetryError

__all__ = ["countdown", "retry_later", "task_idempotency_key"]


def task_idempotency_key(task: Any, *scope: Union[str, int, uuid.UUID]) -> str:
    """The Idempotency-Key of a bound task's call: the same on every retry of this task.

    Derived (:func:`sume_urllib3.idempotency_key_for`) from the task's name and
    ``task.request.id``, which Celery keeps across retries; ``scope`` tells apart several
    calls of one task (``task_idempotency_key(self, "upload")``). Called directly
    (``create_avatar(payload)``, no worker and no task id) the call is its own logical
    request and gets a fresh random key.
    """
    request = getattr(task, "request", None)
    if request is None:
        raise ConfigurationError("task_idempotency_key needs a bound task (@app.task(bind=True)): pass self")
    task_id = getattr(request, "id", None)
    if task_id is None:
        return str(uuid.uuid4())  # called directly: nothing will retry it as the same task
    return idempotency_key_for(task_id, getattr(task, "name", None) or "", *scope)


def countdown(error: SumeRetryError, rng: Union[random.Random, Callable[[], float], None] = None) -> float:
    """Seconds until a task that gave up with ``error`` should run again (``error.retry_in`` or more).

    A refused turn's ``retry_in`` is already spread. The server's Retry-After is not: a
    quota tells every refused caller the same whole second, and tasks that all came back
    at that instant would be refused together again; so the wait is drawn from
    ``[retry_in, 2 * retry_in]``, never shorter than the server asked.
    """
    wait = error.retry_in
    if wait is None:
        raise ConfigurationError("retrying cannot help this error (retry_in is None)")
    if error.record.fleet_refused:
        return wait
    draw = rng.random if isinstance(rng, random.Random) else rng or random.random
    return wait * (1.0 + draw())


def retry_later(task: Any, error: SumeRetryError, **options: Any) -> BaseException:
    """What to raise when a Sume call inside a bound task gave up: a retry, or the error.

    ``raise retry_later(self, error)``:

    - when retrying cannot help (``error.retry_in`` is None: the request must be fixed,
      or it cannot be sent again safely), the error itself: the task fails with it;
    - else ``task.retry(countdown=countdown(error), exc=error, **options)``: the same
      arguments and the same task id (so the same key, from :func:`task_idempotency_key`),
      back when trying again could succeed. Past the task's ``max_retries`` Celery raises
      ``error`` itself, so the task fails with the record, not a bare
      ``MaxRetriesExceededError``.

    ``options`` go to ``task.retry`` (``max_retries``, ``queue``...); ``args`` and
    ``kwargs`` are refused: Celery 5.4-5.6 raise ``TypeError`` ("got multiple values")
    when a task sent with positional arguments is retried with keyword ones, and the
    key does not need them.
    """
    if not isinstance(error, SumeRetryError):
        raise ConfigurationError(f"retry_later needs a SumeRetryError, got {type(error).__name__}")
    if "args" in options or "kwargs" in options:
        raise ConfigurationError(
            "retry_later retries with the task's own arguments: do not pass args or kwargs "
            "(the Idempotency-Key comes from the task id, see task_idempotency_key)"
        )
    if error.retry_in is None:
        return error
    if "countdown" not in options and "eta" not in options:
        options["countdown"] = countdown(error)
    retry: BaseException = task.retry(exc=error, throw=False, **options)  # celery.exceptions.Retry
    return retry
