"""Reply: what FakeSume answers to one request (status, body, headers, faults), and its wire form."""

from __future__ import annotations

import http.client
import json as _json
import typing
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_DROPS = (None, "before_headers", "after_headers")
_PIECE = 64 * 1024
_SPACES = b" " * _PIECE
_NO_BODY_STATUSES = (204, 304)
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    402: "insufficient_credits",
    404: "not_found",
    409: "idempotency_key_in_use",
    429: "rate_limit_exceeded",
    500: "internal_error",
    503: "service_unavailable",
}


#: "No JSON body" (``None`` is a valid JSON document; ``...`` is none).
_MISSING: Any = ...


class _AutoRequestId(str):
    """Placeholder for ``request_id`` that the server replaces with the response's id."""


AUTO_REQUEST_ID = _AutoRequestId("req_auto")


# typing.Mapping because collections.abc.Mapping cannot be subscripted at runtime on 3.8.
class Headers(typing.Mapping[str, str]):
    """Read-only, hashable header mapping with case-insensitive lookup; keeps original case."""

    __slots__ = ("_index", "_items")

    def __init__(self, source: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        pairs = source.items() if isinstance(source, Mapping) else source
        merged: dict[str, tuple[str, str]] = {}
        for name, raw in pairs:
            key, value = str(name).lower(), str(raw)
            # Repeated request headers fold into one comma-separated value, as RFC 9110 allows.
            merged[key] = (merged[key][0], merged[key][1] + ", " + value) if key in merged else (name, value)
        self._items: tuple[tuple[str, str], ...] = tuple(merged.values())
        self._index = {key: value for key, (_, value) in merged.items()}

    def __getitem__(self, name: object) -> str:
        if not isinstance(name, str):
            raise KeyError(name)
        return self._index[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return self._index == {str(k).lower(): str(v) for k, v in other.items()}

    def __hash__(self) -> int:
        return hash(frozenset(self._index.items()))

    def __repr__(self) -> str:
        return f"{dict(self._items)!r}"


@dataclass(frozen=True)
class Reply:
    """One scripted response; the fields combine freely (e.g. gzip + chunked + truncate).

    Attributes:
        status: HTTP status code (200..599).
        json: Document sent with ``json.dumps`` and ``Content-Type: application/json``.
        body: Raw body bytes instead of ``json`` (giving both is a ``ValueError``).
        headers: Extra response headers; they override the fake's defaults by name.
        delay: Seconds to wait before the status line, e.g. to trip a client read timeout.
        gzip: Compress the body and send ``Content-Encoding: gzip``.
        chunked: Use ``Transfer-Encoding: chunked`` instead of ``Content-Length``.
        drop: ``"before_headers"`` closes the connection without answering;
            ``"after_headers"`` sends status and headers promising a body, then closes.
        truncate: Send only this many (possibly gzipped) body bytes, then close; the
            headers still promise the whole body (chunked bodies lack the terminator).
        size: Pad the body to exactly this many bytes, streamed in 64 KiB pieces. JSON
            objects get the padding in a trailing ``"_padding"`` string field, so the
            body stays valid JSON; other bodies are padded with spaces.
    """

    status: int = 200
    json: Any = _MISSING
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=Headers)
    delay: float = 0.0
    gzip: bool = False
    chunked: bool = False
    drop: str | None = None
    truncate: int | None = None
    size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 200 <= self.status <= 599:
            raise ValueError(f"status must be an int in 200..599, got {self.status!r}")
        if self.json is not _MISSING and self.body is not None:
            raise ValueError("Reply takes json= or body=, not both")
        if self.body is not None:
            if not isinstance(self.body, (bytes, bytearray, memoryview)):
                raise TypeError(f"body must be bytes, got {type(self.body).__name__}")
            object.__setattr__(self, "body", bytes(self.body))
        object.__setattr__(self, "headers", Headers(self.headers))
        for name, value in self.headers.items():
            if not name or any(c in name + value for c in "\r\n\0"):
                raise ValueError(f"invalid header {name!r}: {value!r}")
        if not 0 <= self.delay < float("inf"):  # also rejects NaN
            raise ValueError(f"delay must be a finite number >= 0, got {self.delay!r}")
        if self.drop not in _DROPS:
            raise ValueError(f"drop must be one of {_DROPS}, got {self.drop!r}")
        for name in ("truncate", "size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an int >= 0 or None, got {value!r}")
        if self.status in _NO_BODY_STATUSES and (self.json is not _MISSING or self.body or self.size):
            raise ValueError(f"a {self.status} response cannot carry a body")
        # Render once with the longest plausible id, so bad JSON or a too-small size fail here
        # rather than mid-response on the server thread.
        head, pad, tail = _render(self, self.headers.get("x-sume-request-id", "req_" + "9" * 20))
        if self.drop == "after_headers" and not (head or pad or tail or self.chunked):
            raise ValueError(
                "drop='after_headers' needs a body to promise: set json=, body=, size= or chunked=True"
            )

    @classmethod
    def error(
        cls,
        status: int,
        code: str | None = None,
        *,
        message: str | None = None,
        request_id: str | None = None,
        retryable: bool | None = None,
        next_action: str | None = None,
        retry_after: str | float | None = None,
        details: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Reply:
        """Build a Sume error envelope reply; the body's request_id defaults to the response's id.

        ``retry_after`` becomes the ``Retry-After`` header verbatim (``str()`` of a number);
        other keyword arguments (``headers=``, ``gzip=``, ``delay=``...) pass through to ``Reply``.
        """
        error: dict[str, Any] = {
            "code": code if code is not None else _CODES.get(status, f"http_{status}"),
            "message": message if message is not None else http.client.responses.get(status, "Error"),
            "details": dict(details or {}),
        }
        optional = {"retryable": retryable, "next_action": next_action}
        error.update((name, value) for name, value in optional.items() if value is not None)
        headers = dict(Headers(kwargs.pop("headers", {})))
        if retry_after is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != "retry-after"}
            headers["Retry-After"] = str(retry_after)
        envelope = {"error": error, "request_id": AUTO_REQUEST_ID if request_id is None else request_id}
        return cls(status, json=envelope, headers=headers, **kwargs)

    @property
    def framed(self) -> bool:
        """Whether the response frames a body (a 204 or 304 has none, not even an empty one)."""
        return self.status not in _NO_BODY_STATUSES

    def payload(self, request_id: str) -> Iterator[bytes]:
        """The body as sent (padded, gzipped when asked), in pieces of at most 64 KiB."""
        pieces = _pieces(*_render(self, request_id))
        return _gzipped(pieces) if self.gzip else pieces

    def body_headers(self, request_id: str) -> list[tuple[str, str]]:
        """The fake's default headers that describe the body, and the request id."""
        headers = [("Content-Type", "application/json")] if self.json is not _MISSING else []
        if self.gzip:
            headers.append(("Content-Encoding", "gzip"))
        if self.framed and self.chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        elif self.framed:
            head, pad, tail = _render(self, request_id)
            length = sum(map(len, self.payload(request_id))) if self.gzip else len(head) + pad + len(tail)
            headers.append(("Content-Length", str(length)))
        return [*headers, ("x-sume-request-id", request_id)]


def as_reply(item: Reply | int) -> Reply:
    """A script entry as a Reply: ints >= 400 are error envelopes, other 2xx ``{"ok": true}``."""
    if isinstance(item, Reply):
        return item
    if isinstance(item, bool) or not isinstance(item, int):
        raise TypeError(f"script entries must be Reply or int, got {item!r}")
    if item >= 400:
        return Reply.error(item)
    if 200 <= item < 300 and item not in _NO_BODY_STATUSES:
        return Reply(item, json={"ok": True})
    return Reply(item)


def _render(reply: Reply, request_id: str) -> tuple[bytes, int, bytes]:
    """Return the unencoded body as (head, number of padding spaces, tail)."""
    tail = b""
    doc = reply.json
    if doc is _MISSING:
        head = reply.body or b""
    else:
        if isinstance(doc, dict) and isinstance(doc.get("request_id"), _AutoRequestId):
            doc = {**doc, "request_id": request_id}
        head = _json.dumps(doc).encode("utf-8")
        if reply.size is not None and isinstance(doc, dict):
            # Padding lives in a trailing string field so the padded body is still the same object.
            key = "_padding"
            while key in doc:
                key += "_"
            head = head[:-1] + (b", " if doc else b"") + b'"' + key.encode() + b'": "'
            tail = b'"}'
        # Other JSON values are padded with trailing whitespace, which JSON also allows.
    if reply.size is None:
        return head, 0, b""
    pad = reply.size - len(head) - len(tail)
    if pad < 0:
        raise ValueError(f"size={reply.size} is smaller than the {len(head) + len(tail)}-byte body")
    return head, pad, tail


def _pieces(head: bytes, pad: int, tail: bytes) -> Iterator[bytes]:
    if head:
        yield head
    while pad > 0:
        yield _SPACES[: min(pad, _PIECE)]
        pad -= _PIECE
    if tail:
        yield tail


def _gzipped(pieces: Iterable[bytes]) -> Iterator[bytes]:
    # mtime is 0 in zlib's gzip header, so two passes produce identical bytes.
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for piece in pieces:
        out = compressor.compress(piece)
        if out:  # an empty chunk would terminate a chunked body early
            yield out
    yield compressor.flush()
