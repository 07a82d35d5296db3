"""SUME["OBSERVERS"]: dotted paths, classes or objects, built once per process, checked by manage.py check."""

from __future__ import annotations

import threading
from typing import Any, Dict, List

import pytest

pytest.importorskip("django")

from django.core import checks

from sume_urllib3 import ConfigurationError
from sume_urllib3.contrib.django import get_session
from sume_urllib3.testing import FakeSume, no_sleep

from . import sample_observers
from .sample_observers import SHARED, CountingObserver
from .settings import API_KEY

PATH = "tests.contrib.django.sample_observers"


def messages() -> List[checks.CheckMessage]:
    """Our check messages."""
    found: List[checks.CheckMessage] = checks.run_checks(tags=["sume_urllib3"])
    return found


def sume(observers: Any, **extra: Any) -> Dict[str, Any]:
    """A valid SUME with these observers."""
    return {"API_KEY": API_KEY, "OBSERVERS": observers, **extra}


def test_a_dotted_class_path_is_built_and_attached(dj_settings: Any) -> None:
    """A class named by path is called with no arguments and its instance observes the session."""
    dj_settings.SUME = sume([f"{PATH}.CountingObserver"])

    observers = [o for o in get_session().observers if isinstance(o, CountingObserver)]

    assert 1 == len(observers)
    assert observers[0] is not SHARED
    assert [] == messages()


def test_paths_factories_classes_and_objects_are_all_accepted(dj_settings: Any) -> None:
    """A path to an object, a path to a factory, a class and an object each give one observer."""
    mine = CountingObserver()
    dj_settings.SUME = sume([f"{PATH}.SHARED", f"{PATH}.make_observer", CountingObserver, mine])

    observers = [o for o in get_session().observers if isinstance(o, CountingObserver)]

    assert 4 == len(observers)
    assert SHARED is observers[0]
    assert mine is observers[3]
    assert 4 == len({id(o) for o in observers})


def test_an_observer_with_only_on_job_hears_the_jobs(fake: FakeSume, dj_settings: Any) -> None:
    """Any observer hook is enough: a class with on_job only is accepted and hears every poll and ending."""
    fake.job("job_1", ["processing", "completed"])
    dj_settings.SUME = sume([f"{PATH}.JobCounter"], BASE_URL=fake.url + "/v1")

    with no_sleep():
        get_session().jobs.wait("job_1")

    (counter,) = [o for o in get_session().observers if isinstance(o, sample_observers.JobCounter)]
    assert ["poll", "poll", "completed"] == counter.kinds
    assert [] == messages()


def test_observers_are_built_once_and_shared_by_every_thread(dj_settings: Any) -> None:
    """Threads' sessions and sessions rebuilt for an unrelated change share the same observer."""
    dj_settings.SUME = sume([f"{PATH}.CountingObserver"])
    before = CountingObserver.built
    found: List[object] = []

    def run() -> None:
        found.extend(o for o in get_session().observers if isinstance(o, CountingObserver))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    dj_settings.SUME = sume([f"{PATH}.CountingObserver"], MAX_RETRIES=2)
    found.extend(o for o in get_session().observers if isinstance(o, CountingObserver))

    assert 5 == len(found)
    assert 1 == len({id(o) for o in found})
    assert before + 1 == CountingObserver.built


def test_a_changed_setting_builds_new_observers(dj_settings: Any) -> None:
    """Other observers in the setting: the old ones are dropped."""
    dj_settings.SUME = sume([f"{PATH}.CountingObserver"])
    first = [o for o in get_session().observers if isinstance(o, CountingObserver)]
    dj_settings.SUME = sume([f"{PATH}.make_observer"])
    second = [o for o in get_session().observers if isinstance(o, CountingObserver)]

    assert 1 == len(first) == len(second)
    assert first[0] is not second[0]


def test_the_observers_see_every_threads_requests(fake: FakeSume, dj_settings: Any) -> None:
    """One observer behind all threads' sessions receives every outcome."""
    fake.script("GET", "/v1/me", 200)
    dj_settings.SUME = sume([f"{PATH}.CountingObserver"], BASE_URL=fake.url + "/v1")

    def run() -> None:
        for _ in range(3):
            get_session().get("/me")

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    (observer,) = [o for o in get_session().observers if isinstance(o, CountingObserver)]
    assert 9 == len(observer.outcomes)


def test_prometheus_by_dotted_path(fake: FakeSume, dj_settings: Any) -> None:
    """The Django guide's example: PrometheusObserver named by path counts requests on its registry."""
    prometheus_client = pytest.importorskip("prometheus_client")
    fake.script("GET", "/v1/me", 503, 200)
    dj_settings.SUME = sume(
        ["sume_urllib3.contrib.prometheus.PrometheusObserver"], BASE_URL=fake.url + "/v1"
    )
    labels = {"outcome": "retried_ok"}
    before = prometheus_client.REGISTRY.get_sample_value("sume_requests_total", labels) or 0

    with no_sleep():
        get_session().get("/me")

    after = prometheus_client.REGISTRY.get_sample_value("sume_requests_total", {"outcome": "retried_ok"})
    assert before + 1 == after


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("tests.contrib.django.no_such_module.Observer", "No module named 'tests.contrib.django.no_such"),
        (f"{PATH}.Missing", 'does not define a "Missing" attribute'),
        ("CountingObserver", "doesn't look like a module path"),
        (f"{PATH}.NotAnObserver", "which has none of on_start, on_retry, on_outcome, on_job"),
        (f"{PATH}.NeedsArguments", "calling it with no arguments failed: TypeError"),
        (f"{PATH}.NUMBER", "is a int"),
        (42, "is a int"),
    ],
)
def test_e007_a_bad_entry_is_named(dj_settings: Any, entry: Any, expected: str) -> None:
    """manage.py check reports E007 with the entry's position and path, and get_session refuses."""
    dj_settings.SUME = sume([f"{PATH}.CountingObserver", entry])

    (message,) = messages()

    assert "sume_urllib3.E007" == message.id
    assert message.msg.startswith('SUME["OBSERVERS"]: entry 1')
    if isinstance(entry, str):
        assert repr(entry) in message.msg
    assert expected in message.msg
    assert "dotted paths" in (message.hint or "")
    with pytest.raises(ConfigurationError, match=r"sume_urllib3\.E007"):
        get_session()


@pytest.mark.parametrize("value", [f"{PATH}.CountingObserver", {"a": 1}, 3])
def test_e007_observers_must_be_a_list(dj_settings: Any, value: Any) -> None:
    """A single string (a common slip) or anything but a list or tuple is E007."""
    dj_settings.SUME = sume(value)

    (message,) = messages()

    assert "sume_urllib3.E007" == message.id
    assert "must be a list" in message.msg


def test_none_or_empty_means_no_extra_observers(dj_settings: Any) -> None:
    """OBSERVERS = None or [] passes the checks and adds nothing."""
    values: List[Any] = [None, [], ()]
    for value in values:
        dj_settings.SUME = sume(value)
        assert [] == messages()
        assert not [o for o in get_session().observers if isinstance(o, CountingObserver)]


def test_the_sample_module_is_importable() -> None:
    """The paths above point at a real module (so the failures are the ones intended)."""
    assert callable(sample_observers.make_observer)
