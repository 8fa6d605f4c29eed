"""The layout of the house: no import circle, arrows one way, public paths that keep working.

The import graph is read from the source (``ast``), every ``import`` counted, at module level or inside a
function: a lazy import is still an arrow. ``make lint`` runs this file too, so a circle cannot come back.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ops", "explorer")
# explorer's top level: the packages of what the product does, and the few modules that cut across them.
MAX_TOP_LEVEL_MODULES = 8


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imported_names(path: Path, name: str) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved against ``name``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        targets = {target for target in imported_names(path, name) if target in modules and target != name}
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None. Iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_find_cycle_finds_a_circle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imported_names_resolve_relative_and_lazy_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from . import sibling\n    from ..up import thing\n    import os.path\n")
    assert imported_names(source, "pkg.sub.mod") == {"pkg.sub", "pkg.sub.sibling", "pkg.up", "pkg.up.thing",
                                                     "os.path"}


def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 50  # the walk saw the project, not an empty folder
    assert find_cycle(graph) is None


def test_no_circle_between_packages():
    """Between explorer's packages and top-level modules the arrows point one way as well."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {}
    for source, targets in import_graph().items():
        graph.setdefault(unit(source), set()).update(unit(t) for t in targets if unit(t) != unit(source))
    assert find_cycle(graph) is None


def test_arrows_point_from_ui_to_computation_to_ops():
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("ops"):
            assert not {t for t in targets if t.startswith("explorer")}, f"{name} imports explorer"
        elif name.startswith("explorer") and not name.startswith(("explorer.ui", "explorer.bench")):
            assert not {t for t in targets if t.startswith("explorer.ui")}, f"{name} imports the pages"


def test_only_the_pages_import_streamlit():
    allowed = ("explorer.ui", "explorer.bench")  # the benchmark drives the app through streamlit.testing
    for name, path in project_modules().items():
        if name.startswith(allowed):
            continue
        roots = {target.split(".")[0] for target in imported_names(path, name)}
        assert "streamlit" not in roots, f"{name} imports streamlit"


def test_explorer_top_level_is_small():
    top = [p.stem for p in (ROOT / "explorer").glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, sorted(top)
    packages = {p.name for p in (ROOT / "explorer").iterdir() if (p / "__init__.py").exists()}
    assert {"explore", "checker", "train", "expr", "ui", "bench"} <= packages


# -- public paths ------------------------------------------------------------------------------------------
PUBLIC_NAMES = [
    "explorer.sweep", "explorer.Sweep", "explorer.decimate", "explorer.special_points", "explorer.metrics",
    "explorer.metrics_table", "explorer.testing.assert_custom_gradient", "explorer.train.compare",
    "explorer.train.Run", "explorer.train.Session", "explorer.explore.figures.main_figure",
    "explorer.checker.runner.check", "explorer.checker.common.TIME_LIMIT", "explorer.testing.GradientCheckWarning", "ops.inputs.find_inputs", "explorer.train.presets.yin2019",
    "ops.get", "ops.names", "ops.from_function", "ops.SurrogateLayer", "ops.OpSpec",
]


def resolve(dotted: str):
    """The module or attribute a dotted name stands for."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as error:
        if not dotted.startswith(error.name or "\0"):  # a module that exists but imports something missing
            raise
    module_path, _, attribute = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError:  # a dotted attribute of a package (explorer.train.compare)
        module = resolve(module_path)
    return getattr(module, attribute)


@pytest.mark.parametrize("dotted", PUBLIC_NAMES)
def test_public_name_imports(dotted):
    assert resolve(dotted) is not None


def documented_names() -> set[str]:
    """``explorer.x.y`` and ``ops.x`` names written as code in README.md and docs/*.md."""
    texts = [ROOT / "README.md", ROOT / "RUNBOOK.md", *sorted((ROOT / "docs").glob("*.md"))]
    names: set[str] = set()  # host names in the serving examples (explorer.example.com) are not modules
    for path in texts:
        for code in re.findall(r"`([^`\n]+)`", path.read_text(encoding="utf-8")):
            names.update(re.findall(r"(?<![\w./-])((?:explorer|ops)(?:\.[A-Za-z_]\w*)+)", code))
    return {name for name in names if not name.endswith((".com", ".org", ".net"))}


def test_every_public_name_in_the_docs_imports():
    names = documented_names()
    assert "explorer.testing.assert_custom_gradient" in names or "explorer.testing" in names
    failures = []
    for dotted in sorted(names):
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as error:
            failures.append(f"{dotted}: {error}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("command", ["verify", "run", "bench"])
def test_the_command_line_knows_each_command(command):
    from explorer.__main__ import COMMANDS

    module_path, _ = COMMANDS[command]
    assert callable(importlib.import_module(module_path).main)


def test_python_dash_m_explorer_lists_its_commands():
    done = subprocess.run([sys.executable, "-m", "explorer"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert all(command in done.stderr for command in ("run", "verify", "bench"))


# -- the README a newcomer reads ---------------------------------------------------------------------------
def test_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "make run" in text and "make test" in text
    set_up = text.index("## Set up")
    next_section = text.index("\n## ", set_up)
    assert set_up < text.index("make run") < text.index("make test") < next_section  # the first section a newcomer reads


def test_every_relative_link_and_picture_in_the_docs_exists():
    texts = [ROOT / "README.md", ROOT / "RUNBOOK.md", *sorted((ROOT / "docs").glob("*.md"))]
    pictures = 0
    for path in texts:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#")):
                continue
            file_part = target.split("#")[0]
            assert (path.parent / file_part).exists(), f"{path.name} links to missing {target}"
            if file_part.endswith(".png"):
                assert (path.parent / file_part).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                pictures += 1
    assert pictures >= 1  # the README's screenshot of the Explore page


# -- the map a newcomer reads: docs/architecture.md --------------------------------------------------------
MAP_LINE = re.compile(r"^\s*- `((?:ops|explorer)/(?:[\w/]*\.py|(?:\w+/)*))`: (\S.*)$")


def architecture_map(text: str) -> dict[str, str]:
    """``path -> what it holds`` from the map's lines ``- `explorer/checker/plan.py`: which checks run ...``."""
    return {match[1]: match[2] for match in map(MAP_LINE.match, text.splitlines()) if match}


def paths_to_map() -> set[str]:
    """Every package (a folder with ``__init__.py``) and every module of ``ops`` and ``explorer``."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py":
                found.add(relative.removesuffix("__init__.py"))
            elif path.name != "__main__.py":
                found.add(relative)
    return found


def test_the_map_reader_takes_a_module_and_a_package_line_and_nothing_else():
    text = "- `ops/`: ops\n- `ops/user.py`: your function as an op\n  - `explorer/checker/`: the checker\n- `ops/x.py` no colon\n"
    assert architecture_map(text) == {"ops/": "ops", "ops/user.py": "your function as an op", "explorer/checker/": "the checker"}


def test_every_package_and_module_has_one_line_in_the_architecture_map():
    mapped = architecture_map((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    expected = paths_to_map()
    assert sorted(expected - set(mapped)) == [], "add a line `- `path`: what it holds` to docs/architecture.md"
    assert sorted(path for path in set(mapped) - expected if not (ROOT / path).exists()) == [], "the map names a path that is gone"


# -- the version a user reports: pyproject.toml, CHANGELOG.md, --version ------------------------------------
def _project_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_the_changelog_starts_with_the_project_version_and_lists_releases_newest_first():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.MULTILINE)
    assert releases and releases[0][0] == _project_version()
    as_tuples = [tuple(int(part) for part in number.split(".")) for number, _ in releases]
    assert as_tuples == sorted(as_tuples, reverse=True) and [day for _, day in releases] == sorted((day for _, day in releases), reverse=True)


def test_dash_dash_version_prints_the_installed_version():
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "explorer", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and done.stdout == f"gradient-explorer {version('gradient-explorer')}\n"
    assert version("gradient-explorer") == _project_version(), "reinstall: make .venv/.dev-installed"
