"""What a fleet holds for each API key, read without changing it (``python -m sume_urllib3 status``,
``manage.py sume_status``, the admin's pace page): each store reads its own state (its
``_snapshot``: a ``HostFleet``'s file opened read-only, a ``RedisFleet``'s keys by ``SCAN``,
``HGETALL`` and ``ZRANGE``); this module turns a state into what the table shows."""

from __future__ import annotations

import json
from operator import itemgetter
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

from .._util import columns
from . import _core
from ._fleet import describe_rate
from ._signals import fleet_key, origin_name


class KeyStatus(NamedTuple):
    """One API key's pace as its fleet holds it now (seconds). ``key``: the fleet's hash of origin and
    API key; ``origin``: named for the key :func:`read_status` was told of, else None. ``pace``:
    requests per second (None: unknown), ``configured``, ``stated`` by the server or ``learned``
    from 429s. ``retries_left`` of ``retries_room``: the retry budget (None: none). ``last_refusal``:
    ``429`` (one that measured the pace) or ``429/503`` (one with ``Retry-After``)."""

    origin: Optional[str]
    key: str
    cooldown: float
    pace: Optional[float]
    pace_source: Optional[str]
    in_flight: int
    retries_left: Optional[float]
    retries_room: Optional[float]
    last_refusal: Optional[str]
    last_refusal_ago: Optional[float]
    throttle_rounds: int


def read_status(
    fleet: Any, *, base_url: Optional[str] = None, api_key: Optional[str] = None
) -> List[KeyStatus]:
    """Every key ``fleet`` (a ``HostFleet``, ``RedisFleet`` or ``LocalFleet``) holds, sorted by key.

    ``base_url`` and ``api_key`` name the origin of the rows that are theirs (a session's). Raises
    ``OSError`` (no file), ``sqlite3.Error`` or a ``redis`` error when the store cannot be read,
    ``TypeError`` for a store that keeps nothing readable from outside.
    """
    states, now = fleet._snapshot()
    origins: Dict[str, str] = {}
    if base_url:
        origin = origin_name(base_url)
        origins = {fleet_key(api_key, origin): origin, fleet_key(None, origin): origin}
    states.sort(key=itemgetter(0))
    return [_row(kid, st, fleet._config, now, origins.get(kid)) for kid, st in states]


def _row(kid: str, st: _core.State, cfg: _core.Config, now: int, origin: Optional[str]) -> KeyStatus:
    """One key's state as the table shows it, at ``now`` (µs on the state's clock)."""
    interval, _ = _core.pace(st, cfg, now)
    source = _core.pace_source(st, cfg, interval) if interval else None
    left = room = None
    if cfg.retries is not None:
        _core.retry_wait(st, cfg.retries, now, _core.FIRST)  # decays this copy's counts to now
        room = _core.retry_room(st, cfg.retries)
        left = max(0.0, room - st.recent_retries)
    # The state keeps when a cooldown began and when a 429 last measured the pace, not every status.
    began = st.cooldown_until - st.cooldown_length if st.cooldown_length else 0
    measured = st.measured_at and st.measured_at >= began
    refusal, at = ("429", st.measured_at) if measured else ("429/503", began)
    return KeyStatus(
        origin, kid, max(0, st.cooldown_until - now) / _core.SECOND,
        _core.SECOND / interval if interval else None, source,
        sum(1 for end in st.flight.values() if end > now), left, room,
        refusal if at else None, max(0, now - at) / _core.SECOND if at else None, st.epoch,
    )


_COLUMNS = ("origin", "key", "cooldown", "pace", "in flight", "retry budget", "last 429/503")


def render_table(rows: Iterable[KeyStatus]) -> str:
    """The rows as an aligned text table, one line per key (``no keys`` for none)."""
    lines = [_COLUMNS, *(_cells(row) for row in rows)]
    return "no keys\n" if len(lines) == 1 else "".join(line + "\n" for line in columns(lines))


def _cells(row: KeyStatus) -> Tuple[str, ...]:
    """A row's cells as the table and the admin page show them."""
    pace = f"{describe_rate(row.pace)} {row.pace_source}" if row.pace else "-"
    budget = "-" if row.retries_room is None else f"{int(row.retries_left or 0)} of {row.retries_room:.0f}"
    last = "-" if row.last_refusal_ago is None else f"{row.last_refusal} {row.last_refusal_ago:.1f}s ago"
    cooldown = f"{row.cooldown:.1f}s" if row.cooldown else "-"
    return (row.origin or "?", row.key, cooldown, pace, str(row.in_flight), budget, last)


def render_json(rows: Iterable[KeyStatus]) -> str:
    """The rows as one line of JSON: ``{"keys": [{field: value}, ...]}``."""
    return json.dumps({"keys": [row._asdict() for row in rows]}, sort_keys=True) + "\n"


__all__ = ["KeyStatus", "read_status", "render_json", "render_table"]
