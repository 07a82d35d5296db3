"""SumeSession: a requests.Session configured for the Sume API."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union
from urllib.parse import urlsplit

import requests
from requests.utils import default_user_agent

from ._adapter import SumeAdapter
from ._budget import RetryBudget
from ._errors import ConfigurationError
from ._logging import LoggingObserver
from ._metrics import SumeMetrics
from ._observers import dispatch_outcome, observer_tuple
from ._policy import Policy, RandomSource
from ._sleeping import now as _sleeping_now
from ._state import LogicalRequest, current_logical
from ._version import __version__

DEFAULT_BASE_URL = "https://api.sume.com/v1"
AUTH_HEADERS = {"x-api-key": "x-api-key", "bearer": "Authorization"}
Timeout = Union[float, Tuple[float, float]]
_ABSOLUTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class _DefaultBudget:
    """Marker for "a fresh default RetryBudget per session"."""

    def __repr__(self) -> str:
        return "<default>"


DEFAULT_BUDGET: Any = _DefaultBudget()


class SumeSession(requests.Session):
    """A ``requests.Session`` whose every call follows the Sume retry policy.

    ``api_key`` and ``base_url`` default to ``SUME_API_KEY`` and ``SUME_API_BASE_URL``.
    A URL without a scheme is appended to the base URL (``"/jobs"`` becomes
    ``https://api.sume.com/v1/jobs``); absolute URLs pass through. Every response
    carries ``response.sume``; ``session.metrics`` counts outcomes.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        *,
        base_url: Optional[str] = None,
        auth_header: str = "x-api-key",
        policy: Optional[Policy] = None,
        timeout: Optional[Timeout] = (5, 60),
        raise_on_give_up: bool = True,
        observers: Iterable[object] = (),
        retry_budget: Any = DEFAULT_BUDGET,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
    ) -> None:
        super().__init__()
        if api_key is None or api_key == "":  # os.environ.get("SUME_API_KEY", "") means unset too
            api_key = os.environ.get("SUME_API_KEY") or None
        self._api_key = check_api_key(api_key)
        self.base_url = check_base_url(base_url or os.environ.get("SUME_API_BASE_URL") or DEFAULT_BASE_URL)
        self.auth_header = check_auth_header(auth_header)
        self.timeout = check_timeout(timeout)
        self._default_budget = retry_budget is DEFAULT_BUDGET
        if self._default_budget:
            retry_budget = RetryBudget()
        elif retry_budget is not None and not callable(getattr(retry_budget, "try_spend", None)):
            raise ConfigurationError("retry_budget must be a RetryBudget or None")
        self.retry_budget: Optional[RetryBudget] = retry_budget
        self.metrics = SumeMetrics()
        self.user_observers = observer_tuple(observers)
        self._injected = {"sleep": sleep, "clock": clock, "rng": rng}
        self.adapter = SumeAdapter(
            policy,  # validated by SumeRetry, with the same message
            raise_on_give_up=raise_on_give_up,
            observers=(self.metrics, _LOGGING, *self.user_observers),
            budget=retry_budget,
            sleep=sleep,
            clock=clock,
            rng=rng,
        )
        self.mount("https://", self.adapter)
        self.mount("http://", self.adapter)
        self.headers["User-Agent"] = f"sume-urllib3/{__version__} {default_user_agent()}"

    @property
    def policy(self) -> Policy:
        """The policy every request follows."""
        return self.adapter.policy

    @property
    def observers(self) -> Tuple[object, ...]:
        """Built-in observers (metrics, logging) followed by the caller's."""
        return self.adapter.observers

    @property
    def raise_on_give_up(self) -> bool:
        """Whether giving up raises SumeRetryError (else the last response is returned)."""
        return self.adapter.raise_on_give_up

    @property
    def has_api_key(self) -> bool:
        """Whether a key is configured (the key itself is never exposed)."""
        return self._api_key is not None

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<SumeSession base_url={self.base_url!r} auth={self.auth_header!r} api_key={key}>"

    def url_for(self, url: str) -> str:
        """Resolve ``url`` against the base URL unless it is absolute."""
        if _ABSOLUTE.match(url):  # "/jobs?next=https://..." is still relative
            return url
        return self.base_url + "/" + url.lstrip("/")

    def request(
        self, method: Union[str, bytes], url: Union[str, bytes], *args: Any, **kwargs: Any
    ) -> requests.Response:
        """Send one logical request: the deadline and the outcome span its redirects."""
        if isinstance(url, bytes):
            url = url.decode("utf-8")
        logical = LogicalRequest(start=_sleeping_now(self.adapter.retry.clock), owner=self.adapter)
        token = current_logical.set(logical)
        try:
            return super().request(method, self.url_for(url), *args, **kwargs)
        finally:
            current_logical.reset(token)
            if logical.record is not None:
                dispatch_outcome(self.observers, logical.record)

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send with the session's timeout when none is given (every hop comes through here)."""
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout
        return super().send(request, **kwargs)

    def prepare_request(self, request: requests.Request) -> requests.PreparedRequest:
        """Prepare as requests does, then add exactly one auth header (checked)."""
        prepared = super().prepare_request(request)
        headers = prepared.headers
        has_key, has_auth = "x-api-key" in headers, "Authorization" in headers
        if has_key and has_auth:
            raise ConfigurationError(
                "both x-api-key and Authorization are set on this request: send only one"
            )
        if self._api_key is not None and not (has_key or has_auth):
            if self.auth_header == "bearer":
                headers["Authorization"] = "Bearer " + self._api_key
            else:
                headers["x-api-key"] = self._api_key
        elif self._api_key is not None:
            mine = AUTH_HEADERS[self.auth_header]
            if mine not in headers:
                raise ConfigurationError(
                    f"this request sets its own {'Authorization' if has_auth else 'x-api-key'} "
                    f"header and the session sends {mine}: send only one"
                )
        if "x-api-key" in headers or "Authorization" in headers:
            _refuse_plain_http(prepared.url or "")
        return prepared

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: requests.Response) -> None:
        """Strip the key header too (requests strips only Authorization) when leaving the host."""
        previous = response.request.url if response.request is not None else None
        leaving = previous is not None and self.should_strip_auth(  # type: ignore[no-untyped-call]
            previous, prepared_request.url or ""
        )
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]
        if leaving:
            prepared_request.headers.pop("x-api-key", None)
            prepared_request.headers.pop("Authorization", None)

    def __getstate__(self) -> Dict[str, Any]:
        state = {attr: getattr(self, attr, None) for attr in self.__attrs__ if attr != "adapters"}
        config: Dict[str, Any] = {
            "api_key": self._api_key,
            "base_url": self.base_url,
            "auth_header": self.auth_header,
            "policy": self.policy,
            "timeout": self.timeout,
            "raise_on_give_up": self.raise_on_give_up,
            "observers": self.user_observers,
            **self._injected,
        }
        if not self._default_budget:
            config["retry_budget"] = self.retry_budget  # None, shared() or the caller's own
        state["_sume_config"] = config
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        config = state.pop("_sume_config")
        self.__init__(**config)  # type: ignore[misc]
        for attr, value in state.items():
            setattr(self, attr, value)


_LOGGING = LoggingObserver()


def check_auth_header(mode: Any) -> str:
    """The auth mode, lower-cased: "x-api-key" or "bearer"."""
    if not isinstance(mode, str) or mode.lower() not in AUTH_HEADERS:
        raise ConfigurationError(
            f"auth_header must be 'x-api-key' or 'bearer', got {describe_unechoed(mode)}"
        )
    return mode.lower()


def describe_unechoed(value: Any) -> str:
    """Name a bad value without echoing it: "Bearer sk_live_..." pasted here is the key."""
    return f"a str of {len(value)} characters" if isinstance(value, str) else type(value).__name__


def check_api_key(key: Any) -> Optional[str]:
    """The API key, or None; refuses anything that cannot be a header value."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise ConfigurationError(f"api_key must be a str, got {type(key).__name__}")
    if not key or not all("!" <= ch <= "~" for ch in key):
        # The message must not echo the key: it is a secret even when malformed.
        raise ConfigurationError("api_key must be non-empty visible ASCII (no spaces or newlines)")
    return key


def check_base_url(url: Any) -> str:
    """An http(s) base URL with a host and nothing secret in it, without the trailing slash."""
    if not isinstance(url, str):
        raise ConfigurationError(f"base_url must be a str, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The URL may carry credentials: name only the parts that are wrong.
        raise ConfigurationError(
            f"base_url must be an http(s) URL with a host, got scheme {parts.scheme!r}"
            f" and host {parts.hostname!r}"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigurationError("base_url must not carry credentials, a query or a fragment")
    return url.rstrip("/")


def check_timeout(timeout: Any) -> Optional[Timeout]:
    """Seconds > 0, or a (connect, read) pair of them, as requests accepts."""
    if timeout is None:
        return None
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if (isinstance(timeout, tuple) and len(values) != 2) or not all(
        not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values
    ):
        raise ConfigurationError(f"timeout must be seconds > 0 or a (connect, read) pair, got {timeout!r}")
    return timeout  # type: ignore[no-any-return]


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (where plain http is acceptable)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refuse_plain_http(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise ConfigurationError(
            f"refusing to send the API key over plain http to {parts.hostname}: use https"
        )
