"""Which requests may be sent twice: key validation, the refusal rules, replayable bodies, new keys."""

from __future__ import annotations

import io
import itertools
import os
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from sume_urllib3._idempotency import (
    IDEMPOTENCY_HEADER,
    KEYED_METHODS,
    SAFE_METHODS,
    body_is_replayable,
    body_refusal,
    new_key,
    refusal_for,
    validate_idempotency_key,
)
from sume_urllib3.exceptions import ConfigurationError

# --- validate_idempotency_key ----------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 255])
def test_keys_of_1_and_255_characters_are_accepted(length: int) -> None:
    """The shortest and longest keys the server stores are returned unchanged."""
    key = "k" * length
    assert validate_idempotency_key(key) == key


def test_every_visible_ascii_character_is_accepted() -> None:
    """Every character from "!" to "~" may appear in a key."""
    key = "".join(chr(c) for c in range(0x21, 0x7F))
    assert validate_idempotency_key(key) == key


def test_ascii_bytes_become_str() -> None:
    """An ASCII bytes key is accepted and returned as str."""
    assert validate_idempotency_key(b"order-42") == "order-42"


@pytest.mark.parametrize("length", [0, 256, 10_000])
def test_keys_of_0_or_more_than_255_characters_are_refused(length: int) -> None:
    """Empty keys and keys over 255 characters are refused, naming the length but never the key."""
    key = "Z" * length
    with pytest.raises(ConfigurationError) as info:
        validate_idempotency_key(key)
    message = str(info.value)
    assert "Idempotency-Key" in message
    assert "1-255" in message
    assert f"got {length}" in message
    assert "ZZ" not in message


@pytest.mark.parametrize(
    "key",
    [
        "SECRET order 42",  # space
        "SECRET\torder",
        "SECRET\norder",
        "SECRET\r\nX-Injected: 1",
        "SECRET\x00order",
        "SECRET\x7forder",
        "SECRETé-order",
        "SECRET-\u202e-order",  # right-to-left override
        "SECRET-\U0001f600",
    ],
)
def test_spaces_control_and_non_ascii_characters_are_refused(key: str) -> None:
    """A key that is not all visible ASCII is refused and the message never echoes it."""
    with pytest.raises(ConfigurationError) as info:
        validate_idempotency_key(key)
    message = str(info.value)
    assert "Idempotency-Key" in message
    assert "visible ASCII" in message
    assert "SECRET" not in message


@pytest.mark.parametrize("key", [b"SECRET-\xff-order", "SECRET-ü".encode(), b"SECRET order"])
def test_non_ascii_or_invisible_bytes_are_refused(key: bytes) -> None:
    """Bytes that are not visible ASCII are refused without echoing them."""
    with pytest.raises(ConfigurationError) as info:
        validate_idempotency_key(key)
    assert "visible ASCII" in str(info.value)
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize("key", [None, 42, 4.2, ["SECRET"], uuid.UUID(int=7), bytearray(b"SECRET")])
def test_other_types_are_refused_naming_the_type(key: Any) -> None:
    """A key that is neither str nor bytes is refused, naming its type and not its value."""
    with pytest.raises(ConfigurationError) as info:
        validate_idempotency_key(key)
    message = str(info.value)
    assert f"got {type(key).__name__}" in message
    assert "SECRET" not in message
    assert "0000" not in message  # the UUID's digits


def test_configuration_error_is_a_value_error() -> None:
    """A refused key can be caught as ValueError too."""
    with pytest.raises(ValueError, match="Idempotency-Key"):
        validate_idempotency_key("")


# --- refusal_for -----------------------------------------------------------------------------

OTHER_METHODS = ("CONNECT", "PROPFIND", "FOO", "")
METHODS = (*sorted(SAFE_METHODS), *sorted(KEYED_METHODS), *OTHER_METHODS, None, "get", "post", "Patch")
KEYS = (None, "", "order-42")
BODY_REFUSAL = "the request body cannot be replayed (a generator or a stream without seek)"


def test_the_method_sets() -> None:
    """Safe methods are the RFC 9110 idempotent ones; POST and PATCH need a key; the header is named."""
    assert frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) == SAFE_METHODS
    assert frozenset({"POST", "PATCH"}) == KEYED_METHODS
    assert IDEMPOTENCY_HEADER == "Idempotency-Key"


@pytest.mark.parametrize(
    ("method", "key", "replayable"), list(itertools.product(METHODS, KEYS, (True, False)))
)
def test_refusal_for_every_method_key_and_body(
    method: Optional[str], key: Optional[str], replayable: bool
) -> None:
    """Safe methods may be resent, POST/PATCH only with a key, others never; an unreplayable body never."""
    refusal = refusal_for(method, key, replayable)
    verb = (method or "").upper()
    if verb in KEYED_METHODS and not key:
        assert refusal == f"{verb} without an Idempotency-Key is never resent"
    elif verb not in SAFE_METHODS and verb not in KEYED_METHODS:
        assert refusal == f"{verb or 'unknown method'} is not replay-safe"
    elif not replayable:
        assert refusal == BODY_REFUSAL
    else:
        assert refusal is None


def test_refusal_for_examples() -> None:
    """The rules spelled out on the usual requests."""
    assert refusal_for("GET", None) is None
    assert refusal_for("post", "k") is None
    assert refusal_for("POST", None) == "POST without an Idempotency-Key is never resent"
    assert refusal_for("PUT", None, replayable=False) == BODY_REFUSAL
    assert refusal_for("CONNECT", "k") == "CONNECT is not replay-safe"
    assert refusal_for(None, None) == "unknown method is not replay-safe"


# --- body_is_replayable ----------------------------------------------------------------------


class Unseekable(io.RawIOBase):
    """A readable stream that says it cannot seek, as a socket or pipe does."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


class BrokenSeekable:
    """A file-like object whose seekable() raises."""

    def read(self, size: int = -1) -> bytes:
        return b""

    def seekable(self) -> bool:
        raise OSError("seekable() failed")


class TellAndSeek:
    """A file-like object with read, tell and seek but no seekable()."""

    def read(self, size: int = -1) -> bytes:
        return b""

    def tell(self) -> int:
        return 0

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0


class ReadOnly:
    """A file-like object with only read()."""

    def read(self, size: int = -1) -> bytes:
        return b""


def chunks() -> Iterator[bytes]:
    """A generator body: consumed by the first attempt."""
    yield b"a"
    yield b"b"


@pytest.mark.parametrize(
    "body", [None, b"", b"payload", bytearray(b"payload"), "text", '{"json": true}', io.BytesIO(b"x")]
)
def test_in_memory_bodies_are_replayable(body: Any) -> None:
    """No body, bytes, text and an in-memory file can be sent again."""
    assert body_is_replayable(body) is True


def test_a_real_file_is_replayable(tmp_path: Path) -> None:
    """A file opened from disk is seekable, so it can be sent again."""
    path = tmp_path / "upload.bin"
    path.write_bytes(b"data")
    with path.open("rb") as f:
        assert body_is_replayable(f) is True


def test_a_pipe_is_not_replayable() -> None:
    """A real pipe cannot seek, so it is never resent."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader, os.fdopen(write_fd, "wb"):
        assert body_is_replayable(reader) is False


def test_an_unseekable_stream_is_not_replayable() -> None:
    """A stream that says it cannot seek is never resent."""
    assert body_is_replayable(Unseekable()) is False


def test_a_file_whose_seekable_raises_is_not_replayable() -> None:
    """seekable() raising counts as "cannot seek"."""
    assert body_is_replayable(BrokenSeekable()) is False


def test_a_closed_file_is_not_replayable() -> None:
    """A closed file (seekable() raises ValueError) is never resent."""
    closed = io.BytesIO(b"x")
    closed.close()
    assert body_is_replayable(closed) is False


def test_tell_and_seek_without_seekable_is_replayable() -> None:
    """A file-like object with tell() and seek() but no seekable() can be rewound."""
    assert body_is_replayable(TellAndSeek()) is True


def test_read_only_object_is_not_replayable() -> None:
    """A file-like object that can only be read is never resent."""
    assert body_is_replayable(ReadOnly()) is False


@pytest.mark.parametrize("body", [chunks(), iter([b"a", b"b"]), (c for c in [b"a"])])
def test_iterators_are_not_replayable(body: Any) -> None:
    """Generators and iterators are consumed by the first attempt, so they are never resent."""
    assert body_is_replayable(body) is False


# --- new_key ---------------------------------------------------------------------------------


def test_new_key_is_a_version_4_rfc_4122_uuid() -> None:
    """A new key is the canonical string of a random (version 4, RFC 4122 variant) UUID."""
    for _ in range(200):
        key = new_key()
        parsed = uuid.UUID(key)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == key
        assert validate_idempotency_key(key) == key


def test_new_keys_are_distinct() -> None:
    """1000 new keys are 1000 different keys."""
    assert len({new_key() for _ in range(1000)}) == 1000


def test_a_lone_retry_never_resends_a_body_it_cannot_see() -> None:
    """Without an adapter the body is unseen: PUT, POST and PATCH are refused, GET and DELETE are not."""
    for method in ("PUT", "POST", "PATCH"):
        assert "cannot see the request body" in (body_refusal(method, True, lone=True) or "")
    for method in ("GET", "DELETE", "HEAD"):
        assert body_refusal(method, True, lone=True) is None


def test_through_an_adapter_only_an_unreplayable_body_is_refused() -> None:
    """With an adapter, the body seen before the first send decides."""
    assert body_refusal("PUT", True) is None
    assert "cannot be replayed" in (body_refusal("PUT", False) or "")
