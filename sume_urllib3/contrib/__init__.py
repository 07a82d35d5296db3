"""Optional integrations, each needing the extra of its name (``pip install 'sume-urllib3[redis]'``)."""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def needs_extra(module: str, what: str) -> Iterator[None]:
    """Around an integration's imports: one that fails names ``what`` and the extra that installs it."""
    try:
        yield
    except ImportError as exc:
        extra = module.rpartition(".")[2]
        raise ImportError(f"{module} needs {what}: pip install 'sume-urllib3[{extra}]'") from exc
