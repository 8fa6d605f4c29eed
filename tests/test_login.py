"""``gradient-explorer run --login oidc``: the secrets file checked, the policy, the server command, the route guard
and the page gate (AppTest's ``user`` stands for ``st.user``). The real provider and browser: tests/e2e/test_login_browser.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer import serve
from explorer.serve import cli, login
from explorer.ui import guarded_server

SECRET = "a-cookie-secret-of-more-than-thirty-two-characters"
GOOD_AUTH = {
    "redirect_uri": "https://explorer.example.com/oauth2callback",
    "cookie_secret": SECRET,
    "client_id": "gradient-explorer",
    "client_secret": "s3cret",
    "server_metadata_url": "https://id.example.com/.well-known/openid-configuration",
}
HOUR = 3600.0


def _secrets(tmp_path: Path, auth: dict | None, name: str = "secrets.toml") -> Path:
    path = tmp_path / name
    lines = [] if auth is None else ["[auth]", *(f'{key} = "{value}"' for key, value in auth.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the secrets file ---------------------------------------------------------------------------------------------
def test_a_complete_auth_section_is_read(tmp_path):
    assert login.read_auth_section(_secrets(tmp_path, GOOD_AUTH)) == GOOD_AUTH


def test_every_missing_key_is_named(tmp_path):
    auth = {key: value for key, value in GOOD_AUTH.items() if key not in ("client_secret", "cookie_secret")}
    with pytest.raises(ValueError, match=r"\[auth\] is missing cookie_secret, client_secret$"):
        login.read_auth_section(_secrets(tmp_path, auth))


def test_a_missing_file_or_section_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="does not exist .*--secrets PATH"):
        login.read_auth_section(tmp_path / "nope.toml")
    with pytest.raises(ValueError, match=r"no \[auth\] section; it needs redirect_uri, cookie_secret, client_id"):
        login.read_auth_section(_secrets(tmp_path, None))


def test_a_secrets_file_inside_the_repository_is_refused():
    inside = login.REPOSITORY_ROOT / ".streamlit" / "secrets.toml"
    with pytest.raises(ValueError, match="inside the repository"):
        login.read_auth_section(inside)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("redirect_uri", "https://explorer.example.com/callback", "followed by /oauth2callback"),
        ("redirect_uri", "explorer.example.com/oauth2callback", "followed by /oauth2callback"),
        ("cookie_secret", "x" * 31, "at least 32 random characters"),
        ("server_metadata_url", "id.example.com", "openid-configuration URL"),
    ],
)
def test_bad_values_are_refused_with_the_fix(tmp_path, key, value, message):
    with pytest.raises(ValueError, match=message):
        login.read_auth_section(_secrets(tmp_path, GOOD_AUTH | {key: value}))


def test_replicas_need_the_proxys_port_written_out(tmp_path):
    path = _secrets(tmp_path, GOOD_AUTH | {"redirect_uri": "http://localhost:{port}/oauth2callback"})
    login.read_auth_section(path)  # one server: Streamlit fills in its own port
    with pytest.raises(ValueError, match="proxy's port"):
        login.read_auth_section(path, replicas=True)


# -- the policy ---------------------------------------------------------------------------------------------------
def test_a_sign_in_lasts_the_maximum_age_and_not_a_second_more():
    policy = login.LoginPolicy(max_session_seconds=12 * HOUR)
    now = 1_800_000_000.0
    assert policy.session_problem({"is_logged_in": True, "iat": now - 12 * HOUR}, now) is None
    assert policy.session_problem({"is_logged_in": True, "iat": now - 12 * HOUR - 1}, now) == "the sign-in is older than 12 h"
    # auth_time (when the person authenticated) wins over iat (when this token was issued)
    claims = {"is_logged_in": True, "iat": now - 60, "auth_time": now - 13 * HOUR}
    assert policy.session_problem(claims, now) == "the sign-in is older than 12 h"


def test_an_identity_without_a_usable_issued_at_is_refused():
    policy, now = login.LoginPolicy(), 1_800_000_000.0
    assert policy.session_problem({"is_logged_in": True}, now) == "the identity has no issued-at time"
    assert policy.session_problem({"is_logged_in": True, "iat": "1800000000"}, now) == "the identity has no issued-at time"
    assert policy.session_problem({"is_logged_in": True, "iat": True}, now) == "the identity has no issued-at time"
    assert policy.session_problem({"is_logged_in": True, "iat": now + 301}, now) == "the identity was issued in the future"
    assert policy.session_problem({"is_logged_in": True, "iat": now + 299}, now) is None  # clock skew
    assert policy.session_problem({"is_logged_in": False, "iat": now}, now) == "not signed in"


def test_allowed_domains_and_users():
    policy = login.LoginPolicy(allowed=login.parse_allowed("@Example.com, bob@other.org"))
    assert policy.allowed == ("@example.com", "bob@other.org")
    assert policy.admits({"email": "Alice@example.com"})
    assert policy.admits({"email": "bob@other.org", "email_verified": True})
    assert not policy.admits({"email": "eve@other.org"})
    assert not policy.admits({"email": "alice@example.com.evil.net"})
    assert not policy.admits({"email": "alice@example.com", "email_verified": False})  # the provider says: unverified
    assert not policy.admits({"name": "Alice"})  # no email
    assert login.LoginPolicy().admits({"name": "anyone"})
    now = time.time()
    assert policy.session_problem({"is_logged_in": True, "iat": now, "email": "eve@other.org"}, now) == (
        "eve@other.org is not allowed on this server"
    )
    with pytest.raises(ValueError, match="'@domain' or 'user@domain'"):
        login.parse_allowed("example.com")


def test_max_session_hours_range():
    assert login.parse_max_session_hours(None) == 12.0
    assert login.parse_max_session_hours("0.5") == 0.5
    for bad in ("0", "721", "nan", "twelve"):
        with pytest.raises(ValueError, match=r"--max-session-hours must be"):
            login.parse_max_session_hours(bad)


def test_the_policy_comes_from_the_environment_and_is_none_without_login():
    assert login.LoginPolicy.from_environment({}) is None
    env = {login.LOGIN_ENV: "oidc", login.MAX_SESSION_HOURS_ENV: "2", login.ALLOWED_ENV: "@example.com"}
    assert login.LoginPolicy.from_environment(env) == login.LoginPolicy(2 * HOUR, ("@example.com",))


def test_identity_name_prefers_email_then_name_then_subject():
    assert login.identity_name({"email": "a@x.org", "name": "A", "sub": "1"}) == "a@x.org"
    assert login.identity_name({"name": "A", "sub": "1"}) == "A"
    assert login.identity_name({"sub": "1"}) == "1"


# -- the command ---------------------------------------------------------------------------------------------------
def test_login_runs_the_guarded_server_with_the_secrets_file_and_no_trusted_headers(tmp_path):
    path = _secrets(tmp_path, GOOD_AUTH)
    args, rest = serve.parse(["--login", "oidc", "--secrets", str(path), "--max-session-hours", "8", "--allow", "@example.com"])
    env = login.login_environment(args.login, args.secrets, args.max_session_hours, args.allow)
    argv, server_env = serve.command(args.ops, [*rest, "--server.trustedUserHeaders", '{"X-Email": "email"}'], login=env)
    assert argv[1:4] == ["-m", serve.GUARDED_SERVER, "run"]
    assert argv[-2:] == [f"--secrets.files={path.resolve()}", "--server.trustedUserHeaders={}"]  # last: they win
    assert server_env[login.LOGIN_ENV] == "oidc" and server_env[login.MAX_SESSION_HOURS_ENV] == "8"
    assert server_env[login.ALLOWED_ENV] == "@example.com"
    assert SECRET not in " ".join(argv) and SECRET not in json.dumps(server_env)  # Streamlit reads it from the file
    plain, plain_env = serve.command([], [])
    assert plain[1:3] == ["-m", "streamlit"] and login.LOGIN_ENV not in plain_env


def test_the_command_refuses_to_start_naming_the_problem(tmp_path, capsys):
    auth = {key: value for key, value in GOOD_AUTH.items() if key != "client_id"}
    assert cli.main(["--login", "oidc", "--secrets", str(_secrets(tmp_path, auth))]) == 2
    assert "[auth] is missing client_id" in capsys.readouterr().err
    assert cli.main(["--secrets", str(_secrets(tmp_path, GOOD_AUTH))]) == 2
    assert "--secrets applies to --login oidc only" in capsys.readouterr().err


# -- the route guard -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "guarded"),
    [
        ("/media/6e2f.csv", True), ("/_stcore/metrics", True), ("/_stcore/upload_file/s/f", True),
        ("/component/x/index.html", True), ("/_stcore/agent/interact", True), ("/app/static/a.png", True),
        ("/_stcore/bidi-components/x", True),
        ("/", False), ("/train", False), ("/static/js/main.js", False), ("/_stcore/health", False),
        ("/_stcore/host-config", False), ("/_stcore/stream", False), ("/auth/login", False), ("/oauth2callback", False),
    ],
)  # fmt: skip
def test_which_paths_need_a_signed_in_browser(path, guarded):
    assert guarded_server.needs_sign_in(path) is guarded
    assert guarded_server.needs_sign_in(f"/explorer{path}", "explorer/") is guarded  # under server.baseUrlPath


@pytest.fixture
def cookie_secret(monkeypatch):
    from streamlit.web.server import server_util

    monkeypatch.setattr(server_util, "get_cookie_secret", lambda: SECRET)  # what [auth] cookie_secret gives
    return SECRET


def _signed(claims: dict, secret: str = SECRET) -> str:
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

    return create_signed_value(secret, "_streamlit_user", json.dumps(claims)).decode()


def test_the_identity_cookie_is_read_only_with_a_good_signature(cookie_secret):
    claims = {"is_logged_in": True, "email": "alice@example.com", "iat": 1_800_000_000}
    good = _signed(claims)
    assert guarded_server.identity_claims({"_streamlit_user": good}) == claims
    eve_payload = _signed(claims | {"email": "eve@example.com"}).rsplit(".", 2)[0]
    tampered = ".".join([eve_payload, *good.rsplit(".", 2)[1:]])  # another payload under Alice's signature
    assert tampered != good and guarded_server.identity_claims({"_streamlit_user": tampered}) is None
    assert guarded_server.identity_claims({"_streamlit_user": _signed(claims, "another-secret" * 3)}) is None
    assert guarded_server.identity_claims({}) is None


def _ask(middleware, path: str, cookie: str | None) -> tuple[int, bytes]:
    """One GET through the middleware (ASGI by hand: no HTTP client needed)."""
    import asyncio

    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app content"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    headers = [(b"cookie", f"_streamlit_user={cookie}".encode())] if cookie else []
    scope = {"type": "http", "method": "GET", "path": path, "headers": headers, "query_string": b"", "root_path": ""}
    asyncio.run(middleware(app)(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def test_the_guard_refuses_media_without_a_fresh_signed_identity(cookie_secret):
    policy = login.LoginPolicy(max_session_seconds=12 * HOUR)

    def guard(app):
        return guarded_server.SignedInOnly(app, policy)

    now = time.time()
    fresh = _signed({"is_logged_in": True, "email": "alice@example.com", "iat": now - 60})
    expired = _signed({"is_logged_in": True, "email": "alice@example.com", "iat": now - 13 * HOUR})
    forged = fresh[:-4] + ("AAAA" if not fresh.endswith("AAAA") else "BBBB")
    assert _ask(guard, "/media/abc.csv", fresh) == (200, b"app content")
    for cookie in (None, expired, forged):
        assert _ask(guard, "/media/abc.csv", cookie) == (401, b"Sign in first.")
    assert _ask(guard, "/_stcore/health", None) == (200, b"app content")  # open: the app behind answers itself


# -- the page gate (AppTest's user is st.user) ---------------------------------------------------------------------
def _gated_page():
    import streamlit as st

    from explorer.ui import sign_in

    sign_in.gate()
    st.write(f"APP CONTENT for {sign_in.current_user()}")


def _run(monkeypatch, user: dict | None, env: dict | None = None) -> AppTest:
    for name in (login.LOGIN_ENV, login.MAX_SESSION_HOURS_ENV, login.ALLOWED_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_function(_gated_page)
    if user is not None:
        at.user = user
    return at.run()


def _texts(at: AppTest) -> str:
    return " ".join(m.value for m in at.markdown) + " " + " ".join(m.value for m in at.sidebar.markdown)


ON = {login.LOGIN_ENV: "oidc"}


def test_without_login_the_gate_lets_everyone_in_and_there_is_no_user(monkeypatch):
    at = _run(monkeypatch, None)
    assert "APP CONTENT for None" in _texts(at) and not at.button


def test_signed_out_visitors_get_only_the_sign_in_button(monkeypatch):
    at = _run(monkeypatch, {"is_logged_in": False}, ON)
    assert "APP CONTENT" not in _texts(at)
    assert [b.label for b in at.button] == ["Sign in"]


def test_a_fresh_sign_in_sees_the_page_and_its_name_in_the_sidebar(monkeypatch):
    user = {"is_logged_in": True, "email": "alice@example.com", "name": "Alice Adams", "iat": time.time() - 60}
    at = _run(monkeypatch, user, ON)
    assert "APP CONTENT for alice@example.com" in _texts(at)
    assert at.sidebar.caption[0].value == "Signed in as **Alice Adams (alice@example.com)**"
    assert [b.label for b in at.sidebar.button] == ["Sign out"]


def test_an_expired_sign_in_is_signed_out_before_any_content(monkeypatch):
    user = {"is_logged_in": True, "email": "alice@example.com", "iat": time.time() - 3 * HOUR}
    at = _run(monkeypatch, user, ON | {login.MAX_SESSION_HOURS_ENV: "2"})
    assert "APP CONTENT" not in _texts(at)
    assert at.user == {"is_logged_in": False}  # st.logout() was called


def test_someone_outside_the_allowed_list_is_refused(monkeypatch):
    user = {"is_logged_in": True, "email": "eve@other.org", "iat": time.time()}
    at = _run(monkeypatch, user, ON | {login.ALLOWED_ENV: "@example.com"})
    assert "APP CONTENT" not in _texts(at)
    assert "eve@other.org is not allowed on this server" in at.error[0].value
    assert [b.label for b in at.button] == ["Sign out"]


def test_the_login_benchmark_ratio_is_the_median_of_per_round_ratios():
    from explorer.bench.login_overhead import LoginOverhead

    overhead = LoginOverhead(plain_s=[0.2, 0.1, 0.4], login_s=[0.21, 0.12, 0.4], load_average_1m=(1.0, 1.0))
    assert overhead.ratio == pytest.approx(1.05)  # ratios 1.05, 1.2, 1.0: the median, not 0.73 / 0.7
    assert "ratio (median of per-round ratios) 1.050" in overhead.table()


def test_the_login_benchmark_alternates_which_server_moves_first():
    from explorer.bench.login_overhead import round_order

    orders = [round_order(index, "plain", "login") for index in range(4)]
    assert orders == [("plain", "login"), ("login", "plain"), ("plain", "login"), ("login", "plain")]


def test_the_startup_line_of_a_shared_server_says_everyone_signs_in():
    line = serve.reach_line("0.0.0.0", 8501, login=True)
    assert "everyone signs in with your identity provider first (--login oidc)" in line
    assert "Put a sign-in" not in line and "--login oidc" in serve.reach_line("0.0.0.0", 8501)
    assert serve.reach_line("127.0.0.1", 8501, login=True) == serve.reach_line("127.0.0.1", 8501)


def _ticking_fragment_body():
    import streamlit as st

    from explorer.ui import sign_in

    sign_in.end_if_expired()  # what the Train page's training tick calls: a fragment's run skips the gate
    st.write("TRAINING TICK")


@pytest.mark.parametrize(("env", "age_hours", "ticks"), [({}, 30, True), (ON, 1, True), (ON, 13, False)])
def test_a_self_rerunning_fragment_ends_an_expired_sign_in_too(monkeypatch, env, age_hours, ticks):
    for name in (login.LOGIN_ENV, login.MAX_SESSION_HOURS_ENV, login.ALLOWED_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_function(_ticking_fragment_body)
    at.user = {"is_logged_in": True, "email": "alice@example.com", "iat": time.time() - age_hours * HOUR}
    at.run()
    assert ("TRAINING TICK" in _texts(at)) is ticks
    assert at.user["is_logged_in"] is ticks  # signed out when it stopped
