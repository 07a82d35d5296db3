"""Read the Sume JSON error envelope tolerantly from a bounded body prefix, and show what a
response said (its status and code, ids, a key's first characters) as short, printable text."""

from __future__ import annotations

import contextlib
import email.utils
import importlib
import json
import math
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Union

from requests.structures import CaseInsensitiveDict

try:
    from urllib3 import HTTPHeaderDict
except ImportError:  # urllib3 1.26 exports it from its _collections module only
    from urllib3._collections import HTTPHeaderDict

#: Longest server-supplied text a record, log line or message carries.
MAX_FIELD = 200


def printable(value: Any, max_len: int = MAX_FIELD) -> Optional[str]:
    """``value`` as printable text, bounded, or None: no forged log lines, no floods."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if len(text) > max_len:
        text = text[:max_len] + "…"
    return text if text.isprintable() else "".join(ch if ch.isprintable() else "?" for ch in text)


def key_prefix(key: Optional[str]) -> Optional[str]:
    """The first 8 characters of an idempotency key: enough to find it, not to reuse it."""
    if not key:
        return None
    return key[:8] + "…" if len(key) > 8 else key


def status_label(status: Optional[int], code: Optional[str] = None) -> str:
    """How reasons and messages name a response: "503 queue_full", "503", or "no response"."""
    if status is None:
        return "no response"
    return f"{status} {code}" if code else str(status)


#: Response headers that may carry the request id, in order of preference.
REQUEST_ID_HEADERS = ("x-sume-request-id", "x-request-id")


@dataclass(frozen=True)
class ErrorEnvelope:
    """What an error response says about itself; every field may be unknown (None)."""

    code: Optional[str] = None
    message: Optional[str] = None
    request_id: Optional[str] = None
    retryable: Optional[bool] = None
    next_action: Optional[str] = None


def decode_prefix(body: bytes, content_encoding: Optional[str], limit: int) -> Optional[bytes]:
    """Undo gzip/deflate/br/zstd on a (maybe truncated) prefix, producing at most ``limit`` bytes.

    Brotli and zstd are read with the libraries urllib3 decodes them with, when installed
    (requests then asks servers for them). Stacked codings (``gzip, br``, in the order applied)
    are undone last first, each bounded by the limit, up to as many as urllib3 undoes. None for
    what cannot be read within the limit (an unknown coding, a library missing or too old to
    bound its output): a compressed body never reaches the JSON parser as garbage.
    """
    if limit <= 0:
        return b""  # zlib reads max_length=0 as "no limit": never let it
    applied = [coding.strip() for coding in (content_encoding or "").lower().split(",")]
    applied = [coding for coding in applied if coding not in ("", "identity")]
    if len(applied) > MAX_CODINGS:
        return None
    for coding in reversed(applied):
        decoded = _undo(body, coding, limit)
        if decoded is None:
            return None
        body = decoded
    return body[:limit]


#: The most stacked codings undone: urllib3 2.x refuses more (a chain of decoders is work per
#: byte; each link here is bounded by the limit too).
MAX_CODINGS = 5
#: zlib's window bits per coding: servers disagree on whether "deflate" means zlib-wrapped or
#: raw deflate, so both are tried.
_WBITS = {
    "gzip": (16 + zlib.MAX_WBITS,),
    "x-gzip": (16 + zlib.MAX_WBITS,),
    "deflate": (zlib.MAX_WBITS, -zlib.MAX_WBITS),
}


def _undo(body: bytes, coding: str, limit: int) -> Optional[bytes]:
    """``body`` with one coding undone, at most ``limit`` bytes, or None when it cannot be read."""
    if coding == "br":
        return _brotli_prefix(body, limit)
    if coding == "zstd":
        return _zstd_prefix(body, limit)
    for wbits in _WBITS.get(coding, ()):
        try:
            # max_length bounds the output, so a decompression bomb allocates at most `limit`.
            return zlib.decompressobj(wbits).decompress(body, limit)
        except zlib.error:
            continue
    return None


def _brotli_prefix(body: bytes, limit: int) -> Optional[bytes]:
    # brotlicffi first, then brotli: the order urllib3 imports them in.
    brotli = _optional("brotlicffi") or _optional("brotli")
    try:
        # output_buffer_limit (brotli 1.2+) bounds what one call makes; older ones cannot.
        return bytes(brotli.Decompressor().process(body, output_buffer_limit=limit)[:limit])
    except Exception:  # neither installed, a truncated or corrupt stream, or a brotli without the bound
        return None


def _zstd_prefix(body: bytes, limit: int) -> Optional[bytes]:
    # What urllib3 decodes zstd with: the standard library's (3.14), its backport (urllib3 2.6
    # and later), or zstandard (urllib3 2.0 to 2.5).
    zstd = _optional("compression.zstd") or _optional("backports.zstd")
    try:
        if zstd is not None:
            return bytes(zstd.ZstdDecompressor().decompress(body, max_length=limit))
        # A stream reader stops at ``limit`` bytes out, whatever the frame promises.
        with _optional("zstandard").ZstdDecompressor().stream_reader(body, read_across_frames=True) as reader:
            return bytes(reader.read(limit))
    except Exception:  # none installed, or a truncated or corrupt frame
        return None


def _optional(name: str) -> Any:
    """An optional module, or None when it is not installed (looked for once)."""
    if name not in _MODULES:
        try:
            _MODULES[name] = importlib.import_module(name)
        except ImportError:
            _MODULES[name] = None
    return _MODULES[name]


_MODULES: Dict[str, Any] = {}


def parse_envelope(
    headers: Optional[Mapping[str, Any]] = None,
    body: Optional[bytes] = None,
    *,
    limit: int = 65536,
    decoded: bool = False,
    message: bool = True,
) -> ErrorEnvelope:
    """Extract code, message, request id, retryable and next_action; never raises.

    ``body`` is at most ``limit`` raw bytes of the response (content-encoded unless ``decoded``),
    ``headers`` any mapping (names in any case). Each field is looked up in every shape the Sume
    surfaces use; anything malformed leaves it unknown. ``message=False`` leaves the message out
    (None): the decision never reads it.
    """
    if not isinstance(headers, HTTPHeaderDict):  # what a urllib3 response has: asked as it is
        headers = _case_insensitive(headers)
    doc = None
    if body and isinstance(body, (bytes, bytearray)):
        try:
            coding = None if decoded else headers.get("content-encoding")
            prefix = bytes(body[: max(limit, 0)])
            text = decode_prefix(prefix, coding, limit) if coding else prefix
            doc = _document(text) if text else None
        except Exception:  # not one JSON value, or headers that break when asked
            doc = None
    top: Mapping[str, Any] = doc if isinstance(doc, dict) else _EMPTY
    error = top.get("error")
    if not isinstance(error, dict):
        error = _EMPTY
    # {"error": "rate_limit_exceeded"}: a plain string error is the code.
    code = short_text(error.get("code")) or short_text(top.get("code")) or short_text(top.get("error"))
    request_id = short_text(top.get("request_id")) or short_text(error.get("request_id"))
    for name in REQUEST_ID_HEADERS:
        request_id = request_id or short_text(headers.get(name))
    # The other fields inside "error", else at the top level (the Sume surfaces use both).
    found: Dict[str, Any] = {}
    for name in ("retryable", "message", "next_action"):
        value = error.get(name)
        found[name] = top.get(name) if value is None else value
    retryable = found["retryable"]
    return ErrorEnvelope(
        code=code,
        message=short_text(found["message"], 500) if message else None,
        request_id=request_id,
        retryable=retryable if isinstance(retryable, bool) else None,
        next_action=short_text(found["next_action"]),
    )


def _case_insensitive(headers: Any) -> Mapping[str, Any]:
    """Any mapping of headers as a ``CaseInsensitiveDict`` (bytes values read as latin-1);
    anything that is not a mapping, or breaks when read, is no headers."""
    try:
        items = headers.items()
        text = {k: v.decode("latin-1") if isinstance(v, bytes) else v for k, v in items if isinstance(k, str)}
        return CaseInsensitiveDict(text)
    except Exception:
        return _EMPTY


# -- JSON documents: an envelope, a peeked prefix (``_body``), a job's body (``_jobs``) ---------


def _document(text: bytes) -> Any:
    """The one JSON value ``text`` holds (whitespace around it), read with the bounded decoder;
    ValueError (or UnicodeDecodeError) on anything else, a body nesting deeper than ``MAX_DEPTH`` too."""
    if nests_too_deep(text):
        raise ValueError(f"JSON nesting deeper than {MAX_DEPTH}")
    return _DECODER.decode(text.decode("utf-8"))


def ends_like_document(text: bytes) -> bool:
    """Whether ``text`` ends as a JSON object or array does (whitespace after it aside): the
    cheap question before :func:`whole_document`'s parse."""
    return text.rstrip(_JSON_SPACE).endswith((b"}", b"]"))


def whole_document(text: bytes) -> bool:
    """Whether ``text`` is one complete JSON object or array (whitespace around it): all an
    error body of unknown length has to say, though its end (a last chunk, the connection's
    close) has not come yet."""
    with contextlib.suppress(Exception):
        return ends_like_document(text) and isinstance(_document(text), (dict, list))
    return False


def nests_too_deep(text: bytes) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``MAX_DEPTH`` (brackets inside
    strings not counted): such a body is never parsed.

    Fewer openings than ``MAX_DEPTH`` cannot nest deeper, and counting them is quick: only a
    body with more (a job's result with many segments, say) is walked, one step per bracket or
    whole string, with a pattern that cannot backtrack (linear, whatever the body).
    """
    if text.count(b"[") + text.count(b"{") <= MAX_DEPTH:
        return False
    depth = 0
    for found in _SYNTAX.finditer(text):
        depth += _DEPTH_STEP.get(text[found.start()], 0)
        if depth > MAX_DEPTH:
            return True
    return False


# An envelope or a job document nests a few levels. json's C scanner recurses once per level:
# deep enough, it raises RecursionError, or overflows the C stack where the recursion limit was
# raised (the process dies), so a body nesting deeper than this is not parsed at all.
MAX_DEPTH = 200
#: What the depth walk steps on: a bracket, or a whole string with its escapes (the rest of the
#: body after a quote that never closes), whose brackets do not count.
_SYNTAX = re.compile(rb'[\[\]{}]|"(?:[^"\\]+|\\.)*"?', re.DOTALL)
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _bounded_int(digits: str) -> Any:
    return int(digits) if len(digits) <= 30 else float("inf")


def _no_constant(name: str) -> Any:
    return None  # NaN / Infinity are not JSON; treat them as unknown


# One decoder, made once: digit strings are capped so a huge int never burns CPU.
_DECODER = json.JSONDecoder(parse_int=_bounded_int, parse_constant=_no_constant)
#: What JSON counts as whitespace.
_JSON_SPACE = b" \t\n\r"
_EMPTY: Mapping[str, Any] = {}


def short_text(value: Any, max_len: int = 200) -> Optional[str]:
    """A short, printable string or None: ids and codes must be safe to log."""
    if not isinstance(value, str):
        return None
    return printable(value.strip()[:max_len], max_len) or None


# -- Retry-After ---------------------------------------------------------------------------

#: Longest wait we represent; anything larger is already far past any sane deadline.
RETRY_AFTER_CEILING = 10.0**9

# However many digits, a delta is a (huge) wait; beyond this it is not a header value at all.
_MAX_LENGTH = 4096
_MAX_DATE_LENGTH = 256
# ASCII only: "١٢" is two Unicode digits, but not a delta-seconds value.
_DELTA = re.compile(r"^\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*$", re.ASCII)


def parse_retry_after(
    value: Union[str, bytes, float, None],
    now: Optional[Callable[[], float]] = None,
    *,
    date: Union[str, bytes, None] = None,
) -> Optional[float]:
    """Return the wait a Retry-After value asks for, in seconds, or None when it is garbage.

    Accepts delta seconds (integer or decimal), HTTP-dates, and seconds already read (a
    number). A negative delta or a past date means 0. Absurd values are clamped to
    ``RETRY_AFTER_CEILING`` rather than overflowing, so the caller's deadline check turns
    them into "stop". An HTTP-date is measured from the response's ``date`` (its Date
    header) when it has a readable one, else from the wall clock ``now`` (see
    :func:`server_time`).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            return None
        return float(min(max(value, 0.0), RETRY_AFTER_CEILING))  # an int past float range clamps too
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or len(value) > _MAX_LENGTH:
        return None
    match = _DELTA.match(value)
    if match:  # a negative delta means 0; float() of any digits saturates to inf
        return 0.0 if match[1] == "-" else min(float(match[2]), RETRY_AFTER_CEILING)
    stamp = _http_date(value)
    if stamp is None:
        return None
    delta = stamp - server_time(date, now)
    return None if math.isnan(delta) else min(max(delta, 0.0), RETRY_AFTER_CEILING)


def server_time(date: Union[str, bytes, None], now: Optional[Callable[[], float]] = None) -> float:
    """The server's clock when it answered, in epoch seconds: the response's Date header when it
    is a readable HTTP-date, else ``now()`` (the local wall clock, ``time.time`` by default).

    A time the server names (a Retry-After HTTP-date, an epoch reset) is its own clock's: the
    wait is that time less this (RFC 9110 §10.2.3), so a client whose clock is minutes off
    still waits what the server asked, neither giving up at once nor hammering it.
    """
    stamp = _http_date(date.decode("latin-1") if isinstance(date, bytes) else date)
    return stamp if stamp is not None else (now or time.time)()


def _http_date(value: Optional[str]) -> Optional[float]:
    """An HTTP-date (IMF-fixdate, RFC 850, asctime; an offset too) in epoch seconds, or None."""
    if not isinstance(value, str) or len(value) > _MAX_DATE_LENGTH:
        return None
    try:
        parsed = email.utils.parsedate_tz(value.strip())
        if parsed is None:
            return None
        return float(email.utils.mktime_tz(parsed))
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
