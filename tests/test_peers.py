"""benchmarks/peers.py judges the peers' runs: every difference listed with a reason, no stale line."""

from __future__ import annotations

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers  # noqa: E402


def run(plain: dict, swapped: dict, suite: str = "urllib3", line: str = "2") -> peers.Run:
    return peers.Run(suite, line, {"python": "3", "urllib3": "2", "requests": "2"}, plain, swapped)


def expected(tmp_path: pathlib.Path, text: str) -> list:
    path = tmp_path / "expected.txt"
    path.write_text(text, encoding="utf-8")
    return peers.read_expected(str(path))


def test_a_difference_is_a_test_that_passes_plainly_and_fails_or_vanishes_swapped() -> None:
    """Failed or never run swapped (a module that no longer imports) counts; failing both ways does not."""
    r = run(
        {"a": "passed", "b": "passed", "c": "failed", "d": "skipped", "e": "passed"},
        {"a": "failed", "c": "failed", "d": "skipped", "e": "passed", "test_x.py": "failed"},
    )

    assert ["a", "b", "test_x.py"] == r.differences()
    assert ["c"] == r.plain_failures()


def test_an_unlisted_difference_fails_and_a_listed_one_passes(tmp_path: pathlib.Path) -> None:
    """Each listed line names its test (wildcards allowed, brackets literal) and gives a reason."""
    lines = expected(tmp_path, "urllib3 swapped t.py::test_string[a-1] -- repr differs\n")
    listed = run({"t.py::test_string[a-1]": "passed"}, {"t.py::test_string[a-1]": "failed"})
    unlisted = run({"t.py::test_other": "passed"}, {"t.py::test_other": "failed"})

    assert [] == peers.judge([listed], lines)
    assert ["urllib3@urllib3-2: t.py::test_other fails only swapped and is not listed"] == peers.judge(
        [unlisted], expected(tmp_path, "")
    )


def test_a_swapped_line_that_matches_nothing_any_more_fails(tmp_path: pathlib.Path) -> None:
    """A fixed difference must leave the file; a plain line (an environment) may match nothing."""
    lines = expected(
        tmp_path,
        "urllib3 swapped t.py::test_a -- was different\nurllib3 plain t.py::test_b -- needs a fork\n",
    )

    problems = peers.judge(
        [
            run(
                {"t.py::test_a": "passed", "t.py::test_b": "passed"},
                {"t.py::test_a": "passed", "t.py::test_b": "passed"},
            )
        ],
        lines,
    )

    assert 1 == len(problems)
    assert "t.py::test_a matched no failure" in problems[0]


def test_a_line_applies_to_its_suite_and_line_only(tmp_path: pathlib.Path) -> None:
    """urllib3@urllib3-1.26 lines say nothing about the 2.x run."""
    lines = expected(tmp_path, "urllib3@urllib3-1.26 swapped t.py::test_a -- 1.26 only\n")
    on_two = run({"t.py::test_a": "passed"}, {"t.py::test_a": "failed"}, line="2")

    assert ["urllib3@urllib3-2: t.py::test_a fails only swapped and is not listed"] == peers.judge(
        [on_two], lines
    )


@pytest.mark.parametrize(
    "text",
    [
        "urllib3 swapped t.py::test_a\n",  # no reason
        "urllib3 swapped t.py::test_a -- \n",  # an empty reason
        "urllib3 broken t.py::test_a -- why\n",  # an unknown kind
        "django swapped t.py::test_a -- why\n",  # an unknown suite
    ],
)
def test_a_line_without_a_reason_or_of_an_unknown_kind_is_refused(tmp_path: pathlib.Path, text: str) -> None:
    """The file is read strictly: every line says which suite, which kind, which test and why."""
    with pytest.raises(SystemExit, match=r"expected\.txt:1"):
        expected(tmp_path, text)


def test_the_committed_list_reads_and_gives_every_line_a_reason() -> None:
    """benchmarks/peers-expected.txt parses, and no two lines name the same tests."""
    lines = peers.read_expected()

    assert lines
    assert all(line.reason for line in lines)
    keys = [(line.suite, line.kind, line.pattern) for line in lines]
    assert len(keys) == len(set(keys))


@pytest.mark.slow
def test_an_unlisted_failure_that_passes_when_run_again_alone_is_flaky_not_a_finding(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket race on a loaded machine is not a difference: a second look, alone, tells it apart.

    Real pytest runs (the same plugin, the same way peers.py runs a suite): one test fails only
    the first time it runs, one always fails. The first is reported flaky and its outcome
    replaced; the second still fails the judgement.
    """
    monkeypatch.setattr(peers, "CACHE", str(tmp_path))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_flip.py").write_text(
        "import pathlib\n\n"
        "def test_fails_once():\n"
        "    marker = pathlib.Path(__file__).with_name('ran-before')\n"
        "    first = not marker.exists()\n"
        "    marker.write_text('yes')\n"
        "    assert not first\n\n"
        "def test_always_fails():\n"
        "    assert False\n",
        encoding="utf-8",
    )
    outcomes = peers.pytest(sys.executable, str(suite), ["test_flip.py"], "", show=False)
    r = run(outcomes, dict(outcomes))
    r.cwd = str(suite)
    assert ["test_flip.py::test_always_fails", "test_flip.py::test_fails_once"] == r.plain_failures()

    peers.second_look(sys.executable, r, [], show=False)

    # Failed both ways at first; passing plainly made it a difference, so it was run swapped too.
    assert [
        ("test_flip.py::test_fails_once", "plain"),
        ("test_flip.py::test_fails_once", "swapped"),
    ] == r.flaky
    assert [
        "urllib3@urllib3-2: test_flip.py::test_always_fails fails plainly and is not listed"
    ] == peers.judge([r], [])
