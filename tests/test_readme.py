"""Every ```python block of README.md (and of docs/*.md) runs, so the documentation cannot drift from the code.

Each block runs in a fresh namespace in its own process, with the clone's root on ``sys.path`` (a block
may import ``ops``, ``explorer`` and ``examples.*``) and a temporary folder as its working directory, holding
a copy of ``tests/snapshots`` (the README's pinned example compares against the committed snapshot, as in a
team's clone; with ``CI=true`` a missing one fails, as it should). A block that defines ``test_*`` functions (the guardrail example) has them called too, as pytest would.
Blocks in other languages (shell, text) are not run.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

# Runs a block (argv[1], named argv[2] in tracebacks) as a module of its own, then every test_* function it defined.
RUNNER = """
import sys
namespace = {"__name__": "readme_block"}
exec(compile(sys.argv[1], sys.argv[2], "exec"), namespace)
for name, value in list(namespace.items()):
    if name.startswith("test_") and callable(value):
        value()
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of each ```python block."""
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in PYTHON_BLOCK.finditer(text)]


def test_blocks_are_found_as_written():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = 2\nprint(y)\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n"), (9, "y = 2\nprint(y)\n")]


BLOCKS = [
    (f"{path.relative_to(ROOT)}:{line}", code)
    for path in DOCUMENTS
    for line, code in python_blocks(path.read_text(encoding="utf-8"))
]


def test_the_readme_has_python_blocks():
    assert any(where.startswith("README.md:") for where, _ in BLOCKS), "README.md has no ```python block"


@pytest.mark.slow
@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_documented_python_block_runs(where, code, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    shutil.copytree(ROOT / "tests" / "snapshots", tmp_path / "tests" / "snapshots")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, code, where], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{where}: the block failed:\n{code}\n{done.stderr[-3000:]}"
