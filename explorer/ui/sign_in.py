"""The sign-in gate of ``gradient-explorer run --login oidc``, and who the signed-in user is.

:func:`gate` runs first on every page (``explorer/ui/app.py`` calls it before the navigation): without a signed-in
identity the page shows a title and a **Sign in** button, then stops, so no page content reaches the browser.
Streamlit reads the identity from its signed cookie when the WebSocket connects (a tampered cookie reads as
signed out); it does not check the ID token's expiry, so the gate ends a sign-in older than the operator's maximum
session age (:class:`explorer.serve.login.LoginPolicy`) with ``st.logout()``, and refuses an email outside the
allowed list. The sidebar then names the user, with a **Sign out** button.

Other pages and callbacks that record who did something call :func:`current_user` (None when login is off).
"""

from __future__ import annotations

import time

import streamlit as st

from explorer.serve.login import LoginPolicy, activity_log, identity_name

_LOG = activity_log()


def policy() -> LoginPolicy | None:
    """The operator's policy, or None when the server runs without ``--login``."""
    return LoginPolicy.from_environment()


def current_user() -> str | None:
    """The signed-in user's email (else name, else subject) for records and logs; None when login is off.

    Under login a page runs only past :func:`gate`, so there this is never None."""
    if policy() is None or not st.user.is_logged_in:
        return None
    return identity_name(st.user.to_dict())


def log_action(action: str, what: str) -> None:
    """One server-log line naming the user of a request that changes something (start, stop, delete)."""
    _LOG.info("%s by %s: %s", action, current_user() or "anonymous (login off)", what)


def gate() -> None:
    """Stop the script unless a signed-in, fresh, allowed identity is present (no-op without ``--login``)."""
    login_policy = policy()
    if login_policy is None:
        return
    if not st.user.is_logged_in:
        _sign_in_page()
        st.stop()
    claims = st.user.to_dict()
    if not login_policy.admits(claims):
        _LOG.info("refused %s: not in the allowed list", identity_name(claims))
        st.title("Gradient Explorer")
        st.error(f"{identity_name(claims)} is not allowed on this server. Ask its operator, or sign in as someone else.")
        st.button("Sign out", on_click=st.logout, key="sign_in.refused_sign_out")
        st.stop()
    end_if_expired()
    with st.sidebar:
        st.container(key="signed_in_user").caption(f"Signed in as **{_name(claims)}**")
        st.button("Sign out", on_click=st.logout, key="sign_in.sign_out", icon=":material/logout:")


def end_if_expired() -> None:
    """Sign out (``st.logout``) and stop a run whose sign-in is too old; a no-op without ``--login``.

    :func:`gate` calls it on every full run; a fragment that reruns by itself (the Train page's training ticks)
    calls it too, since a fragment's run skips the gate."""
    login_policy = policy()
    if login_policy is None:
        return
    claims = st.user.to_dict()
    problem = login_policy.session_problem(claims, time.time())
    if problem is not None:
        _LOG.info("signed out %s: %s", identity_name(claims), problem)
        st.logout()  # clears the identity cookie; the next page load shows the sign-in button
        st.stop()


def _name(claims: dict) -> str:
    name, email = claims.get("name"), claims.get("email")
    if isinstance(name, str) and name.strip() and isinstance(email, str) and email and name.strip() != email:
        return f"{name.strip()} ({email})"
    return identity_name(claims)


def _sign_in_page() -> None:
    st.title("Gradient Explorer")
    st.write("This server asks you to sign in with your organisation's account.")
    st.button("Sign in", type="primary", on_click=st.login, key="sign_in.sign_in", icon=":material/login:")
