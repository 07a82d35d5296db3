"""What ``import sume_urllib3`` adds to ``import requests``, in fresh interpreters.

Each round starts two interpreters, alternated: one imports requests, the other requests and
then sume_urllib3; ``-X importtime`` gives each package's cumulative time. Prints the medians,
their spread (lowest and highest) and the ratio of the medians. Byte code is written first,
as an installed package has it.

    python benchmarks/import_time.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from typing import Dict, List


def cumulative(code: str) -> Dict[str, int]:
    """Microseconds each top-level import took, as ``-X importtime`` reports it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
    ).stderr
    out = {}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            out[parts[2].strip()] = int(parts[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    rounds = parser.parse_args().rounds
    cumulative("import requests, sume_urllib3")  # byte code written, caches warm
    plain: List[float] = []
    added: List[float] = []
    for _ in range(rounds):
        plain.append(cumulative("import requests")["requests"] / 1000)
        added.append(cumulative("import requests, sume_urllib3")["sume_urllib3"] / 1000)
    p, a = statistics.median(plain), statistics.median(added)
    print(f"import requests: median {p:.1f} ms ({min(plain):.1f} to {max(plain):.1f})")
    print(f"import sume_urllib3 after it: median {a:.1f} ms ({min(added):.1f} to {max(added):.1f})")
    print(f"ratio of the medians: {a / p:.2f} ({rounds} rounds, fresh interpreters alternated)")


if __name__ == "__main__":
    main()
