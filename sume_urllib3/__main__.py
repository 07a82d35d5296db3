"""Entry point for ``python -m sume_urllib3``."""

from __future__ import annotations

from ._cli import main

raise SystemExit(main())
