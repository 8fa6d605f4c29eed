"""Project-wide source checks that ruff does not make.

A module-level name bound twice by ``def``/``class`` (or a ``def`` over an import or assignment)
silently replaces the first binding for every caller after it. ruff's F811 reports it only when the
first binding is unused before the second; ``explorer/state.py`` had two ``_fmt`` (``.10g``, then
``:g``), the first used in between, and URLs lost digits (issue 31).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("explorer", "ops", "tests", "examples", "verification")


def _python_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for folder in SOURCE_DIRS:
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return [path for path in files if path.is_file() and ".venv" not in path.parts]


def _bindings(statement: ast.stmt) -> list[tuple[str, str]]:
    """(name, how) for each name one module-level statement binds; ``how`` is def, class, import or =."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(statement.name, "def")]
    if isinstance(statement, ast.ClassDef):
        return [(statement.name, "class")]
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [((alias.asname or alias.name).split(".")[0], "import") for alias in statement.names]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return [(target.id, "=") for target in targets if isinstance(target, ast.Name)]
    return []


def redefinitions(source: str) -> list[str]:
    """Each module-level ``def``/``class`` whose name an earlier top-level statement already bound.

    Only statements directly in the module body count: a definition inside ``if``/``try`` is the
    usual fallback pattern. Two assignments to one name are not reported (a constant built in two
    steps is normal); a ``def``/``class`` replacing anything is.
    """
    seen: dict[str, tuple[str, int]] = {}
    found = []
    for statement in ast.parse(source).body:
        for name, how in _bindings(statement):
            if name in seen and how in ("def", "class"):
                first_how, first_line = seen[name]
                found.append(f"{name!r}: {how} at line {statement.lineno} replaces the {first_how} at line {first_line}")
            seen[name] = (how, statement.lineno)
    return found


def test_the_check_finds_the_state_py_bug_ruff_missed():
    source = "def _fmt(v):\n    return f'{v:.10g}'\n\nX = _fmt(1.0)\n\ndef _fmt(v):\n    return f'{v:g}'\n"
    assert redefinitions(source) == ["'_fmt': def at line 6 replaces the def at line 1"]
    assert redefinitions("from os import path\nclass path: pass\n") == ["'path': class at line 2 replaces the import at line 1"]
    assert redefinitions("try:\n    from tomllib import loads\nexcept ImportError:\n    def loads(s): ...\n") == []
    assert redefinitions("LIMIT = 1\nLIMIT = LIMIT * 2\n") == []


@pytest.mark.parametrize("path", _python_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_level_name_is_defined_twice(path):
    assert redefinitions(path.read_text(encoding="utf-8")) == []
