"""The retry policy: pure decisions, no I/O, no urllib3."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple, Union

from ._config import check_int, check_seconds
from ._envelope import ErrorEnvelope, parse_retry_after, status_label
from ._errors import ConfigurationError
from ._util import RandomSource, StrEnum, plural, uniform

#: A rule's ``code`` that matches any error code (or none).
ANY = None
#: A rule's ``wait`` that means "the policy's ``in_use_wait``".
IN_USE_WAIT = "in_use_wait"


def seconds(value: float, unit: str = "s") -> str:
    """Seconds as people read them in reasons: "1.5s", or "1e+09s" when absurdly large."""
    return f"{value:.1f}{unit}" if value < 1e6 else f"{value:.3g}{unit}"


class Verdict(StrEnum):
    """What to do with one failed attempt."""

    RETRY = "retry"
    FIX = "fix"
    NO_RETRY = "no_retry"
    STOP = "stop"
    POLL = "poll"


@dataclass(frozen=True)
class Rule:
    """One row of the table: status and code (or ``ANY``) map to a verdict and a wait.

    A code of "any" is ``ANY``: that is how ``python -m sume_urllib3 table`` prints it, so
    settings copied from it (Django's ``RULES``) mean ``ANY`` too; no server's code is "any".

    ``wait`` is None for "Retry-After, else backoff", a number of seconds for a fixed
    wait (a larger Retry-After still wins), or ``IN_USE_WAIT`` for the policy's
    ``in_use_wait``.
    """

    status: int
    code: Optional[str]
    verdict: Verdict
    wait: Union[float, str, None] = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise ConfigurationError(f"rules: status must be an int, got {self.status!r}")
        if not 100 <= self.status <= 599:
            raise ConfigurationError(
                f"rules: status {self.status} is not an HTTP status (must be 100 to 599)"
            )
        if self.code is not None and not isinstance(self.code, str):
            raise ConfigurationError(f"rules: code must be a str or ANY, got {self.code!r}")
        if self.code is not None and self.code.lower() == "any":
            object.__setattr__(self, "code", ANY)
        try:
            object.__setattr__(self, "verdict", Verdict(self.verdict))
        except ValueError:
            verdicts = ", ".join(verdict.value for verdict in Verdict)
            raise ConfigurationError(
                f"rules: unknown verdict {self.verdict!r} (must be one of {verdicts})"
            ) from None
        if self.wait is not None and self.wait != IN_USE_WAIT:
            wait = check_seconds(self.wait, "rules: wait (seconds, None or IN_USE_WAIT)")
            object.__setattr__(self, "wait", wait)

    def matches(self, status: int, code: Optional[str]) -> bool:
        """True when this row applies to the status and code (a code of ``ANY`` fits every code)."""
        return self.status == status and (self.code is None or self.code == code)


DEFAULT_RULES: Tuple[Rule, ...] = (
    Rule(429, ANY, Verdict.RETRY),
    Rule(503, ANY, Verdict.RETRY),
    Rule(409, "idempotency_key_in_use", Verdict.RETRY, IN_USE_WAIT),
    Rule(409, ANY, Verdict.FIX),
    Rule(400, ANY, Verdict.FIX),
    Rule(401, ANY, Verdict.FIX),
    Rule(402, ANY, Verdict.FIX),
    Rule(404, ANY, Verdict.FIX),
)


@dataclass(frozen=True)
class Decision:
    """A verdict, the wait before the next attempt (RETRY only), where it came from, and why."""

    verdict: Verdict
    wait: Optional[float] = None
    source: Optional[str] = None  # "retry_after" | "backoff" | "fixed"
    reason: str = ""

    @property
    def retry(self) -> bool:
        """True when another attempt should be made."""
        return self.verdict is Verdict.RETRY


@dataclass(frozen=True)
class Policy:
    """The whole retry policy as validated, immutable data.

    Every field is checked at construction (``ConfigurationError`` naming the field);
    ``replace(**changes)`` makes a checked copy.

    :param rules: the table, first match wins: :class:`Rule` rows of status, code (or
        ``ANY``), verdict and wait. Anything else >= 400 is NO_RETRY.
    :param max_retries: retries after the first attempt (6: at most 7 requests).
    :param max_elapsed: seconds the whole logical request may take, from its start:
        no wait that would end later is started, no attempt starts after it, and each
        attempt's connect and read timeouts are capped by what is left (120).
    :param backoff_base: seconds of the first backoff; it doubles per retry (1.0).
    :param backoff_max: the longest backoff, in seconds (60.0).
    :param jitter: (low, high) multiplier range drawn per backoff; (0.0, 1.0) is "full
        jitter" (0.5, 1.0).
    :param in_use_wait: seconds to wait after 409 ``idempotency_key_in_use``; a larger
        Retry-After wins (1.0).
    :param trust_body: let the JSON error body (``retryable``, ``next_action``) override
        the table (True).
    :param peek_limit: the most bytes of an error body ever read to decide (65536).
    :param retry_after_jitter: spreads clients that were told the same Retry-After: the
        wait becomes ``Retry-After * (1 + U(0, retry_after_jitter))``, never shorter than
        asked (0: the server's Retry-After is waited exactly).
    :param retry_after_spread: for clients that share no state (no common fleet): adds
        ``U(0, min(backoff_max, retry_after_spread * 2**attempt))`` seconds to a Retry-After
        wait, so a herd of lone clients told the same Retry-After stops waking in step
        (4.0 takes a 500-client herd from 28% to 100% success in ``benchmarks/fleet.py``);
        0 (the default) waits the Retry-After exactly.
    """

    rules: Sequence[Rule] = DEFAULT_RULES
    max_retries: int = 6
    max_elapsed: float = 120.0
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    jitter: Tuple[float, float] = (0.5, 1.0)
    in_use_wait: float = 1.0
    trust_body: bool = True
    peek_limit: int = 65536
    retry_after_jitter: float = 0.0
    retry_after_spread: float = 0.0

    def __post_init__(self) -> None:
        # Frozen: the checked (normalised) values are stored the way dataclasses document.
        object.__setattr__(self, "rules", _check_rules(self.rules))
        check_int(self.max_retries, "max_retries", 0, 1000)
        check_int(self.peek_limit, "peek_limit", 0, 16 * 1024 * 1024)
        object.__setattr__(self, "max_elapsed", check_seconds(self.max_elapsed, "max_elapsed", positive=True))
        for name in ("backoff_base", "backoff_max", "in_use_wait", "retry_after_spread"):
            object.__setattr__(self, name, check_seconds(getattr(self, name), name))
        jitter = check_seconds(self.retry_after_jitter, "retry_after_jitter", high=1.0, unit="")
        object.__setattr__(self, "retry_after_jitter", jitter)
        object.__setattr__(self, "jitter", _check_jitter(self.jitter))
        if not isinstance(self.trust_body, bool):
            raise ConfigurationError(f"trust_body must be a bool, got {self.trust_body!r}")

    def replace(self, **changes: Any) -> Policy:
        """A copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigurationError(f"Policy has no field {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def match(self, status: int, code: Optional[str]) -> Optional[Rule]:
        """The first rule matching status and code, or None."""
        for rule in self.rules:
            if rule.matches(status, code):
                return rule
        return None

    def backoff(self, attempt: int, rng: RandomSource = None) -> float:
        """``min(backoff_max, backoff_base * 2**attempt) * U(jitter)`` for 0-based ``attempt``."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(max(attempt, 0), 64))
        return ceiling * uniform(rng, *self.jitter)

    def decide(
        self,
        status: int,
        code: Optional[str] = None,
        retry_after: Union[str, bytes, float, None] = None,
        attempt: int = 0,
        elapsed: float = 0.0,
        hints: Optional[ErrorEnvelope] = None,
        *,
        rng: RandomSource = None,
        now: Optional[Callable[[], float]] = None,
    ) -> Decision:
        """Decide what to do after an error response.

        ``attempt`` is the number of retries already made for this logical request,
        ``elapsed`` the seconds since it started, ``retry_after`` the header's value (or
        seconds), ``hints`` what the body said, ``rng`` the jitter source and ``now`` the
        wall clock for HTTP-date Retry-After values.
        """
        label = status_label(status, code)
        if status < 400:
            return Decision(Verdict.NO_RETRY, reason=f"{label} is not an error")
        rule = self.match(status, code)
        verdict = rule.verdict if rule else Verdict.NO_RETRY
        if self.trust_body and hints is not None:
            if hints.next_action and "poll" in hints.next_action.lower():
                why = f"server says next_action={hints.next_action}; poll, do not resubmit"
                return Decision(Verdict.POLL, reason=f"{label}: {why}")
            if hints.retryable is False and verdict is Verdict.RETRY:
                return Decision(Verdict.NO_RETRY, reason=f"{label}: server marked the error retryable=false")
            if hints.retryable is True and verdict is Verdict.NO_RETRY:
                verdict, rule = Verdict.RETRY, None  # retried as an unlisted error: Retry-After, else backoff
        if verdict is not Verdict.RETRY:
            return Decision(verdict, reason=_ROW_REASONS[verdict].format(label=label))
        if attempt >= self.max_retries:
            return self._capped(label)

        asked = None if retry_after is None else parse_retry_after(retry_after, now)
        fixed = rule.wait if rule is not None else None
        if fixed == IN_USE_WAIT:
            fixed = self.in_use_wait
        if isinstance(fixed, float):
            wait, source = fixed, "fixed"
            if asked is not None and asked > fixed:
                wait, source = asked, "retry_after"
        elif asked is not None:
            wait, source = asked, "retry_after"
            if self.retry_after_jitter:
                # Upward only: never earlier than the server asked, but not all at once.
                wait = asked * (1.0 + uniform(rng, 0.0, self.retry_after_jitter))
            if self.retry_after_spread:
                # Clients that share nothing were all told the same time: a spread that grows
                # with the attempt lets them come back over a widening window, not in step.
                spread = min(self.backoff_max, self.retry_after_spread * 2.0 ** min(attempt, 64))
                wait += uniform(rng, 0.0, spread)
        else:
            wait, source = self.backoff(attempt, rng), "backoff"
        return self._retry_in(label, wait, source, elapsed)

    def decide_error(
        self,
        kind: str,
        attempt: int = 0,
        elapsed: float = 0.0,
        *,
        replay_safe: bool = True,
        rng: RandomSource = None,
    ) -> Decision:
        """Decide after a transport failure: ``kind`` is "connect", "read" or "other".

        A connection that was never made is safe to retry for any request; a read
        failure only when the request may be sent twice (``replay_safe``).
        """
        if kind == "connect":
            label = "connection failed before sending"
        elif kind == "read":
            label = "connection failed after sending"
            if not replay_safe:
                why = "the request is not replay-safe, so it is not resent"
                return Decision(Verdict.NO_RETRY, reason=f"{label}; {why}")
        else:
            return Decision(Verdict.NO_RETRY, reason="transport error that a retry would not fix")
        if attempt >= self.max_retries:
            return self._capped(label)
        return self._retry_in(label, self.backoff(attempt, rng), "backoff", elapsed)

    def _capped(self, label: str) -> Decision:
        """STOP: the retries are spent."""
        retries = plural(self.max_retries, "retry", "retries")
        return Decision(Verdict.STOP, reason=f"{label}: attempt cap reached ({retries})")

    def _retry_in(self, label: str, wait: float, source: str, elapsed: float) -> Decision:
        """RETRY after ``wait``, or STOP: a wait that would end past ``max_elapsed`` is never started."""
        if wait <= self.max_elapsed - elapsed:
            return Decision(Verdict.RETRY, wait, source, f"{label}: retry in {seconds(wait)} ({source})")
        left = max(self.max_elapsed - elapsed, 0.0)
        asked = "server asked to wait" if source == "retry_after" else "next wait is"
        budget = f"{seconds(left)} of the {seconds(self.max_elapsed)} budget is left"
        return Decision(Verdict.STOP, reason=f"{label}: {asked} {seconds(wait)} ({source}) but only {budget}")


_ROW_REASONS = {
    Verdict.FIX: "{label}: the caller must fix the request; not retried",
    Verdict.NO_RETRY: "{label}: not a retryable error",
    Verdict.STOP: "{label}: stop",
    Verdict.POLL: "{label}: poll, do not resubmit",
}


def _check_rules(rules: Any) -> Tuple[Rule, ...]:
    if not isinstance(rules, (list, tuple)):
        raise ConfigurationError(f"rules must be a sequence of Rule, got {type(rules).__name__}")
    checked = []
    for row in rules:
        if isinstance(row, Rule):
            checked.append(row)
        elif isinstance(row, (list, tuple)) and 3 <= len(row) <= 4:
            checked.append(Rule(*row))
        else:
            raise ConfigurationError(
                f"rules: each row must be a Rule or (status, code, verdict[, wait]), got {row!r}"
            )
    return tuple(checked)


def _check_jitter(value: Any) -> Tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigurationError(f"jitter must be a (low, high) pair, got {value!r}")
    low, high = (check_seconds(bound, "jitter") for bound in value)
    accepted = "a (low, high) pair with 0 <= low <= high <= 1.0 and high > 0"
    if low > high:
        raise ConfigurationError(f"jitter range is inverted: jitter must be {accepted}, got {value!r}")
    if not 0 < high <= 1.0:
        # At most 1.0: jitter only ever shortens a wait, so backoff_max stays a real ceiling.
        raise ConfigurationError(f"jitter must be {accepted}, got {value!r}")
    return (low, high)


#: The policy used when none is given.
DEFAULT_POLICY = Policy()
