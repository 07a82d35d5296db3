"""Entry point for ``python -m sume_urllib3``."""

from __future__ import annotations

import os
import sys

from ._cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # `python -m sume_urllib3 demo | head`: the reader left; say nothing more, no traceback.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
raise SystemExit(code)
