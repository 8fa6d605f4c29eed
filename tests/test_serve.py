"""``gradient-explorer run``: the Streamlit command it builds from the one config file and ``--ops``."""

from __future__ import annotations

import tomllib

from explorer import serve


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)


def test_every_setting_of_the_config_file_becomes_a_flag():
    config = tomllib.loads(serve.CONFIG_FILE.read_text())
    argv, _ = serve.command([], [])
    flags = _flags(argv)
    expected = {f"{section}.{name}" for section, options in config.items() for name in options}
    assert set(flags) == expected
    assert flags["server.enableXsrfProtection"] == "true"  # TOML booleans as Streamlit spells them
    assert flags["server.maxUploadSize"] == "1"
    assert argv[1:5] == ["-m", "streamlit", "run", str(serve.APP_SCRIPT)]


def test_the_config_the_clone_reads_is_the_packaged_one():
    clone_config = serve.UI_DIR.parents[1] / ".streamlit" / "config.toml"
    assert clone_config.resolve() == serve.CONFIG_FILE


def test_a_flag_given_on_the_command_line_wins_over_the_file():
    args, rest = serve.parse(["--server.port", "9000", "--server.headless=false"])
    argv, _ = serve.command(args.ops, rest)
    assert "--server.port=8501" not in argv and argv[-3:] == ["--server.port", "9000", "--server.headless=false"]
    assert not any(arg.startswith("--server.headless=true") for arg in argv)


def test_ops_targets_reach_the_app_as_one_environment_variable(monkeypatch):
    monkeypatch.delenv(serve.OPS_ENV, raising=False)
    args, rest = serve.parse(["--ops", "my_ops.py, team.surrogates", "--ops", "more.py"])
    _, env = serve.command(args.ops, rest)
    assert env[serve.OPS_ENV] == "my_ops.py,team.surrogates,more.py"
    _, env_without = serve.command([], [])
    assert serve.OPS_ENV not in env_without


# -- private by default ----------------------------------------------------------------------------------
def test_the_server_listens_on_loopback_unless_shared():
    argv, _ = serve.command([], [])
    assert _flags(argv)["server.address"] == "127.0.0.1"
    shared, _ = serve.command([], [], share=True)
    assert [arg for arg in shared if arg.startswith("--server.address")] == ["--server.address=0.0.0.0"]
    named, _ = serve.command([], ["--server.address", "10.1.2.3"], share=True)  # a named address wins over --share
    assert named[-2:] == ["--server.address", "10.1.2.3"] and not any("0.0.0.0" in arg for arg in named)


def test_the_startup_line_says_who_can_reach_the_server():
    assert "this machine only" in serve.reach_line("127.0.0.1", 8501)
    assert "this machine only" in serve.reach_line("localhost", 8501)
    shared = serve.reach_line("0.0.0.0", 8501)
    assert "every network interface" in shared and "anyone who can reach this machine" in shared
    assert "this machine only" not in serve.reach_line("192.168.1.5", 8501)


def test_flag_value_reads_both_spellings_and_the_last_wins():
    assert serve.flag_value(["--server.port", "9000", "--server.port=9001"], "server.port") == "9001"
    assert serve.flag_value(["--server.port=9000"], "server.address") is None
    assert serve.file_setting("server.port") == "8501"


def test_run_options_parse_replicas_share_and_auth():
    args, rest = serve.parse(["--replicas", "2", "--share", "--auth", "users.htpasswd", "--server.port=9000"])
    assert (args.replicas, args.share, args.auth, rest) == (2, True, "users.htpasswd", ["--server.port=9000"])


# -- the runs folder (issue 47) ----------------------------------------------------------------------------
def test_the_runs_folder_reaches_the_app_as_an_absolute_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args, rest = serve.parse(["--runs", "team/runs", "--server.port", "9000"])
    assert rest == ["--server.port", "9000"]  # --runs is ours, not Streamlit's
    _, env = serve.command(args.ops, rest, runs=args.runs)
    assert env[serve.RUNS_ENV] == str(tmp_path / "team" / "runs")
    assert serve.runs_folder(env) == tmp_path / "team" / "runs"


def test_the_runs_folder_defaults_to_runs_beside_the_server(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args, rest = serve.parse([])
    _, env = serve.command(args.ops, rest, runs=args.runs)
    assert env[serve.RUNS_ENV] == str(tmp_path / "runs")
    assert serve.runs_folder({}) == tmp_path / "runs"  # streamlit run app.py, without the launcher
