"""``python -m explorer.ui.guarded_server run app.py ...``: Streamlit's server, with its content routes signed-in only.

With ``--login oidc`` the page gate (:mod:`explorer.ui.sign_in`) keeps every page's content out of a WebSocket that
has not signed in. But Streamlit answers some HTTP routes outside any script run: the media files
(``/media/<id>``: the CSV and HTML downloads, images), the upload endpoint, custom components' files, the metrics
and the agent API. A media URL is a 128-bit hash of the file's bytes (for a file over 1 MiB, of its length, head,
middle and tail only): not guessable, but no secret either, and it lives as long as the session that made it, so
whoever is sent the link could fetch it without signing in. This server adds one check in
front of those routes (:class:`SignedInOnly`): the request must carry Streamlit's identity cookie, with a valid
signature (the cookie secret of ``[auth]``), within the operator's maximum session age and allowed list
(:class:`explorer.serve.login.LoginPolicy`); otherwise 401 and nothing else. The page shell (``/``, the page
paths and ``/static/``: Streamlit's own JavaScript, the same for every app), the health check (``ok``), the
host configuration, the sign-in routes and the WebSocket stay open: they carry no app content.

It is Streamlit's own command (``streamlit run``) with its middleware list extended, Streamlit being pinned
(requirements.txt): ``tests/e2e/test_login_browser.py`` asks every route of the real server.
"""

from __future__ import annotations

import json
import sys
import time

from explorer.serve.login import LoginPolicy, activity_log

_LOG = activity_log()

# Paths (after server.baseUrlPath) that answer without a script run and can carry what a session made.
GUARDED_PREFIXES = ("/media/", "/app/static/", "/component/", "/_stcore/")
# Under /_stcore/, what the browser needs before it has signed in; none of it is app content.
OPEN_STCORE = ("/_stcore/health", "/_stcore/script-health-check", "/_stcore/host-config", "/_stcore/stream")


def needs_sign_in(path: str, base_url_path: str = "") -> bool:
    """True for a request path the server answers only to a signed-in browser."""
    base = "/" + base_url_path.strip("/") if base_url_path.strip("/") else ""
    if base and path.startswith(base):
        path = path[len(base) :] or "/"
    if path.startswith(OPEN_STCORE):
        return False
    return path.startswith(GUARDED_PREFIXES)


def identity_claims(cookies: dict[str, str]) -> dict | None:
    """The claims of Streamlit's identity cookie if its signature is good (Streamlit's own check), else None."""
    from streamlit.auth_util import get_cookie_with_chunks
    from streamlit.web.server.server_util import get_cookie_secret
    from streamlit.web.server.starlette.starlette_app_utils import decode_signed_value
    from streamlit.web.server.starlette.starlette_server_config import USER_COOKIE_NAME

    secret = get_cookie_secret()

    def one(name: str) -> bytes | None:
        raw = cookies.get(name)
        return None if raw is None else decode_signed_value(secret, name, raw.encode("latin-1"))

    decoded = get_cookie_with_chunks(one, USER_COOKIE_NAME)
    if not decoded:
        return None
    try:
        claims = json.loads(decoded)
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


class SignedInOnly:
    """ASGI middleware: a guarded path (:func:`needs_sign_in`) without a good, fresh identity gets 401."""

    def __init__(self, app, policy: LoginPolicy | None = None):
        self.app = app
        self.policy = policy or LoginPolicy.from_environment() or LoginPolicy()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            from starlette.requests import Request
            from starlette.responses import PlainTextResponse
            from streamlit import config

            path = scope.get("path", "")
            if needs_sign_in(path, config.get_option("server.baseUrlPath") or ""):
                claims = identity_claims(dict(Request(scope).cookies))
                problem = "no identity cookie" if claims is None else self.policy.session_problem(claims, time.time())
                if problem is not None:
                    _LOG.info("refused %s %s: %s", scope.get("method"), path.split("?")[0][:80], problem)
                    await PlainTextResponse("Sign in first.", status_code=401)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def install() -> None:
    """Add :class:`SignedInOnly` to the middleware Streamlit builds its server with."""
    from starlette.middleware import Middleware
    from streamlit.web.server.starlette import starlette_app

    build = starlette_app.create_streamlit_middleware
    if getattr(build, "signed_in_only", False):
        return

    def with_sign_in():
        return [*build(), Middleware(SignedInOnly)]

    with_sign_in.signed_in_only = True
    starlette_app.create_streamlit_middleware = with_sign_in


def main() -> None:
    install()
    from streamlit.web import cli

    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
