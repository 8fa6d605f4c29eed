"""``python -m explorer.bench.browser --login [--login-moves N]``: what signing in costs a slider move.

Two servers started the same way (:func:`explorer.serve.command`, the settings of ``explorer/ui/config.toml``), one
plain, one with ``--login oidc`` against a local OpenID Connect provider (``oidc-provider-mock``, a development
dependency) on loopback; one browser context signed in on the second. Each round moves the Explore page's first
slider on both servers, the plain one first in even rounds and the signed-in one first in odd rounds (interleaved,
in one browser, so a change of the machine's load and the cost of being the second move weigh on both), and the time from the key press to the redrawn figure is compared: median of each, and the
median of the per-round ratios. Target: the signed-in server within 5 % of the plain one.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from explorer.bench.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    VIEWPORT,
    async_playwright,
    free_port,
    nudge_first_slider,
    open_explore,
    serve_command,
)

TARGET_RATIO = 1.05
PACE_SECONDS = 0.5
OP = "atan"


@dataclass
class LoginOverhead:
    plain_s: list[float]
    login_s: list[float]
    load_average_1m: tuple[float, float]

    @property
    def ratio(self) -> float:
        """Median of the per-round ratios, signed in over plain."""
        return statistics.median(login / plain for plain, login in zip(self.plain_s, self.login_s, strict=True))

    def table(self) -> str:
        return "\n".join([
            f"slider to figure, {len(self.plain_s)} interleaved rounds on {OP}",
            f"  plain server      median {statistics.median(self.plain_s) * 1000:7.1f} ms",
            f"  --login oidc      median {statistics.median(self.login_s) * 1000:7.1f} ms",
            f"  ratio (median of per-round ratios) {self.ratio:.3f}  target <= {TARGET_RATIO:.2f}: "
            f"{'met' if self.ratio <= TARGET_RATIO else 'NOT met'}",
            f"  load average (1 min) before/after: {self.load_average_1m[0]:.1f} / {self.load_average_1m[1]:.1f}",
        ])  # fmt: skip


@contextmanager
def _server(login: dict[str, str], port: int, log_path: Path):
    """The app as ``gradient-explorer run`` starts it (``login``: the environment of ``--login``), on ``port``; its
    URL by ``localhost``, the host of the redirect URI (the identity cookie is the host's)."""
    from explorer import serve

    argv, env = serve.command([], [f"--server.port={port}"], login=login or None)
    with serve_command(argv, port, log_path, timeout=240, env=env):
        yield f"http://localhost:{port}"


def round_order(index: int, plain, signed_in) -> tuple:
    """The two moves of round ``index``, in the order they are made: plain first in even rounds, else signed in."""
    return (plain, signed_in) if index % 2 == 0 else (signed_in, plain)


async def _rounds(plain_url: str, login_url: str, moves: int) -> tuple[list[float], list[float]]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            plain_page = await (await browser.new_context(viewport=VIEWPORT)).new_page()
            login_page = await (await browser.new_context(viewport=VIEWPORT)).new_page()
            await login_page.goto(login_url)
            await login_page.get_by_role("button", name="Sign in").click(timeout=90_000)
            await login_page.wait_for_url("**/oauth2/authorize**")
            await login_page.get_by_role("button", name="alice", exact=True).click()
            await login_page.locator(".st-key-signed_in_user").wait_for(timeout=90_000)
            for page, url in ((plain_page, plain_url), (login_page, login_url)):
                await open_explore(page, url, OP)
                await nudge_first_slider(page)  # warm: the first change pays one-off costs on both
            plain, signed_in = [], []
            for index in range(moves):
                key = "ArrowRight" if index % 20 < 10 else "ArrowLeft"  # stay inside the slider's range
                # Every other round moves the signed-in server first: the second move of a round runs on a machine
                # the first has just woken (or still loads), and that must weigh on both servers alike.
                for page, times in round_order(index, (plain_page, plain), (login_page, signed_in)):
                    times.append(await nudge_first_slider(page, key))
                    await asyncio.sleep(PACE_SECONDS)
            return plain, signed_in
        finally:
            await browser.close()


def run(moves: int = 30) -> LoginOverhead:
    from oidc_provider_mock import User, run_server_in_thread

    from explorer.serve.login import login_environment

    load_before = os.getloadavg()[0]
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    users = [User(sub="alice", claims={"email": "alice@example.com", "name": "Alice", "email_verified": True})]
    plain_port, login_port = free_port(), free_port()
    with (
        run_server_in_thread(port=0, user_claims=users) as provider,
        tempfile.TemporaryDirectory(prefix="ge-login-bench-") as operator,
    ):
        secrets = Path(operator) / "secrets.toml"  # the operator's folder, never the repository
        secrets.write_text(
            "[auth]\n"
            f'redirect_uri = "http://localhost:{login_port}/oauth2callback"\n'
            f'cookie_secret = "{os.urandom(24).hex()}"\n'
            'client_id = "bench"\nclient_secret = "bench"\n'
            f'server_metadata_url = "http://localhost:{provider.server_port}/.well-known/openid-configuration"\n'
        )
        login = login_environment("oidc", secrets, None, None)
        with (
            _server({}, plain_port, artifacts / "bench_login_plain.log") as plain_url,
            _server(login, login_port, artifacts / "bench_login_oidc.log") as login_url,
        ):
            plain, signed_in = asyncio.run(_rounds(plain_url, login_url, moves))
    return LoginOverhead(plain, signed_in, (load_before, os.getloadavg()[0]))
