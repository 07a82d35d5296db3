"""The documentation is whole: every public name has an API entry, every page and link resolves.

``mkdocs build --strict`` (CI's docs step) fails on a broken link, an unresolved reference or a
page left out of the navigation; these tests hold what a build cannot see: a public name missing
from the reference, a README too long to be a landing page, and a file the docs or the code cite
that the repository does not contain.
"""

from __future__ import annotations

import ast
import pathlib
import re
from typing import Dict, List

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
README = ROOT / "README.md"
#: Where the README's links point: they must work on the PyPI page, where a relative link breaks.
REPOSITORY = "https://github.com/sume/sume-urllib3/blob/main/"
#: The public modules whose ``__all__`` the API reference must cover, by the file that defines it.
PUBLIC_MODULES: Dict[str, str] = {
    "sume_urllib3": "sume_urllib3/__init__.py",
    "sume_urllib3.exceptions": "sume_urllib3/exceptions.py",
    "sume_urllib3.observe": "sume_urllib3/observe.py",
    "sume_urllib3.pacing": "sume_urllib3/pacing/__init__.py",
    "sume_urllib3.pacing.store": "sume_urllib3/pacing/store.py",
    "sume_urllib3.pacing.status": "sume_urllib3/pacing/status.py",
    "sume_urllib3.testing": "sume_urllib3/testing/__init__.py",
    "sume_urllib3.contrib.celery": "sume_urllib3/contrib/celery.py",
    "sume_urllib3.contrib.django": "sume_urllib3/contrib/django/__init__.py",
    "sume_urllib3.contrib.redis": "sume_urllib3/contrib/redis/__init__.py",
    "sume_urllib3.contrib.prometheus": "sume_urllib3/contrib/prometheus.py",
    "sume_urllib3.contrib.opentelemetry": "sume_urllib3/contrib/opentelemetry.py",
}
#: What a mkdocstrings entry looks like: ``::: sume_urllib3.SumeSession``.
ENTRY = re.compile(r"^::: (\S+)\s*$", re.M)
#: Where the project's own files are cited: the top-level folders and files of the repository.
CITED = re.compile(
    r"(?<![\w./-])((?:sume_urllib3|tests|benchmarks|docs|examples|\.ci)/[\w./-]*\w"
    r"|[A-Z]+\.md|setup\.cfg|tox\.ini|pyproject\.toml|mkdocs\.yml)"
)
#: A cited file in source code: a path with an extension (a folder may be named loosely).
CITED_FILE = re.compile(r"\.(?:py|lua|md|txt|cfg|ini|toml|yml|yaml)$")
#: Sources that cite files of other projects (the peers' own test suites) or generated ones.
CITES_OTHERS = ("benchmarks/peers.py", "benchmarks/peers-expected.txt")


def public_names(module: str) -> List[str]:
    """``module.__all__`` read from its source (no import: an extra may be missing); else its classes."""
    tree = ast.parse((ROOT / PUBLIC_MODULES[module]).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            value = ast.literal_eval(node.value)
            return [str(name) for name in value]
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return [node.name for node in classes if not node.name.startswith("_")]


def entries() -> List[str]:
    """Every ``::: dotted.name`` of the API reference."""
    return [m.group(1) for page in sorted(REFERENCE.glob("*.md")) for m in ENTRY.finditer(page.read_text())]


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_every_public_name_has_an_api_reference_entry(module: str) -> None:
    """Each name a public module exports is documented by its own entry in docs/reference/."""
    documented = set(entries())
    missing = [name for name in public_names(module) if f"{module}.{name}" not in documented]
    assert not missing, f"docs/reference/ has no '::: {module}.NAME' entry for: {', '.join(missing)}"


def test_every_api_entry_names_something_public() -> None:
    """No entry documents a name its module does not export (a renamed or private name)."""
    public = {f"{module}.{name}" for module in PUBLIC_MODULES for name in public_names(module)}
    stray = [entry for entry in entries() if entry not in public and entry not in PUBLIC_MODULES]
    assert not stray, stray


def test_the_readme_is_a_landing_page() -> None:
    """At most 200 lines, with the command that builds and serves the docs."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    command = re.search(r"<!-- docs-command -->(.*?)<!-- /docs-command -->", text, re.S)
    assert command is not None
    assert "mkdocs serve" in command.group(1)


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    """A Markdown link to a file of the repository (README on a code host, or a page) points at one."""
    broken: List[str] = []
    for page in [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if target.startswith(REPOSITORY):  # the README's links, absolute for the PyPI page
                target = str(ROOT / target[len(REPOSITORY) :])
            if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_nothing_cites_a_file_the_repository_does_not_contain() -> None:
    """Every path the docs, the code, the tests and the benchmarks cite exists, and none is outside it."""
    # A document the project does not hold, by its path or by its bare name (a pattern, so that
    # neither this file nor its compiled bytecode holds the names themselves).
    outside = re.compile(r"DESIGN[. ]|\.\./shared")
    cited: List[str] = []
    sources = [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
    for folder in ("sume_urllib3", "tests", "benchmarks", "examples"):
        sources += [p for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".py", ".lua", ".md")]
    for source in sources:
        text = source.read_text(encoding="utf-8")
        name = source.relative_to(ROOT)
        cited += [f"{name}: {word}" for word in outside.findall(text)]
        if source.name == "CHANGELOG.md" or name.as_posix() in CITES_OTHERS:  # history's names; peers'
            continue
        for path in CITED.findall(text):
            generated = path.startswith("benchmarks/results/")
            if source.suffix != ".md" and not CITED_FILE.search(path):
                continue
            if not generated and not (ROOT / path).exists():
                cited.append(f"{name}: {path}")
    assert not cited, "cited but not in the repository:\n" + "\n".join(cited)


def test_the_readme_links_work_on_the_package_index() -> None:
    """PyPI shows the README without the repository: every link in it is absolute."""
    relative = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]
    assert not relative
