"""The status table the pacing guide shows: ``python -m sume_urllib3 status`` while a herd runs.

Twelve threads send POSTs for four seconds through sessions sharing one ``HostFleet`` (a file in
a temporary directory, a retry budget) to a loopback token bucket of 5/s, burst 5, that answers
over-quota calls with 429 and ``Retry-After`` (``_quota_servers.TokenBucket``, "retry-after"):
eight threads with the session's API key, and four with a tenant's key to a second such server. Two seconds
in, the script reads the file as ``status`` does (``SUME_API_KEY`` being the session's key, so
that key's row names its origin; the tenant's key is only a hash) and writes:

- ``benchmarks/status-capture.json``: the fleet's description and the rows, as read;
- ``benchmarks/status-capture.txt``: the terminal capture the guide includes, rendered from them.

Run: ``python benchmarks/status_capture.py`` (about five seconds); ``--render`` writes the text
again from the JSON alone (``tests/test_status.py`` checks the two agree, so the capture keeps
the renderer's current format).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _quota_servers import QuotaServer, TokenBucket  # noqa: E402

from sume_urllib3 import Policy, SumeSession  # noqa: E402
from sume_urllib3.pacing import HostFleet, RetryBudget  # noqa: E402
from sume_urllib3.pacing.status import KeyStatus, read_status, render_table  # noqa: E402

CAPTURE_JSON = os.path.join(HERE, "status-capture.json")
CAPTURE_TEXT = os.path.join(HERE, "status-capture.txt")
KEY, TENANT = "sk_test_capture_0123456789abcdef", "sk_test_tenant_0123456789abcdef"
COMMAND = "$ python -m sume_urllib3 status"


def render(document: Dict[str, Any]) -> str:
    """The capture: the command, the fleet and the time it names, and the table of the rows."""
    rows = [KeyStatus(**row) for row in document["keys"]]
    return f"{COMMAND}\n{document['fleet']}, {document['time']}\n" + render_table(rows)


def capture() -> Dict[str, Any]:
    """Run the herd and read the fleet's file halfway through."""
    budget = RetryBudget()
    quota, tenants = TokenBucket(5, 5, "retry-after"), TokenBucket(5, 5, "retry-after")
    with tempfile.TemporaryDirectory() as directory, QuotaServer(quota) as server, \
            QuotaServer(tenants) as other:
        path = os.path.join(directory, "shop.fleet")
        fleet = HostFleet(path, retry_budget=budget)
        stop = time.monotonic() + 4.0

        def send(api_key: str, url: str) -> None:
            with SumeSession(api_key, base_url=url + "/v1", fleet=fleet, policy=Policy(max_elapsed=10),
                             raise_on_give_up=False) as session:
                while time.monotonic() < stop:
                    session.post("/jobs", json={})

        threads = [threading.Thread(target=send, args=(KEY, server.url) if n < 8 else (TENANT, other.url))
                   for n in range(12)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)
        reader = HostFleet(path, retry_budget=budget)
        rows: List[KeyStatus] = read_status(reader, base_url=server.url + "/v1", api_key=KEY)
        when = time.strftime("%H:%M:%S")
        for thread in threads:
            thread.join()
    # The path of a run's temporary directory says nothing: the default path's shape instead.
    fleet_text = repr(reader).replace(path, "/run/user/1000/sume_urllib3/shop-5c1f0e9a7d21.fleet")
    return {"fleet": fleet_text, "time": when, "keys": [row._asdict() for row in rows]}


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="write the text from the JSON only")
    args = parser.parse_args(argv)
    if args.render:
        with open(CAPTURE_JSON, encoding="utf-8") as f:
            document = json.load(f)
    else:
        document = capture()
        with open(CAPTURE_JSON, "w", encoding="utf-8") as f:
            f.write(json.dumps(document, indent=1, sort_keys=True) + "\n")
    with open(CAPTURE_TEXT, "w", encoding="utf-8") as f:
        f.write(render(document))
    print(render(document), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
