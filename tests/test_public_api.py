"""The public surface: ``__all__`` sorted and complete, the contract's names exported, all documented."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import types
from pathlib import Path
from typing import Any, List, Set, Tuple

import pytest

import sume_urllib3

#: The names the package promises at the top level (docs/reference/index.md documents each).
PUBLIC_NAMES = (
    "Policy",
    "Decision",
    "Verdict",
    "Outcome",
    "SumeRetry",
    "SumeAdapter",
    "SumeSession",
    "SumeRecord",
    "SumeError",
    "ConfigurationError",
    "SumeRetryError",
    "sume_record",
    "Job",
    "JobFailed",
    "JobTimeout",
    "idempotency_key_for",
)
#: Names that live in a namespace: the observers (docs/guide/observability.md), the fleets.
NAMESPACED = (
    (
        "sume_urllib3.observe",
        ("SumeObserver", "RetryEvent", "RequestStart", "JobEvent", "SumeMetrics", "LoggingObserver"),
    ),
    ("sume_urllib3.pacing", ("Fleet", "Grant", "LocalFleet", "HostFleet", "RetryBudget")),
)
#: Classes whose every constructor parameter must be documented with ``:param name:``.
DOCUMENTED_CONSTRUCTORS = ("SumeSession", "SumeAdapter", "SumeRetry", "Policy")


def natural_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as the ``natord`` crate (ruff's natural order) compares two identifiers.

    Runs of digits compare as numbers, or digit by digit when either starts with 0;
    everything else compares character by character.
    """
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i].isdigit() and b[j].isdigit():
            run_a, run_b = DIGITS.match(a, i).group(), DIGITS.match(b, j).group()  # type: ignore[union-attr]
            if run_a[0] == "0" or run_b[0] == "0":
                order = _compare(run_a, run_b)  # "fractional": left-aligned, digit by digit
            else:
                order = _compare(len(run_a), len(run_b)) or _compare(run_a, run_b)
            if order:
                return order
            i, j = i + len(run_a), j + len(run_b)
        elif a[i] != b[j]:
            return _compare(a[i], b[j])
        else:
            i, j = i + 1, j + 1
    return _compare(len(a) - i, len(b) - j)


def _compare(x: Any, y: Any) -> int:
    return int(x > y) - int(x < y)


def category(name: str) -> int:
    """ruff's ``InferredMemberType``: 0 for CONSTANTS, 1 for Classes, 2 for the rest."""
    if len(name) > 1 and name.isupper():
        return 0
    return 1 if name[:1].isupper() else 2


def isort_compare(a: str, b: str) -> int:
    """ruff's RUF022 "isort-style" order: CONSTANTS, then Classes, then the rest, each naturally sorted."""
    return _compare(category(a), category(b)) or natural_compare(a, b)


DIGITS = re.compile(r"\d+")
isort_key = functools.cmp_to_key(isort_compare)


def top_level_names() -> Set[str]:
    """Public names the package's ``__init__`` defines or imports (``from __future__`` aside)."""
    tree = ast.parse(Path(inspect.getfile(sume_urllib3)).read_text(encoding="utf-8"))
    names: Set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


def public_objects() -> List[Tuple[str, Any]]:
    """The classes and functions listed in ``__all__``."""
    objects = [(name, getattr(sume_urllib3, name)) for name in sume_urllib3.__all__]
    return [(name, obj) for name, obj in objects if inspect.isclass(obj) or inspect.isfunction(obj)]


# --- __all__ ---------------------------------------------------------------------------------


def test_isort_key_orders_as_ruff_does() -> None:
    """The key puts constants first, then classes, then the rest, with numbers in natural order."""
    names = [
        "wait_seconds",
        "Policy",
        "ANY",
        "__version__",
        "Job2",
        "Job10",
        "IN_USE_WAIT",
        "A",
        "sume_record",
    ]
    assert sorted(names, key=isort_key) == [
        "ANY",
        "IN_USE_WAIT",
        "A",
        "Job2",
        "Job10",
        "Policy",
        "__version__",
        "sume_record",
        "wait_seconds",
    ]


def test_all_is_sorted_isort_style() -> None:
    """``__all__`` is in the order ruff's RUF022 keeps it, without duplicates."""
    names = list(sume_urllib3.__all__)
    assert names == sorted(names, key=isort_key)
    assert len(names) == len(set(names))


def test_every_entry_of_all_exists() -> None:
    """Every name in ``__all__`` is an attribute of the package."""
    missing = [name for name in sume_urllib3.__all__ if not hasattr(sume_urllib3, name)]
    assert missing == []


def test_all_lists_every_public_name_of_init() -> None:
    """Every public name ``__init__`` defines or re-exports is in ``__all__``."""
    assert top_level_names() - set(sume_urllib3.__all__) == set()


def test_all_lists_every_public_attribute() -> None:
    """Every public attribute of the package (submodules aside) is in ``__all__``."""
    attributes = {
        name
        for name, value in vars(sume_urllib3).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and type(value).__module__ != "__future__"  # `from __future__ import annotations`
    }
    assert attributes - set(sume_urllib3.__all__) == set()


def test_version_is_exported() -> None:
    """``__version__`` is listed and is a string."""
    assert "__version__" in sume_urllib3.__all__
    assert isinstance(sume_urllib3.__version__, str)


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_contract_names_are_exported(name: str) -> None:
    """Every everyday object of the contract is importable from the package and listed in ``__all__``."""
    assert name in sume_urllib3.__all__
    assert getattr(sume_urllib3, name) is not None


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in NAMESPACED for n in names])
def test_namespaced_names_are_exported_there_only(module: str, name: str) -> None:
    """The rest of the contract is in its namespace's ``__all__``, not at the top level."""
    namespace = importlib.import_module(module)
    assert name in namespace.__all__
    assert getattr(namespace, name) is not None
    assert not hasattr(sume_urllib3, name)


# --- docstrings ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "obj"), public_objects(), ids=[name for name, _ in public_objects()])
def test_public_objects_have_a_one_sentence_summary(name: str, obj: Any) -> None:
    """Every public class and function has its own docstring whose first line is one sentence."""
    doc = obj.__doc__
    assert doc, f"{name} has no docstring of its own"
    first = inspect.cleandoc(doc).splitlines()[0].strip()
    assert first.endswith("."), f"{name}: the summary line does not end a sentence: {first!r}"
    assert not re.search(r"[.!?]\s+[A-Z]", first[:-1]), f"{name}: the summary line is several sentences"
    assert not first.startswith(name + "("), f"{name}: the summary is the generated signature"


def documented_parameters(doc: str) -> Set[str]:
    """Names given in ``:param a:`` or ``:param a, b:`` fields."""
    names: Set[str] = set()
    for group in re.findall(r":param\s+([\w\s,]+?):", doc):
        names.update(part.strip() for part in group.split(",") if part.strip())
    return names


@pytest.mark.parametrize("name", DOCUMENTED_CONSTRUCTORS)
def test_every_constructor_parameter_is_documented(name: str) -> None:
    """Each parameter of ``__init__`` (but self and ``**kwargs``) has a ``:param`` in the class docstring."""
    cls = getattr(sume_urllib3, name)
    parameters = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    assert parameters, f"{name}.__init__ has no parameters to document"
    undocumented = [p for p in parameters if p not in documented_parameters(cls.__doc__ or "")]
    assert undocumented == [], f"{name} does not document {undocumented}"


# --- sume_urllib3.exceptions ---------------------------------------------------------------


def test_every_exception_class_is_in_the_exceptions_module() -> None:
    """Every exception class the package defines is listed in ``sume_urllib3.exceptions``."""
    import sume_urllib3.exceptions as exceptions

    defined = {
        name
        for module in (sume_urllib3._errors, sume_urllib3._jobs)
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, Exception)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
    }
    assert defined == set(exceptions.__all__)


def test_the_package_answers_no_name_it_does_not_define() -> None:
    """No module ``__getattr__``: a misspelt import fails at once, and type-checks as an error."""
    assert not hasattr(sume_urllib3, "__getattr__")
    with pytest.raises(ImportError):
        exec("from sume_urllib3 import SumeConectionError", {})
