"""Machine-readable benchmark results: ``benchmarks/results/<name>.json``, stamped.

Every figure the docs state comes from one of these files (``benchmarks/render.py``
writes the pages' marked blocks from them, and ``tests/test_docs_figures.py`` fails
when a block no longer matches). A file holds two things:

- ``stamp``: the command line that produced it, the Python, urllib3 and requests versions,
  the sume-urllib3 commit (and whether its package or benchmark code had local edits), the
  machine and the date;
- ``figures``: what the benchmark measured, as plain JSON. Floats are kept to 4 significant
  digits (what these runs can tell apart, and a file that stays readable); how the docs
  round them is ``render.py``'s business.

A benchmark writes its file only when asked (``--write``), and only for its full, default run
(``refuse_partial``), so a smoke run never replaces committed figures.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from argparse import ArgumentParser, Namespace
from typing import Any, Dict, List, Mapping, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS_DIR = os.path.join(HERE, "results")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The command as a user types it from the project root: ``python benchmarks/<name>.py --write``."""
    args = list(sys.argv if argv is None else argv)
    script = os.path.basename(args[0]) if args else "?"
    return " ".join(["python", "benchmarks/" + script, *args[1:]])


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _edited(script: str) -> bool:
    """True when the measured code (the package, the script, the shared helpers) differs from the commit."""
    changes = _git("status", "--porcelain", "--", "sume_urllib3", "benchmarks/_*.py", script)
    return bool(changes)


def stamp(command: str) -> Dict[str, Any]:
    """What produced a result: command, versions, commit, machine and date."""
    script = command.split()[1] if len(command.split()) > 1 else ""
    import requests
    import urllib3

    import sume_urllib3

    return {
        "command": command,
        "python": platform.python_version(),
        "urllib3": getattr(urllib3, "__version__", "?"),
        "requests": requests.__version__,
        "sume_urllib3": sume_urllib3.__version__,
        "commit": _git("rev-parse", "--short=7", "HEAD"),
        "edited": _edited(script),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "date": datetime.date.today().isoformat(),
    }


def path(name: str) -> str:
    """Where the results called ``name`` live."""
    if not _NAME.match(name):
        raise ValueError(f"results name {name!r}: use lower-case letters, digits, '.', '_' and '-'")
    return os.path.join(RESULTS_DIR, name + ".json")


def refuse_partial(parser: ArgumentParser, args: Namespace, *names: str) -> None:
    """Exit with a usage error when ``--write`` comes with any of ``names`` off its default."""
    changed = [name for name in names if getattr(args, name) != parser.get_default(name)]
    if args.write and changed:
        changed = ["--" + name.replace("_", "-") for name in changed]
        parser.error(f"--write records the full, default run: drop {', '.join(changed)}")


def _rounded(value: Any) -> Any:
    """``value`` with every float to 4 significant digits (ints, booleans and text as they are)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, Mapping):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def write(name: str, figures: Mapping[str, Any], command: Optional[str] = None) -> str:
    """Write ``figures`` (floats to 4 significant digits) with their stamp to ``results/<name>.json``."""
    target = path(name)
    document = {"stamp": stamp(command or command_line()), "figures": _rounded(figures)}
    text = json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(f"wrote {os.path.relpath(target, ROOT)}")
    return target


def load(name: str) -> Dict[str, Any]:
    """The results called ``name``: ``{"stamp": ..., "figures": ...}``."""
    with open(path(name), encoding="utf-8") as f:
        document: Dict[str, Any] = json.load(f)
    return document


def names() -> List[str]:
    """Every committed results name, sorted."""
    if not os.path.isdir(RESULTS_DIR):
        return []
    return sorted(f[: -len(".json")] for f in os.listdir(RESULTS_DIR) if f.endswith(".json"))
