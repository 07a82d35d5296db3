"""A response's body: peeked without taking it from the caller, drained, watched while streamed.

The private parts of urllib3 and requests this package relies on are used here and in
``_deadline`` only, each for a reason their public API cannot serve (checked on urllib3 1.26.5
to 1.26.20 and 2.0 to 2.7, requests 2.25 to 2.34, responses 0.21 to 0.26):

- ``HTTPResponse._fp``: the peek reads ahead and puts the bytes back (urllib3 cannot unread);
- ``HTTPResponse._body``/``_decoder``: a preloaded body, and whether urllib3 decoded it;
- ``requests.Response.__class__``: a streamed body is watched to its end (requests has no hook);
- ``Response._content``/``_content_consumed``: whether a body is in memory already.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import io
import weakref
from typing import Any, Callable, Iterator, List, Optional, Tuple

import requests
from urllib3.util.response import is_fp_closed

from ._deadline import Watch, timeout_for
from ._envelope import ends_like_document, whole_document
from ._errors import raisable
from ._record import SumeRecord


class PrefixedFP:
    """A file object that serves a peeked prefix, then the rest of the original body.

    It deliberately has no ``fp`` attribute: urllib3 switches to its own chunk parser
    when it sees one, but http.client is already part-way through the chunks, so the
    plain ``read()`` path must stay in charge. If the peek itself failed (a body cut
    short, a timeout), the error is raised to the caller once the prefix is served, as
    it would have been without the peek.
    """

    def __init__(
        self,
        prefix: bytes,
        inner: Any,
        error: Optional[BaseException] = None,
        *,
        whole_reads_only: bool = False,
    ) -> None:
        self.prefix = prefix
        self.inner = inner
        self._rest = memoryview(prefix)
        self._error = error
        # http.client raises a Content-Length body cut short only from a read() of all of it;
        # a read(amt) just comes back short. Where urllib3 does not enforce the length
        # (1.26's default), the error keeps to that.
        self._whole_reads_only = whole_reads_only

    def read(self, amt: Optional[int] = None) -> bytes:
        """Read like ``http.client.HTTPResponse.read``: reading all of a body whose peek broke
        raises that error, as http.client does for a body cut short."""
        if amt is None or amt < 0:
            if not self._rest:
                return self._read_inner()  # no concatenation: a drain holds the body once
            head = self._take(len(self._rest))
            return head + self._read_inner()  # a pending error raises here, as in http.client
        head = self._take(amt)
        if len(head) < amt and self._error is None:
            more = self._read_inner(amt - len(head))
            return head + more if head else more
        return head if head else self._read_inner(amt)

    def read1(self, amt: int = -1) -> bytes:
        """Return buffered prefix bytes first, then at most one read from the stream."""
        if self._rest:
            return self._take(len(self._rest) if amt is None or amt < 0 else amt)
        self._raise_pending()
        return bytes(self.inner.read1(-1 if amt is None or amt < 0 else amt))

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
        flush = getattr(self.inner, "flush", None)
        if flush is not None and not getattr(self.inner, "closed", False):
            flush()

    def fileno(self) -> int:
        """The wrapped stream's file descriptor."""
        return int(self.inner.fileno())

    def close(self) -> None:
        """Drop the prefix and any pending error, and close the wrapped stream unless it closed
        itself (http.client does at the end of a body)."""
        self._rest = memoryview(b"")
        self._error = None
        if not is_fp_closed(self.inner):
            self.inner.close()

    def isclosed(self) -> bool:
        """Closed only once the prefix is served, no error is pending and the stream is closed."""
        return not self._rest and self._error is None and is_fp_closed(self.inner)

    @property
    def closed(self) -> bool:
        """Mirror ``closed`` of the stream, never its ``isclosed()`` (responses closes on it)."""
        return not self._rest and self._error is None and bool(getattr(self.inner, "closed", False))

    def _take(self, amt: int) -> bytes:
        head = self._rest[:amt].tobytes()
        self._rest = self._rest[len(head) :]
        return head

    def _read_inner(self, amt: Optional[int] = None) -> bytes:
        self._raise_pending(whole=amt is None)
        if getattr(self.inner, "closed", False):
            return b""  # e.g. responses closes its BytesIO at EOF; http.client gives b"" too
        return bytes(self.inner.read() if amt is None else self.inner.read(amt))

    def _raise_pending(self, whole: bool = False) -> None:
        error, self._error = self._error, None
        if error is not None and (whole or not self._whole_reads_only):
            raise error


class WholeBody(io.BytesIO):
    """A body the peek read to its end, served from memory (its connection is back in the pool)."""

    prefix = b""


def peek_body(
    response: Any, limit: int, expired: Optional[Callable[[], bool]] = None
) -> Tuple[Optional[bytes], bool]:
    """Return up to ``limit`` bytes of the body and whether they are already decoded.

    The bytes read are put back in front of the stream, so the caller can still read the whole
    body through any API; a preloaded body (``PoolManager.request``) is sliced instead. A
    failure while peeking is raised to the caller when they read that far, as without the peek.
    ``expired`` says when the request's time is up: a body that trickles in is then peeked no
    further.
    """
    if limit <= 0 or response is None:
        return None, False
    fp = getattr(response, "_fp", None)
    if isinstance(fp, (PrefixedFP, WholeBody)):
        return fp.prefix[:limit], False
    body = getattr(response, "_body", None)
    if body:
        # Preloaded: decoded only if urllib3 had a decoder for its Content-Encoding (an
        # encoding it cannot read, zstd without its library say, is kept as it came).
        decoded = getattr(response, "_decoder", None) is not None
        return bytes(body[:limit]), decoded and bool(getattr(response, "decode_content", False))
    if fp is None or is_fp_closed(fp):
        return None, False
    return _read_ahead(response, fp, b"", limit, expired, stop_at_document=True), False


def hold_whole(response: Any, limit: int, expired: Optional[Callable[[], bool]] = None) -> None:
    """Read the rest of an unread body into memory when it ends within ``limit`` bytes, and
    give its connection back (a response handed over on an exception may be dropped unread, and
    a blocking pool would never see that connection again). Any other body keeps its bytes.
    """
    fp = getattr(response, "_fp", None)
    if isinstance(fp, WholeBody):
        return  # all of it in hand already
    if isinstance(fp, PrefixedFP):
        if fp._error is not None or len(fp._rest) != len(fp.prefix):
            return  # all of it in hand already, an error pending, or the caller began reading
        head, fp = fp.prefix, fp.inner
    else:
        head = b""
    if fp is not None and not getattr(response, "_body", None) and not is_fp_closed(fp):
        _read_ahead(response, fp, head, limit, expired)


def _read_ahead(
    response: Any,
    fp: Any,
    head: bytes,
    limit: int,
    expired: Optional[Callable[[], bool]],
    stop_at_document: bool = False,
) -> bytes:
    """Read ``fp`` on from ``head`` (bytes of it read before) up to ``limit`` in all, put what
    was read back in front of it, and give the connection back once the body is in hand.
    ``stop_at_document``: stop at a whole JSON document (the decision's peek; a give-up's hold
    reads to the end)."""
    pieces: List[bytes] = [head] if head else []
    got = len(head)
    cut = False  # stopped by the deadline, not by the end of the body
    ended = False  # an empty read, or Content-Length met: the end of the body
    # What urllib3 has yet to read of a Content-Length body (None: chunked, or unknown).
    promised = getattr(response, "length_remaining", None)
    try:
        if expired is None or not hasattr(fp, "read1"):
            piece = fp.read(limit - got)
            pieces.append(piece)
            ended = len(piece) < limit - got
        else:
            while got < limit:
                piece = fp.read1(limit - got)
                if not piece:
                    ended = True
                    break
                pieces.append(piece)
                got += len(piece)
                if got == promised or getattr(fp, "length", None) == 0:
                    # Content-Length met (urllib3's count, or http.client's): no read is left
                    # to ask for, nor a deadline to check before it.
                    ended = True
                    break
                if (
                    stop_at_document
                    and promised is None
                    and ends_like_document(piece)  # before joining the pieces to parse them
                    and whole_document(b"".join(pieces))
                ):
                    # A body of unknown length (chunked, or ended by the connection's close)
                    # that holds a whole JSON document has said what it will: its end may come
                    # late, and is read by whoever reads on.
                    break
                if got < limit and expired():
                    cut = True
                    break
            if not cut and getattr(fp, "length", None) == 0 and not is_fp_closed(fp):
                # http.client closes a Content-Length body on a read(), never on read1():
                # without this the connection would not go back to the pool.
                fp.read()
    except Exception as exc:  # the body broke: keep what arrived, re-raise on reading on
        partial = getattr(exc, "partial", b"")
        pieces.append(partial if isinstance(partial, bytes) else b"")
        arrived = b"".join(pieces)
        response._fp = PrefixedFP(arrived, fp, exc)
        # What arrived is still what the server said: a whole envelope before the break (or the
        # deadline's cut) is read, a part of one is no JSON, so no hint.
        return arrived
    prefix = b"".join(pieces)
    if cut:
        response._fp = PrefixedFP(prefix, fp)
        return prefix
    if isinstance(promised, int) and len(prefix) < min(promised, limit):
        # The connection closed before Content-Length was met: read1 only says so with a
        # short read. urllib3 enforcing the length (2.x) raises IncompleteRead on any read;
        # else http.client raises it from a read() of the whole body.
        error = http.client.IncompleteRead(prefix, promised - len(prefix))
        enforced = bool(getattr(response, "enforce_content_length", False))
        response._fp = PrefixedFP(prefix, fp, error, whole_reads_only=not enforced)
        return prefix
    closed = is_fp_closed(fp)
    if prefix and (ended or closed):
        response._fp = WholeBody(prefix)
        response._fp.prefix = prefix
    elif prefix:
        response._fp = PrefixedFP(prefix, fp)
    if closed:
        # The whole body is in hand. urllib3 hands the connection back only from inside
        # a read, and an empty body is never read again, so give it back now.
        release(response)
    return prefix


#: A body not read by anyone is drained up to this many bytes to keep its connection; a longer
#: one costs more to read than a new connection does (a handshake is a few round trips).
DRAIN_LIMIT = 1024 * 1024
_DRAIN_CHUNK = 65536


def let_go(raw: Any, limit: int = DRAIN_LIMIT) -> None:
    """Give back the connection of a response nobody will read.

    The rest of the body is read through urllib3's own ``read`` (so urllib3 counts the bytes
    and hands the connection back at the end) up to ``limit`` bytes; a longer body, or one
    that breaks, closes the connection instead. Either way the pool gets its slot back.
    """
    fp = getattr(raw, "_fp", None)  # None too when there is no response
    if isinstance(fp, WholeBody):
        # The peek read the whole body: what is left is in memory, and dropping it is the drain.
        fp.close()
        if isinstance(getattr(raw, "length_remaining", None), int):
            # urllib3 counts what it reads itself; the peek read the body around it. Told that
            # nothing is left, the drain urllib3 makes after every retry reads nothing, where it
            # would raise IncompleteRead for the bytes it never saw (and catch it).
            raw.length_remaining = 0
    elif fp is not None and not is_fp_closed(fp):
        drained = 0
        try:
            while drained <= limit:
                piece = raw.read(_DRAIN_CHUNK, decode_content=False)
                if not piece:
                    break
                drained += len(piece)
            else:
                raw.close()  # too long to be worth its connection: a new one is cheaper
        except Exception:  # a body that broke: its connection cannot be reused
            with contextlib.suppress(Exception):
                raw.close()
    release(raw)


def release(response: Any) -> None:
    """Hand a response's connection back to its pool; never raises (a mock has no pool)."""
    give_back = getattr(response, "release_conn", None)
    if give_back is not None:
        with contextlib.suppress(Exception):
            give_back()


# A streamed body (``stream=True``) that breaks is the request's failure, not a success: it
# raises the give-up that is also requests' own class (``SumeChunkedEncodingError`` is a
# ``ChunkedEncodingError``) with the record, on both urllib3 lines.

#: Errors requests raises while reading a body (its mapping of urllib3's).
BODY_ERRORS = (
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ConnectionError,
    requests.exceptions.ContentDecodingError,
)


class StreamWatch:
    """The end of one streamed request: tells its outcome once, when the body is done with
    (read to its end, broken, closed or dropped unread). Made on a response, it makes it a
    :class:`StreamedResponse` that reports here.

    ``broken`` makes the failure's record from the response and the error's name (the adapter
    knows the request). The response is held weakly: the finalizer that reports a response
    dropped unread must not keep it alive.
    """

    def __init__(
        self,
        response: requests.Response,
        record: SumeRecord,
        broken: Callable[[requests.Response, str], SumeRecord],
        deadline: Optional[Watch] = None,
    ) -> None:
        response.__class__ = StreamedResponse
        raw = response.raw
        if raw is not None and hasattr(raw, "enforce_content_length"):
            raw.enforce_content_length = True  # 1.26 returns a body cut short as complete otherwise
        response._sume_watch = self  # type: ignore[attr-defined]
        self._deadline = deadline
        self._response = weakref.ref(response)
        self.record = record
        self._broken = broken
        self._report: Optional[Callable[[SumeRecord], None]] = None
        self._context = contextvars.Context()  # the call's, where ``_report`` runs
        self._ended = False

    def report_with(self, report: Callable[[SumeRecord], None]) -> None:
        """Tell ``report`` the outcome once, when the body ends (or at once if it has).

        Told later, it runs in a copy of the context the call returned in, so observers see
        the request's context variables (a span their ``on_start`` made current, a logger's
        bound fields) on whichever thread ends the body, and change nothing on that thread.
        """
        response = self._response()
        if self._ended or response is None:
            self._ended = True
            report(self.record)
        else:
            self._report, self._context = report, contextvars.copy_context()
            weakref.finalize(response, self.end)

    def end(self) -> None:
        """The body was read to the end, closed, or dropped: the record stands."""
        if self._ended:
            return
        self._ended = True
        if self._deadline is not None:
            self._deadline.end()
        if self._report is not None:
            self._context.run(self._report, self.record)

    def fail(self, error: Exception) -> Exception:
        """The body broke: the give-up to raise, with the failure's record, told to the observers."""
        error = timeout_for(self._deadline, error)
        if not self._ended:
            response = self._response()  # alive: its own read is what failed
            if response is not None:
                self.record = self._broken(response, type(error).__name__)
            self.end()
        return raisable(error, self.record)


class StreamedResponse(requests.Response):
    """A ``requests.Response`` whose body is watched while the caller reads it."""

    _sume_watch: StreamWatch

    def iter_content(self, chunk_size: Optional[int] = 1, decode_unicode: bool = False) -> Iterator[Any]:
        """requests' ``iter_content``; a body that breaks raises the give-up with the record."""
        # requests' stubs (types-requests) and its inline types overload this differently.
        chunks: Iterator[Any] = super().iter_content(  # type: ignore[arg-type,call-overload,unused-ignore]
            chunk_size, decode_unicode
        )
        if getattr(self, "_content_consumed", False) and not isinstance(self._content, bool):
            return chunks  # already in memory: nothing left to break
        return self._watched(chunks)

    def _watched(self, chunks: Iterator[Any]) -> Iterator[Any]:
        watch = self._sume_watch
        try:
            yield from chunks
        except BODY_ERRORS as exc:
            failure = watch.fail(exc)
            if failure is exc:
                raise
            raise failure from exc
        if watch._deadline is not None and watch._deadline.fired:
            # The deadline's cut ends a body without a length as if it were whole.
            raise watch.fail(requests.exceptions.ConnectionError("cut at the deadline"))
        watch.end()

    def close(self) -> None:
        """Close as requests does; the request ends here if its body was not read to the end."""
        try:
            super().close()
        finally:
            self._sume_watch.end()
