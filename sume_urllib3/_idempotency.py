"""Which requests may be sent twice, and the Idempotency-Key that makes a POST one of them.

A request's own key and whether its body can be sent again are decided as it starts
(``RequestContext.join``); whether it may be resent, by ``SumeRetry.refusal``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from ._errors import ConfigurationError
from ._util import is_visible_ascii

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Methods that may be sent twice without harm.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Methods that may be sent twice only with the same Idempotency-Key.
KEYED_METHODS = frozenset({"POST", "PATCH"})
#: Methods whose requests carry a body (a 307/308 or a retry sends it again).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def validate_idempotency_key(key: Any) -> str:
    """The key as str; refuses keys the server cannot store: 1-255 visible ASCII characters."""
    if isinstance(key, bytes):
        key = key.decode("latin-1")  # a byte past ASCII is then refused as not visible ASCII
    if not isinstance(key, str):
        raise ConfigurationError(f"Idempotency-Key must be a str, got {type(key).__name__}")
    if not 1 <= len(key) <= 255:
        raise ConfigurationError(f"Idempotency-Key must be 1-255 characters, got {len(key)}")
    if not is_visible_ascii(key):
        raise ConfigurationError("Idempotency-Key must be visible ASCII (no spaces or control characters)")
    return key


# Idempotency-Keys derived from an id that stays the same across a task queue's retries.

#: Fixed forever: every key already derived depends on it.
_NAMESPACE = "6f1d3c2a-5b7e-5c1f-9a0d-2e4b8c6d1f30"

if TYPE_CHECKING:  # uuid (and the platform module it loads) is imported when a key is first derived
    import uuid

    StableId = Union[str, int, uuid.UUID]


def idempotency_key_for(stable_id: StableId, *scope: StableId) -> str:
    """The Idempotency-Key of one logical request, derived from an id its retries share.

    A task queue retries a task as the same task: Celery keeps ``self.request.id``, RQ
    the job id, Dramatiq the message id, Huey the task id. Derive the key from that id
    and every retry sends the same key, however it is retried (``autoretry_for``,
    ``self.retry()``, a worker lost with ``acks_late``), without passing the key through
    the task's arguments.

    ``scope`` tells apart the calls of one task (``idempotency_key_for(job_id, "avatar")``
    and ``..., "video"``): each gets its own key. The id must be unique per logical
    request (the queues' own ids are random UUIDs). The key is a version 5 UUID (SHA-1
    over the id and scope under a fixed namespace): always valid (36 visible ASCII
    characters), the same on every machine and Python version, and it reveals neither
    the id nor the scope.
    """
    import uuid

    parts = [_part(stable_id, "stable_id")]
    parts.extend(_part(item, "scope") for item in scope)
    # Each part prefixed by its length, so ("a", "b:c") and ("a:b", "c") never meet.
    return str(uuid.uuid5(uuid.UUID(_NAMESPACE), "".join(f"{len(part)}:{part}" for part in parts)))


def _part(value: object, name: str) -> str:
    import uuid

    if isinstance(value, bool) or not isinstance(value, (str, int, uuid.UUID)):
        hint = " (outside a worker, Celery's self.request.id is None)" if value is None else ""
        raise ConfigurationError(
            f"idempotency_key_for: {name} must be a str, int or UUID, got {type(value).__name__}{hint}"
        )
    text = str(value)
    if not text.strip():
        raise ConfigurationError(f"idempotency_key_for: {name} must not be empty")
    return text
