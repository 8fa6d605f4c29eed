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


# -- the checker: one function of each name, no private helper shared, modules of a readable size -----------------
CHECKER = ROOT / "explorer" / "checker"
MAX_CHECKER_MODULE_LINES = 800


def _module_functions(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(node, ast.FunctionDef)}


def functions_defined_twice(paths: list[Path]) -> dict[str, list[str]]:
    """Module-level function names defined in more than one of ``paths`` (a check of each kind lives once)."""
    where: dict[str, list[str]] = {}
    for path in paths:
        for name in _module_functions(path):
            where.setdefault(name, []).append(path.name)
    return {name: files for name, files in sorted(where.items()) if len(files) > 1}


def test_the_twice_defined_check_finds_two_check_finites(tmp_path):
    (tmp_path / "user.py").write_text("def check_finite(spec):\n    pass\n\ndef _forward64(x):\n    pass\n")
    (tmp_path / "general.py").write_text("def check_finite(user, found):\n    pass\n\ndef _forward64(x):\n    pass\n")
    (tmp_path / "other.py").write_text("def check_graph(subject):\n    pass\n")
    paths = sorted(tmp_path.glob("*.py"))
    assert functions_defined_twice(paths) == {"_forward64": ["general.py", "user.py"], "check_finite": ["general.py", "user.py"]}


def test_no_two_checker_modules_define_a_function_of_the_same_name():
    assert functions_defined_twice(sorted(CHECKER.glob("*.py"))) == {}


def _project_modules() -> set[str]:
    names = {"app"}
    for folder in ("explorer", "ops"):
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def private_imports(path: Path, modules: set[str]) -> list[str]:
    """``from <project module> import _name``: a private helper used outside its module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_private_import_check_finds_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from explorer.checker.common import _CLONE, Check, __doc__\nfrom os import _exit\n")
    assert private_imports(probe, _project_modules()) == ["explorer.checker.common._CLONE"]


@pytest.mark.parametrize("folder", ["explorer", "ops"])
def test_no_product_module_imports_a_private_helper_of_another(folder):
    modules = _project_modules()
    found = {str(p.relative_to(ROOT)): private_imports(p, modules) for p in sorted((ROOT / folder).rglob("*.py"))}
    assert {path: names for path, names in found.items() if names} == {}


def test_checker_modules_stay_readable():
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in CHECKER.glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_CHECKER_MODULE_LINES} == {}
