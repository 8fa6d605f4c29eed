"""``gradient-explorer run`` / ``python -m explorer run``: start the app with its settings and your ops.

The app is ``explorer/ui/app.py`` run by ``python -m streamlit run``, which replaces this process, so this
module does not import streamlit. The settings of ``explorer/ui/config.toml`` (the file ``.streamlit/config.toml``
links to in a clone) are passed as command-line flags: an installed wheel has no ``.streamlit`` folder.
A flag you pass yourself (``--server.port 9000``) wins over the file.

``--ops`` names the operator's own modules (paths to ``.py`` files or module names, comma-separated or
repeated); they reach the app as the environment variable :data:`OPS_ENV`, read once at server start.
Their functions run in worker processes (:mod:`explorer.worker`), which the app starts at its first run
(:func:`explorer.loaded.start_workers`; :mod:`explorer.loaded.lanes` knows them), not here: this process is replaced by Streamlit's (``exec``), and
a worker started before would lose its parent. The workers' settings (``GRADIENT_EXPLORER_CALL_SECONDS``,
``GRADIENT_EXPLORER_CHECK_SECONDS``, ``GRADIENT_EXPLORER_WORKER_MEMORY_MB``) pass through the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

import explorer.loaded.lanes as lanes

OPS_ENV = lanes.OPS_ENV
UI_DIR = Path(__file__).resolve().parent / "ui"
APP_SCRIPT = UI_DIR / "app.py"
CONFIG_FILE = UI_DIR / "config.toml"


def start_user_code_worker() -> bool:
    """Start the sweeps' worker for the modules of :data:`OPS_ENV`, if any, without importing TensorFlow:
    the app script calls this first thing, so the worker imports while the server does. True if started."""
    targets = lanes.parse_targets(os.environ.get(OPS_ENV))
    if targets:
        lanes.worker_for(lanes.Modules(targets, str(Path.cwd().resolve())), lanes.INTERACTIVE)
    return bool(targets)


def config_flags(config_file: Path = CONFIG_FILE) -> list[str]:
    """``--section.option=value`` for every setting of a Streamlit ``config.toml``, in file order."""
    with config_file.open("rb") as handle:
        config = tomllib.load(handle)
    flags = []
    for section, options in config.items():
        for option, value in options.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            flags.append(f"--{section}.{option}={text}")
    return flags


def _flag_name(arg: str) -> str | None:
    return arg[2:].split("=", 1)[0] if arg.startswith("--") and "." in arg.split("=", 1)[0] else None


def command(ops: list[str], streamlit_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The server's argv and environment: file settings first, minus any the caller passes itself."""
    own = {_flag_name(arg) for arg in streamlit_args} - {None}
    defaults = [flag for flag in config_flags() if _flag_name(flag) not in own]
    argv = [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *defaults, *streamlit_args]
    env = dict(os.environ)
    targets = [target.strip() for joined in ops for target in joined.split(",") if target.strip()]
    if targets:
        env[OPS_ENV] = ",".join(targets)
    return argv, env


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="gradient-explorer run",
        description="Start Gradient Explorer at http://localhost:8501. Other --section.option flags go to Streamlit.",
    )
    parser.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="TARGETS",
        help="your own ops: .py files or module names, comma-separated or repeated",
    )
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Replace this process by the server (``exec``), so signals and the exit code are Streamlit's own."""
    args, streamlit_args = parse(sys.argv[1:] if argv is None else argv)
    server_argv, env = command(args.ops, streamlit_args)
    sys.stdout.flush()
    os.execve(server_argv[0], server_argv, env)
    return 0  # not reached
