"""Switch retry sleeping off and record the waits instead."""

from __future__ import annotations

import contextlib
from typing import Iterator

from .._sleeping import SleepRecorder, install_recorder


@contextlib.contextmanager
def no_sleep() -> Iterator[SleepRecorder]:
    """Within this block, retries record their waits instead of sleeping.

    Time appears to pass by the recorded waits, so deadlines still behave as in
    production: a test can assert "waited 1.0 s then 2.3 s, then gave up at the
    deadline" instantly. Process-wide, restored on exit: one virtual clock for every thread,
    so the waits of threads retrying at once add up, and count against each one's deadline.
    """
    recorder = SleepRecorder()
    previous = install_recorder(recorder)
    try:
        yield recorder
    finally:
        install_recorder(previous)
