"""Every heavy scenario names its smaller twin, and the twin runs in CI (docs/development/testing.md).

A test marked ``heavy`` (minutes of real nodes or real training) runs with ``tools/test --heavy``, not in CI's
``tools/test``. The mark carries ``twin="PATH::TEST"`` (or ``PATH::TEST[ID]`` for one case of a parametrized test):
the test in CI that takes the same path on less. Read from the test files' syntax, so that a renamed or deleted
twin, or a twin marked heavy too, fails here and not in a reader's trust.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT


@dataclass(frozen=True)
class HeavyMark:
    where: str  # PATH::TEST, or PATH::TEST[ID] for one case
    twin: str | None


def _heavy_call(node: ast.expr) -> ast.Call | None:
    """``pytest.mark.heavy(...)`` as written, else None (``pytest.mark.heavy`` bare: a call with no twin)."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and target.attr == "heavy" and ast.unparse(target) == "pytest.mark.heavy":
        return node if isinstance(node, ast.Call) else ast.Call(func=target, args=[], keywords=[])
    return None


def _twin(call: ast.Call) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "twin" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


def _param_marks(call: ast.Call) -> tuple[str, list[ast.expr]]:
    """A ``pytest.param(...)``'s id (its ``id=``, else pytest's own for plain values: them joined by "-"; "?" where
    neither says it) and marks."""
    ident = next((k.value.value for k in call.keywords if k.arg == "id" and isinstance(k.value, ast.Constant)), None)
    if ident is None and all(isinstance(a, ast.Constant) for a in call.args):
        ident = "-".join(str(a.value) for a in call.args if isinstance(a, ast.Constant))
    marks = next((k.value for k in call.keywords if k.arg == "marks"), None)
    found = list(marks.elts) if isinstance(marks, (ast.List, ast.Tuple)) else [marks] if marks is not None else []
    return (str(ident) if ident is not None else "?"), found


def heavy_marks(path: Path, root: Path = ROOT) -> list[HeavyMark]:
    relative = path.relative_to(root).as_posix()
    marks = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        for decorator in node.decorator_list:
            call = _heavy_call(decorator)
            if call is not None:
                marks.append(HeavyMark(f"{relative}::{node.name}", _twin(call)))
            for inner in ast.walk(decorator):
                if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "pytest.param":
                    ident, param_marks = _param_marks(inner)
                    for mark in param_marks:
                        heavy = _heavy_call(mark)
                        if heavy is not None:
                            marks.append(HeavyMark(f"{relative}::{node.name}[{ident}]", _twin(heavy)))
    return marks


def _all_heavy() -> list[HeavyMark]:
    return [mark for path in sorted((ROOT / "tests").rglob("test_*.py")) for mark in heavy_marks(path)]


def _case_ids(test: ast.FunctionDef) -> set[str]:
    """The ids of a parametrized test's cases that its decorators spell out: ``ids=[...]``, ``pytest.param``'s
    ``id=`` or its plain values, and plain values (a tuple's joined by "-", as pytest joins them)."""
    found: set[str] = set()
    for decorator in test.decorator_list:
        if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.parametrize"):
            continue
        for keyword in decorator.keywords:
            if keyword.arg == "ids" and isinstance(keyword.value, (ast.List, ast.Tuple)):
                found |= {str(e.value) for e in keyword.value.elts if isinstance(e, ast.Constant)}
        values = decorator.args[1] if len(decorator.args) > 1 else None
        for case in values.elts if isinstance(values, (ast.List, ast.Tuple)) else []:
            if isinstance(case, ast.Call) and ast.unparse(case.func) == "pytest.param":
                found.add(_param_marks(case)[0])
            elif isinstance(case, ast.Constant):
                found.add(str(case.value))
            elif isinstance(case, ast.Tuple) and all(isinstance(e, ast.Constant) for e in case.elts):
                found.add("-".join(str(e.value) for e in case.elts if isinstance(e, ast.Constant)))
    return found


def _defines(where: str) -> bool:
    """Whether ``PATH::TEST`` (or ``PATH::TEST[ID]``) names a test function, and that case of it."""
    path, _, test = where.partition("::")
    name, _, case = test.partition("[")
    file = ROOT / path
    if not file.is_file():
        return False
    tree = ast.parse(file.read_text())
    found = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    return found is not None and (not case or case.removesuffix("]") in _case_ids(found))


def test_every_heavy_scenario_names_a_twin_that_exists_and_runs_in_ci() -> None:
    heavy = _all_heavy()
    assert heavy, "no test is marked heavy: tools/test --heavy would run nothing"
    where = {mark.where for mark in heavy}
    whole = {w for w in where if "[" not in w}
    for mark in heavy:
        assert not mark.where.endswith("[?]"), f"{mark.where}: give the heavy case an id= to name it by"
        assert mark.twin, f"{mark.where}: pytest.mark.heavy needs twin='PATH::TEST', the smaller test CI runs"
        assert _defines(mark.twin), f"{mark.where}: its twin {mark.twin} is not a test (or a case of one) of that file"
        assert mark.twin not in where and mark.twin.split("[")[0] not in whole, (
            f"{mark.where}: its twin {mark.twin} is heavy too: CI would run neither"
        )


def test_the_reader_finds_a_mark_on_a_test_and_on_one_case(tmp_path: Path) -> None:
    """The reader above, on a file of its own: a mark on a whole test, one on one case, and a bare mark."""
    sample = tmp_path / "tests" / "test_sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "import pytest\n"
        "@pytest.mark.heavy(twin='tests/a.py::test_small')\n"
        "def test_whole(): ...\n"
        "@pytest.mark.parametrize('x', [1, pytest.param(2, id='two', marks=pytest.mark.heavy(twin='t.py::test_y'))])\n"
        "def test_cases(x): ...\n"
        "@pytest.mark.parametrize('x', ['a', pytest.param('b', marks=[pytest.mark.heavy(twin='t.py::test_a')])])\n"
        "def test_named(x): ...\n"
        "@pytest.mark.heavy\n"
        "def test_bare(): ...\n"
    )
    assert heavy_marks(sample, tmp_path) == [
        HeavyMark("tests/test_sample.py::test_whole", "tests/a.py::test_small"),
        HeavyMark("tests/test_sample.py::test_cases[two]", "t.py::test_y"),
        HeavyMark("tests/test_sample.py::test_named[b]", "t.py::test_a"),
        HeavyMark("tests/test_sample.py::test_bare", None),
    ]
