"""Peek at the start of an error body without taking it from the caller."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from urllib3.util.response import is_fp_closed


class PrefixedFP:
    """A file object that serves a peeked prefix, then the rest of the original body.

    It deliberately has no ``fp`` attribute: urllib3 switches to its own chunk parser
    when it sees one, but http.client is already part-way through the chunks, so the
    plain ``read()`` path must stay in charge.
    """

    def __init__(self, prefix: bytes, inner: Any) -> None:
        self.prefix = prefix
        self._rest = memoryview(prefix)
        self._inner = inner

    def read(self, amt: Optional[int] = None) -> bytes:
        """Read like ``http.client.HTTPResponse.read``: up to ``amt`` bytes, all if None."""
        if amt is None or amt < 0:
            head = self._take(len(self._rest))
            return head + bytes(self._inner.read())
        head = self._take(amt)
        if len(head) < amt:
            more = bytes(self._inner.read(amt - len(head)))
            return head + more if head else more
        return head

    def read1(self, amt: int = -1) -> bytes:
        """Return buffered prefix bytes first, then at most one read from the stream."""
        if self._rest:
            return self._take(len(self._rest) if amt is None or amt < 0 else amt)
        if amt is None or amt < 0:
            return bytes(self._inner.read1())
        return bytes(self._inner.read1(amt))

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the prefix and the stream."""
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        """Always readable, like the response it wraps."""
        return True

    def flush(self) -> None:
        """Flush the wrapped stream when it supports it."""
        flush = getattr(self._inner, "flush", None)
        if flush is not None and not getattr(self._inner, "closed", False):
            flush()

    def fileno(self) -> int:
        """The wrapped stream's file descriptor."""
        return int(self._inner.fileno())

    def close(self) -> None:
        """Drop the prefix and close the wrapped stream."""
        self._rest = memoryview(b"")
        self._inner.close()

    def isclosed(self) -> bool:
        """Closed only once the prefix is consumed and the stream is closed."""
        return not self._rest and is_fp_closed(self._inner)

    @property
    def closed(self) -> bool:
        """Mirror ``closed`` of the stream, never its ``isclosed()`` (responses closes on it)."""
        return not self._rest and bool(getattr(self._inner, "closed", False))

    def _take(self, amt: int) -> bytes:
        head = self._rest[:amt].tobytes()
        self._rest = self._rest[len(head) :]
        return head


def peek_body(response: Any, limit: int) -> Tuple[Optional[bytes], bool]:
    """Return up to ``limit`` bytes of the body and whether they are already decoded.

    The bytes read are put back in front of the stream, so the caller can still read
    the whole body through any API. A preloaded body (``PoolManager.request``) is
    sliced instead. Any failure means "no body" and is never raised.
    """
    if limit <= 0 or response is None:
        return None, False
    try:
        fp = getattr(response, "_fp", None)
        if isinstance(fp, PrefixedFP):
            return fp.prefix[:limit], False
        body = getattr(response, "_body", None)
        if body:
            return bytes(body[:limit]), bool(getattr(response, "decode_content", False))
        if fp is None or is_fp_closed(fp):
            return None, False
        prefix = fp.read(limit)
        response._fp = PrefixedFP(prefix, fp)
        return prefix, False
    except Exception:
        return None, False
