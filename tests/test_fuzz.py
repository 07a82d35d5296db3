"""Property-based fuzzing of everything that reads server input or decides: it never raises.

The envelope parser, the Retry-After parser and the policy see bytes and numbers a server (or a
proxy in front of it) controls. Whatever they are given, they return a well-formed answer and
the policy's invariants hold: retry waits are finite, non-negative and fit in the budget, and a
row the caller must fix is never retried.
"""

from __future__ import annotations

import email.utils
import gzip
import json
import math
import os
import random
import zlib
from typing import Any, Dict, List, Mapping, Optional

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict
from urllib3._collections import HTTPHeaderDict

from sume_urllib3 import ANY, Decision, Policy, Rule, Verdict
from sume_urllib3._envelope import (
    RETRY_AFTER_CEILING,
    ErrorEnvelope,
    decode_prefix,
    parse_envelope,
    parse_retry_after,
)

#: SUME_FUZZ_EXAMPLES=20000 for a long run; the default keeps the suite fast.
FUZZ = settings(
    max_examples=int(os.environ.get("SUME_FUZZ_EXAMPLES", "200")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LIMIT = 65536

# -- strategies -------------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_docs = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
field_names = st.sampled_from(
    ["error", "code", "request_id", "retryable", "next_action", "message", "details", "_padding"]
)
#: Documents shaped like the Sume envelope, with every field of any type.
envelopes = st.recursive(
    json_scalars,
    lambda inner: (
        st.dictionaries(field_names | st.text(max_size=8), inner, max_size=6) | st.lists(inner, max_size=3)
    ),
    max_leaves=20,
)
header_values = st.text(max_size=60) | st.binary(max_size=60) | st.integers() | st.none()
header_names = st.sampled_from(
    [
        "Content-Encoding",
        "content-encoding",
        "X-Sume-Request-Id",
        "x-request-id",
        "Retry-After",
        "Content-Type",
    ]
) | st.text(max_size=20)
raw_headers = st.dictionaries(header_names, header_values, max_size=6)
encodings = st.sampled_from(["gzip", "x-gzip", "deflate", "br", "zstd", "identity", "", "gzip, br", " GZIP "])
visible_ascii = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=60)


@st.composite
def header_mappings(draw: st.DrawFn) -> Mapping[Any, Any]:
    """Plain dicts, requests' and urllib3's header types, with hostile values."""
    items = draw(raw_headers)
    kind = draw(st.sampled_from(["dict", "requests", "urllib3"]))
    if kind == "dict":
        return items
    text_items = {k: v for k, v in items.items() if isinstance(v, str) and "\n" not in k}
    return CaseInsensitiveDict(text_items) if kind == "requests" else HTTPHeaderDict(text_items)


def assert_well_formed(envelope: ErrorEnvelope) -> None:
    assert isinstance(envelope, ErrorEnvelope)
    for value, longest in (
        (envelope.code, 200),
        (envelope.request_id, 200),
        (envelope.next_action, 200),
        (envelope.message, 500),
    ):
        assert value is None or (isinstance(value, str) and 0 < len(value) <= longest and value.isprintable())
    assert envelope.retryable in (None, True, False)


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# -- parse_envelope ---------------------------------------------------------------------------------


@FUZZ
@given(body=st.binary(max_size=4096), headers=header_mappings(), decoded=st.booleans())
@example(body=b"[" * 60_000, headers={}, decoded=False)
@example(
    body=b'{"error": {"code": 1e999}, "request_id": 123456789012345678901234567890123}',
    headers={},
    decoded=True,
)
@example(body=b"\x1f\x8b\x08\x00garbage", headers={"Content-Encoding": "gzip"}, decoded=False)
def test_envelope_from_arbitrary_bytes_never_raises(
    body: bytes, headers: Mapping[Any, Any], decoded: bool
) -> None:
    """Any bytes under any headers give a well-formed envelope (fields unknown when unreadable)."""
    assert_well_formed(parse_envelope(headers, body, limit=LIMIT, decoded=decoded))


@pytest.mark.slow  # real time: runs in CI's slow step
@FUZZ
@given(doc=envelopes | json_docs, headers=header_mappings(), limit=st.integers(0, 4096))
def test_envelope_from_arbitrary_json_never_raises(doc: Any, headers: Mapping[Any, Any], limit: int) -> None:
    """Any JSON document, cut at any limit, gives a well-formed envelope."""
    body = json.dumps(doc).encode()
    assert_well_formed(parse_envelope(headers, body, limit=limit))


@FUZZ
@given(
    code=visible_ascii,
    request_id=visible_ascii,
    retryable=st.none() | st.booleans(),
    next_action=st.none() | visible_ascii,
    nested=st.booleans(),
    encoding=st.sampled_from(["identity", "gzip", "deflate", "raw-deflate"]),
)
def test_a_well_formed_envelope_reads_back_under_every_encoding(
    code: str,
    request_id: str,
    retryable: Optional[bool],
    next_action: Optional[str],
    nested: bool,
    encoding: str,
) -> None:
    """Every field of a valid envelope is read back, plain, gzip or deflate (zlib or raw)."""
    fields: Dict[str, Any] = {"code": code}
    if retryable is not None:
        fields["retryable"] = retryable
    if next_action is not None:
        fields["next_action"] = next_action
    doc: Dict[str, Any] = (
        {"error": fields, "request_id": request_id} if nested else {**fields, "request_id": request_id}
    )
    plain = json.dumps(doc).encode()
    if encoding == "gzip":
        body, headers = gzipped(plain), {"Content-Encoding": "gzip"}
    elif encoding == "deflate":
        body, headers = zlib.compress(plain), {"Content-Encoding": "deflate"}
    elif encoding == "raw-deflate":
        squeeze = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        body, headers = squeeze.compress(plain) + squeeze.flush(), {"Content-Encoding": "deflate"}
    else:
        body, headers = plain, {}

    envelope = parse_envelope(headers, body)

    assert (code, request_id, retryable, next_action) == (
        envelope.code,
        envelope.request_id,
        envelope.retryable,
        envelope.next_action,
    )


@pytest.mark.slow  # real time: runs in CI's slow step
@FUZZ
@given(doc=envelopes | json_docs, cut=st.integers(0, 2048), encoding=st.sampled_from(["gzip", "x-gzip"]))
def test_gzip_of_any_json_reads_like_the_plain_json_or_not_at_all(doc: Any, cut: int, encoding: str) -> None:
    """A gzip body gives the same envelope as plain JSON; a truncated one never raises."""
    plain = json.dumps(doc).encode()
    body = gzipped(plain)

    assert parse_envelope(None, plain) == parse_envelope({"Content-Encoding": encoding}, body)
    assert_well_formed(parse_envelope({"Content-Encoding": encoding}, body[:cut]))


_BOMB = b"\0" * (4 * LIMIT)
_BOMBS = {"gzip": gzip.compress(_BOMB, mtime=0), "deflate": zlib.compress(_BOMB)}


@FUZZ
@given(coding=st.sampled_from(sorted(_BOMBS)), cut=st.integers(1, 400), limit=st.integers(0, 2 * LIMIT))
def test_decoding_a_compressed_prefix_never_exceeds_the_limit(coding: str, cut: int, limit: int) -> None:
    """A decompression bomb, whole or cut anywhere, inflates to at most ``limit`` bytes."""
    body = _BOMBS[coding]
    for prefix in (body, body[:cut]):
        decoded = decode_prefix(prefix, coding, limit)
        assert decoded is None or len(decoded) <= limit


@FUZZ
@given(body=st.binary(max_size=2048), coding=encodings | st.text(max_size=12), limit=st.integers(0, 4096))
def test_decode_prefix_never_raises(body: bytes, coding: str, limit: int) -> None:
    """Garbage under any Content-Encoding decodes to at most ``limit`` bytes, or None."""
    decoded = decode_prefix(body, coding, limit)
    assert decoded is None or len(decoded) <= limit


# -- Retry-After ------------------------------------------------------------------------------------

retry_after_text = (
    st.text(max_size=300)
    | st.from_regex(r"\A\s*[+-]?[0-9]{0,30}(\.[0-9]{0,10})?\s*\Z")
    | st.builds(
        lambda ts: email.utils.formatdate(ts, usegmt=True),
        st.floats(min_value=-2e9, max_value=2.5e11, allow_nan=False),
    )
    | st.sampled_from(
        [
            "soon",
            "",
            "1.5",
            "-5",
            "+3",
            "1e999",
            "9" * 20,
            "NaN",
            "inf",
            "0x10",
            "\u0663",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ]
    )
)


@FUZZ
@given(value=retry_after_text | st.binary(max_size=300), now=st.floats(0, 4e9))
def test_retry_after_never_raises_and_stays_in_range(value: Any, now: float) -> None:
    """Every value is None (garbage) or a finite wait between 0 and the ceiling."""
    seconds = parse_retry_after(value, lambda: now)
    assert seconds is None or (math.isfinite(seconds) and 0.0 <= seconds <= RETRY_AFTER_CEILING)


@FUZZ
@given(n=st.integers(0, 10**40), pad=st.sampled_from(["", " ", "  ", "\t"]))
def test_retry_after_integers_are_seconds(n: int, pad: str) -> None:
    """Delta seconds parse to themselves, clamped to the ceiling."""
    assert min(float(n), RETRY_AFTER_CEILING) == parse_retry_after(f"{pad}{n}{pad}")


@FUZZ
@given(stamp=st.integers(0, 253402300799), now=st.integers(0, 253402300799))
def test_retry_after_dates_are_seconds_from_now(stamp: int, now: int) -> None:
    """An HTTP-date gives the seconds until it, or 0 when past."""
    value = email.utils.formatdate(stamp, usegmt=True)
    assert min(max(stamp - now, 0), RETRY_AFTER_CEILING) == parse_retry_after(value, lambda: float(now))


@pytest.mark.parametrize("value", ["\u0663", "\uff15", "\u0967\u0966", "5\u00a0", "\u20037"])
def test_retry_after_digits_are_ascii_only(value: str) -> None:
    """RFC 9110 delay-seconds is ASCII: Arabic-Indic or fullwidth digits, Unicode spaces are garbage."""
    assert parse_retry_after(value) is None


# -- the policy -------------------------------------------------------------------------------------

statuses = st.integers(100, 599) | st.sampled_from([400, 401, 402, 404, 409, 429, 500, 503]) | st.integers()
codes = (
    st.none()
    | st.sampled_from(
        [
            "idempotency_key_in_use",
            "idempotency_conflict",
            "queue_full",
            "rate_limit_exceeded",
            "insufficient_credits",
        ]
    )
    | st.text(max_size=30)
)
retry_afters = (
    st.none() | retry_after_text | st.binary(max_size=40) | st.floats() | st.integers(-(10**6), 10**12)
)
hint_envelopes = st.none() | st.builds(
    ErrorEnvelope,
    code=codes,
    request_id=st.none() | st.text(max_size=20),
    retryable=st.none() | st.booleans(),
    next_action=st.none()
    | st.sampled_from(["poll", "poll_job", "poll_status", "resubmit", "POLL_later"])
    | st.text(max_size=20),
)
verdicts = st.sampled_from(list(Verdict))
rules = st.builds(
    Rule,
    status=st.sampled_from([400, 402, 409, 429, 500, 502, 503]),
    code=st.none() | st.sampled_from(["queue_full", "idempotency_key_in_use"]),
    verdict=verdicts,
    wait=st.none() | st.floats(0, 100) | st.just("in_use_wait"),
)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    low = draw(st.floats(0, 1))
    return Policy(
        rules=draw(st.just(Policy().rules) | st.lists(rules, max_size=8).map(tuple)),
        max_retries=draw(st.integers(0, 12)),
        max_elapsed=draw(st.floats(0.001, 1e6)),
        backoff_base=draw(st.floats(0, 100)),
        backoff_max=draw(st.floats(0, 1e4)),
        jitter=(low, draw(st.floats(max(low, 1e-6), 1))),
        in_use_wait=draw(st.floats(0, 60)),
        trust_body=draw(st.booleans()),
    )


def assert_invariants(policy: Policy, decision: Decision, elapsed: float) -> None:
    assert isinstance(decision, Decision)
    assert isinstance(decision.reason, str)
    assert decision.reason
    if decision.retry:
        assert decision.wait is not None
        assert math.isfinite(decision.wait)
        assert 0.0 <= decision.wait
        assert elapsed + decision.wait <= policy.max_elapsed + 1e-9
        assert decision.source in ("retry_after", "backoff", "fixed")
    else:
        assert decision.wait is None


@pytest.mark.slow  # real time: runs in CI's slow step
@FUZZ
@given(
    policy=policies(),
    status=statuses,
    code=codes,
    retry_after=retry_afters,
    attempt=st.integers(0, 50),
    elapsed=st.floats(0, 2e6),
    hints=hint_envelopes,
    seed=st.integers(0, 2**32),
)
def test_decide_never_raises_and_keeps_its_invariants(
    policy: Policy,
    status: int,
    code: Optional[str],
    retry_after: Any,
    attempt: int,
    elapsed: float,
    hints: Optional[ErrorEnvelope],
    seed: int,
) -> None:
    """RETRY waits are finite, >= 0 and end within max_elapsed; FIX rows and spent caps never retry."""
    decision = policy.decide(status, code, retry_after, attempt, elapsed, hints, rng=random.Random(seed))

    assert_invariants(policy, decision, elapsed)
    rule = policy.match(status, code)
    if rule is not None and rule.verdict is Verdict.FIX:
        assert decision.verdict in (Verdict.FIX, Verdict.POLL)
    if attempt >= policy.max_retries or status < 400:
        assert not decision.retry
    if hints is not None and hints.retryable is False and policy.trust_body:
        assert not decision.retry


def default_wait(status: int, code: Optional[str], retry_after: Any, attempt: int) -> Optional[float]:
    """The default policy's wait at elapsed 0, or None for "do not retry"."""
    decision = Policy().decide(status, code, retry_after, attempt, 0.0)
    return decision.wait if decision.retry else None


@FUZZ
@given(
    status=statuses,
    code=codes,
    retry_after=retry_afters,
    attempt=st.integers(-5, 50),
)
def test_default_wait_never_raises(status: int, code: Optional[str], retry_after: Any, attempt: int) -> None:
    """The default policy's wait is None or a wait within the default budget; attempt >= 6 is None."""
    wait = default_wait(status, code, retry_after, attempt)

    assert wait is None or (math.isfinite(wait) and 0.0 <= wait <= Policy().max_elapsed)
    if attempt >= 6:
        assert wait is None


def test_default_wait_with_a_huge_integer_retry_after_falls_back() -> None:
    """An integer Retry-After too big for a float is a wait past any budget: no retry, no exception."""
    assert default_wait(503, None, 10**400, 0) is None


@FUZZ
@given(
    policy=policies(),
    kind=st.sampled_from(["connect", "read", "other"]) | st.text(max_size=10),
    attempt=st.integers(0, 50),
    elapsed=st.floats(0, 2e6),
    replay_safe=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_decide_error_never_raises_and_never_resends_unsafe_reads(
    policy: Policy, kind: str, attempt: int, elapsed: float, replay_safe: bool, seed: int
) -> None:
    """A read failure of a request that is not replay-safe is never retried; waits fit the budget."""
    decision = policy.decide_error(kind, attempt, elapsed, replay_safe=replay_safe, rng=random.Random(seed))

    assert_invariants(policy, decision, elapsed)
    if (kind == "read" and not replay_safe) or kind not in ("connect", "read"):
        assert not decision.retry
    if attempt >= policy.max_retries:
        assert not decision.retry


@FUZZ
@given(
    status=statuses,
    retry_after=st.none() | st.floats(allow_nan=True) | st.text(max_size=20),
    attempt=st.integers(-(10**6), 10**6),
    elapsed=st.floats(allow_nan=True),
    hints=hint_envelopes,
)
def test_decide_survives_nonsense_numbers(
    status: int, retry_after: Any, attempt: int, elapsed: float, hints: Optional[ErrorEnvelope]
) -> None:
    """NaN, infinities and negative attempts never raise (the answer only has to be a Decision)."""
    decision = Policy().decide(status, None, retry_after, attempt, elapsed, hints)

    assert isinstance(decision, Decision)
    if decision.retry:
        assert decision.wait is not None
        assert decision.wait >= 0.0


def test_fix_rows_are_fix_for_every_code_and_body() -> None:
    """400, 401, 402, 404 and 409 (other codes) are FIX even when the body says retryable."""
    hints = ErrorEnvelope(retryable=True)
    verdicts: List[Verdict] = [
        Policy().decide(status, code, "1", 0, 0.0, hints).verdict
        for status, code in (
            (400, None),
            (401, "x"),
            (402, "insufficient_credits"),
            (404, None),
            (409, "idempotency_conflict"),
        )
    ]

    assert [Verdict.FIX] * 5 == verdicts
    assert Policy(rules=(Rule(503, ANY, Verdict.FIX),)).decide(503, None, "0").verdict is Verdict.FIX
