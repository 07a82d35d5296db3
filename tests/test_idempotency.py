"""Which requests may be sent twice: the method sets and key validation (the refusal rules are
SumeRetry.refusal's, in test_retry; replayable bodies and new keys RequestContext.join's, in test_request)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sume_urllib3._idempotency import (
    IDEMPOTENCY_HEADER,
    KEYED_METHODS,
    SAFE_METHODS,
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


# --- the method sets ------------------------------------------------------------------------


def test_the_method_sets() -> None:
    """Safe methods are the RFC 9110 idempotent ones; POST and PATCH need a key; the header is named."""
    assert frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) == SAFE_METHODS
    assert frozenset({"POST", "PATCH"}) == KEYED_METHODS
    assert IDEMPOTENCY_HEADER == "Idempotency-Key"
