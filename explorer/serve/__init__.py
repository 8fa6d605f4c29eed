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

Private by default: the server listens on 127.0.0.1 (``server.address`` in the config file), so only this
machine reaches it. ``--share`` binds every interface (0.0.0.0); ``--server.address`` names one. The first
line printed says who can reach it. ``--replicas N`` (or ``--auth FILE``) starts N servers behind HAProxy
instead (:mod:`explorer.serve.replicas`). ``--login oidc`` asks every visitor to sign in with the provider of the
operator's ``secrets.toml`` (:mod:`explorer.serve.login`); the server then runs under
:mod:`explorer.ui.guarded_server`, which refuses its content routes to a browser that has not signed in.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

import explorer.loaded.lanes as lanes
from explorer.serve import login as login_settings

OPS_ENV = lanes.OPS_ENV
RUNS_ENV = "GRADIENT_EXPLORER_RUNS"  # --runs: the folder of training runs the Runs page lists (absolute path)
DEFAULT_RUNS = "runs"  # --runs' default, relative to the folder the server starts in
REPLICA_ENV = "GRADIENT_EXPLORER_REPLICA"  # set by --replicas: the replica's name, shown in the page's sidebar
UI_DIR = Path(__file__).resolve().parents[1] / "ui"
APP_SCRIPT = UI_DIR / "app.py"
CONFIG_FILE = UI_DIR / "config.toml"
SHARED_ADDRESS = "0.0.0.0"  # every IPv4 interface: what --share binds
LOOPBACK_HOSTS = ("localhost", "::1")


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


def flag_value(streamlit_args: list[str], name: str) -> str | None:
    """The last value given for ``--name`` in ``streamlit_args`` (``--name=v`` or ``--name v``), else None."""
    value = None
    for index, arg in enumerate(streamlit_args):
        if arg == f"--{name}" and index + 1 < len(streamlit_args):
            value = streamlit_args[index + 1]
        elif arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def file_setting(name: str, config_file: Path = CONFIG_FILE) -> str:
    """``section.option`` of the config file, as the flag would spell it."""
    section, option = name.split(".", 1)
    with config_file.open("rb") as handle:
        return str(tomllib.load(handle)[section][option])


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in LOOPBACK_HOSTS


def reach_line(address: str, port: int | str, login: bool = False) -> str:
    """The startup line that says who can reach a server bound to ``address`` (``login``: everyone signs in)."""
    if is_loopback(address):
        return (
            f"Gradient Explorer: http://{address}:{port}, reachable from this machine only. "
            "To open it to your network: gradient-explorer run --share (see docs/serving.md)."
        )
    where = "every network interface (0.0.0.0)" if address == SHARED_ADDRESS else f"{address}"
    if login:
        return (
            f"Gradient Explorer: port {port} on {where}, reachable by anyone who can reach this machine; everyone signs "
            "in with your identity provider first (--login oidc)."
        )
    return (
        f"Gradient Explorer: port {port} on {where}, reachable by anyone who can reach this machine; they can drive "
        "the modules of --ops and their training. Put a sign-in in front with --login oidc, or a password with "
        "--auth FILE (see docs/serving.md)."
    )


GUARDED_SERVER = "explorer.ui.guarded_server"  # `python -m` this instead of streamlit when login is on


def command(
    ops: list[str], streamlit_args: list[str], share: bool = False, login: dict[str, str] | None = None,
    runs: str | Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The server's argv and environment: file settings first, minus any the caller passes itself.
    ``share`` binds every interface unless ``--server.address`` is given. ``login`` (from
    :func:`explorer.serve.login.login_environment`) turns sign-in on: Streamlit reads the operator's secrets file,
    identities come from the signed cookie alone (no trusted headers), and the server is the guarded one.
    ``runs`` (``--runs``) reaches the app as :data:`RUNS_ENV`, made absolute here, so every replica reads the same
    folder."""
    if share and flag_value(streamlit_args, "server.address") is None:
        streamlit_args = [f"--server.address={SHARED_ADDRESS}", *streamlit_args]
    own = {_flag_name(arg) for arg in streamlit_args} - {None}
    defaults = [flag for flag in config_flags() if _flag_name(flag) not in own]
    module, forced = "streamlit", []
    if login:
        module = GUARDED_SERVER
        # last, so they win: a header set by whoever reaches the server must never name the user
        forced = [f"--secrets.files={login[login_settings.SECRETS_ENV]}", "--server.trustedUserHeaders={}"]
    argv = [sys.executable, "-m", module, "run", str(APP_SCRIPT), *defaults, *streamlit_args, *forced]
    env = ops_environment(ops) | (login or {})
    if runs is not None:
        env[RUNS_ENV] = str(Path(runs).expanduser().absolute())
    return argv, env


def runs_folder(environ: dict[str, str] | None = None) -> Path:
    """The runs folder the app lists: :data:`RUNS_ENV` as ``gradient-explorer run --runs`` set it, else ``./runs``
    of the folder the server runs in (``streamlit run app.py`` without the launcher)."""
    value = (os.environ if environ is None else environ).get(RUNS_ENV)
    return Path(value) if value else Path.cwd() / DEFAULT_RUNS


def ops_environment(ops: list[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with :data:`OPS_ENV` naming the targets of every ``--ops``."""
    env = dict(os.environ if base is None else base)
    targets = [target.strip() for joined in ops for target in joined.split(",") if target.strip()]
    if targets:
        env[OPS_ENV] = ",".join(targets)
    return env


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="gradient-explorer run",
        description="Start Gradient Explorer at http://127.0.0.1:8501 (this machine only). "
        "Other --section.option flags go to Streamlit.",
    )
    parser.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="TARGETS",
        help="your own ops: .py files or module names, comma-separated or repeated",
    )
    parser.add_argument(
        "--runs", default=DEFAULT_RUNS, metavar="DIR",
        help="the folder of training runs the Runs page lists (the watch callback writes them; default ./runs)",
    )  # fmt: skip
    parser.add_argument(
        "--share", action="store_true",
        help="listen on every network interface (0.0.0.0), not only on this machine's loopback",
    )  # fmt: skip
    parser.add_argument(
        "--replicas", type=int, default=0, metavar="N",
        help="N app servers on local ports behind HAProxy on the public port (sticky by cookie)",
    )  # fmt: skip
    parser.add_argument(
        "--auth", metavar="HTPASSWD_FILE",
        help="HTTP basic auth at the proxy from an htpasswd file (bcrypt or SHA-512 crypt); implies --replicas 1",
    )  # fmt: skip
    parser.add_argument(
        "--login", choices=login_settings.LOGIN_MODES,
        help="every visitor signs in with the OpenID Connect provider of the [auth] section of --secrets",
    )  # fmt: skip
    parser.add_argument(
        "--secrets", metavar="SECRETS_TOML",
        help="the secrets file with the [auth] section (default ~/.streamlit/secrets.toml); never in the repository",
    )  # fmt: skip
    parser.add_argument(
        "--max-session-hours", metavar="HOURS",
        help=f"with --login: sign in again after this long (default {login_settings.DEFAULT_MAX_SESSION_HOURS:g})",
    )  # fmt: skip
    parser.add_argument(
        "--allow", metavar="EMAILS",
        help="with --login: only these, comma-separated: '@example.com' (a domain) or 'alice@example.com'",
    )  # fmt: skip
    return parser.parse_known_args(argv)
