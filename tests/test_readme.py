"""Every ```python block of README.md (and of docs/*.md) runs, so the documentation cannot drift from the code.

Each block runs in a fresh namespace in a process of its own (a worker, forked from the fork server: TensorFlow
is imported there, nothing of it initialised), with the clone's root on ``sys.path`` (a block
may import ``ops``, ``explorer`` and ``examples.*``) and a temporary folder as its working directory, holding
a copy of ``tests/snapshots`` (the README's pinned example compares against the committed snapshot, as in a
team's clone; with ``CI=true`` a missing one fails, as it should). A block that defines ``test_*`` functions (the guardrail example) has them called too, as pytest would.
Blocks in other languages (shell, text) are not run.
"""

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from explorer import worker

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

def run_block(code: str, where: str, folder: str) -> str | None:
    """In a worker process: ``code`` as a module of its own (tracebacks name ``where``) with ``folder`` as the
    working directory, then every test_* function it defined, as pytest would; the traceback if anything raised."""
    import traceback

    os.chdir(folder)
    sys.path.insert(0, "")  # as ``python -c``: the working directory first
    namespace = {"__name__": "readme_block"}
    try:
        exec(compile(code, where, "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                value()
    except SystemExit as error:
        return None if error.code in (0, None) else traceback.format_exc()  # as the exit status of ``python -c``
    except BaseException:  # noqa: BLE001 - KeyboardInterrupt too: the block failed
        return traceback.format_exc()
    return None


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
def test_documented_python_block_runs(where, code, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # for the processes a block starts (the guardrail's worker)
    shutil.copytree(ROOT / "tests" / "snapshots", tmp_path / "tests" / "snapshots")
    running = worker.Worker("readme-block")
    try:
        failure = running.call(run_block, code, where, str(tmp_path), time_limit=600)
    finally:
        running.close()
    assert failure is None, f"{where}: the block failed:\n{code}\n{failure[-3000:]}"
