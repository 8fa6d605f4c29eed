"""What ``pip install`` of the repository gives: the library, the app, its data files, one command."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # setuptools writes build/ into the tree it builds
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(ROOT / name, source / name)
    for package in ("ops", "explorer"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("gradient_explorer-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def _product_files() -> set[str]:
    files = set()
    for package in ("ops", "explorer"):
        for path in (ROOT / package).rglob("*"):
            relative = path.relative_to(ROOT).as_posix()
            if path.is_file() and "__pycache__" not in relative and not relative.startswith("explorer/bench/"):
                files.add(relative)
    return files


def test_the_wheel_holds_every_product_file_and_no_tooling(wheel):
    names = {name for name in wheel.namelist() if ".dist-info/" not in name}
    assert names == _product_files()  # templates and the Streamlit config included; the benchmark left out
    assert {"explorer/ui/app.py", "explorer/ui/config.toml", "explorer/export_templates/op_module.py.tmpl"} <= names
    assert not any(name.startswith(("tests/", "examples/", "explorer/bench/")) for name in names)


def test_the_wheel_installs_the_command_and_the_pinned_requirements(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    assert parser["console_scripts"]["gradient-explorer"] == "explorer.__main__:main"
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    required = {line.split(": ", 1)[1] for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")}
    pinned = {line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")}
    assert {line for line in required if "extra ==" not in line} == pinned
    # the notebook extra (explorer.interact), the images extra (explorer.plot(..., save=...)), the backends extra
    # (verify --backends: JAX's CPU build) and the examples extra (scikit-learn's digits), and only they
    by_extra: dict[str, set[str]] = {}
    for line in required:
        if "extra ==" in line:
            requirement, marker = (part.strip() for part in line.split(";"))
            by_extra.setdefault(marker, set()).add(re.split(r"[<>=!~ ]", requirement)[0])
    assert by_extra == {
        'extra == "notebook"': {"ipywidgets", "anywidget"},
        'extra == "images"': {"kaleido"},
        'extra == "backends"': {"jax", "jaxlib"},
        'extra == "examples"': {"scikit-learn"},
    }
