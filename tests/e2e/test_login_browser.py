"""``gradient-explorer run --login oidc`` against a real OpenID Connect provider on loopback (``oidc-provider-mock``),
driven by real browsers: sign in, see one's name, train, sign out; a second user sees whose run it was; and every
route of the server, asked without a session, with a tampered identity cookie and with an expired one, gives no
app content (pages and the WebSocket: no page content in any frame; media, uploads, components, metrics: 401;
health: ``ok``). Every wait waits for an event, bounded; nothing depends on the machine's speed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from explorer.bench import harness
from explorer.ui.train import EPOCHS_PER_TICK_ENV
from tests.e2e.conftest import ARTIFACTS, EPOCHS_PER_TICK, IN_CI, SETTLE_SECONDS, App

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
COOKIE_SECRET = "e2e-cookie-secret-" + "0123456789abcdef" * 2
USERS = {
    "alice": {"email": "alice@example.com", "name": "Alice Adams", "email_verified": True},
    "bob": {"email": "bob@example.com", "name": "Bob Brown", "email_verified": True},
}
HOUR = 3600
# Text that only the app's pages send (the navigation's page names, the Explore page's op, the Train page's title):
# none of it may reach a browser that has not signed in, in the page or in any WebSocket frame. (The sign-in page is
# titled "Gradient Explorer", so "Explore" alone would match it.)
APP_CONTENT = (b"Straight-through", b"ste_sign", b"Train: what a gradient", b"Surrogate op", b"Editor", b"Runs to compare")


def _provider_module():
    try:
        import oidc_provider_mock
    except ImportError:
        reason = "the Python package 'oidc-provider-mock' is not installed (pip install -r requirements-dev.txt)"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return oidc_provider_mock


@pytest.fixture(scope="module")
def provider():
    mock = _provider_module()
    users = [mock.User(sub=sub, claims=claims) for sub, claims in USERS.items()]
    with mock.run_server_in_thread(port=0, user_claims=users) as server:
        yield f"http://localhost:{server.server_port}"


class LoginServer:
    """``python -m explorer run --login oidc`` with a secrets file in the test's own (operator's) folder."""

    def __init__(self, tmp: Path, provider: str, *flags: str, max_session_hours: str = "12"):
        self.port = harness.free_port()
        self.url = f"http://localhost:{self.port}"  # the address of redirect_uri: the identity cookie's origin
        self.secrets = tmp / "operator" / "secrets.toml"
        self.secrets.parent.mkdir(parents=True)
        self.secrets.write_text(
            "[auth]\n"
            f'redirect_uri = "{self.url}/oauth2callback"\n'
            f'cookie_secret = "{COOKIE_SECRET}"\n'
            'client_id = "gradient-explorer"\n'
            'client_secret = "any-secret-the-mock-accepts"\n'
            f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n'
        )
        self.log_path = ARTIFACTS / f"login_{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {
            **os.environ, "XDG_CONFIG_HOME": str(tmp / "config"), "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "", EPOCHS_PER_TICK_ENV: str(EPOCHS_PER_TICK),
        }  # fmt: skip
        command = [sys.executable, "-m", "explorer", "run", "--login", "oidc", "--secrets", str(self.secrets),
                   "--max-session-hours", max_session_hours, *flags, "--server.port", str(self.port)]  # fmt: skip
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                command, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        harness.wait_healthy(f"http://127.0.0.1:{self.port}", self.process, self.log_path, timeout=240)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)  # its own group: only what this test started
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory, provider, chromium_path):
    run = LoginServer(tmp_path_factory.mktemp("login"), provider)
    yield run
    run.stop()


def _signed_identity(claims: dict, secret: str = COOKIE_SECRET) -> str:
    """An identity cookie as Streamlit signs it (itsdangerous, salted with the cookie's name)."""
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

    return create_signed_value(secret, "_streamlit_user", json.dumps(claims)).decode()


def _identity(server: LoginServer, sub: str, issued: float) -> dict:
    return {**USERS[sub], "sub": sub, "iat": int(issued), "exp": int(issued) + HOUR, "origin": server.url,
            "is_logged_in": True, "provider": "default"}  # fmt: skip


def _bad_cookies(server: LoginServer) -> dict[str, str | None]:
    """The identities that must get nothing: none, a tampered one, a forged one, one signed in 13 h ago."""
    fresh = _signed_identity(_identity(server, "alice", time.time()))
    other = _signed_identity(_identity(server, "bob", time.time()))
    return {
        "no session": None,
        # Bob's claims under the signature of Alice's cookie
        "tampered": ".".join([other.rsplit(".", 2)[0], *fresh.rsplit(".", 2)[1:]]),
        "signed with another secret": _signed_identity(_identity(server, "alice", time.time()), "x" * 48),
        "expired (signed in 13 h ago)": _signed_identity(_identity(server, "alice", time.time() - 13 * HOUR)),
    }


class Visitor:
    """One browser context; every WebSocket frame it receives is kept, to search for app content."""

    def __init__(self, browser, server: LoginServer, identity_cookie: str | None = None):
        self.context = browser.new_context(viewport=harness.VIEWPORT, accept_downloads=True)
        if identity_cookie:
            self.context.add_cookies([{"name": "_streamlit_user", "value": identity_cookie, "url": server.url}])
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.frames: list[bytes] = []
        self.page.on("websocket", lambda ws: ws.on("framereceived", self._keep))
        self.app = App(self.page, server.url)
        self.server = server

    def _keep(self, payload) -> None:
        self.frames.append(payload if isinstance(payload, bytes) else payload.encode())

    def content_frames(self) -> list[bytes]:
        return [marker for marker in APP_CONTENT for frame in self.frames if marker in frame]

    def sign_in(self, sub: str) -> None:
        self.page.goto(self.server.url)
        self.page.get_by_role("button", name="Sign in").click(timeout=SETTLE_SECONDS * 1000)
        self.page.wait_for_url("**/oauth2/authorize**")
        self.page.get_by_role("button", name=sub, exact=True).click()  # the provider's page: one click per user
        self.page.locator(".st-key-signed_in_user").wait_for(timeout=SETTLE_SECONDS * 1000)
        self.app.settle()

    def signed_in_as(self) -> str:
        return self.page.locator(".st-key-signed_in_user").inner_text().strip()

    def close(self) -> None:
        self.context.close()


def _get(url: str, cookie: str | None) -> tuple[int, bytes]:
    headers = {"Cookie": f"_streamlit_user={cookie}"} if cookie else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_one_user_signs_in_trains_and_signs_out_and_another_sees_whose_run_it_was(server, browser):
    alice = Visitor(browser, server)
    try:
        alice.sign_in("alice")
        assert alice.signed_in_as() == "Signed in as Alice Adams (alice@example.com)"
        assert alice.app.title() == "Straight-through sign"  # the app itself, past the gate

        # Train: a short run, then the page says who started it
        alice.page.get_by_test_id("stSidebarNav").get_by_role("link", name="Train").click()
        start = alice.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True)
        start.wait_for(timeout=SETTLE_SECONDS * 1000)
        alice.app.settle()
        epochs = alice.page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Epochs", exact=True)
        epochs.fill(str(2 * EPOCHS_PER_TICK))
        epochs.press("Enter")
        alice.app.settle()
        start.click()
        alice.page.get_by_role("heading", name="Results").wait_for(timeout=SETTLE_SECONDS * 1000)
        alice.app.settle()
        progress = alice.page.get_by_test_id("stProgress").inner_text()
        assert "started by alice@example.com" in progress, progress
        run_id = alice.app.query()["run"][0]
        assert _grid_has(alice, run_id, "alice@example.com")

        # the server's log names the user of the request that started it
        assert re.search(rf"training run started by alice@example\.com: run {run_id} ", server.log()), server.log()[-2000:]

        # Sign out: the provider's end-of-session page, then back on the app, signed out
        alice.page.get_by_test_id("stSidebar").get_by_role("button", name="Sign out").click()
        alice.page.wait_for_url("**/oauth2/end_session**")
        alice.page.get_by_role("button").first.click()  # the provider asks to confirm
        alice.page.get_by_role("button", name="Sign in").wait_for(timeout=SETTLE_SECONDS * 1000)
        assert not [c for c in alice.context.cookies() if c["name"].startswith("_streamlit_user")]
        assert alice.page.locator(".st-key-signed_in_user").count() == 0
    except Exception:
        alice.app.dump("login_alice")
        raise
    finally:
        alice.close()

    bob = Visitor(browser, server)
    try:
        bob.sign_in("bob")
        assert bob.signed_in_as() == "Signed in as Bob Brown (bob@example.com)"
        bob.app.open("train")
        assert _grid_has(bob, run_id, "alice@example.com"), "Bob does not see Alice's run with her name"
    except Exception:
        bob.app.dump("login_bob")
        raise
    finally:
        bob.close()


def _grid_has(visitor: Visitor, run_id: str, user: str) -> bool:
    """The "Training runs on this server" table has a row of ``run_id`` started by ``user``."""
    grid = visitor.page.locator(".st-key-train_started_runs").get_by_test_id("stDataFrame")
    grid.wait_for(timeout=SETTLE_SECONDS * 1000)
    grid.locator('[role="gridcell"]').first.wait_for(state="attached", timeout=10_000)
    rows = grid.evaluate(harness.GRID_ROWS_JS)
    return any(row[:2] == [run_id, user] for row in rows)


@pytest.mark.parametrize("case", ["no session", "tampered", "signed with another secret", "expired (signed in 13 h ago)"])
def test_the_pages_and_the_websocket_carry_no_app_content_without_a_good_session(server, browser, case):
    visitor = Visitor(browser, server, _bad_cookies(server)[case])
    try:
        for path in ("", "train", "editor"):
            visitor.page.goto(f"{server.url}/{path}")
            if case.startswith("expired"):
                # the gate signs the stale identity out: Streamlit clears its cookie on the way to the provider
                visitor.page.wait_for_url("**/oauth2/end_session**", timeout=SETTLE_SECONDS * 1000)
                assert not [c for c in visitor.context.cookies() if c["name"] == "_streamlit_user"]
                visitor.context.add_cookies(
                    [{"name": "_streamlit_user", "value": _bad_cookies(server)[case], "url": server.url}]
                )
                continue
            visitor.page.get_by_role("button", name="Sign in").wait_for(timeout=SETTLE_SECONDS * 1000)
            visitor.app.settle()
            assert visitor.page.get_by_test_id("stSidebarNav").count() == 0
            assert visitor.page.locator(".js-plotly-plot").count() == 0
            assert visitor.app.title() == "Gradient Explorer"
        assert visitor.frames, "no WebSocket frame was seen: the test would prove nothing"
        assert visitor.content_frames() == [], f"{case}: app content in a WebSocket frame"
        if case.startswith("expired"):
            assert "signed out alice@example.com: the sign-in is older than 12 h" in server.log()
    finally:
        visitor.close()


@pytest.fixture(scope="module")
def owned_media(server, browser):
    """Alice's CSV download, its URL, and Alice's identity cookie; her session stays open (and so does the file)."""
    owner = Visitor(browser, server)
    try:
        owner.sign_in("alice")
        owner.app.wait_figure()
        with owner.page.expect_download(timeout=60_000) as info:
            owner.page.get_by_role("button", name=re.compile(r"^Sweep as CSV")).click()
        cookie = {c["name"]: c["value"] for c in owner.context.cookies()}["_streamlit_user"]
        yield info.value.url, cookie
    finally:
        owner.close()


def test_the_signed_in_owner_gets_its_media_file(owned_media):
    media_url, cookie = owned_media
    # a 128-bit hash of the file's bytes: not guessable, but no secret either (whoever has the file can compute it,
    # and a link is easily passed on): hence the guard, which the next test asks
    assert re.search(r"/media/[0-9a-f]{32}\.csv$", media_url), media_url
    status, body = _get(media_url, cookie)
    assert status == 200 and body.startswith(b"x,"), (status, body[:80])


@pytest.mark.parametrize("case", ["no session", "tampered", "signed with another secret", "expired (signed in 13 h ago)"])
def test_every_http_route_gives_no_app_content_without_a_good_session(server, owned_media, case):
    media_url, _ = owned_media
    cookie = _bad_cookies(server)[case]
    guarded = [
        media_url, f"{server.url}/_stcore/metrics", f"{server.url}/_stcore/upload_file/s/f",
        f"{server.url}/component/x/index.html", f"{server.url}/_stcore/agent/openapi.json",
        f"{server.url}/_stcore/bidi-components/x/y",
    ]  # fmt: skip
    for url in guarded:
        status, body = _get(url, cookie)
        assert (status, body) == (401, b"Sign in first."), (url, status, body[:80])
    assert _get(f"{server.url}/_stcore/health", cookie) == (200, b"ok")  # for load balancers; nothing else
    for path in ("", "train", "editor", "_stcore/host-config"):  # the page shell: Streamlit's, no app content
        status, body = _get(f"{server.url}/{path}", cookie)
        assert status == 200 and not [marker for marker in APP_CONTENT if marker in body], path


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory, provider, chromium_path, server):
    """``--login oidc --replicas 2``: the same secrets file (so the same cookie secret) for both, the redirect URI
    the proxy's address. (Asks for ``server`` first, so that the one-server tests have ended before it starts.)"""
    server.stop()
    run = LoginServer(tmp_path_factory.mktemp("login_replicas"), provider, "--replicas", "2")
    yield run
    run.stop()


def test_through_two_replicas_each_user_signs_in_on_its_replica_and_sees_whose_run_it_was(two_replicas, browser):
    header = "x-gradient-explorer-replica"
    visitors = []
    try:
        for sub in ("alice", "bob"):  # round robin: new browsers land on r1, then r2
            visitor = Visitor(browser, two_replicas)
            visitors.append(visitor)
            replica = visitor.page.goto(two_replicas.url).headers[header]
            visitor.sign_in(sub)
            name = USERS[sub]["name"]
            assert visitor.signed_in_as() == f"Signed in as {name} ({USERS[sub]['email']})"
            served = visitor.page.locator(".st-key-replica").inner_text(timeout=SETTLE_SECONDS * 1000).strip()
            assert served == f"Served by replica {replica}"  # the sign-in came back to the same replica (sticky)
        assert {v.page.locator(".st-key-replica").inner_text().split()[-1] for v in visitors} == {"r1", "r2"}

        alice = visitors[0]
        alice.app.open("train")
        epochs = alice.page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Epochs", exact=True)
        epochs.fill(str(EPOCHS_PER_TICK))
        epochs.press("Enter")
        alice.app.settle()
        alice.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).click()
        alice.page.get_by_role("heading", name="Results").wait_for(timeout=SETTLE_SECONDS * 1000)
        assert "started by alice@example.com" in alice.page.get_by_test_id("stProgress").inner_text()
        run_id = alice.app.query()["run"][0]
        assert _grid_has(alice, run_id, "alice@example.com")
        bob = visitors[1]  # on the other replica: the replicas share the list of runs started on the machine
        bob.app.open("train")
        assert _grid_has(bob, run_id, "alice@example.com"), "Bob, on the other replica, does not see Alice's run"

        for case, cookie in _bad_cookies(two_replicas).items():  # through the proxy, to either replica
            for replica in ("r1", "r2"):
                request = urllib.request.Request(
                    f"{two_replicas.url}/_stcore/metrics",
                    headers={"Cookie": f"GE_REPLICA={replica}" + (f"; _streamlit_user={cookie}" if cookie else "")},
                )
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(request, timeout=30)
                assert refused.value.code == 401, (case, replica)

        alice.page.get_by_test_id("stSidebar").get_by_role("button", name="Sign out").click()
        alice.page.wait_for_url("**/oauth2/end_session**")
        alice.page.get_by_role("button").first.click()
        alice.page.get_by_role("button", name="Sign in").wait_for(timeout=SETTLE_SECONDS * 1000)
        assert not [c for c in alice.context.cookies() if c["name"].startswith("_streamlit_user")]
    except Exception:
        for index, visitor in enumerate(visitors):
            visitor.app.dump(f"login_replicas_{index}")
        raise
    finally:
        for visitor in visitors:
            visitor.close()
