"""``python -m explorer.bench.screenshots``: the README's pictures, taken from the real app in Chromium.

Serves the app (``harness.serve_app``), opens each view by its URL, waits until the page has settled and
its main figure is drawn, and writes a PNG under ``docs/``. Tooling, not product: run it from a clone after a
change that alters what a picture shows.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from explorer.bench import harness

# name -> (URL path and query, extra server environment, the part of the page to keep: CSS selector or None,
# the key of the figure to wait for)
VIEWS: dict[str, tuple[str, dict[str, str], str | None, str]] = {
    "explore": ("?op=fast_sigmoid&lo=-3&hi=3", {}, None, "main_figure"),
    # a reduction's directional view: examples/safe_norm.py on a line through the origin (its key clashes with
    # the built-in safe_norm, so it is module.function)
    "directional": (
        "?op=safe_norm.safe_norm&origin=1&seed=4",
        {"GRADIENT_EXPLORER_OPS": "examples/safe_norm.py"},
        '[data-testid="stPlotlyChart"]',
        "main_figure",
    ),
    # the ste_bias preset: q and the expected loss over SGD steps per estimator, with the closed forms
    "ste_bias": ("train?preset=ste_bias", {}, ".st-key-train-preset_ste_bias", "train.preset_ste_bias"),
}


async def take(name: str, url: str, path: Path, clip_selector: str | None, figure_key: str = "main_figure") -> None:
    async with harness.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=harness.CHROMIUM, args=list(harness.CHROMIUM_ARGS))
        try:
            page = await (await browser.new_context(viewport=harness.VIEWPORT)).new_page()
            await page.goto(url)
            await harness.settle(page)
            await page.wait_for_function(harness.FIGURE_JS, arg=figure_key, timeout=90_000)
            await page.wait_for_timeout(1500)  # plotly's second draw (the measured width) is not a Streamlit state
            if clip_selector:
                await page.locator(clip_selector).first.screenshot(path=str(path))
            else:
                await page.screenshot(path=str(path))
        finally:
            await browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.bench.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"views to take: {', '.join(VIEWS)} (default: all)")
    parser.add_argument("--out", type=Path, default=harness.ROOT / "docs")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in VIEWS]
    if unknown:
        parser.error(f"unknown view(s) {', '.join(unknown)}; valid: {', '.join(VIEWS)}")
    if not harness.chromium_available():
        print(f"no Chromium at {harness.CHROMIUM} (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names or VIEWS:
        query, env, clip, figure_key = VIEWS[name]
        with harness.serve_app(env=env) as server:
            path = args.out / f"{name}.png"
            asyncio.run(take(name, f"{server.url}/{query}", path, clip, figure_key))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
