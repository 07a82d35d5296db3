"""A short soak: many threads, one SumeSession, a server that fails one answer in five.

The long version is ``benchmarks/soak.py`` (32 threads x 500 requests, memory sampled).
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Set, Union

import pytest

from sume_urllib3 import SumeRecord, SumeRetryError, SumeSession
from sume_urllib3.testing import FakeSume, Reply, no_sleep

THREADS = 8
PER_THREAD = 40
LOGICAL = THREADS * PER_THREAD


def mixed_script(length: int, seed: int = 0, failure_rate: float = 0.2) -> List[Union[int, Reply]]:
    """A deterministic run of 503s and 201s ending in 201 (the last reply repeats forever)."""
    rng = random.Random(seed)
    script: List[Union[int, Reply]] = [503 if rng.random() < failure_rate else 201 for _ in range(length)]
    return [*script, 201]


@pytest.mark.slow  # real time: runs in CI's slow step
def test_eight_threads_share_one_session_without_losing_or_mixing_a_request(
    fake: FakeSume, make_session: Callable[..., SumeSession]
) -> None:
    """320 logical POSTs: one key each, never reused, every attempt counted and every outcome recorded."""
    script = mixed_script(LOGICAL * 2)
    fake.script("POST", "/v1/jobs", *script)
    session = make_session()
    records: Dict[int, SumeRecord] = {}
    failures: List[BaseException] = []
    lock = threading.Lock()

    def work(thread: int) -> None:
        for i in range(PER_THREAD):
            n = thread * PER_THREAD + i
            try:
                record = session.post("/jobs", json={"n": n}).sume
            except SumeRetryError as exc:  # a give-up is an outcome too
                record = exc.record
            except BaseException as exc:  # pragma: no cover - reported below
                with lock:
                    failures.append(exc)
                continue
            with lock:
                records[n] = record

    with no_sleep() as recorder:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

    keys_by_request: Dict[int, Set[str]] = defaultdict(set)
    for sent in fake.requests:
        keys_by_request[sent.json()["n"]].add(sent.headers["Idempotency-Key"])
    attempts_by_key = Counter(sent.headers["Idempotency-Key"] for sent in fake.requests)
    outcomes = session.metrics.snapshot()["outcomes"]

    assert ([], LOGICAL) == (failures, len(records))
    assert not any(thread.is_alive() for thread in threads)
    assert LOGICAL == len(keys_by_request)
    assert all(1 == len(keys) for keys in keys_by_request.values())  # every attempt shares its key
    assert LOGICAL == len(attempts_by_key)  # and no key is ever reused by another request
    assert all({rec.idempotency_key} == keys_by_request[n] for n, rec in records.items())
    assert all(attempts_by_key[rec.idempotency_key or ""] == rec.attempts for rec in records.values())
    assert LOGICAL == sum(outcomes.values())
    assert sum(rec.attempts for rec in records.values()) == len(fake.requests)
    assert len(fake.requests) - LOGICAL == len(recorder.waits)  # one recorded wait per retry
    gave_up = outcomes["gave_up"]  # only a spent retry budget could do that here
    assert (
        script[: len(fake.requests)].count(503) == sum(rec.attempts - 1 for rec in records.values()) + gave_up
    )
