"""``gradient-explorer run --replicas``: the HAProxy configuration, the operator's secret and the htpasswd file."""

from __future__ import annotations

import http.server
import re
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from explorer import serve
from explorer.serve import replicas

BCRYPT = "$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"
SHA512 = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."


def _config(users=None, address="127.0.0.1") -> str:
    pool = [replicas.Replica("r1", 20001), replicas.Replica("r2", 20002), replicas.Replica("r3", 20003)]
    return replicas.haproxy_config(address, 8501, pool, Path("/run/ge.sock"), users)


def test_each_replica_is_a_health_checked_server_with_its_own_cookie_value():
    config = _config()
    servers = re.findall(r"^\s*server (\S+) (\S+) cookie (\S+) check inter 1s fall 2 rise 2$", config, re.M)
    assert servers == [("r1", "127.0.0.1:20001", "r1"), ("r2", "127.0.0.1:20002", "r2"), ("r3", "127.0.0.1:20003", "r3")]
    assert "cookie GE_REPLICA insert indirect nocache httponly" in config  # HAProxy inserts it: sticky without the app
    assert "option httpchk GET /_stcore/health" in config and "http-check expect string ok" in config
    assert "http-response set-header X-Gradient-Explorer-Replica %s" in config  # %s: the server that answered
    assert "option redispatch" in config  # a cookie naming a dead replica goes to a live one
    assert re.search(r"^\s*timeout check 5s$", config, re.M)  # a busy replica answers late (test_a_replica_...)
    assert re.search(r"^\s*bind 127\.0\.0\.1:8501$", config, re.M)
    tunnel = int(re.search(r"timeout tunnel (\d+)s", config).group(1))
    assert tunnel == replicas.TUNNEL_TIMEOUT_SECONDS >= 3600  # an idle WebSocket outlives a long training run
    assert "auth" not in config and "userlist" not in config  # no password unless asked


def test_basic_auth_guards_every_request_before_routing():
    config = _config(users=[("alice", SHA512), ("bob", BCRYPT)])
    assert f"user alice password {SHA512}\n" in config and f"user bob password {BCRYPT}\n" in config
    frontend = config.split("frontend public", 1)[1].split("backend", 1)[0]
    assert 'http-request auth realm "Gradient Explorer" unless { http_auth(operators) }' in frontend


@pytest.mark.requires_tool("haproxy", "gradient-explorer run --replicas needs HAProxy: apt-get install -y haproxy")
def test_haproxy_accepts_the_generated_configuration(tmp_path):
    path = tmp_path / "haproxy.cfg"
    path.write_text(_config(users=[("alice", SHA512)], address="0.0.0.0"))
    done = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr


class _SlowHealth(http.server.BaseHTTPRequestHandler):
    """A replica whose Python is busy: /_stcore/health answers "ok", 2.5 s late; any other path is refused."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path != "/_stcore/health":
            self.send_error(404)
            return
        time.sleep(2.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _proxy_states(stats_socket: Path) -> dict[str, str]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(stats_socket))
        sock.sendall(b"show stat\n")
        text = b"".join(iter(lambda: sock.recv(65536), b"")).decode()
    header, *rows = text.strip().splitlines()
    columns = header.lstrip("# ").split(",")
    states = {}
    for row in rows:
        values = dict(zip(columns, row.split(","), strict=False))
        if values.get("pxname") == "replicas" and values.get("svname") not in ("BACKEND", "FRONTEND"):
            states[values["svname"]] = values["status"]
    return states


@pytest.mark.slow
@pytest.mark.requires_tool("haproxy", "gradient-explorer run --replicas needs HAProxy: apt-get install -y haproxy")
def test_a_replica_that_answers_its_health_check_late_stays_in_and_a_dead_one_goes(tmp_path):
    """HAProxy with the generated configuration, on loopback: r1 answers its health checks 2.5 s late (busy), r2's
    port is closed (dead). After 4 checks (at 1 s intervals; 2 failures mark a server down), r1 is still UP and r2
    DOWN. With the check timeout at the interval, HAProxy's default, r1 was marked down too."""
    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHealth)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]  # nothing listens there once this socket closes
    pool = [replicas.Replica("r1", slow.server_address[1]), replicas.Replica("r2", dead_port)]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    stats_socket = tmp_path / "stats.sock"
    config = tmp_path / "haproxy.cfg"
    config.write_text(replicas.haproxy_config("127.0.0.1", port, pool, stats_socket, None))
    proxy = subprocess.Popen(["haproxy", "-f", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not stats_socket.exists():
            assert proxy.poll() is None and time.monotonic() < deadline, proxy.stdout.read().decode()
            time.sleep(0.1)
        time.sleep(4 * (replicas.HEALTH_CHECK_SECONDS + 2.5))  # four slow checks of r1, many refused ones of r2
        assert _proxy_states(stats_socket) == {"r1": "UP", "r2": "DOWN"}
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        slow.shutdown()


def test_the_cookie_secret_is_made_once_and_kept_private(tmp_path):
    first = replicas.cookie_secret(tmp_path / "gradient-explorer")
    again = replicas.cookie_secret(tmp_path / "gradient-explorer")
    assert first == again and len(first) >= 40
    mode = stat.S_IMODE((tmp_path / "gradient-explorer" / "cookie_secret").stat().st_mode)
    assert mode == 0o600
    assert replicas.cookie_secret(tmp_path / "other") != first  # random, not derived


def test_the_config_folder_is_the_operators(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert replicas.config_dir() == tmp_path / "gradient-explorer"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert replicas.config_dir() == Path.home() / ".config" / "gradient-explorer"


def test_htpasswd_lines_become_users_and_unusable_ones_are_named(tmp_path):
    path = tmp_path / "users"
    path.write_text(f"# team\nalice:{SHA512}\n\nbob:{BCRYPT}\n")
    assert replicas.read_htpasswd(path) == [("alice", SHA512), ("bob", BCRYPT)]
    path.write_text("carol:$apr1$abc$def\n")  # htpasswd's default MD5: crypt(3) cannot check it
    with pytest.raises(ValueError, match=r"users:1: user carol: .*htpasswd -B"):
        replicas.read_htpasswd(path)
    path.write_text(f'eve" x:{SHA512}\n')  # would break out of HAProxy's config line
    with pytest.raises(ValueError, match="user name"):
        replicas.read_htpasswd(path)
    path.write_text("\n# nobody\n")
    with pytest.raises(ValueError, match="no users"):
        replicas.read_htpasswd(path)


def test_replica_count_outside_its_range_is_refused():
    with pytest.raises(ValueError, match=r"--replicas must be in \[1, 16\], got 17"):
        replicas.ReplicaSet(17, [], [], share=False, auth=None)


def test_the_replicas_get_loopback_ports_and_the_proxy_the_public_one():
    replica_set = replicas.ReplicaSet(2, [], ["--server.port", "9000", "--server.address=0.0.0.0", "--theme.base=dark"], False, None)
    assert (replica_set.address, replica_set.port) == ("0.0.0.0", 9000)
    assert replica_set.streamlit_args == ["--theme.base=dark"]


class _Started:
    """A child process as ``subprocess.Popen`` returns it, that never ran: what ``start`` and ``stop`` call."""

    count = 0

    def __init__(self, argv, env=None):
        _Started.count += 1
        self.argv, self.env, self.pid, self.returncode = argv, env, 40000 + _Started.count, None

    def poll(self):
        return self.returncode

    def terminate(self):
        self.returncode = -15

    def wait(self, timeout=None):
        return self.returncode


@pytest.fixture
def started(monkeypatch, tmp_path):
    """A started ReplicaSet whose processes are :class:`_Started` (nothing runs); its own config folder."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(replicas.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(replicas.subprocess, "Popen", _Started)
    monkeypatch.setattr(replicas, "_healthy", lambda port: True)
    monkeypatch.setattr(replicas, "_port_open", lambda port: True)

    def start(count: int) -> replicas.ReplicaSet:
        replica_set = replicas.ReplicaSet(count, [], ["--server.port=9000"], share=False, auth=None)
        replica_set.start()
        return replica_set

    return start


def test_every_replica_marks_its_trainers_in_one_private_folder_that_stop_removes(started):
    from explorer.train.time_share import TRAINERS_DIR_ENV

    replica_set = started(3)
    folders = {replica_set.processes[r.name].env[TRAINERS_DIR_ENV] for r in replica_set.replicas}
    assert folders == {str(replica_set.trainers_dir)}  # one folder for the machine, not one per replica
    assert stat.S_IMODE(replica_set.runtime_dir.stat().st_mode) == 0o700
    assert replica_set.trainers_dir.parent == replica_set.runtime_dir
    replica_set.stop()
    assert not replica_set.runtime_dir.exists()
    assert all(process.returncode == -15 for process in replica_set.processes.values())


def test_a_replica_that_dies_is_restarted_on_its_port_later_and_later_while_it_keeps_dying_young(started, capsys):
    import json

    replica_set = started(2)
    r1, r2 = replica_set.replicas
    now = replica_set._lifelines["r1"].started
    delays = []
    for _ in range(len(replicas.RESTART_DELAYS_SECONDS)):
        replica_set.processes["r1"].returncode = -9  # SIGKILL, a few seconds after each start
        now += 3
        replica_set.supervise(now)
        assert "replica r1 ended (exit code -9)" in capsys.readouterr().out
        pid = replica_set.replicas[0].pid
        delay = replica_set._lifelines["r1"].restart_at - now
        replica_set.supervise(now + delay - 0.01)  # not before its delay
        assert replica_set.replicas[0].pid == pid
        now += delay
        replica_set.supervise(now)
        restarted = replica_set.replicas[0]
        assert restarted.pid != pid and restarted.port == r1.port and restarted.name == "r1"
        assert f"replica r1 restarted (pid {restarted.pid}, 127.0.0.1:{r1.port})" in capsys.readouterr().out
        status = json.loads(replica_set.status_path.read_text())  # tools and tests read the new pid there
        assert [r["pid"] for r in status["replicas"]] == [restarted.pid, r2.pid]
        delays.append(delay)
    assert delays == pytest.approx(list(replicas.RESTART_DELAYS_SECONDS)) and replicas.RESTART_DELAYS_SECONDS == (1, 5, 30, 60, 300)
    replica_set.processes["r1"].returncode = 1  # a sixth death soon after starting: a crash loop, given up
    replica_set.supervise(now + 3)
    assert "not restarted again" in capsys.readouterr().out
    replica_set.supervise(now + 1000)
    assert replica_set.replicas[0].pid == restarted.pid and replica_set.replicas[1] == r2  # r2 never touched


def test_a_replica_that_lived_long_starts_again_from_the_first_delay(started, capsys):
    replica_set = started(1)
    now = replica_set._lifelines["r1"].started
    for _ in range(2):  # two young deaths: the next delay would be the third
        replica_set.processes["r1"].returncode = -9
        replica_set.supervise(now := now + 1)
        replica_set.supervise(now := replica_set._lifelines["r1"].restart_at)
    replica_set.processes["r1"].returncode = -9
    now += replicas.HEALTHY_AFTER_SECONDS
    replica_set.supervise(now)
    assert replica_set._lifelines["r1"].restart_at - now == pytest.approx(replicas.RESTART_DELAYS_SECONDS[0])
    assert "Restarting it in 1 s." in capsys.readouterr().out


def test_every_replica_reads_the_one_runs_folder_given_with_runs(monkeypatch, tmp_path):
    """Issue 47: ``--runs DIR`` reaches every replica as the same absolute folder, so a run written there shows on
    each (the argv and environment each replica is started with)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(replicas.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(replicas.subprocess, "Popen", _Started)
    monkeypatch.setattr(replicas, "_healthy", lambda port: True)
    monkeypatch.setattr(replicas, "_port_open", lambda port: True)
    args, rest = serve.parse(["--replicas", "2", "--runs", "shared/runs", "--server.port=9000"])
    replica_set = replicas.replica_set_of(args, rest)
    replica_set.start()
    try:
        children = [replica_set.processes[r.name] for r in replica_set.replicas]
        assert len(children) == 2
        assert [child.env[serve.RUNS_ENV] for child in children] == [str(tmp_path / "shared" / "runs")] * 2
        assert all(child.argv[1:4] == ["-m", "streamlit", "run"] for child in children)
    finally:
        replica_set.stop()

# -- private by default (issue 45): the proxy on loopback unless shared, the replicas on loopback always -------
@pytest.mark.parametrize(("share", "public"), [(False, "127.0.0.1"), (True, "0.0.0.0")], ids=["default", "share"])
def test_the_proxy_binds_loopback_unless_shared_and_every_replica_binds_loopback(started, share, public):
    replica_set = replicas.ReplicaSet(2, [], ["--server.port=9000"], share=share, auth=None)
    replica_set.start()
    assert replica_set.address == public
    assert re.findall(r"^\s*bind (\S+)$", replica_set.config_path.read_text(), re.M) == [f"{public}:9000"]
    for replica in replica_set.replicas:
        argv = replica_set.processes[replica.name].argv
        addresses = [arg for arg in argv if arg.startswith("--server.address")]
        assert addresses[-1] == "--server.address=127.0.0.1" and "--server.address=0.0.0.0" not in addresses
    assert replicas.startup_lines(replica_set)[0].endswith("(see docs/serving.md).")
    assert ("this machine only" in replicas.startup_lines(replica_set)[0]) == (not share)
    replica_set.stop()
