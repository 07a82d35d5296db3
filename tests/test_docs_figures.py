"""Every measured figure in the docs is a committed results file, rendered; none is typed by hand.

The figures live between ``<!-- figures: NAME -->`` markers on the pages (``docs/measured.md``
above all, README.md and the docs site) and are written by ``python benchmarks/render.py`` from
``benchmarks/results/*.json``, which each benchmark writes with ``--write``. These tests fail
when a block differs from what its file renders (a figure edited by hand, or a new measurement
not rendered), when a block does not name the command that made it, when a results file was
measured on code that differs from its commit, and when a measured-looking figure appears
outside a block.
"""

from __future__ import annotations

import difflib
import os
import pathlib
import re
import sys
from typing import List, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
MEASURED_PAGE = ROOT / "docs" / "measured.md"
sys.path.insert(0, str(BENCHMARKS))

import _results  # noqa: E402
import render  # noqa: E402

#: Measurement-shaped figures: ratios, times in µs/ms, memory, calls per request, percentiles.
MEASURED = re.compile(
    r"\b\d+(?:\.\d+)?x\b"  # 1.042x
    r"|\d+(?:\.\d+)?\s?(?:µs|ms)\b"  # 43.6 µs, 0.16 ms
    r"|[+\u2212-]\d+(?:\.\d+)?\s?MB\b"  # +95 MB, -0.4 MB
    r"|\b\d+(?:\.\d+)?\s+calls\b"  # 1.00 calls
    r"|\bp(?:50|99)\b"  # p50, p99
    r"|\b\d+(?:\.\d+)?\s?%\s+success"  # 28% success
)
#: A number standing alone (the 3 of ``urllib3`` is part of a name).
NUMBER = re.compile(r"(?<![\w.])\d")


def pages() -> List[Tuple[str, str]]:
    """(name, text) of every page render.py writes into."""
    found = [pathlib.Path(page) for page in render.documents()]
    return [(os.path.relpath(page, ROOT), page.read_text(encoding="utf-8")) for page in found]


def outside_blocks(text: str) -> str:
    """``text`` with every figure block, fenced code block and inline code span removed."""
    text = render.BLOCK.sub("", text)
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def with_one_digit_changed(text: str, block: re.Match[str]) -> str:
    """``text`` with the first digit inside ``block`` changed, as a hand edit would."""
    digit = re.search(r"\d", block.group(3))
    assert digit is not None, f"block {block.group(2)} states no figure"
    at = block.start(3) + digit.start()
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


def test_every_figure_block_is_what_its_results_file_renders() -> None:
    """A block differing from its rendered results file fails, with the difference shown."""
    for name, text in pages():
        rendered = render.render(text)
        diff = difflib.unified_diff(text.splitlines(True), rendered.splitlines(True), name, "rendered")
        hint = f"{name}: figures differ from their results (python benchmarks/render.py):\n"
        assert rendered == text, hint + "".join(diff)


def test_a_figure_edited_by_hand_is_caught() -> None:
    """Changing one digit inside any block of any page makes the rendered page differ from it."""
    for name, text in pages():
        for match in render.BLOCK.finditer(text):
            edited = with_one_digit_changed(text, match)
            unnoticed = f"an edit inside {name}'s block {match.group(2)} went unnoticed"
            assert render.render(edited) != edited, unnoticed


def test_every_block_has_a_renderer_and_every_renderer_a_block() -> None:
    """Every renderer has a block somewhere, no page shows one twice, and only the comparison shows twice."""
    shown: List[str] = []
    for name, text in pages():
        names = render.blocks(text)
        assert sorted(names) == sorted(set(names)), f"a figure block appears twice in {name}"
        shown += names
    assert sorted(set(shown)) == sorted(render.RENDERERS)
    assert [name for name in set(shown) if shown.count(name) > 1] == ["comparison"]


def test_every_block_names_the_command_that_made_it() -> None:
    """Each block cites a ``python benchmarks/<script>.py`` command that exists."""
    for page, text in pages():
        for match in render.BLOCK.finditer(text):
            commands = re.findall(r"`python (benchmarks/[a-z0-9_]+\.py)[^`]*`", match.group(3))
            assert commands, f"{page}: block {match.group(2)} names no command"
            for script in commands:
                missing = f"{page}: block {match.group(2)} cites {script}, which does not exist"
                assert (ROOT / script).is_file(), missing


@pytest.mark.parametrize("name", _results.names())
def test_every_results_file_is_stamped_from_committed_code(name: str) -> None:
    """A results file names its command, versions and commit, and was measured on unedited code."""
    stamp = _results.load(name)["stamp"]
    for key in ("command", "python", "urllib3", "requests", "commit", "machine", "date"):
        assert stamp.get(key), f"{name}.json: stamp has no {key}"
    script = stamp["command"].split()[1]
    assert stamp["command"].startswith("python benchmarks/"), stamp["command"]
    assert (ROOT / script).is_file(), stamp["command"]
    assert "--write" in stamp["command"].split(), f"{name}.json: not written by a --write run"
    assert stamp["edited"] is False, f"{name}.json was measured on code with uncommitted edits"


def test_every_results_file_is_shown_on_a_page() -> None:
    """No results file is left out of the docs (rendering reads each one)."""
    results = render.Results()
    for _name, text in pages():
        render.render(text, results)
    assert sorted(results.used) == _results.names()


def test_no_measured_figure_outside_a_block() -> None:
    """Ratios, µs, MB, calls per request and percentiles appear only inside rendered blocks."""
    stray: List[str] = []
    for name, text in pages():
        for line in outside_blocks(text).splitlines():
            stray += [f"{name}: {m.group(0)!r} in: {line.strip()[:90]}" for m in MEASURED.finditer(line)]
    assert not stray, "figures typed by hand (render them from a results file):\n" + "\n".join(stray)


def test_the_measured_page_states_no_number_outside_a_block() -> None:
    """On the Measured page every number comes from a block: its prose states none."""
    text = outside_blocks(MEASURED_PAGE.read_text(encoding="utf-8"))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    stray = [line.strip()[:90] for line in lines if NUMBER.search(line)]
    assert not stray, "numbers typed by hand on docs/measured.md:\n" + "\n".join(stray)


def test_the_checker_reports_a_stray_figure() -> None:
    """The scan itself finds a hand-typed ratio, memory figure and call count in prose."""
    prose = "It costs 1.04x and +95 MB, about 3.3 calls per request, p99 2 ms."
    assert [m.group(0) for m in MEASURED.finditer(prose)] == ["1.04x", "+95 MB", "3.3 calls", "p99", "2 ms"]
    assert not MEASURED.findall(outside_blocks("<!-- figures: x -->\n1.04x\n<!-- /figures: x -->\n"))


def test_render_check_exits_non_zero_on_a_stale_page(tmp_path: pathlib.Path) -> None:
    """``render.py --check`` fails on an edited copy and leaves it as it was; the real pages pass."""
    copy = tmp_path / "measured.md"
    text = MEASURED_PAGE.read_text(encoding="utf-8")
    copy.write_text(with_one_digit_changed(text, next(render.BLOCK.finditer(text))), encoding="utf-8")
    before = copy.read_text()
    assert render.main(["--check", "--page", str(copy)]) == 1
    assert copy.read_text() == before
    assert render.main(["--check"]) == 0


# -- pictures ---------------------------------------------------------------------------------


def test_every_picture_names_the_digest_of_what_its_results_draw() -> None:
    """A picture's metadata names the SHA-256 of the data the committed results give it."""
    results = render.Results()
    for picture, (series_of, _draw) in render.PICTURES.items():
        name = os.path.relpath(picture, ROOT)
        stale = f"{name} was not drawn from the committed results (python benchmarks/render.py --figures)"
        assert render.drawn_digest(picture) == render.digest(series_of(results)), stale


def test_a_changed_result_makes_its_picture_stale() -> None:
    """One call more in one interval of one scenario: the picture no longer matches its results."""
    assert render.stale_pictures(render.Results()) == []
    results = render.Results()
    results["fleet_redis"]["figures"]["scenarios"]["host_learned"]["timeline"]["calls"][0] += 1
    assert render.stale_pictures(results) == [render.HERD_SVG]


def test_every_picture_is_shown_on_a_page() -> None:
    """Each picture under docs/ is an image on a docs page, and each image there is a picture."""
    shown = set()
    for name, text in pages():
        page = ROOT / name
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text):
            shown.add(os.path.normpath(page.parent / target))
    assert shown == {os.path.normpath(picture) for picture in render.PICTURES}


def test_the_herd_timelines_add_up_to_the_table() -> None:
    """Each scenario's per-interval counts add up to the calls, 429s and successes its row states,
    and the picture's lines end where the table does."""
    figures = _results.load("fleet_redis")["figures"]
    for sid, row in figures["scenarios"].items():
        timeline = row["timeline"]
        assert len(timeline["calls"]) == len(timeline["429s"]), sid
        assert sum(timeline["calls"]) == row["calls"], sid
        assert sum(timeline["429s"]) == row["429s"], sid
        assert all(0 <= t <= c for c, t in zip(timeline["calls"], timeline["429s"])), sid
    series = render.herd_series(render.Results())
    for line in series["lines"]:
        row = figures["scenarios"][line["id"]]
        assert line["succeeded"][-1] == row["succeeded"], line["id"]  # a 200 per request, none twice
        assert line["calls_per_request"][-1] == pytest.approx(row["calls"] / row["total"], abs=1e-4)
        assert sum(line["429s_per_s"]) * series["interval_s"] == pytest.approx(row["429s"])


def test_render_check_exits_non_zero_on_a_stale_picture(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``render.py --check`` fails on a picture whose digest is not its results' and leaves it as it was."""
    copy = tmp_path / "herd.svg"
    text = pathlib.Path(render.HERD_SVG).read_text(encoding="utf-8")
    found = re.search(r"sha256:([0-9a-f])", text)
    assert found is not None, "the herd picture names no digest"
    other = "0" if found.group(1) != "0" else "1"
    copy.write_text(text[: found.start(1)] + other + text[found.end(1) :], encoding="utf-8")
    before = copy.read_text(encoding="utf-8")
    monkeypatch.setattr(render, "PICTURES", {str(copy): render.PICTURES[render.HERD_SVG]})
    assert render.main(["--check"]) == 1
    assert copy.read_text(encoding="utf-8") == before


def test_a_picture_is_what_matplotlib_draws_from_its_results() -> None:
    """Drawn again from the committed results, every picture is the same bytes as the committed one
    (with the matplotlib that drew it; another version lays text out its own way)."""
    matplotlib = pytest.importorskip("matplotlib", reason="pictures are drawn with matplotlib (bench extra)")
    results = render.Results()
    for picture, (series_of, draw) in render.PICTURES.items():
        series = series_of(results)
        drawn = draw(series)
        assert drawn == draw(series), f"{picture}: two drawings of the same data differ"
        committed = pathlib.Path(picture).read_bytes()
        creator = re.search(rb"Matplotlib v([0-9][^,<\s]*)", committed)
        assert creator is not None, f"{picture} does not name the matplotlib that drew it"
        if creator.group(1).decode() != matplotlib.__version__:
            pytest.skip(f"{picture} was drawn by matplotlib {creator.group(1).decode()}, "
                        f"this is {matplotlib.__version__}")
        redraw = "python benchmarks/render.py --figures"
        assert drawn == committed, f"{picture} differs from what its results draw ({redraw})"
