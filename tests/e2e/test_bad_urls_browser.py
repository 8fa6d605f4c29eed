"""A subset of the bad-input tour (tests/test_bad_urls.py) in a real browser: a notice, no exception,
and the next interaction still works."""

from __future__ import annotations

import pytest

from tests.test_bad_urls import HOSTILE, LONG, PARAM, SPEC, P

pytestmark = pytest.mark.e2e

# (id, page path, query, text a warning must contain)
CASES = [
    ("unknown-op", "", {"op": "no_such_op"}, "Unknown op 'no_such_op'"),
    ("param-nan", "", {"op": SPEC.key, P: "nan"}, f"Parameter '{PARAM.name}'"),
    ("lo-above-hi", "", {"op": SPEC.key, "lo": "5", "hi": "1"}, "lo < hi"),
    ("n-negative", "", {"op": SPEC.key, "n": "-5"}, "'n'"),
    ("query-10kB", "", {"op": SPEC.key, P: "1" * LONG}, f"URL value of '{P}' is too long"),
    ("editor-hostile", "editor", {"u_grad": HOSTILE}, "did not compile"),
]


@pytest.mark.parametrize(("name", "path", "query", "must_mention"), CASES, ids=[c[0] for c in CASES])
def test_bad_url_in_browser(app, name, path, query, must_mention):
    key = "editor.figure" if path == "editor" else "main_figure"
    app.open(path, query)
    before = app.wait_figure(key)
    app.screenshot(f"bad_url_{name}")
    assert app.exceptions() == []
    warnings = app.warnings()
    assert any(must_mention in text for text in warnings), warnings

    # the next valid interaction works: move the first slider, the figure follows
    slider = app.page.get_by_test_id("stSlider").first.get_by_role("slider")
    slider.focus()
    slider.press("ArrowRight")
    app.wait_figure_change(before, key)
    assert app.exceptions() == []
