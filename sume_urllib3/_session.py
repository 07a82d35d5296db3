"""SumeSession: a requests.Session configured for the Sume API."""

from __future__ import annotations

import functools
import traceback
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Union, cast
from urllib.parse import urlsplit

import requests
from requests.adapters import DEFAULT_POOLBLOCK, DEFAULT_POOLSIZE, BaseAdapter
from requests.hooks import dispatch_hook
from requests.utils import default_user_agent, select_proxy

from ._adapter import DEFAULT_FLEET, Default, SumeAdapter
from ._config import AUTH_HEADERS, check_api_key, check_auth_header, check_base_url, setting
from ._deadline import TimeoutSpec, check_timeout
from ._environment import EnvironmentSession
from ._errors import ConfigurationError
from ._jobs import Jobs
from ._policy import Policy
from ._redact import redact_error, secrets_of
from ._redirects import left_behind, strip
from ._request import RequestContext, current
from ._util import RandomSource, is_loopback, origin, plain_http_refusal
from ._version import __version__
from .observe import LoggingObserver, Observers, SumeMetrics, SumeObserver, in_own_context
from .pacing._fleet import Fleet, LocalFleet, RetryBudget
from .pacing._signals import key_ids, origin_name, sent_key

if TYPE_CHECKING:
    from http.cookiejar import CookieJar
    from typing import TypedDict

    from typing_extensions import Unpack  # mypy's own: never imported at run time

    _Url = Union[str, bytes]
    _Auth = Union[Tuple[str, str], Callable[[requests.PreparedRequest], requests.PreparedRequest], None]

    class _Sent(TypedDict, total=False):
        # requests' keyword arguments typed as requests types them (its inline types and types-requests
        # alike; ``timeout`` also urllib3's ``Timeout``), bodies and queries as Any.
        headers: Optional[Mapping[str, Union[str, bytes, None]]]
        cookies: Union[CookieJar, Mapping[str, str], None]
        files: Any
        auth: _Auth
        timeout: TimeoutSpec
        allow_redirects: bool
        proxies: Optional[Mapping[str, str]]
        hooks: Optional[Mapping[str, Union[Iterable[Callable[..., Any]], Callable[..., Any]]]]
        stream: Optional[bool]
        verify: Union[bool, str, None]
        cert: Union[str, Tuple[str, str], None]

    class _Payload(_Sent, total=False):  # request()'s, beside its own policy=
        params: Any
        data: Any
        json: Any

    class _Verb(_Sent, total=False):  # the verbs' own, beside their positional arguments
        policy: Optional[Policy]

    class _GetOptions(_Verb, total=False):
        data: Any
        json: Any

    class _PostOptions(_Verb, total=False):
        params: Any

    class _PutOptions(_PostOptions, total=False):
        json: Any

    class _Options(_Payload, _Verb, total=False):  # options(), head(), delete()
        pass


__all__ = ["DEFAULT_BASE_URL", "SumeSession"]

DEFAULT_BASE_URL = "https://api.sume.com/v1"


#: The ``retry_budget=`` default: a new RetryBudget per session.
DEFAULT_BUDGET: Any = Default()


def _no_auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
    """Stands in for netrc on the API's own origin: the session sends the key itself."""
    return request


class SumeSession(EnvironmentSession):
    """A ``requests.Session`` whose every call follows the Sume retry policy.

    A URL without a scheme is appended to the base URL (``"/jobs"`` becomes
    ``https://api.sume.com/v1/jobs``); absolute URLs pass through, and the API key goes
    only to the base URL's origin. Every response carries ``response.sume`` (read it
    typed with :func:`sume_record`); ``session.metrics`` counts outcomes. Any request
    method takes ``policy=`` to use another :class:`Policy` for that call alone
    (``session.post("/jobs", json=..., policy=session.policy.replace(max_elapsed=10))``).

    :param api_key: the Sume API key; default ``SUME_API_KEY``. Never logged or shown.
    :param base_url: default ``SUME_API_BASE_URL``, else ``https://api.sume.com/v1``.
    :param auth_header: ``"x-api-key"`` (default) or ``"bearer"`` (``Authorization``).
    :param policy: the :class:`Policy` every request follows (default ``Policy()``).
    :param timeout: the timeout of a call that gives none, in any form requests takes:
        seconds, ``(connect, read)`` (None in a place means no limit there), or a
        urllib3 ``Timeout``; default ``(5, 60)``. Each attempt's timeouts are also capped
        by what is left of ``policy.max_elapsed``. A call's own ``timeout=None`` means
        this default (requests cannot tell it from no argument); pass ``(5, None)`` for
        a read without limit.
    :param raise_on_give_up: raise :class:`SumeRetryError` when the policy gives up
        (default), else return the last response.
    :param observers: objects with ``on_retry``/``on_outcome`` hooks, after the
        built-in metrics and logging.
    :param retry_budget: a :class:`RetryBudget` shared by this session's threads
        (default: a new one per session), or None for no budget.
    :param fleet: the :class:`Fleet` that paces every attempt (cooldowns after a
        Retry-After, the server's pace, a configured ``rate``): by default the
        process-wide ``LocalFleet.default()``, where every session sending one API key (a
        call's own key, a tenant's, is paced as that key) to one origin paces together (a
        session with an injected ``clock`` gets a fleet of its own on that clock);
        ``LocalFleet(rate="10/min")`` or ``contrib.redis.RedisFleet(...)`` to configure
        or share it across processes; None for no pacing.
    :param metrics: the :class:`SumeMetrics` to count into (default: a new one), so
        several sessions can share one.
    :param sleep: how to wait (default ``time.sleep``); :param clock: a monotonic clock;
        :param rng: the jitter source. All three are for tests.
    :param pool_connections: how many hosts' connection pools to keep (requests' default, 10).
    :param pool_maxsize: connections kept per host (default 10): give it the size of the
        thread pool that shares this session, so no thread opens a connection it cannot keep.
    :param pool_block: wait for a free connection rather than open one past ``pool_maxsize``
        (default False).
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        *,
        base_url: Optional[str] = None,
        auth_header: str = "x-api-key",
        policy: Optional[Policy] = None,
        timeout: TimeoutSpec = (5, 60),
        raise_on_give_up: bool = True,
        observers: Iterable[SumeObserver] = (),
        retry_budget: Optional[RetryBudget] = DEFAULT_BUDGET,
        fleet: Optional[Fleet] = DEFAULT_FLEET,
        metrics: Optional[SumeMetrics] = None,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        rng: RandomSource = None,
        pool_connections: int = DEFAULT_POOLSIZE,
        pool_maxsize: int = DEFAULT_POOLSIZE,
        pool_block: bool = DEFAULT_POOLBLOCK,
    ) -> None:
        super().__init__()
        # None or "" reads the variable (os.environ.get("SUME_API_KEY", "") means unset too); a
        # bad variable is refused under its own name.
        self._api_key = setting(api_key, "SUME_API_KEY", check_api_key)
        self.base_url = setting(base_url, "SUME_API_BASE_URL", check_base_url, DEFAULT_BASE_URL)
        self._prefix = self.base_url + "/"
        self._origin = origin(self.base_url)
        self._base_refusal = plain_http_refusal(self.base_url)
        self.auth_header = check_auth_header(auth_header)
        self._auth_name = AUTH_HEADERS[self.auth_header]
        self._bearer = None if self._api_key is None else "Bearer " + self._api_key
        self._auth_value = self._bearer if self.auth_header == "bearer" else self._api_key
        self._default_budget = retry_budget is DEFAULT_BUDGET
        if self._default_budget:
            retry_budget = RetryBudget()
        self._default_fleet = fleet is DEFAULT_FLEET
        if self._default_fleet and clock is not None:
            # Paced on the session's own clock: a fleet on real time would hold requests
            # that a test's virtual clock has long let through.
            fleet = LocalFleet(clock=clock, rng=rng)
        # The fleet entry of this session's own key at its base origin, hashed once here;
        # a call that sends another key (a tenant's) is paced under that key's entry.
        self._origin_name = origin_name(self.base_url)
        self._key_id = key_ids(self._origin_name, self._api_key)
        if metrics is not None and not isinstance(metrics, SumeMetrics):
            raise ConfigurationError(f"metrics must be a SumeMetrics, got {type(metrics).__name__}")
        self.metrics = metrics if metrics is not None else SumeMetrics()
        self.user_observers = Observers(observers)
        self._injected: Dict[str, Any] = {"sleep": sleep, "clock": clock, "rng": rng}
        self._pool: Dict[str, Any] = {
            "pool_connections": pool_connections,
            "pool_maxsize": pool_maxsize,
            "pool_block": pool_block,
        }
        self.adapter = SumeAdapter(
            policy,  # validated by SumeRetry, with the same message
            raise_on_give_up=raise_on_give_up,
            observers=(self.metrics, _LOGGING, *self.user_observers),
            retry_budget=retry_budget,
            timeout=check_timeout(timeout),
            fleet=fleet,
            **self._injected,
            **self._pool,
        )
        self.mount("https://", self.adapter)
        self.mount("http://", self.adapter)
        self.headers["User-Agent"] = f"sume-urllib3/{__version__} {default_user_agent()}"

    @property
    def policy(self) -> Policy:
        """The policy every request follows."""
        return self.adapter.policy

    @property
    def observers(self) -> Observers:
        """Built-in observers (metrics, logging) followed by the caller's."""
        return self.adapter.observers

    @property
    def raise_on_give_up(self) -> bool:
        """Whether giving up raises SumeRetryError (else the last response is returned)."""
        return self.adapter.raise_on_give_up

    @property
    def retry_budget(self) -> Optional[RetryBudget]:
        """The retry budget this session's retries spend from, if any."""
        return self.adapter.retry_budget

    @property
    def fleet(self) -> Optional[Fleet]:
        """The fleet that paces this session's requests (None: no pacing)."""
        return self.adapter.fleet

    @functools.cached_property
    def jobs(self) -> Jobs:
        """Poll jobs for the caller: ``get``, ``wait``, ``result``, ``cancel``."""
        return Jobs(self)

    @property
    def timeout(self) -> TimeoutSpec:
        """The timeout of a call that gives none."""
        return self.adapter.timeout

    @property
    def has_api_key(self) -> bool:
        """Whether a key is configured (the key itself is never exposed)."""
        return self._api_key is not None

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<SumeSession base_url={self.base_url!r} auth={self.auth_header!r} api_key={key}>"

    def url_for(self, url: str) -> str:
        """Resolve ``url`` against the base URL unless it is absolute."""
        head, sep, _ = url.partition("://")  # "/jobs?next=https://..." stays relative
        absolute = bool(sep) and head[:1].isalpha() and all(ch.isalnum() or ch in "+.-" for ch in head)
        return url if absolute else self._prefix + url.lstrip("/")

    def request(
        self, method: _Url, url: _Url, *args: Any, policy: Optional[Policy] = None, **kwargs: Unpack[_Payload]
    ) -> requests.Response:
        """Send one logical request, with requests' arguments: the deadline and the outcome span
        its redirects. ``policy`` replaces the session's policy for this call alone.
        """
        if policy is not None and not isinstance(policy, Policy):
            raise ConfigurationError(f"policy must be a Policy, got {type(policy).__name__}")
        sent = cast("Dict[str, Any]", kwargs)  # handed on as given: requests checks them
        for adapter in self.adapters.values():
            if isinstance(adapter, SumeAdapter) and adapter.retry.observers.starts:
                # Told to an observer's on_start (by the SumeAdapter serving it): its own context.
                return in_own_context(self._request, method, url, args, policy, sent)
        return self._request(method, url, args, policy, sent)

    def _request(
        self, method: _Url, url: _Url, args: Tuple[Any, ...], policy: Optional[Policy], kwargs: Dict[str, Any]
    ) -> requests.Response:
        adapter = self.adapter
        context = RequestContext(clock=adapter.retry.clock, policy=policy, owned=True, fleet=adapter.fleet)
        token = current.set(context)
        try:
            return super().request(method, url, *args, **kwargs)  # type: ignore[arg-type,unused-ignore]
        except Exception as exc:
            # Raised before the adapter could redact it (requests' InvalidHeader, InvalidURL
            # and the like echo what they refused): the secrets this call carried come out.
            redact_error(exc, secrets_of(_text(url), kwargs.get("headers"), self.headers, self._api_key))
            if context.record is not None and getattr(exc, "sume", None) is None and not _from_a_hook(exc):
                # Raised by requests after a hop ended (too many redirects, a bad Location): the
                # request did not end as that hop's record says. A response hook's exception
                # (raise_for_status) is the caller's own reading of the response recorded.
                context.finish(None, None, context.now(), error=type(exc).__name__)
                setattr(exc, "sume", context.record)
            raise
        finally:
            current.reset(token)
            # Told once: an extra SumeAdapter mounted here adds its own observers.
            observers = adapter.retry.observers
            if context.adapter not in (None, adapter):
                observers = Observers({id(o): o for o in (*observers, *context.adapter.observers)}.values())
            if context.stream is not None:
                # The request's record: requests may have raised after the body's hop (see above).
                context.stream.report_with(lambda body: observers.outcome(context.record or body))
            elif context.record is not None:
                observers.outcome(context.record)

    if TYPE_CHECKING:  # requests' own verbs run; these add policy= to requests' types

        def get(self, url: _Url, params: Any = None, **kwargs: Unpack[_GetOptions]) -> requests.Response: ...
        def options(self, url: _Url, **kwargs: Unpack[_Options]) -> requests.Response: ...
        def head(self, url: _Url, **kwargs: Unpack[_Options]) -> requests.Response: ...
        def post(
            self, url: _Url, data: Any = None, json: Any = None, **kwargs: Unpack[_PostOptions]
        ) -> requests.Response: ...
        def put(self, url: _Url, data: Any = None, **kwargs: Unpack[_PutOptions]) -> requests.Response: ...
        def patch(self, url: _Url, data: Any = None, **kwargs: Unpack[_PutOptions]) -> requests.Response: ...
        def delete(self, url: _Url, **kwargs: Unpack[_Options]) -> requests.Response: ...

    def prepare_request(self, request: requests.Request) -> requests.PreparedRequest:
        """Resolve the URL against the base, prepare as requests does, then add the key.

        The key goes only to the base URL's origin, in exactly one auth header (checked).
        """
        if isinstance(request.url, bytes):
            request.url = request.url.decode("utf-8")
        if isinstance(request.url, str):
            request.url = self.url_for(request.url)
        url = request.url if isinstance(request.url, str) else ""
        # On the base URL's origin: the only one the key goes to.
        ours = url.startswith(self._prefix) or url == self.base_url or origin(url) == self._origin
        if ours and self._api_key is not None and request.auth is None and self.auth is None:
            request.auth = _no_auth  # the key is ours to send: no ~/.netrc credentials here
        context = current.get()
        if context is not None and (not context.owned or context.hops):
            context = None  # only a session's request, before its first hop, is paced from here
        if not ours and context is not None:
            # The fleet paces this API key; another host's 429 or Retry-After (a storage
            # upload's) must not hold the key's requests to the API.
            context.leave_fleet()
        prepared = super().prepare_request(request)
        headers = prepared.headers
        has_key, has_auth = "x-api-key" in headers, "Authorization" in headers
        if not ours:
            self._strip_key(headers)
            url = prepared.url or ""
            refusal = plain_http_refusal(url) if url.startswith("http:") and _carries_key(headers) else None
        elif has_key and has_auth:
            raise ConfigurationError(
                "both x-api-key and Authorization are set on this request: send only one"
            )
        else:
            if self._auth_value is not None and not (has_key or has_auth):
                headers[self._auth_name] = self._auth_value
            elif self._auth_value is not None and self._auth_name not in headers:
                raise ConfigurationError(
                    f"this request sets its own {'Authorization' if has_auth else 'x-api-key'} "
                    f"header and the session sends {self._auth_name}: send only one"
                )
            # Decided once for the base URL: the key never crosses plain http off loopback.
            refusal = self._base_refusal if (has_key or has_auth or self._auth_value) else None
            if context is not None:
                # Paced under the key this request actually sends (the session's, or one the
                # call or session.headers set: a tenant's) at this origin.
                context.key_id = (
                    self._key_id
                    if self._auth_value is not None and not (has_key or has_auth)
                    else key_ids(self._origin_name, sent_key(headers))
                )
        if refusal:
            raise ConfigurationError(refusal)
        return prepared

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send as requests does; a key over plain http goes through no proxy but a loopback one
        (such a proxy reads it in clear). Whatever adapter sends, a call without a timeout has
        the session's."""
        if not isinstance(request, requests.PreparedRequest):  # typed so, but not always passed so
            return super().send(request, **kwargs)  # type: ignore[unreachable]  # requests refuses it
        url = request.url or ""
        if kwargs.get("timeout") is None and not isinstance(self.get_adapter(url), SumeAdapter):
            kwargs["timeout"] = self.timeout  # a SumeAdapter applies it (or its own) itself
        proxies = kwargs.get("proxies")  # merged from the environment: {} without any
        if proxies and url.startswith("http:") and _carries_key(request.headers):
            host = _proxy_host(select_proxy(url, proxies))
            if host is not None and not is_loopback(host):
                raise ConfigurationError(
                    f"refusing to send the API key over plain http through the proxy {host}: use "
                    "https, or name the host in NO_PROXY"
                )
        return super().send(request, **kwargs)

    def _strip_key(self, headers: Any) -> None:
        """Remove the API key from a request to another origin (a presigned upload, say).

        ``x-api-key`` is Sume's header, so it never goes elsewhere; ``Authorization`` goes
        only when this call set it itself (not the session's key, not ``session.headers``).
        """
        headers.pop("x-api-key", None)
        auth = headers.get("Authorization")
        if auth is not None and auth in (self._bearer, self.headers.get("Authorization")):
            del headers["Authorization"]

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: requests.Response) -> None:
        """Leave behind what the redirect's hop must not carry (``_redirects.left_behind``), also
        where a caller mounted another adapter than a SumeAdapter over the API."""
        previous = response.request.url if response.request is not None else None
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call,unused-ignore]
        if previous is not None:
            new = prepared_request
            strip(new.headers, left_behind(previous, new.url or "", new.method))

    def mount(self, prefix: Union[str, bytes], adapter: BaseAdapter) -> None:
        """Mount ``adapter`` for URLs starting with ``prefix``, as requests does.

        A :class:`SumeAdapter` mounted here (to size a pool, say) serves with this session's
        policy, timeout, fleet, observers, retry budget and ``raise_on_give_up``; only its
        pool arguments are its own. Any other adapter over the base URL, or below it, warns:
        the calls it serves lose the policy, the Idempotency-Key, ``response.sume`` and the
        metrics (the session's timeout they keep).
        """
        own = getattr(self, "adapter", None)  # None while requests mounts its defaults
        mounted, base = _text(prefix).lower(), getattr(self, "base_url", "").lower().rstrip("/")
        # Serving some of the API's calls: the prefix covers the base URL, or lies below it.
        serves_api = base.startswith(mounted) or mounted.startswith(base + "/")
        if own is not None and isinstance(adapter, SumeAdapter) and adapter is not own:
            adapter.serve_as(own)
        elif own is not None and not isinstance(adapter, SumeAdapter) and serves_api:
            warnings.warn(
                f"{type(adapter).__name__} mounted on {prefix!r} is not a SumeAdapter: calls to "
                f"{self._origin} through it are not retried by the Sume policy, POSTs get no "
                "Idempotency-Key, responses carry no .sume record and metrics do not count them "
                "(compose the other library's adapter with SumeAdapter instead; see the docs)",
                UserWarning,
                stacklevel=2,
            )
        super().mount(prefix, adapter)  # type: ignore[arg-type,unused-ignore]  # bytes too, as requests

    def close(self) -> None:
        """Close every mounted adapter once (the default one is mounted twice)."""
        for adapter in {id(adapter): adapter for adapter in self.adapters.values()}.values():
            adapter.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = {attr: getattr(self, attr, None) for attr in self.__attrs__ if attr != "adapters"}
        state["_sume_mounts"] = [(p, a) for p, a in self.adapters.items() if a is not self.adapter]
        config: Dict[str, Any] = {
            "api_key": self._api_key,
            "base_url": self.base_url,
            "auth_header": self.auth_header,
            "policy": self.policy,
            "timeout": self.timeout,
            "raise_on_give_up": self.raise_on_give_up,
            "observers": tuple(self.user_observers),
            **self._injected,
            **self._pool,
        }
        if not self._default_budget:
            config["retry_budget"] = self.retry_budget  # None, shared() or the caller's own
        if not self._default_fleet:
            config["fleet"] = self.fleet
        state["_sume_config"] = config
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        config = state.pop("_sume_config")
        mounts = state.pop("_sume_mounts", [])
        # The session is rebuilt from what SumeSession was given, whatever a subclass's own
        # __init__ takes; a subclass keeps its own attributes by naming them in __attrs__.
        SumeSession.__init__(self, **config)
        for attr, value in state.items():
            setattr(self, attr, value)
        for prefix, adapter in mounts:  # as requests.Session keeps its mounts
            self.mount(prefix, adapter)


_LOGGING = LoggingObserver()


def _carries_key(headers: Mapping[str, Any]) -> bool:
    return "x-api-key" in headers or "Authorization" in headers


def _text(value: Union[str, bytes]) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _from_a_hook(exc: BaseException) -> bool:
    """Whether a response hook raised ``exc`` (requests' ``dispatch_hook`` is in its traceback)."""
    return any(frame.f_code is dispatch_hook.__code__ for frame, _ in traceback.walk_tb(exc.__traceback__))


def _proxy_host(proxy: Optional[str]) -> Optional[str]:
    """The host of a proxy URL as requests reads it (``host:port`` is ``http://host:port``)."""
    if not proxy:
        return None
    try:
        return urlsplit(proxy if "://" in proxy else "http://" + proxy).hostname
    except ValueError:  # requests refuses it itself, with its own error
        return None
