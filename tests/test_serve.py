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
