"""Which requests may be sent twice, and the Idempotency-Key that makes a POST one of them."""

from __future__ import annotations

import io
import os
from typing import Any, Optional

from ._errors import ConfigurationError
from ._helpers import is_visible_ascii

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


def refusal_for(method: Optional[str], key: Optional[str], replayable: bool = True) -> Optional[str]:
    """Why a request may not be sent again, or None when it may."""
    verb = (method or "").upper()
    if verb in SAFE_METHODS:
        pass
    elif verb in KEYED_METHODS:
        if not key:
            return f"{verb} without an Idempotency-Key is never resent"
    else:
        return f"{verb or 'unknown method'} is not replay-safe"
    if not replayable:
        return "the request body cannot be replayed"
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
