"""How retries wait and read the time: a real sleep and clock, unless tests switch them.

Test mode is one switch, :data:`_virtual`, set only by ``sume_urllib3.testing.no_sleep()``
(through :func:`install_recorder`). When it holds a recorder, waits are recorded instead of
slept and every clock below adds the seconds recorded; otherwise nothing here does more
than call the clock or the sleep it is given.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Protocol


class VirtualTime(Protocol):
    """What test mode plugs in (``testing.SleepRecorder``): waits noted, seconds passed."""

    @property
    def horizon(self) -> float: ...
    def record(self, seconds: float) -> None: ...
    def slept_here(self) -> float: ...
    def catch_up(self) -> float: ...


#: The one test switch: None in production.
_virtual: Optional[VirtualTime] = None


def install_recorder(recorder: Optional[VirtualTime]) -> Optional[VirtualTime]:
    """Switch sleeping off (or back on with None); returns the previous recorder."""
    global _virtual
    previous, _virtual = _virtual, recorder
    return previous


def wait(seconds: float, sleep: Callable[[float], None]) -> None:
    """Sleep ``seconds`` with ``sleep`` (or record them in test mode)."""
    virtual = _virtual  # read once: another thread may flip the switch meanwhile
    if virtual is not None:
        virtual.record(seconds)
    elif seconds > 0:
        sleep(seconds)


def now(clock: Callable[[], float]) -> float:
    """``clock()``, plus in test mode the seconds this thread recorded, so deadlines hold."""
    virtual = _virtual
    return clock() if virtual is None else clock() + virtual.slept_here()


def virtual_offset() -> float:
    """Seconds the shared clock is ahead of real time: 0 outside test mode."""
    virtual = _virtual
    return 0.0 if virtual is None else virtual.catch_up()


def virtual_horizon() -> float:
    """What :func:`virtual_offset` reads now, without moving this thread's time: for stamping an
    event whose age is told later (0 outside test mode)."""
    virtual = _virtual
    return 0.0 if virtual is None else virtual.horizon


def default_sleep(seconds: float) -> None:
    """time.sleep looked up at call time, so monkeypatching time.sleep still works."""
    time.sleep(seconds)
