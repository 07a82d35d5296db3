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
    deadline" instantly. Process-wide (every thread), restored on exit.
    """
    recorder = SleepRecorder()
    previous = install_recorder(recorder)
    try:
        yield recorder
    finally:
        install_recorder(previous)
