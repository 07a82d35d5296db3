"""Which requests may be sent twice, and the Idempotency-Key that makes a POST one of them."""

from __future__ import annotations

import io
import os
import uuid
from typing import Any, Optional, Union

from ._errors import ConfigurationError
from ._util import is_visible_ascii

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Methods that may be sent twice without harm.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Methods that may be sent twice only with the same Idempotency-Key.
KEYED_METHODS = frozenset({"POST", "PATCH"})
#: Methods whose requests carry a body (a 307/308 or a retry sends it again).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def new_key() -> str:
    """A fresh key for one logical POST/PATCH: a random (version 4) UUID, as Stripe's clients send.

    The same as ``str(uuid.uuid4())``, without building a ``UUID`` object on every POST.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def validate_idempotency_key(key: Any) -> str:
    """The key as str; refuses keys the server cannot store: 1-255 visible ASCII characters."""
    if isinstance(key, bytes):
        try:
            key = key.decode("ascii")
        except UnicodeDecodeError:
            raise ConfigurationError("Idempotency-Key must be visible ASCII") from None
    if not isinstance(key, str):
        raise ConfigurationError(f"Idempotency-Key must be a str, got {type(key).__name__}")
    if not 1 <= len(key) <= 255:
        raise ConfigurationError(f"Idempotency-Key must be 1-255 characters, got {len(key)}")
    if not is_visible_ascii(key):
        raise ConfigurationError("Idempotency-Key must be visible ASCII (no spaces or control characters)")
    return key


def refusal_for(
    method: Optional[str], key: Optional[str], replayable: bool = True, lone: bool = False
) -> Optional[str]:
    """Why a request may not be sent again (its method, its key, its body), or None when it may."""
    verb = (method or "").upper()
    if verb in SAFE_METHODS:
        pass
    elif verb in KEYED_METHODS:
        if not key:
            return f"{verb} without an Idempotency-Key is never resent"
    else:
        return f"{verb or 'unknown method'} is not replay-safe"
    return body_refusal(verb, replayable, lone)


def body_refusal(method: Optional[str], replayable: bool, lone: bool = False) -> Optional[str]:
    """Why this request's body may not be sent again (a retry, a 307/308, a resend), or None.

    Through ``SumeAdapter`` the body was seen before the first send (``replayable``). A
    ``lone`` ``SumeRetry`` never sees it (urllib3 hands a Retry the method and URL only), so
    it cannot tell bytes from a consumed generator: it does not resend a method with a body.
    """
    if lone and (method or "").upper() in BODY_METHODS:
        return "a lone SumeRetry cannot see the request body, so it never sends it twice"
    if not replayable:
        return "the request body cannot be replayed (a generator or a stream without seek)"
    return None


def body_is_replayable(body: Any) -> bool:
    """True when urllib3 can send this body again: bytes, text, or a seekable file."""
    if body is None or isinstance(body, (bytes, bytearray, str)):
        return True
    if isinstance(body, io.IOBase) or hasattr(body, "read"):
        try:
            return (
                bool(body.seekable())
                if hasattr(body, "seekable")
                else hasattr(body, "tell") and hasattr(body, "seek")
            )
        except Exception:
            return False
    return False  # generators and other iterables are consumed by the first attempt


# Idempotency-Keys derived from an id that stays the same across a task queue's retries.

#: Fixed forever: every key already derived depends on it.
_NAMESPACE = uuid.UUID("6f1d3c2a-5b7e-5c1f-9a0d-2e4b8c6d1f30")

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
    parts = [_part(stable_id, "stable_id")]
    parts.extend(_part(item, "scope") for item in scope)
    # Each part prefixed by its length, so ("a", "b:c") and ("a:b", "c") never meet.
    return str(uuid.uuid5(_NAMESPACE, "".join(f"{len(part)}:{part}" for part in parts)))


def _part(value: object, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, uuid.UUID)):
        hint = " (outside a worker, Celery's self.request.id is None)" if value is None else ""
        raise ConfigurationError(
            f"idempotency_key_for: {name} must be a str, int or UUID, got {type(value).__name__}{hint}"
        )
    text = str(value)
    if not text.strip():
        raise ConfigurationError(f"idempotency_key_for: {name} must not be empty")
    return text
