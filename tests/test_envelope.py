"""parse_envelope, decode_prefix and parse_retry_after: every documented shape; garbage never raises."""

from __future__ import annotations

import calendar
import email.utils
import gzip
import json
import time
import tracemalloc
import zlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict
from urllib3._collections import HTTPHeaderDict

from sume_urllib3 import SumeSession, _envelope
from sume_urllib3._envelope import (
    RETRY_AFTER_CEILING,
    ErrorEnvelope,
    decode_prefix,
    parse_envelope,
    parse_retry_after,
    server_time,
)
from sume_urllib3.testing import FakeSume, Reply

from .conftest import VirtualTime

MakeSession = Callable[..., SumeSession]

EMPTY = ErrorEnvelope()
JSON = {"Content-Type": "application/json"}


def body(doc: Any) -> bytes:
    """The JSON bytes a server would send for ``doc``."""
    return json.dumps(doc).encode("utf-8")


def raw_deflate(data: bytes) -> bytes:
    """Deflate without the zlib wrapper, as some servers send for "deflate"."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# --- the documented shapes ----------------------------------------------------------------


def test_nested_error_with_top_level_request_id() -> None:
    """{"error": {"code", "message"}, "request_id"} gives code, message and request id."""
    doc = {"error": {"code": "insufficient_credits", "message": "Top up"}, "request_id": "req_1"}
    expected = ErrorEnvelope(code="insufficient_credits", message="Top up", request_id="req_1")
    assert expected == parse_envelope(JSON, body(doc))


def test_top_level_code() -> None:
    """{"code", "message", "request_id"} at top level is read the same way."""
    doc = {"code": "queue_full", "message": "Busy", "request_id": "req_2"}
    assert ErrorEnvelope(code="queue_full", message="Busy", request_id="req_2") == parse_envelope(
        JSON, body(doc)
    )


def test_request_id_inside_error() -> None:
    """A request_id inside the error object is found."""
    doc = {"error": {"code": "rate_limit_exceeded", "request_id": "req_in"}}
    assert ErrorEnvelope(code="rate_limit_exceeded", request_id="req_in") == parse_envelope(JSON, body(doc))


def test_top_level_request_id_wins_over_nested() -> None:
    """When both levels carry a request id the top-level one is used."""
    doc = {"error": {"code": "x", "request_id": "req_in"}, "request_id": "req_top"}
    assert "req_top" == parse_envelope(JSON, body(doc)).request_id


def test_nested_code_wins_over_top_level() -> None:
    """error.code is preferred over a top-level code."""
    doc = {"error": {"code": "inner"}, "code": "outer"}
    assert "inner" == parse_envelope(JSON, body(doc)).code


def test_error_as_a_plain_string_is_the_code() -> None:
    """{"error": "rate_limit_exceeded"} gives that code."""
    assert ErrorEnvelope(code="rate_limit_exceeded") == parse_envelope(
        JSON, body({"error": "rate_limit_exceeded"})
    )


@pytest.mark.parametrize(
    "doc",
    [
        {"error": {"code": "queue_full", "retryable": True, "next_action": "poll_job"}},
        {"error": {"code": "queue_full"}, "retryable": True, "next_action": "poll_job"},
        {"code": "queue_full", "retryable": True, "next_action": "poll_job"},
    ],
)
def test_retryable_and_next_action_inside_error_or_top_level(doc: Dict[str, Any]) -> None:
    """retryable and next_action are read inside error or at top level."""
    expected = ErrorEnvelope(code="queue_full", retryable=True, next_action="poll_job")
    assert expected == parse_envelope(JSON, body(doc))


def test_nested_hints_win_over_top_level() -> None:
    """Inside error wins over top level for retryable and next_action."""
    doc = {"error": {"retryable": False, "next_action": "resubmit"}, "retryable": True, "next_action": "poll"}
    envelope = parse_envelope(JSON, body(doc))
    assert (False, "resubmit") == (envelope.retryable, envelope.next_action)


def test_retryable_false_is_kept() -> None:
    """retryable: false is a hint, not "unknown"."""
    assert parse_envelope(JSON, body({"error": {"retryable": False}})).retryable is False


# --- request id headers -------------------------------------------------------------------

HEADER_TYPES = [dict, CaseInsensitiveDict, HTTPHeaderDict]


@pytest.mark.parametrize("make", HEADER_TYPES)
@pytest.mark.parametrize("name", ["x-sume-request-id", "X-Sume-Request-Id", "X-SUME-REQUEST-ID"])
def test_request_id_from_sume_header(make: Any, name: str) -> None:
    """The x-sume-request-id header (any case, any mapping type) supplies the request id."""
    assert "req_h" == parse_envelope(make({name: "req_h"}), body({"error": {"code": "x"}})).request_id


@pytest.mark.parametrize("make", HEADER_TYPES)
@pytest.mark.parametrize("name", ["x-request-id", "X-Request-Id", "X-REQUEST-ID"])
def test_request_id_from_generic_header(make: Any, name: str) -> None:
    """The x-request-id header is the fallback when x-sume-request-id is absent."""
    assert "req_g" == parse_envelope(make({name: "req_g"}), None).request_id


@pytest.mark.parametrize("make", HEADER_TYPES)
def test_sume_header_wins_over_generic_header(make: Any) -> None:
    """x-sume-request-id is preferred over x-request-id."""
    headers = make({"X-Request-Id": "generic", "X-Sume-Request-Id": "sume"})
    assert "sume" == parse_envelope(headers, None).request_id


def test_body_request_id_wins_over_headers() -> None:
    """A request id in the body is preferred over the headers."""
    headers = {"X-Sume-Request-Id": "from_header"}
    assert "from_body" == parse_envelope(headers, body({"request_id": "from_body"})).request_id


def test_header_request_id_survives_a_garbage_body() -> None:
    """A body that cannot be read still leaves the header's request id."""
    assert ErrorEnvelope(request_id="req_h") == parse_envelope(
        {"x-request-id": "req_h"}, b"<html>oops</html>"
    )


def test_bytes_header_values_are_decoded() -> None:
    """Header values given as bytes are decoded as latin-1."""
    assert "req_b" == parse_envelope({"X-Request-Id": b"req_b"}, None).request_id


@pytest.mark.parametrize("value", ["", "   ", 42, None, ["req"]])
def test_unusable_header_values_are_ignored(value: Any) -> None:
    """Empty, blank or non-string header values give no request id."""
    assert parse_envelope({"X-Request-Id": value}, None).request_id is None


class ExplodingHeaders(Mapping[str, str]):
    """A mapping whose every access raises, like a broken third-party header object."""

    def __getitem__(self, key: str) -> str:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1


def test_header_lookup_never_raises() -> None:
    """A header object that raises on access counts as "no header"."""
    assert EMPTY == parse_envelope(ExplodingHeaders(), b"{")


@pytest.mark.parametrize("headers", [None, {}, [], "x-request-id: r"])
def test_missing_or_odd_headers_are_no_headers(headers: Any) -> None:
    """None, empty or non-mapping headers give no request id and no error."""
    assert EMPTY == parse_envelope(headers, None)


# --- garbage gives the empty envelope -----------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"not json",
        b"<html><body>502 Bad Gateway</body></html>",
        b"[1, 2, 3]",
        b'[{"error": {"code": "x"}}]',
        b'"rate_limit_exceeded"',
        b"null",
        b"true",
        b"42",
        b"1" + b"0" * 5000,
        b"-" + b"9" * 5000,
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"\xff\xfe\xfd",
        b'{"error": {"code": "caf\xe9"}}',
        b"\xef\xbb\xbf{}",
        b'{"error": {"code": "queue_',
        b'{"error": {"code": "queue_full"',
        b'{"error": ',
        b"{" * 100_000,
        b'{"a":' * 100_000,
        b"[" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b"\x00" * 1000,
        b'{"error": ["code", "x"]}',
        b'{"error": 42}',
        b'{"error": null, "code": null}',
    ],
)
def test_garbage_body_gives_empty_envelope(raw: Optional[bytes]) -> None:
    """Non-JSON, non-object JSON, bad UTF-8, truncated, huge or deeply nested bodies give no hints."""
    assert EMPTY == parse_envelope(JSON, raw)


def test_deeply_nested_arrays_do_not_raise_recursion_error() -> None:
    """A 100 000-deep array is no hint, never a RecursionError escaping parse_envelope."""
    assert EMPTY == parse_envelope(None, b"[" * 100_000)


@pytest.mark.parametrize(
    "doc",
    [
        {
            "error": {
                "code": 42,
                "message": ["m"],
                "request_id": 7,
                "retryable": "yes",
                "next_action": {"a": 1},
            }
        },
        {"code": True, "message": None, "request_id": 1.5, "retryable": 1, "next_action": 0},
        {"error": {"retryable": "true"}},
        {"error": {"retryable": None}},
        {"error": {"code": "", "request_id": "   "}},
    ],
)
def test_wrong_field_types_are_unknown(doc: Dict[str, Any]) -> None:
    """Fields of the wrong type (retryable "yes", numeric codes, lists) are unknown, not errors."""
    assert EMPTY == parse_envelope(JSON, body(doc))


def test_huge_numbers_elsewhere_do_not_hide_the_code() -> None:
    """A 5000-digit number beside the code neither raises nor costs the code."""
    raw = b'{"error": {"code": "queue_full"}, "n": 1' + b"0" * 5000 + b"}"
    assert ErrorEnvelope(code="queue_full") == parse_envelope(JSON, raw)


def test_nan_and_infinity_constants_do_not_hide_the_code() -> None:
    """NaN and Infinity (not JSON) are read as unknown values; the rest of the body still counts."""
    raw = b'{"error": {"code": "queue_full", "retryable": NaN}, "t": Infinity, "u": -Infinity}'
    assert ErrorEnvelope(code="queue_full") == parse_envelope(JSON, raw)


def test_body_of_the_wrong_type_is_ignored() -> None:
    """A str body (not bytes) is ignored rather than parsed or raising."""
    assert EMPTY == parse_envelope(JSON, '{"code": "x"}')  # type: ignore[arg-type]


def test_bytearray_body_is_read() -> None:
    """A bytearray body is read like bytes."""
    assert "x" == parse_envelope(JSON, bytearray(b'{"code": "x"}')).code


# --- text cleaning ------------------------------------------------------------------------


def test_long_codes_are_cut_to_200_characters() -> None:
    """A very long code is cut to 200 characters so logs stay bounded."""
    assert "q" * 200 == parse_envelope(JSON, body({"error": {"code": "q" * 5000}})).code


def test_long_request_ids_are_cut_to_200_characters() -> None:
    """Request ids from body and headers are cut to 200 characters."""
    assert "r" * 200 == parse_envelope(JSON, body({"request_id": "r" * 5000})).request_id
    assert "h" * 200 == parse_envelope({"X-Request-Id": "h" * 5000}, None).request_id


def test_long_messages_are_cut_to_500_characters() -> None:
    """Messages are cut to 500 characters."""
    assert "m" * 500 == parse_envelope(JSON, body({"error": {"message": "m" * 5000}})).message


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("queue\x00full", "queue?full"),
        ("a\x1b[31mb", "a?[31mb"),
        ("line\nbreak", "line?break"),
        ("tab\there", "tab?here"),
        ("bidi\u202eevil", "bidi?evil"),
        ("  padded  ", "padded"),
        ("caf\u00e9", "caf\u00e9"),
    ],
)
def test_unprintable_characters_are_replaced(code: str, expected: str) -> None:
    """Control and format characters become "?" and outer whitespace is stripped, so codes are safe to log."""
    assert expected == parse_envelope(JSON, body({"error": {"code": code}})).code


# --- content encodings --------------------------------------------------------------------

DOC = {"error": {"code": "queue_full", "retryable": True}, "request_id": "req_z"}
PARSED = ErrorEnvelope(code="queue_full", request_id="req_z", retryable=True)


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        (" gzip ", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("identity", lambda data: data),
        ("", lambda data: data),
    ],
)
def test_encoded_bodies_are_decoded(encoding: str, compress: Any) -> None:
    """gzip, x-gzip and deflate (zlib-wrapped or raw) bodies are decoded before parsing."""
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    assert PARSED == parse_envelope(headers, compress(body(DOC)))


def test_decoded_flag_skips_decoding() -> None:
    """decoded=True means the body is already plain JSON whatever Content-Encoding says."""
    assert PARSED == parse_envelope({"Content-Encoding": "gzip"}, body(DOC), decoded=True)


def test_gzip_missing_its_trailer_is_still_read() -> None:
    """A gzip prefix cut before the CRC trailer still yields the whole JSON document."""
    assert PARSED == parse_envelope({"Content-Encoding": "gzip"}, gzip.compress(body(DOC))[:-8])


@pytest.mark.parametrize("keep", [1, 5, 10, 20, 30])
def test_truncated_gzip_gives_no_hints(keep: int) -> None:
    """A gzip body cut mid-stream is no hint, never an exception."""
    compressed = gzip.compress(body({"error": {"code": "queue_full"}, "pad": "x" * 200}))
    assert EMPTY == parse_envelope({"Content-Encoding": "gzip"}, compressed[:keep])


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "x-gzip"])
def test_bodies_that_are_not_what_they_claim_give_no_hints(encoding: str) -> None:
    """Plain JSON labelled gzip/deflate is not parsed as garbage: no hints, no exception."""
    assert EMPTY == parse_envelope({"Content-Encoding": encoding}, body(DOC))


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br", "compress, gzip", "unknown"])
def test_unknown_encodings_give_no_hints(encoding: str) -> None:
    """Encodings we cannot read (compress, one stacked on gzip, unknown), and a body that is not
    the br or zstd it claims, give no body hints; header ids still count."""
    headers = {"Content-Encoding": encoding, "X-Request-Id": "req_h"}
    assert ErrorEnvelope(request_id="req_h") == parse_envelope(headers, gzip.compress(body(DOC)))


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br", "compress, gzip"])
def test_decode_prefix_unknown_encoding_is_none(encoding: str) -> None:
    """decode_prefix returns None for encodings it cannot undo."""
    assert decode_prefix(b"\x1f\x8b anything", encoding, 100) is None


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
        ("deflate, gzip", lambda data: gzip.compress(zlib.compress(data))),
        ("identity, gzip", gzip.compress),
        ("Gzip ,  x-gzip", lambda data: gzip.compress(gzip.compress(data))),
    ],
)
def test_stacked_codings_are_undone_in_reverse(encoding: str, pack: Any) -> None:
    """``Content-Encoding`` lists codings in the order they were applied (as urllib3 reads it):
    the last is undone first, and the envelope is read."""
    headers = {"Content-Encoding": encoding}
    assert parse_envelope(headers, pack(body(DOC))).code == "queue_full"


def test_a_brotli_stacked_on_gzip_is_read() -> None:
    """``gzip, br``: brotli undone first, then gzip (where brotli is installed)."""
    packed = brotli_compress(gzip.compress(body(DOC)))
    assert parse_envelope({"Content-Encoding": "gzip, br"}, packed).code == "queue_full"


def test_more_stacked_codings_than_urllib3_undoes_are_not_read() -> None:
    """Six codings (urllib3 2.x refuses more than five): no hints, never an error."""
    packed = body(DOC)
    for _ in range(6):
        packed = gzip.compress(packed)
    assert decode_prefix(packed, ", ".join(["gzip"] * 6), 65536) is None
    assert parse_envelope({"Content-Encoding": ", ".join(["gzip"] * 6)}, packed) == ErrorEnvelope()


def test_each_stacked_coding_is_bounded_by_the_limit() -> None:
    """A bomb under a second coding still yields at most ``limit`` bytes."""
    bomb = gzip.compress(gzip.compress(bytes(20_000_000)))
    assert len(decode_prefix(bomb, "gzip, gzip", 4096) or b"") == 4096


@pytest.mark.parametrize("coding", [",", " , identity,", "identity, identity"])
def test_a_list_of_no_codings_is_bounded_by_the_limit(coding: str) -> None:
    """Commas and identity alone undo nothing, and the body is still cut at ``limit`` (the fuzz
    test found ``","`` returning it whole)."""
    assert b"\x00" == decode_prefix(b"\x00\x00", coding, 1)


def brotli_compress(data: bytes) -> bytes:
    """Brotli from the brotli library urllib3 decodes with (skipped where it is not installed)."""
    brotli = pytest.importorskip("brotli")
    compressed: bytes = brotli.compress(data, quality=5)  # the default 11 takes a second on a bomb
    return compressed


def zstd_compress(data: bytes) -> bytes:
    """One zstd frame from zstandard, the library urllib3 2.x decodes with (skipped where absent)."""
    zstandard = pytest.importorskip("zstandard")
    compressed: bytes = zstandard.ZstdCompressor().compress(data)
    return compressed


COMPRESSORS = {"br": brotli_compress, "zstd": zstd_compress}


@pytest.mark.parametrize("encoding", ["br", "zstd"])
def test_br_and_zstd_bodies_are_decoded_when_their_library_is_installed(encoding: str) -> None:
    """A server asked for br or zstd (requests asks once brotli or zstandard is installed) is read."""
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    assert PARSED == parse_envelope(headers, COMPRESSORS[encoding](body(DOC)))


@pytest.mark.slow  # real time: runs in CI's slow step
@pytest.mark.parametrize("encoding", ["br", "zstd"])
def test_br_and_zstd_bombs_decode_to_at_most_limit_bytes(encoding: str) -> None:
    """50 MB of zeros compressed to a few kB: decoded to the limit, never whole."""
    bomb = COMPRESSORS[encoding](bytes(50_000_000))
    tracemalloc.start()
    try:
        decoded = decode_prefix(bomb, encoding, 65_536)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded is not None
    assert 65_536 == len(decoded)
    assert peak < 4 * 65_536 + 256 * 1024


@pytest.mark.parametrize("keep", [5, 20])
@pytest.mark.parametrize("encoding", ["br", "zstd"])
def test_truncated_br_and_zstd_give_no_hints(encoding: str, keep: int) -> None:
    """A br or zstd body cut mid-stream is no hint, never an exception."""
    compressed = COMPRESSORS[encoding](body({"error": {"code": "queue_full"}, "pad": "x" * 200}))
    assert EMPTY == parse_envelope({"Content-Encoding": encoding}, compressed[:keep])


ZSTD_LIBRARIES = ("compression.zstd", "backports.zstd", "zstandard")


@pytest.mark.parametrize("library", ZSTD_LIBRARIES)
def test_zstd_is_read_with_each_library_urllib3_decodes_it_with(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standard library's zstd (3.14), its backport (urllib3 2.6+) or zstandard (urllib3 2.0-2.5)."""
    pytest.importorskip(library)
    for other in ZSTD_LIBRARIES:
        if other != library:
            monkeypatch.setitem(_envelope._MODULES, other, None)
    compressed = zstd_compress(body(DOC))
    assert PARSED == parse_envelope({"Content-Encoding": "zstd"}, compressed)
    assert 65_536 == len(decode_prefix(zstd_compress(bytes(50_000_000)), "zstd", 65_536) or b"")


@pytest.mark.parametrize(
    ("encoding", "modules"), [("br", ("brotli", "brotlicffi")), ("zstd", ZSTD_LIBRARIES)]
)
def test_without_the_library_br_and_zstd_give_no_hints(
    encoding: str, modules: Tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no library for it is installed the body is unknown (the status table decides)."""
    compressed = COMPRESSORS[encoding](body(DOC))
    for name in modules:
        monkeypatch.setitem(_envelope._MODULES, name, None)
    assert EMPTY == parse_envelope({"Content-Encoding": encoding}, compressed)


# --- decode_prefix limits -----------------------------------------------------------------

PLAIN = bytes(range(256)) * 40  # 10 240 bytes that are not trivially compressible


@pytest.mark.parametrize("limit", [1, 100, 4096, 10_240, 50_000])
@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        (None, lambda data: data),
        ("identity", lambda data: data),
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
    ],
)
def test_decode_prefix_returns_the_first_limit_bytes(
    encoding: Optional[str], compress: Any, limit: int
) -> None:
    """decode_prefix yields exactly the first ``limit`` bytes of the plain body (or all of it)."""
    assert PLAIN[:limit] == decode_prefix(compress(PLAIN), encoding, limit)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_decode_prefix_of_a_compressed_prefix(encoding: str) -> None:
    """A prefix of a compressed body decodes to a prefix of the plain body."""
    compressed = gzip.compress(PLAIN) if encoding == "gzip" else zlib.compress(PLAIN)
    decoded = decode_prefix(compressed[: len(compressed) // 2], encoding, 65536)
    assert decoded is not None
    assert PLAIN.startswith(decoded)
    assert 0 < len(decoded) < len(PLAIN)


@pytest.mark.parametrize("encoding", [None, "gzip", "deflate"])
def test_decode_prefix_limit_zero_returns_nothing(encoding: Optional[str]) -> None:
    """limit=0 means "read nothing": b"", even for gzip/deflate (zlib reads max_length=0 as unlimited)."""
    compressed = {None: PLAIN, "gzip": gzip.compress(PLAIN), "deflate": zlib.compress(PLAIN)}[encoding]
    assert b"" == decode_prefix(compressed, encoding, 0)


def test_parse_envelope_limit_zero_reads_nothing() -> None:
    """parse_envelope with limit=0 reads no body, compressed or not."""
    headers = {"Content-Encoding": "gzip", "X-Request-Id": "req_h"}
    assert ErrorEnvelope(request_id="req_h") == parse_envelope(headers, gzip.compress(body(DOC)), limit=0)


def test_parse_envelope_only_reads_the_first_limit_bytes() -> None:
    """A valid document longer than limit is not parsed from a cut prefix."""
    raw = body({"error": {"code": "queue_full"}, "pad": "x" * 1000})
    assert EMPTY == parse_envelope(JSON, raw, limit=100)
    assert "queue_full" == parse_envelope(JSON, raw, limit=len(raw)).code


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """200 MB of zeros, gzip-compressed to about 200 kB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    parts = [compressor.compress(chunk) for _ in range(200)]
    parts.append(compressor.flush())
    return b"".join(parts)


@pytest.mark.parametrize("limit", [65_536, 1 << 20])
def test_gzip_bomb_is_decoded_to_at_most_limit_bytes(gzip_bomb: bytes, limit: int) -> None:
    """decode_prefix never produces more than ``limit`` bytes from a decompression bomb."""
    decoded = decode_prefix(gzip_bomb[:limit], "gzip", limit)
    assert decoded is not None
    assert limit == len(decoded)


@pytest.mark.parametrize("limit", [65_536, 1 << 20])
def test_gzip_bomb_parse_allocates_a_bounded_amount(gzip_bomb: bytes, limit: int) -> None:
    """Parsing a 200 MB gzip bomb allocates about 4x limit at most, not 200 MB.

    The prefix, the inflated bytes, zlib's unconsumed tail and the decoded text are each at
    most ``limit``; zlib's window and bookkeeping add a fixed ~128 kB on top.
    """
    headers = {"Content-Encoding": "gzip", "X-Request-Id": "req_bomb"}
    tracemalloc.start()
    try:
        envelope = parse_envelope(headers, gzip_bomb, limit=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ErrorEnvelope(request_id="req_bomb") == envelope
    assert peak < 4 * limit + 128 * 1024


# --- properties ---------------------------------------------------------------------------

PROPERTY = settings(max_examples=300, deadline=None)
ENCODINGS = st.sampled_from([None, "", "identity", "gzip", "x-gzip", "deflate", "br", "zstd", "gzip, br"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
ENVELOPE_KEYS = st.sampled_from(["error", "code", "message", "request_id", "retryable", "next_action"])
ENVELOPE_LIKE = st.dictionaries(
    ENVELOPE_KEYS,
    SCALARS | st.dictionaries(ENVELOPE_KEYS, SCALARS, max_size=6),
    max_size=6,
)
HEADER_VALUES = st.one_of(
    st.none(), st.text(max_size=50), st.binary(max_size=50), st.integers(), st.lists(st.text())
)
HEADERS = st.one_of(
    st.none(),
    st.dictionaries(
        st.one_of(st.text(max_size=30), st.sampled_from(["X-Request-Id", "x-sume-request-id"])), HEADER_VALUES
    ),
    st.dictionaries(
        st.sampled_from(["Content-Encoding", "X-Request-Id", "X-Sume-Request-Id"]), st.text(max_size=30)
    ),
)


def _well_formed(envelope: ErrorEnvelope) -> None:
    assert isinstance(envelope, ErrorEnvelope)
    for text, longest in (
        (envelope.code, 200),
        (envelope.request_id, 200),
        (envelope.next_action, 200),
        (envelope.message, 500),
    ):
        assert text is None or (isinstance(text, str) and 0 < len(text) <= longest and text.isprintable())
    assert envelope.retryable in (None, True, False)


@PROPERTY
@given(st.binary(max_size=2000), ENCODINGS, st.integers(0, 4096))
def test_property_arbitrary_bytes_never_raise(raw: bytes, encoding: Optional[str], limit: int) -> None:
    """Arbitrary bytes under any Content-Encoding and limit give a well-formed envelope."""
    _well_formed(parse_envelope({"Content-Encoding": encoding}, raw, limit=limit))


@pytest.mark.slow  # real time: runs in CI's slow step
@PROPERTY
@given(JSON_VALUES | ENVELOPE_LIKE, ENCODINGS)
def test_property_arbitrary_json_never_raises(doc: Any, encoding: Optional[str]) -> None:
    """Any JSON value, envelope-shaped or not and however encoded, gives a well-formed envelope."""
    raw = json.dumps(doc).encode("utf-8")
    if encoding in ("gzip", "x-gzip"):
        raw = gzip.compress(raw)
    elif encoding == "deflate":
        raw = zlib.compress(raw)
    _well_formed(parse_envelope({"Content-Encoding": encoding}, raw))


@PROPERTY
@given(ENVELOPE_LIKE)
def test_property_string_fields_round_trip(doc: Dict[str, Any]) -> None:
    """A short printable top-level code and request id always come back exactly."""
    doc = dict(doc, code="queue_full", request_id="req_1")
    doc.pop("error", None)
    envelope = parse_envelope(JSON, json.dumps(doc).encode("utf-8"))
    assert ("queue_full", "req_1") == (envelope.code, envelope.request_id)


@pytest.mark.slow  # real time: runs in CI's slow step
@PROPERTY
@given(HEADERS, st.one_of(st.none(), st.binary(max_size=200)))
def test_property_arbitrary_headers_never_raise(headers: Any, raw: Optional[bytes]) -> None:
    """Arbitrary header dicts (odd keys, bytes, ints, lists, None) never make parsing raise."""
    _well_formed(parse_envelope(headers, raw))


def test_a_body_nesting_too_deep_is_never_parsed() -> None:
    """Nesting deeper than ``MAX_DEPTH`` (200) is not parsed, whatever it holds; a wide body of many
    small objects, or brackets inside strings, is. json's scanner recurses once per level (with a
    raised recursion limit, deep enough overflows the C stack and the process dies)."""
    nested = b"[" * 50_000 + b"]" * 50_000
    deepest = b'{"error": {"code": "queue_full", "x": ' + b"[" * 198 + b"]" * 198 + b"}}"
    too_deep = b'{"error": {"code": "queue_full", "x": ' + b"[" * 199 + b"]" * 199 + b"}}"
    wide = b'{"error": {"code": "queue_full", "details": [' + b",".join([b"{}"] * 5_000) + b"]}}"
    quoted = b'{"error": {"code": "queue_full", "message": "' + b'[[\\" {' * 1_000 + b'"}}'

    assert ErrorEnvelope() == parse_envelope(JSON, nested, limit=len(nested))
    assert "queue_full" == parse_envelope(JSON, deepest, limit=len(deepest)).code
    assert ErrorEnvelope() == parse_envelope(JSON, too_deep, limit=len(too_deep))
    assert "queue_full" == parse_envelope(JSON, wide, limit=len(wide)).code
    assert "queue_full" == parse_envelope(JSON, quoted, limit=len(quoted)).code


# --- parse_retry_after: delta seconds and HTTP-dates in, a bounded wait or None out -----------

#: 2015-10-21 07:28:00 UTC, the wall clock for every HTTP-date test.
NOW = float(calendar.timegm((2015, 10, 21, 7, 28, 0, 0, 0, 0)))


def clock() -> float:
    """The injected wall clock."""
    return NOW


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("12", 12.0),
        ("120", 120.0),
        ("007", 7.0),
        ("1.5", 1.5),
        ("0.25", 0.25),
        (".5", 0.5),
        ("5.", 5.0),
        (" 10 ", 10.0),
        ("\t3\r\n", 3.0),
        (b"12", 12.0),
        (b" 1.5 ", 1.5),
    ],
)
def test_delta_seconds(value: Any, expected: float) -> None:
    """Integer and decimal delta seconds, padded or as bytes, give that many seconds."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize("value", ["-5", "-0.5", "-0", "-99999999999999999999", b"-1"])
def test_negative_delta_means_zero(value: Any) -> None:
    """A negative delta means "now": 0 seconds."""
    assert 0.0 == parse_retry_after(value, clock)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 08:28:00 GMT", 3600.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 09:28:30 +0200", 30.0),
        ("Wednesday, 21-Oct-15 07:28:30 GMT", 30.0),
        ("Wed Oct 21 07:28:30 2015", 30.0),
        (b"Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("  Wed, 21 Oct 2015 07:28:30 GMT  ", 30.0),
    ],
)
def test_http_dates_against_the_injected_clock(value: Any, expected: float) -> None:
    """HTTP-dates (IMF-fixdate, RFC 850, asctime, offsets) are measured from ``now``; past means 0."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize(
    "value", ["9" * 20, "9" * 200, "1" + "0" * 12, "Fri, 31 Dec 9999 23:59:59 GMT", "99999999999.5"]
)
def test_absurd_values_clamp_to_the_ceiling(value: str) -> None:
    """Huge deltas and far-future dates clamp to RETRY_AFTER_CEILING instead of overflowing."""
    assert RETRY_AFTER_CEILING == parse_retry_after(value, clock)


def test_ceiling_is_exactly_representable() -> None:
    """A delta equal to the ceiling is returned unchanged; one just below is not clamped."""
    assert RETRY_AFTER_CEILING == parse_retry_after("1000000000", clock)
    assert 999999999.0 == parse_retry_after("999999999", clock)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "soon",
        "1m0s",
        "1e999",
        "1e3",
        "inf",
        "-inf",
        "nan",
        "NaN",
        "0x10",
        "1_000",
        "1,5",
        "1 2",
        "12s",
        "+-1",
        "--1",
        ".",
        "\x00",
        "Mon, 32 Foo",
        "0 0 0 0 0",
        "1 Jan 99999999999 00:00:00",
        "1" + " " * 5000,
        "1" * 4097,
        b"\xff\xfe",
        b"",
    ],
)
def test_garbage_is_none(value: Any) -> None:
    """Anything that is neither delta seconds nor an HTTP-date is ignored (None)."""
    assert parse_retry_after(value, clock) is None


@pytest.mark.parametrize("value", [True, False, ["12"], {"12": 1}, object()])
def test_non_text_is_none(value: Any) -> None:
    """Only str and bytes (header values) and numbers (seconds) are read; anything else is None."""
    assert parse_retry_after(value, clock) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (12, 12.0),
        (1.5, 1.5),
        (0, 0.0),
        (-3, 0.0),
        (float("inf"), RETRY_AFTER_CEILING),
        (10**400, RETRY_AFTER_CEILING),
        (-(10**400), 0.0),
        (float("nan"), None),
    ],
)
def test_numbers_are_seconds(value: Any, expected: Optional[float]) -> None:
    """A number is seconds already read: clamped to 0..RETRY_AFTER_CEILING, NaN is None."""
    assert expected == parse_retry_after(value, clock)


@pytest.mark.parametrize("value", ["١٢", "１２", "১"])
def test_non_ascii_digits_are_garbage(value: str) -> None:
    """delay-seconds is 1*DIGIT (ASCII): Arabic-Indic, fullwidth or Bengali digits are garbage (None)."""
    assert parse_retry_after(value, clock) is None


def http_date(stamp: float) -> str:
    """``stamp`` as an IMF-fixdate, as a server's Date and Retry-After headers carry it."""
    return email.utils.formatdate(stamp, usegmt=True)


@pytest.mark.parametrize("skew", [-300, 0, 300])
def test_an_http_date_is_measured_from_the_response_date(skew: float) -> None:
    """RFC 9110 §10.2.3: the wait is the Retry-After date less the response's Date, whatever the
    local clock says (here ``skew`` seconds off the server's); without a readable Date, the
    local clock as before."""
    server_now = NOW + skew
    asked = http_date(server_now + 2)
    assert 2.0 == parse_retry_after(asked, clock, date=http_date(server_now))
    assert 2.0 == parse_retry_after(asked.encode(), clock, date=http_date(server_now).encode())
    for unreadable in (None, "", "yesterday", "x" * 300):
        assert max(skew + 2.0, 0.0) == parse_retry_after(asked, clock, date=unreadable)
    assert 0.0 == parse_retry_after(http_date(server_now - 5), clock, date=http_date(server_now))
    assert 7.0 == parse_retry_after("7", clock, date=http_date(server_now))  # deltas need no clock


def test_server_time_is_the_date_header_else_the_wall_clock() -> None:
    """The helper every absolute server time is read against (an epoch reset too)."""
    assert NOW + 60 == server_time(http_date(NOW + 60), clock)
    assert NOW + 60 == server_time("Wed, 21 Oct 2015 07:29:00 GMT")
    assert NOW == server_time(None, clock)
    assert NOW == server_time("not a date", clock)


@pytest.mark.parametrize("skew", [-300, 300], ids=["client behind", "client ahead"])
def test_a_retry_waits_what_the_server_asked_whatever_the_local_clock(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime, skew: int
) -> None:
    """A 503 asking, by HTTP-date, for 2 s of the server's time is retried after 2 s with the
    local clock 300 s behind (it gave up at once, "retry in 302s") or ahead (it retried at once)."""
    server_now = int(time.time()) + skew
    dates = {"Date": http_date(server_now), "Retry-After": http_date(server_now + 2)}
    fake.script("POST", "/v1/avatars", Reply.error(503, "service_unavailable", headers=dates), Reply(201))

    response = make_session().post("avatars", json={"name": "Ada"})

    assert (201, 2) == (response.status_code, response.sume.attempts)  # type: ignore[attr-defined]
    assert [2.0] == vtime.sleeps


def test_a_job_poll_is_spaced_by_the_server_clock(
    fake: FakeSume, make_session: MakeSession, vtime: VirtualTime
) -> None:
    """A status poll's Retry-After HTTP-date is read against its Date: 5 s, not 305 s, with the
    local clock 300 s behind the server's."""
    server_now = int(time.time()) + 300
    dates = {"Date": http_date(server_now), "Retry-After": http_date(server_now + 5)}
    fake.job("job_1", [Reply(200, json={"data": {"status": "processing"}}, headers=dates), "completed"])

    assert make_session().jobs.wait("job_1").done
    assert [5.0] == vtime.sleeps


def test_delta_never_consults_the_clock() -> None:
    """The wall clock is read only for HTTP-dates."""
    calls: List[int] = []

    def counting_clock() -> float:
        calls.append(1)
        return NOW

    assert 5.0 == parse_retry_after("5", counting_clock)
    assert [] == calls
    assert 30.0 == parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", counting_clock)
    assert [1] == calls


def test_default_clock_is_the_real_time() -> None:
    """Without ``now`` a date in the past still means 0 and a far-future one clamps."""
    assert 0.0 == parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT")
    assert RETRY_AFTER_CEILING == parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT")


# --- properties ---------------------------------------------------------------------------


def _check(result: Optional[float]) -> None:
    assert result is None or 0.0 <= result <= RETRY_AFTER_CEILING


@PROPERTY
@given(st.text(max_size=300))
def test_property_never_raises_on_text(value: str) -> None:
    """Arbitrary text gives None or a wait between 0 and the ceiling."""
    _check(parse_retry_after(value, clock))


@PROPERTY
@given(st.binary(max_size=300))
def test_property_never_raises_on_bytes(value: bytes) -> None:
    """Arbitrary bytes give None or a wait between 0 and the ceiling."""
    _check(parse_retry_after(value, clock))


@PROPERTY
@given(
    st.lists(
        st.sampled_from(
            ["Mon,", "Wed", "21", "Oct", "2015", "07:28:00", "GMT", "+0200", "-", ":", "99", "0", " "]
        ),
        max_size=12,
    ).map(" ".join),
    st.floats(min_value=-1e12, max_value=1e12),
)
def test_property_never_raises_on_date_like_text(value: str, now: float) -> None:
    """Near-miss HTTP-dates never raise, whatever the clock says."""
    _check(parse_retry_after(value, lambda: now))


@PROPERTY
@given(st.integers(min_value=0, max_value=10**40), st.sampled_from(["", " ", "\t"]))
def test_property_integer_deltas_are_exact_up_to_the_ceiling(seconds: int, pad: str) -> None:
    """An integer delta gives exactly that many seconds, clamped to the ceiling."""
    assert min(float(seconds), RETRY_AFTER_CEILING) == parse_retry_after(f"{pad}{seconds}{pad}", clock)


@PROPERTY
@given(st.integers(min_value=0, max_value=253402300799))
def test_property_http_dates_measure_from_now(stamp: int) -> None:
    """An IMF-fixdate gives its distance from ``now`` (0 if past), clamped to the ceiling."""
    value = email.utils.formatdate(stamp, usegmt=True)
    assert min(max(stamp - NOW, 0.0), RETRY_AFTER_CEILING) == parse_retry_after(value, clock)


def test_a_delta_of_any_length_is_a_huge_wait() -> None:
    """300 digits is as absurd as 20: clamped to the ceiling, so the deadline stops it."""
    assert RETRY_AFTER_CEILING == parse_retry_after("1" * 300, clock)
