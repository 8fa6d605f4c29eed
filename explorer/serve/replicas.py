"""``gradient-explorer run --replicas N``: N app servers on local ports behind HAProxy on the public port.

Streamlit keeps a session (its widgets, its training run, its download files) in the process that served
its WebSocket, so every request of one browser must reach one replica. HAProxy, from the operating system's
package (``apt-get install haproxy``), inserts a cookie naming the replica on a browser's first response
(:data:`AFFINITY_COOKIE`): the page, its WebSocket, its downloads and its reconnects follow it, which a hash
of the client address cannot do for a team behind one NAT. A replica whose ``/_stcore/health`` stops
answering is taken out; a browser whose cookie names it is sent to another one, where the page comes back
from its URL. Every response says which replica served it (:data:`REPLICA_HEADER`), and so does the page's
sidebar (:data:`REPLICA_ENV`).

What the operator keeps lives in the operator's config folder (:func:`config_dir`), never in the repository:
the cookie secret all replicas share (made once, mode 0600), the generated ``haproxy-<port>.cfg`` and
``run-<port>.json`` (every process id and port, and HAProxy's runtime API socket, for tools and tests).

The replicas share the machine's cores, so they share its training time too: each marks its trainers in one
private folder (:attr:`ReplicaSet.trainers_dir`), and a Train-page tick trains for its share of everyone training
on the machine (:mod:`explorer.train.time_share`), as a single server would.

A replica that dies is restarted on its port (:meth:`ReplicaSet.supervise`): HAProxy sends its users to the
others meanwhile, and new sessions to it again once its health checks pass; one that keeps dying soon after it
starts (a crash loop: a module that fails to load, memory that runs out) is restarted after longer and longer
delays, then no more. The command says all of it in its log. Stopping this command (Ctrl-C, SIGTERM) stops every
process it started.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from explorer import serve
from explorer.serve import login as login_settings
from explorer.train.started_runs import STARTED_RUNS_ENV
from explorer.train.time_share import TRAINERS_DIR_ENV

REPLICA_ENV = serve.REPLICA_ENV
REPLICA_HEADER = "X-Gradient-Explorer-Replica"  # set by HAProxy on every response: the server that answered
AFFINITY_COOKIE = "GE_REPLICA"  # inserted by HAProxy: the replica of this browser
COOKIE_SECRET_ENV = "STREAMLIT_SERVER_COOKIE_SECRET"  # Streamlit reads any option from STREAMLIT_<SECTION>_<OPTION>
MAX_REPLICAS = 16
# An idle WebSocket (a tab left open) is closed by HAProxy after this long; Streamlit pings it far more often,
# so in practice only a dead client is closed. Above the longest training run (2,000 epochs of 8,192 points,
# minutes here), so a quiet training page is never cut.
TUNNEL_TIMEOUT_SECONDS = 3600
HEALTH_CHECK_SECONDS = 1  # a dead replica is out after 2 failed checks, back after 2 good ones
# How long a health check waits for a replica's answer once connected. A replica whose Python is busy (a user's
# training step, a big sweep) answers late, not never: at HAProxy's default (the 1 s interval) a loaded replica was
# marked down and its users moved to another, their sessions lost. A killed replica refuses the connection and is
# out as fast as before; a hung one after 2 x (1 + 5) s.
HEALTH_CHECK_TIMEOUT_SECONDS = 5
HAPROXY = os.environ.get("GRADIENT_EXPLORER_HAPROXY", "haproxy")
START_TIMEOUT_SECONDS = 180.0
RESTART_DELAYS_SECONDS = (1.0, 5.0, 30.0, 60.0, 300.0)  # before each restart of a replica dying young; then none
HEALTHY_AFTER_SECONDS = 300.0  # a replica that lived this long starts again from the first delay when it dies
# crypt(3) schemes HAProxy's userlist understands on glibc: bcrypt (htpasswd -B), SHA-512 and SHA-256 crypt
# (mkpasswd -m sha-512, openssl passwd -6). Apache's own $apr1$ MD5 (htpasswd's default) is not one of them.
CRYPT_PREFIXES = ("$2y$", "$2b$", "$2a$", "$6$", "$5$", "$y$")
USER_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


@dataclass(frozen=True)
class Replica:
    name: str
    port: int
    pid: int = 0


@dataclass
class _Lifeline:
    """When a replica's process started, how often it died young in a row, and its pending restart."""

    started: float
    failures: int = 0
    restart_at: float | None = None
    given_up: bool = False


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/gradient-explorer`` (``~/.config/gradient-explorer``): the operator's, not the repo's."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gradient-explorer"


def cookie_secret(directory: Path) -> str:
    """The secret every replica signs its cookies with (XSRF token, ``st.login``): made on first use, then
    read from ``directory/cookie_secret`` (mode 0600), so replicas and restarts agree."""
    path = directory / "cookie_secret"
    directory.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


def read_htpasswd(path: Path) -> list[tuple[str, str]]:
    """``(user, crypt hash)`` per line of an htpasswd file; ``ValueError`` naming the line for anything HAProxy
    could not check (an unknown hash scheme, a name with spaces or quotes)."""
    users = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, hashed = line.strip().partition(":")
        if not USER_NAME.fullmatch(name):
            raise ValueError(f"{path}:{number}: a user name of 1-64 letters, digits and ._@- expected, got {name!r}")
        if not hashed.startswith(CRYPT_PREFIXES) or any(c.isspace() or c in "\"'" for c in hashed):
            raise ValueError(
                f"{path}:{number}: user {name}: the password hash must be bcrypt or SHA crypt "
                f"(starting with one of {', '.join(CRYPT_PREFIXES)}); make it with `htpasswd -B` or `openssl passwd -6`"
            )
        users.append((name, hashed))
    if not users:
        raise ValueError(f"{path}: no users (one `name:hash` per line)")
    return users


def haproxy_config(
    address: str, port: int, replicas: list[Replica], stats_socket: Path, users: list[tuple[str, str]] | None = None
) -> str:
    """HAProxy's configuration for ``replicas`` behind ``address:port``; ``users`` turns basic auth on."""
    auth = ""
    userlist = ""
    if users:
        userlist = "userlist operators\n" + "".join(f"    user {name} password {hashed}\n" for name, hashed in users)
        # before any routing: the page, its assets and the WebSocket upgrade (/_stcore/stream) alike
        auth = '    http-request auth realm "Gradient Explorer" unless { http_auth(operators) }\n'
    servers = "".join(
        f"    server {r.name} 127.0.0.1:{r.port} cookie {r.name} check inter {HEALTH_CHECK_SECONDS}s fall 2 rise 2\n"
        for r in replicas
    )
    return f"""# Generated by gradient-explorer run --replicas {len(replicas)}; rewritten at every start.
global
    stats socket {stats_socket} mode 600 level admin
    maxconn 2000

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel {TUNNEL_TIMEOUT_SECONDS}s
    timeout http-request 30s
    timeout check {HEALTH_CHECK_TIMEOUT_SECONDS}s
    option redispatch
    retries 2

{userlist}
frontend public
    bind {address}:{port}
{auth}    default_backend replicas

backend replicas
    balance roundrobin
    cookie {AFFINITY_COOKIE} insert indirect nocache httponly attr SameSite=Lax
    option httpchk GET /_stcore/health
    http-check expect string ok
    http-response set-header {REPLICA_HEADER} %s
{servers}"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.read().decode().strip() == "ok"
    except OSError:
        return False


class ReplicaSet:
    """The replicas and the proxy as child processes of this one; :meth:`stop` ends them all."""

    def __init__(
        self, count: int, ops: list[str], streamlit_args: list[str], share: bool, auth: Path | None,
        login: dict[str, str] | None = None,
        runs: str | Path = serve.DEFAULT_RUNS,
    ):  # fmt: skip
        if not 1 <= count <= MAX_REPLICAS:
            raise ValueError(f"--replicas must be in [1, {MAX_REPLICAS}], got {count}")
        self.users = read_htpasswd(auth) if auth else None
        user_address = serve.flag_value(streamlit_args, "server.address")
        self.address = user_address or (serve.SHARED_ADDRESS if share else serve.file_setting("server.address"))
        self.port = int(serve.flag_value(streamlit_args, "server.port") or serve.file_setting("server.port"))
        # the replicas listen on loopback ports of their own; only the proxy takes the public address and port
        self.streamlit_args = [
            arg for index, arg in enumerate(streamlit_args)
            if not _flag_or_its_value(streamlit_args, index, ("server.address", "server.port"))
        ]  # fmt: skip
        self.ops, self.count = ops, count
        self.login = login or {}  # explorer.serve.login.login_environment: every replica reads the same secrets file
        self.runs = Path(runs).expanduser().absolute()  # one folder for every replica: a run shows on each
        self.directory = config_dir()
        self.processes: dict[str, subprocess.Popen] = {}
        self.replicas: list[Replica] = []
        self.proxy: subprocess.Popen | None = None
        self._runtime_dir: Path | None = None
        self._lifelines: dict[str, _Lifeline] = {}

    @property
    def config_path(self) -> Path:
        return self.directory / f"haproxy-{self.port}.cfg"

    @property
    def status_path(self) -> Path:
        return self.directory / f"run-{self.port}.json"

    @property
    def runtime_dir(self) -> Path:
        """A private temporary folder (mode 0700) for this run: HAProxy's socket, the machine's trainers."""
        if self._runtime_dir is None:
            self._runtime_dir = Path(tempfile.mkdtemp(prefix="gradient-explorer-"))
        return self._runtime_dir

    @property
    def stats_socket(self) -> Path:
        """HAProxy's runtime API (a socket path has at most ~100 characters: hence a short temporary folder)."""
        return self.runtime_dir / f"haproxy-{self.port}.sock"

    @property
    def trainers_dir(self) -> Path:
        """Every replica marks its trainers here, so that the machine's training time is shared by all of them
        (:mod:`explorer.train.time_share`): N replicas train no more per second than one."""
        folder = self.runtime_dir / "trainers"
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder

    def start(self) -> None:
        if shutil.which(HAPROXY) is None:
            raise RuntimeError(f"{HAPROXY} not found: install HAProxy (apt-get install -y haproxy) to run replicas")
        for number in range(1, self.count + 1):
            self.replicas.append(self._launch(Replica(f"r{number}", _free_port())))
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        for replica in self.replicas:
            while not _healthy(replica.port):
                if self.processes[replica.name].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"replica {replica.name} did not start (see its lines above)")
                time.sleep(0.2)
        self.config_path.write_text(haproxy_config(self.address, self.port, self.replicas, self.stats_socket, self.users))
        os.chmod(self.config_path, 0o600)  # it may hold password hashes
        self.proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config_path)])
        while not _port_open(self.port):
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy did not start with {self.config_path} (see its lines above)")
            time.sleep(0.1)
        self._write_status()

    def _launch(self, replica: Replica, now: float | None = None) -> Replica:
        """Start (or restart) one app server on its loopback port; the replica with its new process id."""
        flags = [*self.streamlit_args, "--server.address=127.0.0.1", f"--server.port={replica.port}"]
        argv, env = serve.command(self.ops, flags, login=self.login, runs=self.runs)
        secret = cookie_secret(self.directory)
        env |= {REPLICA_ENV: replica.name, COOKIE_SECRET_ENV: secret, TRAINERS_DIR_ENV: str(self.trainers_dir),
                STARTED_RUNS_ENV: str(self.runtime_dir / "started_runs.jsonl")}  # fmt: skip
        self.processes[replica.name] = subprocess.Popen(argv, env=env)
        life = self._lifelines.setdefault(replica.name, _Lifeline(0.0))
        life.started, life.restart_at = time.monotonic() if now is None else now, None
        return replace(replica, pid=self.processes[replica.name].pid)

    def _write_status(self) -> None:
        status = {
            "port": self.port, "address": self.address, "proxy_pid": self.proxy.pid, "config": str(self.config_path),
            "stats_socket": str(self.stats_socket), "replicas": [asdict(r) for r in self.replicas],
        }  # fmt: skip
        self.status_path.write_text(json.dumps(status, indent=2))

    def watch(self, poll_seconds: float = 0.5) -> int:
        """Until the proxy ends or this process is told to stop: restart a replica that died, after a delay that
        grows while it keeps dying young (:data:`RESTART_DELAYS_SECONDS`), and say so in the log. HAProxy sends
        its users to the others meanwhile, and back to it once its health checks pass."""
        while self.proxy is not None and self.proxy.poll() is None:
            self.supervise()
            time.sleep(poll_seconds)
        return self.proxy.returncode if self.proxy is not None else 1

    def supervise(self, now: float | None = None) -> None:
        """One look at every replica: schedule the restart of one that ended, start one whose delay is over."""
        now = time.monotonic() if now is None else now
        for index, replica in enumerate(self.replicas):
            process, life = self.processes[replica.name], self._lifelines[replica.name]
            if life.given_up or process.poll() is None:
                continue
            if life.restart_at is None:
                if now - life.started >= HEALTHY_AFTER_SECONDS:
                    life.failures = 0  # it had lived long enough: this death is not part of a crash loop
                lost = f"replica {replica.name} ended (exit code {process.returncode}): HAProxy sends its users to the others; its sessions and training runs are lost."
                if life.failures >= len(RESTART_DELAYS_SECONDS):
                    life.given_up = True
                    print(f"{lost} It died {life.failures} times within {HEALTHY_AFTER_SECONDS:g} s of starting: not restarted "
                          "again (see its lines above); restart this command to bring it back.", flush=True)  # fmt: skip
                    continue
                delay = RESTART_DELAYS_SECONDS[life.failures]
                life.failures += 1
                life.restart_at = now + delay
                print(f"{lost} Restarting it in {delay:g} s.", flush=True)
            elif now >= life.restart_at:
                self.replicas[index] = self._launch(replica, now)
                self._write_status()
                pid = self.replicas[index].pid
                print(f"replica {replica.name} restarted (pid {pid}, 127.0.0.1:{replica.port})", flush=True)

    def stop(self) -> None:
        children = [*self.processes.values(), *([self.proxy] if self.proxy else [])]
        for process in children:
            if process.poll() is None:
                process.terminate()
        for process in children:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.status_path.unlink(missing_ok=True)
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)


def _flag_or_its_value(args: list[str], index: int, names: tuple[str, ...]) -> bool:
    arg = args[index]
    if any(arg == f"--{name}" or arg.startswith(f"--{name}=") for name in names):
        return True
    return index > 0 and args[index - 1] in {f"--{name}" for name in names}


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def startup_lines(replica_set: ReplicaSet) -> list[str]:
    """What the command prints once everything answers: who can reach it, and what runs where."""
    lines = [serve.reach_line(replica_set.address, replica_set.port, login=bool(replica_set.login))]
    if replica_set.users:
        lines.append(f"Basic auth at the proxy: {len(replica_set.users)} user(s) from the htpasswd file.")
    if replica_set.login:
        lines.append(login_settings.startup_line(replica_set.login))
    elif not replica_set.users and not serve.is_loopback(replica_set.address):
        lines.append("No password: anyone on the network can use it (add --auth HTPASSWD_FILE).")
    replicas = ", ".join(f"{r.name} on 127.0.0.1:{r.port} (pid {r.pid})" for r in replica_set.replicas)
    lines.append(f"HAProxy (pid {replica_set.proxy.pid}) -> {replicas}; config {replica_set.config_path}")
    return lines


def replica_set_of(args: argparse.Namespace, streamlit_args: list[str], login: dict[str, str] | None = None) -> ReplicaSet:
    """The replica set ``gradient-explorer run`` asks for (its parsed options); ValueError/OSError for bad ones."""
    auth = Path(args.auth) if args.auth else None
    return ReplicaSet(args.replicas or 1, args.ops, streamlit_args, args.share, auth, login, runs=args.runs)


def main(args: argparse.Namespace, streamlit_args: list[str], login: dict[str, str] | None = None) -> int:
    try:
        replica_set = replica_set_of(args, streamlit_args, login)
    except (ValueError, OSError) as error:
        print(f"gradient-explorer run: {error}", file=sys.stderr)
        return 2

    def stop_on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        replica_set.start()
        print("\n".join(startup_lines(replica_set)), flush=True)
        return replica_set.watch()
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:
        print(f"gradient-explorer run: {error}", file=sys.stderr)
        return 1
    finally:
        replica_set.stop()
