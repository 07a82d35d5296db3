"""What SumeRetry costs compared with urllib3's stock Retry, measured in one run.

(a) One retry decision on a 503 with a 1 KiB JSON error body: ``SumeRetry.increment``
    (bounded peek, envelope parse, policy decision, new object) against the stock
    ``Retry`` doing its own work for the same response (``is_retry``, ``increment``,
    ``get_retry_after``, ``get_backoff_time``).
(b) The success path: GET returning 200 through requests' ``HTTPAdapter`` with a
    ``SumeRetry`` against the same adapter with a stock ``Retry``, and a full
    ``SumeSession`` against a plain ``requests.Session``, on one loopback server.
    Runs are interleaved (A, B, A, B, ...) and the ratio of medians is reported, because
    the machine is shared and noisy.

Run ``python benchmarks/retry_bench.py`` (``--quick`` for fewer rounds).
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import statistics
import sys
import threading
import time
from typing import Callable, List, Tuple

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from sume_urllib3 import SumeRetry, SumeSession

BODY = json.dumps(
    {
        "error": {"code": "service_unavailable", "message": "x" * 900, "details": {}},
        "request_id": "req_0123456789",
    }
).encode()


def make_response() -> urllib3.HTTPResponse:
    return urllib3.HTTPResponse(
        body=io.BytesIO(BODY),
        headers={"Content-Type": "application/json", "Content-Length": str(len(BODY))},
        status=503,
        preload_content=False,
        decode_content=False,
    )


def time_decisions(decide: Callable[[urllib3.HTTPResponse], object], n: int) -> float:
    """Seconds per decision, over n fresh responses built outside the timed loop."""
    responses = [make_response() for _ in range(n)]
    start = time.perf_counter()
    for response in responses:
        decide(response)
    return (time.perf_counter() - start) / n


def stock_decision(retry: Retry) -> Callable[[urllib3.HTTPResponse], object]:
    def decide(response: urllib3.HTTPResponse) -> object:
        retry.is_retry("GET", response.status, bool(response.headers.get("Retry-After")))
        new = retry.increment("GET", "/jobs", response=response)
        new.get_retry_after(response)
        return new.get_backoff_time()

    return decide


def sume_decision(retry: SumeRetry) -> Callable[[urllib3.HTTPResponse], object]:
    def decide(response: urllib3.HTTPResponse) -> object:
        retry.is_retry("GET", response.status, False)
        new = retry.increment("GET", "/jobs", response=response)
        return new.get_backoff_time()

    return decide


class _OK(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:
        payload = b'{"ok":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve() -> Tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OK)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def per_request(session: requests.Session, url: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        session.get(url, timeout=(5, 60)).content  # noqa: B018 - read like a caller would
    return (time.perf_counter() - start) / n


def interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int) -> Tuple[float, float]:
    """Medians of a and b, run alternately so drift in machine load hits both alike."""
    xs: List[float] = []
    ys: List[float] = []
    for _ in range(rounds):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds, n_decisions, n_requests = (5, 2000, 200) if args.quick else (15, 5000, 500)

    stock = Retry(total=6, backoff_factor=1, status_forcelist=(503,), raise_on_status=False)
    sume = SumeRetry(sleep=lambda s: None)
    stock_dec, sume_dec = interleaved(
        lambda: time_decisions(stock_decision(stock), n_decisions),
        lambda: time_decisions(sume_decision(sume), n_decisions),
        rounds,
    )

    server, url = serve()
    try:
        plain_stock = requests.Session()
        plain_stock.mount("http://", HTTPAdapter(max_retries=stock))
        plain_sume = requests.Session()
        plain_sume.mount("http://", HTTPAdapter(max_retries=SumeRetry()))
        bare = requests.Session()
        bare.headers["x-api-key"] = "sk_bench"  # the same request on the wire as SumeSession's
        session = SumeSession("sk_bench", base_url=url)
        for s in (plain_stock, plain_sume, bare, session):
            per_request(s, url + "/warm", 20)
        adapter_stock, adapter_sume = interleaved(
            lambda: per_request(plain_stock, url + "/me", n_requests),
            lambda: per_request(plain_sume, url + "/me", n_requests),
            rounds,
        )
        session_bare, session_sume = interleaved(
            lambda: per_request(bare, url + "/me", n_requests),
            lambda: per_request(session, url + "/me", n_requests),
            rounds,
        )
    finally:
        server.shutdown()

    print(f"python {sys.version.split()[0]}, urllib3 {urllib3.__version__}, requests {requests.__version__}")
    print()
    print("| measurement | stock | sume | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(
        f"| (a) one 503 decision, 1 KiB JSON body | {stock_dec * 1e6:.1f} µs | {sume_dec * 1e6:.1f} µs "
        f"| {sume_dec / stock_dec:.2f}x | ≤ 50 µs absolute |"
    )
    print(
        f"| (b) 200 through HTTPAdapter: Retry vs SumeRetry | {adapter_stock * 1e6:.0f} µs "
        f"| {adapter_sume * 1e6:.0f} µs | {adapter_sume / adapter_stock:.3f}x | ≤ 1.03x |"
    )
    print(
        f"| (b') 200: requests.Session vs SumeSession | {session_bare * 1e6:.0f} µs "
        f"| {session_sume * 1e6:.0f} µs | {session_sume / session_bare:.3f}x | (for reference) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
