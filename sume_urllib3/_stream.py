"""A streamed body (``stream=True``) that breaks is the request's failure, not a success.

With ``stream=True`` the adapter hands the response back before the body is read, so the
request is not over: its outcome is told to the observers (metrics, logs) once the body
ends, breaks or is closed. A body cut short raises the library's give-up that is also
requests' own class (``SumeChunkedEncodingError`` is a ``ChunkedEncodingError``), with the
record (``exc.sume``), on both urllib3 lines (1.26 is told to enforce Content-Length, as
2.x does by default).
"""

from __future__ import annotations

import contextvars
import weakref
from typing import Any, Callable, Iterator, Optional

import requests

from ._deadline import Watch, disarm, timeout_for
from ._errors import raisable
from ._record import SumeRecord

#: Errors requests raises while reading a body (its mapping of urllib3's).
BODY_ERRORS = (
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ConnectionError,
    requests.exceptions.ContentDecodingError,
)


class StreamWatch:
    """The end of one streamed request: tells its outcome once, when the body is done with.

    ``broken`` makes the failure's record from the response and the error's name (the adapter
    knows the request). Nothing here holds the response itself, only a weak reference: the
    finalizer that reports a response dropped unread must not keep it alive. ``report`` is set
    by whoever tells the observers (the session, or an adapter used alone) once the
    response is returned, and is called with the final record exactly once, in the context
    the call returned in (whichever thread, or the garbage collector, ends the body).
    """

    def __init__(
        self,
        response: requests.Response,
        record: SumeRecord,
        broken: Callable[[requests.Response, str], SumeRecord],
        deadline: Optional[Watch] = None,
    ) -> None:
        self._deadline = deadline
        self._response = weakref.ref(response)
        self.record = record
        self._broken = broken
        self._report: Optional[Callable[[SumeRecord], None]] = None
        self._context: Optional[contextvars.Context] = None
        self._ended = False

    def report_with(self, report: Callable[[SumeRecord], None]) -> None:
        """Tell ``report`` the outcome when the body ends (or when the response is collected unread).

        Told later, it runs in a copy of the context the call returned in, so observers see
        the request's context variables (a span their ``on_start`` made current, a logger's
        bound fields) on whichever thread ends the body, and change nothing on that thread.
        """
        self._report = report
        response = self._response()
        if self._ended or response is None:
            self._ended = True
            report(self.record)
        else:
            self._context = contextvars.copy_context()
            weakref.finalize(response, self.end)

    @property
    def cut(self) -> bool:
        """Whether the request's deadline cut the body short."""
        return self._deadline is not None and self._deadline.fired

    def end(self) -> None:
        """The body was read to the end, closed, or dropped: the record stands."""
        if self._ended:
            return
        self._ended = True
        disarm(self._deadline)
        if self._report is not None:
            if self._context is not None:
                self._context.run(self._report, self.record)
            else:
                self._report(self.record)

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
        if watch.cut:  # the deadline's cut ends a body without a length as if it were whole
            raise watch.fail(requests.exceptions.ConnectionError("cut at the deadline"))
        watch.end()

    def close(self) -> None:
        """Close as requests does; the request ends here if its body was not read to the end."""
        try:
            super().close()
        finally:
            self._sume_watch.end()


def watch_stream(
    response: requests.Response,
    record: SumeRecord,
    broken: Callable[[requests.Response, str], SumeRecord],
    deadline: Optional[Watch] = None,
) -> StreamWatch:
    """Watch a streamed ``response``: from now on its body's end decides the request's outcome."""
    response.__class__ = StreamedResponse
    raw = response.raw
    if raw is not None and hasattr(raw, "enforce_content_length"):
        raw.enforce_content_length = True  # 1.26 returns a body cut short as complete otherwise
    watch = StreamWatch(response, record, broken, deadline)
    response._sume_watch = watch  # type: ignore[attr-defined]
    return watch
