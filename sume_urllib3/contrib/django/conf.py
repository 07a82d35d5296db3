"""Read ``settings.SUME`` and turn it into session arguments, or into problems to report.

This module is the only reader of the setting: the system checks report its problems and
``get_session()`` refuses to build from settings that have errors, so both always agree.
Values are validated by the code that uses them (``Policy`` and ``SumeSession``'s own
helpers); this module only says which setting a failure belongs to.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

from ... import Policy, SumeSession
from ..._config import check_api_key, check_auth_header, check_base_url, check_flag
from ..._deadline import check_timeout, timeout_limits
from ..._session import DEFAULT_BASE_URL
from ..._util import plain_http_refusal
from . import fleet, observers

#: The name of the Django setting: one dict.
SUME_SETTING = "SUME"
#: The tag of the system checks (``manage.py check --tag sume_urllib3``).
CHECK_TAG = "sume_urllib3"

#: Keys that are ``Policy`` fields, upper-cased (derived, so a new field is a new key).
POLICY_KEYS: Tuple[str, ...] = tuple(field.name.upper() for field in dataclasses.fields(Policy))

ENV_KEY = "SUME_API_KEY"
ENV_BASE_URL = "SUME_API_BASE_URL"
_DEFAULT_TIMEOUT = inspect.signature(SumeSession.__init__).parameters["timeout"].default
_POLICY_DEFAULTS = {field.name: field.default for field in dataclasses.fields(Policy)}
# Shorter strings are not plausible keys, and masking them would garble whole messages.
_MIN_SECRET = 4


def _problem(code: str, msg: str, hint: str) -> checks.CheckMessage:
    """One thing wrong (``E...``: a ``checks.Error``) or suspicious (``W...``) with ``settings.SUME``,
    as the system check ``sume_urllib3.{code}``."""
    kind = checks.Error if code.startswith("E") else checks.Warning
    return kind(msg, hint=hint, id=f"{CHECK_TAG}.{code}")


@dataclass(frozen=True)
class SumeSettings:
    """``settings.SUME`` resolved: session arguments, the policy, and any problems.

    ``session_kwargs`` holds only the keys that were set, so ``SumeSession`` applies its
    own defaults (and the ``SUME_API_KEY`` / ``SUME_API_BASE_URL`` environment variables)
    to the rest. ``policy`` is None when a policy value is invalid.
    """

    session_kwargs: Mapping[str, Any]
    policy: Optional[Policy]
    retry_budget: bool
    problems: Tuple[checks.CheckMessage, ...]

    @property
    def errors(self) -> Tuple[checks.CheckMessage, ...]:
        """The problems that make the settings unusable."""
        return tuple(problem for problem in self.problems if problem.is_serious())


def read() -> SumeSettings:
    """Read and resolve ``settings.SUME`` and the environment as they are now."""
    return resolve(getattr(settings, SUME_SETTING, {}), os.environ)


def resolve(raw: Any, environ: Mapping[str, str]) -> SumeSettings:
    """Resolve a ``SUME`` value (``{}`` when unset) against ``environ``; never raises."""
    if not isinstance(raw, Mapping):
        message = f"{SUME_SETTING} must be a dict, got {type(raw).__name__}"
        hint = f'Set {SUME_SETTING} = {{"API_KEY": ..., "MAX_RETRIES": ...}}, or remove it for the defaults.'
        return SumeSettings({}, None, True, (_problem("E001", message, hint),))
    problems: List[checks.CheckMessage] = []
    _check_keys(raw, problems)
    policy = _resolve_policy(raw, problems)
    kwargs = _resolve_session(raw, environ, problems)
    retry_budget = kwargs.pop("retry_budget", True)
    if policy is not None and ("TIMEOUT" not in raw or "timeout" in kwargs):
        _check_deadline(policy, kwargs, problems)
    # Validation messages echo the offending value, and a key pasted into the wrong setting
    # would be echoed with them. A malformed key is still a secret: a stray space or newline
    # around it must not let the rest through.
    keys = (raw.get("API_KEY"), environ.get(ENV_KEY))
    forms = {form for key in keys for form in _secret_forms(key) if len(form) >= _MIN_SECRET}
    secrets = sorted(forms, key=len, reverse=True)  # a form that holds another goes whole
    clean = tuple(type(p)(_redact(p.msg, secrets), _redact(p.hint, secrets), id=p.id) for p in problems)
    return SumeSettings(kwargs, policy, retry_budget, clean)


def _secret_forms(value: Any) -> Iterator[str]:
    """A key as a message may show it: raw and stripped, each also as ``!r`` escapes it.

    Not ``secrets_of``'s header rules: those leave out a bytearray and a key shorter than
    ``MIN_SECRET``, which a setting's message would still echo."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    if isinstance(value, str):
        for form in (value, value.strip()):
            yield form
            yield repr(form)[1:-1]


def setting_name(key: Any) -> str:
    """How messages name one key of the setting: ``SUME["MAX_RETRIES"]``."""
    return f'{SUME_SETTING}["{key}"]' if isinstance(key, str) else f"{SUME_SETTING}[{key!r}]"


def _check_keys(raw: Mapping[Any, Any], problems: List[checks.CheckMessage]) -> None:
    # An unknown key is an error, not ignored: a typo would silently keep the default.
    for key in raw:
        if key not in VALID_KEYS:
            close = difflib.get_close_matches(key.upper(), VALID_KEYS, n=1) if isinstance(key, str) else []
            hint = f"Did you mean {setting_name(close[0])}? " if close else ""
            hint += f"Valid keys: {', '.join(VALID_KEYS)}."
            problems.append(_problem("E002", f"{setting_name(key)} is not a known setting", hint))


def _resolve_policy(raw: Mapping[Any, Any], problems: List[checks.CheckMessage]) -> Optional[Policy]:
    fields = {key.lower(): raw[key] for key in POLICY_KEYS if key in raw}
    reported = len(problems)
    # One field at a time, so each failure names its own key and all are reported at once.
    for field, value in fields.items():
        try:
            Policy(**{field: value})
        except (TypeError, ValueError) as exc:
            name = setting_name(field.upper())
            default = "the default table" if field == "rules" else repr(_POLICY_DEFAULTS[field])
            hint = f"Fix {name} (Policy.{field}), or remove it to use {default}."
            problems.append(_problem("E003", f"{name}: {exc}", hint))
    if len(problems) > reported:
        return None
    try:
        return Policy(**fields)
    except (TypeError, ValueError) as exc:
        # Only a rule that ties fields together can fail here.
        hint = "Make the policy values in SUME agree with each other."
        problems.append(_problem("E003", f"{SUME_SETTING}: {exc}", hint))
        return None


def _resolve_session(
    raw: Mapping[Any, Any], environ: Mapping[str, str], problems: List[checks.CheckMessage]
) -> Dict[str, Any]:
    """Check every session key (``SESSION_FIELDS``); the keyword arguments of the keys that are set."""
    kwargs: Dict[str, Any] = {}
    given: List[str] = []
    for field in SESSION_FIELDS:
        if field.key in raw and not field.is_unset(raw[field.key]):
            source, value, passed = setting_name(field.key), raw[field.key], True
        elif field.env is not None and environ.get(field.env):
            # SumeSession reads the variable itself; it is checked here so that
            # `manage.py check` reports what get_session() would refuse.
            source, value, passed = f"the {field.env} environment variable", environ[field.env], False
        else:
            continue
        given.append(field.key)
        try:
            checked = field.check(value)
        except (TypeError, ValueError) as exc:
            text = str(exc).replace(field.arg, source, 1) if field.renames else f"{source}: {exc}"
            problems.append(_problem(field.code, text, field.hint))
            continue
        if passed:
            kwargs[field.arg] = checked
        if field.then is not None:
            field.then(checked, source, problems)
    if "API_KEY" not in given:
        key = setting_name("API_KEY")
        message = f"no Sume API key: {key} and the {ENV_KEY} environment variable are both unset"
        hint = (
            f"Set {key} (e.g. from an environment variable or a secret store) or {ENV_KEY}; "
            "without a key every call fails with 401."
        )
        problems.append(_problem("W001", message, hint))
    return kwargs


def _check_plain_http(url: str, source: str, problems: List[checks.CheckMessage]) -> None:
    if plain_http_refusal(url):
        problems.append(
            _problem(
                "E005",
                f"{source} uses plain http to {urlsplit(url).hostname}, which is not a loopback host: "
                "SumeSession refuses to send the API key unencrypted",
                "Use https://; plain http is allowed only for loopback hosts "
                "(localhost, 127.0.0.1, ::1) such as a local fake server.",
            )
        )


def _check_deadline(policy: Policy, kwargs: Mapping[str, Any], problems: List[checks.CheckMessage]) -> None:
    read_timeout = timeout_limits(kwargs.get("timeout", _DEFAULT_TIMEOUT))[1]
    if policy.max_elapsed <= read_timeout < math.inf:
        elapsed, timeout = setting_name("MAX_ELAPSED"), setting_name("TIMEOUT")
        source = timeout if "timeout" in kwargs else "the default TIMEOUT"
        message = (
            f"{elapsed} ({policy.max_elapsed:g}s) is not longer than the read timeout of one attempt "
            f"({read_timeout:g}s, {source}): an attempt that times out leaves no time for a retry"
        )
        hint = f"Raise {elapsed} well above the read timeout, or lower the read timeout in {timeout}."
        problems.append(_problem("W002", message, hint))


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


@dataclass(frozen=True)
class SessionField:
    """One key of ``SUME`` that configures the session: how it is checked and reported.

    ``check`` returns the value to pass as ``SumeSession(arg=...)`` or raises
    ``ConfigurationError``, reported under ``code`` as ``{source}: {message}`` (with ``renames``,
    as the message with ``source`` in place of the argument's name).
    A value in ``unset`` counts as absent, and then ``env`` (read by SumeSession itself)
    is checked instead. ``then`` runs further checks on a valid value.
    """

    key: str
    arg: str
    check: Callable[[Any], Any]
    hint: str
    code: str = "E004"
    env: Optional[str] = None
    unset: Tuple[Any, ...] = ()
    renames: bool = False
    then: Optional[Callable[[Any, str, List[checks.CheckMessage]], None]] = None

    def is_unset(self, value: Any) -> bool:
        """True when ``value`` means "not set" for this key (None or "" for the API key)."""
        return any(value is absent or (isinstance(value, str) and value == absent) for absent in self.unset)


#: The session keys of ``SUME``, in the order they are checked and reported.
SESSION_FIELDS: Tuple[SessionField, ...] = (
    SessionField(
        "API_KEY", "api_key", check_api_key,
        f"Set {setting_name('API_KEY')} to the key string, or remove it and set the "
        f"{ENV_KEY} environment variable.",
        env=ENV_KEY,
        # os.environ.get("SUME_API_KEY", "") with no variable means "not set", as in SumeSession.
        unset=(None, ""),
    ),
    SessionField(
        "BASE_URL", "base_url", check_base_url,
        f'Use an https URL with a host and no credentials, query or fragment, such as "{DEFAULT_BASE_URL}".',
        env=ENV_BASE_URL, unset=(None,), then=_check_plain_http,
    ),
    SessionField(
        "AUTH_HEADER", "auth_header", check_auth_header,
        'Use "x-api-key" (the default: an x-api-key header) or "bearer" (an Authorization: Bearer header).',
        code="E006", renames=True,
    ),
    SessionField(
        "TIMEOUT", "timeout",
        # Settings are often written as lists (or loaded from JSON); requests wants a tuple.
        lambda value: check_timeout(tuple(value) if isinstance(value, list) else value),
        f"Use seconds > 0 or a (connect, read) pair such as {_DEFAULT_TIMEOUT!r}; None disables the timeout.",
    ),
    SessionField(
        "RAISE_ON_GIVE_UP", "raise_on_give_up", lambda value: check_flag(value, "raise_on_give_up"),
        "Use True (raise SumeRetryError when the policy gives up) or False (return the last response).",
    ),
    SessionField(
        "RETRY_BUDGET", "retry_budget", lambda value: check_flag(value, "retry_budget"),
        "Use True (a default retry budget shared by this process's threads) or False (no retry budget).",
    ),
    SessionField(
        "OBSERVERS", "observers", observers.build_observers,
        'Use a list of dotted paths such as "sume_urllib3.contrib.prometheus.PrometheusObserver", '
        "classes (called with no arguments) or observer objects (with on_retry, on_outcome, on_start "
        "and/or on_job).",
        code="E007",
    ),
    SessionField(
        "FLEET", "fleet", fleet.build_fleet,
        'Use {"RATE": "10/min"} (this process), {"HOST": True, "RATE": "10/min"} (every process on this '
        'host), {"REDIS_URL": "redis://...", "RATE": "10/min"} '
        f"(every process on that Redis; keys: {', '.join(fleet.FLEET_KEYS)}), or None for no pacing.",
        code="E008",
    ),
)
#: Every key ``SUME`` may have: the session's, then the policy's.
VALID_KEYS: Tuple[str, ...] = tuple(field.key for field in SESSION_FIELDS) + POLICY_KEYS
