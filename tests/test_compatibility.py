"""The compatibility claims (README, docs, setup.cfg) say what the tox matrix and .ci/run prove."""

from __future__ import annotations

import configparser
import pathlib
import re
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# "Django 3.2, 4.2, 5.x and 6.x" or "Django 3.2–5.x": a list of version lines after "Django".
_VERSION = r"\d+\.(?:\d+|x)"
_DJANGO_CLAIM = re.compile(rf"Django ({_VERSION}(?:(?:, | and |, and |\s*[–-]\s*){_VERSION})*)")
_PYTHON_RANGE = re.compile(r"Python (3\.\d+)\s*[–-]\s*(3\.\d+)")
_DJANGO_PIN = re.compile(r"^Django>=(\d+(?:\.\d+)*),<(\d+(?:\.\d+)*)$")


class Sources(NamedTuple):
    """The text of every file that states or proves compatibility."""

    tox_ini: str
    ci_run: str
    setup_cfg: str
    readme: str


def read_sources() -> Sources:
    """Read the repository's tox.ini, .ci/run, setup.cfg, and README.md with docs/compatibility.md."""
    tox_ini, ci_run, setup_cfg, readme, compatibility = (
        (ROOT / name).read_text(encoding="utf-8")
        for name in ("tox.ini", ".ci/run", "setup.cfg", "README.md", "docs/compatibility.md")
    )
    return Sources(tox_ini, ci_run, setup_cfg, readme + "\n" + compatibility)


def _split_top_level(text: str) -> List[str]:
    """Split on commas and newlines that are not inside braces."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if depth == 0 and char in ",\n":
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def expand(pattern: str) -> List[str]:
    """Expand tox's brace form: py{38,39}-x{a,b} is py38-xa, py38-xb, py39-xa, py39-xb."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [env for option in match.group(1).split(",") for env in expand(head + option.strip() + tail)]


def _tox_config(tox_ini: str) -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read_string(tox_ini)
    return config


def tox_envlist(tox_ini: str) -> List[str]:
    """Every environment tox.ini's envlist names, braces expanded."""
    raw = _tox_config(tox_ini).get("tox", "envlist", fallback="")
    return [env for item in _split_top_level(raw) for env in expand(item)]


def django_factor_pins(tox_ini: str) -> Dict[str, Tuple[str, str]]:
    """The djangoNN factors tox.ini pins, each to its (lowest, excluded upper) Django version."""
    pins: Dict[str, Tuple[str, str]] = {}
    config = _tox_config(tox_ini)
    for section in config.sections():
        for line in config.get(section, "deps", fallback="").splitlines():
            factor, _, requirement = line.partition(":")
            pin = _DJANGO_PIN.match(requirement.strip())
            if re.fullmatch(r"django\w+", factor.strip()) and pin:
                pins[factor.strip()] = (pin.group(1), pin.group(2))
    return pins


def line_name(lowest: str, upper: str) -> str:
    """The README's name for a pinned line: >=5.0,<6 is "5.x", >=4.2,<4.3 is "4.2"."""
    major = lowest.split(".")[0]
    return f"{major}.x" if upper == str(int(major) + 1) else lowest


def _key(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.replace(".x", "").split("."))


def _in_line(version: str, name: str) -> bool:
    """Whether a release such as "5.1" belongs to a line such as "5.x" or "5.1"."""
    return version == name or (name.endswith(".x") and version.split(".")[0] == name[:-2])


def matrix_django_lines(tox_ini: str) -> Dict[str, Tuple[str, str]]:
    """The Django lines the envlist runs, by README name, each with its tox pin."""
    pins = django_factor_pins(tox_ini)
    lines: Dict[str, Tuple[str, str]] = {}
    for env in tox_envlist(tox_ini):
        for factor in env.split("-"):
            if factor in pins:
                lines[line_name(*pins[factor])] = pins[factor]
    return lines


def ci_envs(ci_run: str) -> List[str]:
    """The environments .ci/run hands to tox with -e."""
    joined = re.sub(r"\\\n\s*", " ", ci_run)
    envs: List[str] = []
    for command in re.findall(r"tox run(?:-parallel)?\b[^\n]*", joined):
        for value in re.findall(r"-e\s+(\S+)", command):
            envs.extend(env for env in value.split(",") if env)
    return envs


def readme_compatibility(readme: str) -> str:
    """The Compatibility page's opening section (docs/compatibility.md), up to its first subheading."""
    match = re.search(r"^#{1,2} Compatibility\n(.*?)(?=^## |\Z)", readme, flags=re.S | re.M)
    return match.group(1) if match else ""


def _python_versions(envs: List[str]) -> Set[str]:
    found = set()
    for env in envs:
        factor = re.match(r"py3(\d+)(?:-|$)", env)
        if factor:
            found.add(f"3.{factor.group(1)}")
    return found


def _span(versions: Set[str]) -> str:
    ordered = sorted(versions, key=_key)
    return f"{ordered[0]}–{ordered[-1]}" if ordered else "nothing"


def _setup_list(config: configparser.ConfigParser, section: str, option: str) -> List[str]:
    return [line.strip() for line in config.get(section, option, fallback="").splitlines() if line.strip()]


def _check_django(sources: Sources, setup: configparser.ConfigParser) -> List[str]:
    problems: List[str] = []
    lines = matrix_django_lines(sources.tox_ini)
    names = set(lines)
    if not lines:
        return ["tox.ini's envlist runs no pinned Django line (djangoNN: Django>=X,<Y)"]
    claims = _DJANGO_CLAIM.findall(sources.readme)
    if not _DJANGO_CLAIM.search(readme_compatibility(sources.readme)):
        problems.append("README's Compatibility section names no Django versions")
    for claim in claims:
        said = set(re.findall(_VERSION, claim))
        if said != names:
            problems.append(
                f"README says Django {claim!r} but tox runs Django {', '.join(sorted(names, key=_key))}"
            )

    classified = {
        c.rsplit(" :: ", 1)[1]
        for c in _setup_list(setup, "metadata", "classifiers")
        if re.fullmatch(r"Framework :: Django :: \d+\.\d+", c)
    }
    for version in sorted(classified, key=_key):
        if not any(_in_line(version, name) for name in names):
            problems.append(f"setup.cfg classifies Django {version}, a line tox does not run")
    for name in sorted(names, key=_key):
        if not any(_in_line(version, name) for version in classified):
            problems.append(f"tox runs Django {name} but no 'Framework :: Django :: {name}' classifier")

    lowest = min((pin[0] for pin in lines.values()), key=_key)
    upper = max((pin[1] for pin in lines.values()), key=_key)
    for extra in ("django", "test"):
        pins = [
            r for r in _setup_list(setup, "options.extras_require", extra) if r.lower().startswith("django")
        ]
        wanted = f"Django>={lowest},<{upper}"
        if pins != [wanted]:
            problems.append(f"setup.cfg extra {extra!r} requires {pins} but the tox matrix spans {wanted!r}")

    ran = {factor for env in ci_envs(sources.ci_run) for factor in env.split("-")}
    pins_by_factor = django_factor_pins(sources.tox_ini)
    for name, pin in sorted(lines.items(), key=lambda item: _key(item[0])):
        if not any(pins_by_factor.get(factor) == pin for factor in ran):
            problems.append(f".ci/run runs no leg of Django {name}")
    return problems


def _check_python(sources: Sources, setup: configparser.ConfigParser) -> List[str]:
    problems: List[str] = []
    matrix = _python_versions(tox_envlist(sources.tox_ini))
    if not matrix:
        return ["tox.ini's envlist names no pyNN environment"]
    span = _span(matrix)
    lo, hi = sorted(matrix, key=_key)[0], sorted(matrix, key=_key)[-1]
    contiguous = {f"3.{minor}" for minor in range(_key(lo)[1], _key(hi)[1] + 1)}
    if matrix != contiguous:
        problems.append(f"tox's envlist skips Python {sorted(contiguous - matrix, key=_key)} within {span}")

    runtime = re.search(r"^Runtime dependencies:.*$", sources.readme, flags=re.M)
    claims: List[Tuple[str, Optional[re.Match[str]]]] = [
        ("Runtime dependencies line", _PYTHON_RANGE.search(runtime.group(0)) if runtime else None),
        ("Compatibility section", _PYTHON_RANGE.search(readme_compatibility(sources.readme))),
    ]
    for where, claim in claims:
        said = f"{claim.group(1)}–{claim.group(2)}" if claim else "no Python range"
        if said != span:
            problems.append(f"README's {where} says {said!r} but tox runs Python {span}")

    classified = {
        c.rsplit(" :: ", 1)[1]
        for c in _setup_list(setup, "metadata", "classifiers")
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    if classified != matrix:
        problems.append(
            f"setup.cfg classifies Python {sorted(classified, key=_key)} "
            f"but tox runs {sorted(matrix, key=_key)}"
        )
    requires = setup.get("options", "python_requires", fallback="")
    if requires.replace(" ", "") != f">={lo}":
        problems.append(f"setup.cfg python_requires is {requires!r} but tox's oldest Python is {lo}")
    return problems


def disagreements(sources: Sources) -> List[str]:
    """Every way the README, setup.cfg and .ci/run disagree with the tox matrix, as sentences."""
    setup = configparser.ConfigParser(interpolation=None)
    setup.read_string(sources.setup_cfg)
    envlist = set(tox_envlist(sources.tox_ini))
    problems = [
        f".ci/run runs {env!r}, which tox.ini's envlist lacks"
        for env in ci_envs(sources.ci_run)
        if env not in envlist
    ]
    if not ci_envs(sources.ci_run):
        problems.append(".ci/run hands tox no environments with -e")
    return problems + _check_django(sources, setup) + _check_python(sources, setup)


def test_the_repository_claims_what_the_matrix_runs() -> None:
    """README, setup.cfg classifiers and extras, and .ci/run all agree with tox.ini's matrix."""
    problems = disagreements(read_sources())
    assert problems == [], "compatibility claims disagree:\n" + "\n".join(problems)


def test_brace_expansion_is_the_cross_product() -> None:
    """An envlist entry with two brace groups expands to every combination, in order."""
    assert expand("py{38,39}-x{a,b}") == ["py38-xa", "py38-xb", "py39-xa", "py39-xb"]
    assert tox_envlist("[tox]\nenvlist =\n    py{38,310}-d{5,6}, lint\n    typing\n") == [
        "py38-d5",
        "py38-d6",
        "py310-d5",
        "py310-d6",
        "lint",
        "typing",
    ]


def test_the_matrix_names_each_django_line_as_the_readme_does() -> None:
    """A major-wide pin reads as "6.x" and a minor pin as "4.2", both found from envlist and deps."""
    lines = matrix_django_lines(read_sources().tox_ini)
    assert lines["6.x"] == ("6.0", "7")
    assert lines["4.2"] == ("4.2", "4.3")
    assert "py312-django6" in ci_envs(read_sources().ci_run)


@pytest.mark.parametrize(
    ("field", "old", "new", "reported"),
    [
        ("readme", "5.x and 6.x.", "5.x.", "README says Django '3.2, 4.2, 5.x'"),
        ("readme", "Python 3.8–3.13;", "Python 3.8–3.12;", "Compatibility section says '3.8–3.12'"),
        ("readme", "Python 3.8–3.13.", "Python 3.9–3.13.", "Runtime dependencies line says '3.9–3.13'"),
        (
            "setup_cfg",
            "    Framework :: Django :: 6.0\n    Framework :: Django :: 6.1\n",
            "",
            "no 'Framework :: Django :: 6.x' class",
        ),
        ("setup_cfg", "Framework :: Django :: 5.0", "Framework :: Django :: 2.2", "classifies Django 2.2"),
        ("setup_cfg", "Django>=3.2,<7", "Django>=3.2", "'django' requires ['Django>=3.2']"),
        ("setup_cfg", "test =", "test =\n    Django>=4.2,<6", "'test' requires ['Django>=4.2,<6', "),
        ("setup_cfg", "python_requires = >=3.8", "python_requires = >=3.7", "python_requires is '>=3.7'"),
        ("setup_cfg", "Programming Language :: Python :: 3.13\n", "", "setup.cfg classifies Python"),
        ("ci_run", ",py312-django6", "", ".ci/run runs no leg of Django 6.x"),
        ("ci_run", "py313-django5", "py314-django5", "runs 'py314-django5', which tox.ini's envlist lacks"),
        ("tox_ini", "py{38,39,310,", "py{38,310,", "skips Python ['3.9']"),
        ("tox_ini", "django6: Django>=6.0,<7", "django6: Django>=6.0,<8", "matrix spans 'Django>=3.2,<8'"),
    ],
)
def test_a_wrong_claim_is_reported(field: str, old: str, new: str, reported: str) -> None:
    """Each kind of disagreement, made in a copy of the real files, is named in the report."""
    sources = read_sources()
    text = getattr(sources, field)
    assert old in text, f"{field} no longer contains {old!r}: update this case"
    problems = disagreements(sources._replace(**{field: text.replace(old, new, 1)}))
    assert any(reported in problem for problem in problems), problems
