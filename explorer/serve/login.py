"""``gradient-explorer run --login oidc``: sign in with the team's OpenID Connect provider (Streamlit's ``st.login``).

Streamlit reads the provider from the ``[auth]`` section of a ``secrets.toml``; this module checks that file before
the server starts (every key named when missing), and carries the operator's policy to the app in the environment:
the longest a sign-in lasts (:data:`MAX_SESSION_HOURS_ENV`, default 12 h: Streamlit keeps its identity cookie for
30 days and never looks at the ID token's expiry) and, optionally, who may sign in (:data:`ALLOWED_ENV`). The page
gate (:mod:`explorer.ui.sign_in`) and the server's guard of its content routes (:mod:`explorer.ui.guarded_server`)
read the same :class:`LoginPolicy`. Nothing here imports streamlit.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

LOGIN_ENV = "GRADIENT_EXPLORER_LOGIN"  # "oidc" when the app asks every visitor to sign in
SECRETS_ENV = "GRADIENT_EXPLORER_SECRETS"  # the secrets file the server was started with (for its log line)
MAX_SESSION_HOURS_ENV = "GRADIENT_EXPLORER_MAX_SESSION_HOURS"
ALLOWED_ENV = "GRADIENT_EXPLORER_ALLOWED"  # comma-separated: "@example.com" (a domain) or "alice@example.com"
LOGIN_MODES = ("oidc",)
DEFAULT_MAX_SESSION_HOURS = 12.0
MAX_SESSION_HOURS_RANGE = (0.01, 24.0 * 30)  # Streamlit's identity cookie itself lasts 30 days
CLOCK_SKEW_SECONDS = 300.0  # an issued-at this far in the future is refused (clocks of server and provider differ)
# The [auth] keys of Streamlit's default provider (``st.login()`` without a name).
REQUIRED_AUTH_KEYS = ("redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url")
MIN_COOKIE_SECRET_CHARS = 32
CALLBACK_PATH = "/oauth2callback"
_ALLOWED_ENTRY = re.compile(r"(?:[A-Za-z0-9._%+-]+)?@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def default_secrets_path() -> Path:
    """Where Streamlit looks for the user's secrets: ``~/.streamlit/secrets.toml``."""
    return Path.home() / ".streamlit" / "secrets.toml"


def _inside_repository(path: Path) -> bool:
    """True for a file in this clone's working tree (a clone has pyproject.toml at its root; a wheel has none)."""
    if not (REPOSITORY_ROOT / "pyproject.toml").is_file():
        return False
    return path.resolve().is_relative_to(REPOSITORY_ROOT)


def read_auth_section(path: Path, replicas: bool = False) -> dict:
    """The ``[auth]`` section of the secrets file at ``path``, checked; ``ValueError`` saying what to fix.

    ``replicas``: the redirect URI must be the proxy's address, written out (Streamlit would put each replica's own
    port in place of ``{port}``, which the provider does not know).
    """
    path = Path(path).expanduser()
    if _inside_repository(path):
        raise ValueError(
            f"{path} is inside the repository: keep secrets in your config folder (e.g. ~/.streamlit/secrets.toml), "
            "never in the repository"
        )
    if not path.is_file():
        raise ValueError(
            f"--login oidc needs a secrets file with an [auth] section: {path} does not exist "
            "(give one with --secrets PATH; docs/serving.md has an example)"
        )
    try:
        with path.open("rb") as handle:
            secrets = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path} is not valid TOML: {error}") from None
    auth = secrets.get("auth")
    if not isinstance(auth, dict):
        raise ValueError(f"{path} has no [auth] section; it needs {', '.join(REQUIRED_AUTH_KEYS)}")
    missing = [key for key in REQUIRED_AUTH_KEYS if not str(auth.get(key, "")).strip()]
    if missing:
        raise ValueError(f"{path}: [auth] is missing {', '.join(missing)}")
    redirect = urlparse(str(auth["redirect_uri"]))
    if redirect.scheme not in ("http", "https") or not redirect.netloc or not redirect.path.endswith(CALLBACK_PATH):
        raise ValueError(
            f"{path}: [auth] redirect_uri must be the address browsers open followed by {CALLBACK_PATH} "
            f"(e.g. https://explorer.example.com{CALLBACK_PATH}), got {auth['redirect_uri']!r}"
        )
    if replicas and "{port}" in str(auth["redirect_uri"]):
        raise ValueError(f"{path}: with --replicas, write the proxy's port in [auth] redirect_uri instead of {{port}}")
    if len(str(auth["cookie_secret"])) < MIN_COOKIE_SECRET_CHARS:
        raise ValueError(
            f"{path}: [auth] cookie_secret must be at least {MIN_COOKIE_SECRET_CHARS} random characters "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    metadata = urlparse(str(auth["server_metadata_url"]))
    if metadata.scheme not in ("http", "https") or not metadata.netloc:
        raise ValueError(f"{path}: [auth] server_metadata_url must be the provider's .well-known/openid-configuration URL")
    return auth


def parse_allowed(text: str | None) -> tuple[str, ...]:
    """``"@example.com, bob@other.org"`` -> ``("@example.com", "bob@other.org")``, lower case; empty: everyone."""
    entries = tuple(entry.strip().lower() for entry in (text or "").split(",") if entry.strip())
    for entry in entries:
        if not _ALLOWED_ENTRY.fullmatch(entry):
            raise ValueError(f"--allow takes '@domain' or 'user@domain' entries, comma-separated; got {entry!r}")
    return entries


def parse_max_session_hours(text: str | float | None) -> float:
    low, high = MAX_SESSION_HOURS_RANGE
    try:
        hours = DEFAULT_MAX_SESSION_HOURS if text in (None, "") else float(text)
    except ValueError:
        raise ValueError(f"--max-session-hours must be a number of hours in [{low:g}, {high:g}], got {text!r}") from None
    if not low <= hours <= high:  # NaN fails this too
        raise ValueError(f"--max-session-hours must be in [{low:g}, {high:g}], got {text!r}")
    return hours


@dataclass(frozen=True)
class LoginPolicy:
    """Who may use the app and for how long after signing in."""

    max_session_seconds: float = DEFAULT_MAX_SESSION_HOURS * 3600
    allowed: tuple[str, ...] = ()  # "@domain" or "user@domain"; empty: anyone the provider signs in

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> LoginPolicy | None:
        """The policy the server was started with; None when login is off."""
        env = os.environ if env is None else env
        if env.get(LOGIN_ENV) not in LOGIN_MODES:
            return None
        hours = parse_max_session_hours(env.get(MAX_SESSION_HOURS_ENV))
        return cls(max_session_seconds=hours * 3600, allowed=parse_allowed(env.get(ALLOWED_ENV)))

    def session_problem(self, claims: Mapping, now: float) -> str | None:
        """Why an identity (the ID token's claims, as ``st.user`` holds them) must sign in again, or None.

        The session starts at ``auth_time`` (when the provider authenticated the person) or, without it, ``iat``
        (when it issued the ID token): a sign-in is at most :attr:`max_session_seconds` old, whatever the token's
        own ``exp`` (often 1 h, while the person keeps working) says.
        """
        if not claims.get("is_logged_in"):
            return "not signed in"
        started = claims.get("auth_time", claims.get("iat"))
        if isinstance(started, bool) or not isinstance(started, (int, float)):
            return "the identity has no issued-at time"
        if started > now + CLOCK_SKEW_SECONDS:
            return "the identity was issued in the future"
        if now - started > self.max_session_seconds:
            return f"the sign-in is older than {self.max_session_seconds / 3600:g} h"
        if not self.admits(claims):
            return f"{identity_name(claims)} is not allowed on this server"
        return None

    def admits(self, claims: Mapping) -> bool:
        """Anyone, or an email in :attr:`allowed` (its domain, or itself); a provider that marks the email
        unverified (``email_verified: false``) is not taken at its word."""
        if not self.allowed:
            return True
        email = str(claims.get("email") or "").strip().lower()
        if not email or "@" not in email or claims.get("email_verified") is False:
            return False
        domain = "@" + email.rsplit("@", 1)[1]
        return email in self.allowed or domain in self.allowed


def identity_name(claims: Mapping) -> str:
    """How the app names a signed-in person in its pages and its log: email, else name, else subject."""
    for key in ("email", "name", "preferred_username", "sub"):
        value = claims.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "unknown user"


def login_environment(mode: str | None, secrets: Path | None, max_session_hours: str | None, allowed: str | None,
                      replicas: bool = False) -> dict[str, str]:  # fmt: skip
    """What a server (each replica) needs in its environment for ``--login``; ``ValueError`` on a bad setting.
    :func:`explorer.serve.command` passes the secrets file to Streamlit (``--secrets.files``)."""
    if mode is None:
        for flag, value in (("--secrets", secrets), ("--max-session-hours", max_session_hours), ("--allow", allowed)):
            if value is not None:
                raise ValueError(f"{flag} applies to --login oidc only")
        return {}
    if mode not in LOGIN_MODES:
        raise ValueError(f"--login must be one of {', '.join(LOGIN_MODES)}, got {mode!r}")
    path = Path(secrets).expanduser() if secrets else default_secrets_path()
    read_auth_section(path, replicas=replicas)
    hours = parse_max_session_hours(max_session_hours)
    parse_allowed(allowed)
    return {
        LOGIN_ENV: mode,
        SECRETS_ENV: str(path.resolve()),
        MAX_SESSION_HOURS_ENV: f"{hours:g}",
        ALLOWED_ENV: allowed or "",
    }


def startup_line(login: Mapping[str, str]) -> str:
    """What the command prints when sign-in is on: where the provider comes from, the policy."""
    allowed = login.get(ALLOWED_ENV) or "anyone the provider signs in"
    return (
        f"Sign-in with OpenID Connect: provider from {login[SECRETS_ENV]}; a sign-in lasts "
        f"{login[MAX_SESSION_HOURS_ENV]} h; allowed: {allowed}."
    )


def activity_log() -> logging.Logger:
    """The server log's ``explorer.login`` lines (sign-ins refused, who started, stopped or deleted what), on the
    server's standard error with a time, whatever Streamlit's own logger level is."""
    log = logging.getLogger("explorer.login")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log
