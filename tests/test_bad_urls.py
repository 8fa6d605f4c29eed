"""The bad-input tour, headless: malformed URLs render with a notice, never an exception.

Each case opens the app with a malformed query string (AppTest runs the real script, no browser),
checks that nothing raised, that a warning names the offending key or value, that the page still
draws its figure, and that the next valid interaction works. A smaller subset runs in a real
browser in tests/e2e/test_bad_urls_browser.py.

Explore cases run ``app.py`` itself (Explore is the default page). Editor cases run the Editor
page function: AppTest selects pages by file (``switch_page``), and the app's pages are
functions registered with ``st.navigation``, so a file cannot select it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import ops
from explorer import expr
from tests.shown import shown

TIMEOUT = 120
APP = str(Path(__file__).resolve().parents[1] / "app.py")
LONG = 10_240  # a 10 kB query string


def _float_param_op() -> ops.OpSpec:
    """The first op with a float parameter: the cases' target for parameter values."""
    return next(s for s in map(ops.get, ops.names()) if s.params and not s.params[0].integer)


SPEC = _float_param_op()
PARAM = SPEC.params[0]
P = f"p.{PARAM.name}"

# (id, query, text a warning must contain). A list value repeats the key (?op=a&op=b).
EXPLORE_CASES = [
    ("unknown-op", {"op": "no_such_op"}, "Unknown op 'no_such_op'"),
    ("empty-op", {"op": ""}, "Unknown op ''"),
    ("html-op", {"op": "<script>alert(1)</script>"}, "Unknown op"),
    ("fullwidth-op", {"op": "ａｔａｎ"}, "Unknown op"),
    ("repeated-op-last-bad", {"op": [SPEC.key, "nope"]}, "Unknown op 'nope'"),
    ("param-nan", {"op": SPEC.key, P: "nan"}, f"Parameter '{PARAM.name}'"),
    ("param-inf", {"op": SPEC.key, P: "inf"}, f"Parameter '{PARAM.name}'"),
    ("param-minus-inf", {"op": SPEC.key, P: "-inf"}, f"Parameter '{PARAM.name}'"),
    ("param-overflow", {"op": SPEC.key, P: "1e309"}, f"Parameter '{PARAM.name}'"),
    ("param-text", {"op": SPEC.key, P: "abc"}, f"Parameter '{PARAM.name}'"),
    ("param-empty", {"op": SPEC.key, P: ""}, f"Parameter '{PARAM.name}'"),
    ("param-below-range", {"op": SPEC.key, P: str(PARAM.low - 1)}, f"Parameter '{PARAM.name}'"),
    ("param-above-range", {"op": SPEC.key, P: "1e6"}, f"Parameter '{PARAM.name}'"),
    ("param-repeated-last-bad", {"op": SPEC.key, P: [str(PARAM.default), "nan"]}, f"Parameter '{PARAM.name}'"),
    ("param-unknown", {"op": SPEC.key, "p.no_such_param": "1"}, "no_such_param"),
    ("lo-nan", {"lo": "nan"}, "'lo'"),
    ("hi-inf", {"hi": "inf"}, "'hi'"),
    ("lo-text", {"lo": "minus three"}, "'lo'"),
    ("lo-hex", {"lo": "0x10"}, "'lo'"),
    ("lo-huge", {"lo": "-1e7"}, "'lo'"),
    ("lo-above-hi", {"lo": "5", "hi": "1"}, "lo < hi"),
    ("lo-equals-hi", {"lo": "1", "hi": "1"}, "lo < hi"),
    ("n-negative", {"n": "-5"}, "'n'"),
    ("n-zero", {"n": "0"}, "'n'"),
    ("n-huge", {"n": "1e12"}, "'n'"),
    ("n-fraction", {"n": "10.5"}, "'n'"),
    ("n-text", {"n": "many"}, "'n'"),
    ("n-nan", {"n": "nan"}, "'n'"),
    ("upstream-nan", {"upstream": "nan"}, "'upstream'"),
    ("upstream-huge", {"upstream": "1e300"}, "'upstream'"),
    ("dtype-unknown", {"dtype": "float8"}, "Unknown dtype 'float8'"),
    ("dtype-html", {"dtype": "<b>x</b>"}, "Unknown dtype"),
    ("overlay-text", {"overlay": "maybe"}, "'overlay'"),
    ("cmp-unknown", {"cmp": "everything"}, "'cmp'"),
    ("cmp-ops-unknown", {"cmp": "ops", "cmp_ops": f"{SPEC.key},nope"}, "cmp_ops"),
    ("cmp-param-unknown", {"cmp_param": "nothing"}, "'cmp_param'"),
    ("cmp-values-text", {"op": SPEC.key, "cmp_param": PARAM.name, "cmp_values": "1,abc,nan"}, "compare value 'abc'"),
    ("long-op-10kB", {"op": "a" * LONG}, "URL value of 'op' is too long"),
    ("long-param-10kB", {"op": SPEC.key, P: "1" * LONG}, f"URL value of '{P}' is too long"),
    ("many-keys-10kB", {**{f"junk{i}": "x" * 40 for i in range(LONG // 48)}, "n": "bad"}, "'n'"),
]

# Editor page: hostile or malformed editor URLs. (id, query, warning text, error text or None)
HOSTILE = "__import__('os').system('id')"
EDITOR_CASES = [
    ("import-call", {"u_grad": HOSTILE}, "did not compile", "attribute access"),
    ("dunder-escape", {"u_fwd": "().__class__.__bases__[0].__subclasses__()"}, "did not compile", "not allowed"),
    ("open-file", {"u_fwd": "open('/etc/passwd').read()"}, "did not compile", "not allowed"),
    ("lambda", {"u_grad": "lambda: 0"}, "did not compile", "lambda is not allowed"),
    ("power-tower", {"u_fwd": "9 ** 9 ** 9 ** 9"}, "did not compile", "exponent"),
    ("html-name", {"u_name": "<script>alert(1)</script>"}, "did not compile", None),
    ("long-forward", {"u_fwd": "x+" * 300 + "x"}, "u_fwd", None),
    ("params-text", {"u_params": "k:abc:1:100"}, "u_params", None),
    ("params-nan", {"u_params": "k:nan:1:100"}, "u_params", None),
    ("params-fields", {"u_params": "k:1:2"}, "u_params", None),
    ("params-too-many", {"u_params": ";".join(f"p{i}:1:0:2" for i in range(expr.MAX_PARAMS + 2))}, "u_params", None),
    ("points-call", {"u_points": "exec('1')"}, "did not compile", None),
]


# Train page: every key of its URL (explorer.state.train_from_query). (id, query, warning text); every case
# also carries a good value of another key, which must survive (nothing else lost).
TRAIN_CASES = [
    ("preset-unknown", {"preset": "<b>nope</b>"}, "Unknown preset '<b>nope</b>'"),
    ("task-unknown", {"task": "spirals"}, "'task' = 'spirals' must be one of"),
    ("n-below", {"n": "3"}, "'n' = '3' must be a whole number in [16, 10000]"),
    ("n-fraction", {"n": "100.5"}, "'n' = '100.5' must be a whole number"),
    ("noise-nan", {"noise": "nan"}, "'noise' = 'nan' must be a number in [0, 1]"),
    ("width-huge", {"width": "1e9"}, "'width' = '1e9' must be a whole number in [1, 64]"),
    ("depth-zero", {"depth": "0"}, "'depth' = '0' must be a whole number in [1, 6]"),
    ("opt-unknown", {"opt": "nadam"}, "'opt' = 'nadam' must be one of adam, sgd"),
    ("lr-zero", {"lr": "0"}, "'lr' = '0' must be a number in (0, 1e+07]"),
    ("lr-inf", {"lr": "inf"}, "'lr' = 'inf' must be a number in (0, 1e+07]"),
    ("batch-text", {"batch": "half"}, "'batch' = 'half' must be 'full' or a whole number in [1, 10000]"),
    ("epochs-over", {"epochs": "2001"}, "'epochs' = '2001' must be a whole number in [1, 2000]"),
    ("seed-negative", {"seed": "-1"}, "'seed' = '-1' must be a whole number in [0, 2147483647]; using 0"),
    ("runs-unknown-op", {"runs": "no_such_op:custom;atan:true"}, "Ignored run 'no_such_op:custom'"),
    ("runs-bad-mode", {"runs": "atan:sideways"}, "gradient 'sideways' must be one of custom, true"),
    ("runs-bad-param", {"runs": "atan:custom:alpha=99"}, "alpha"),
    ("runs-learn-impossible", {"runs": "ste_tern:custom::learn"}, "ste_tern has no parameter that can be learned"),
    ("runs-garbage", {"runs": ";;:::"}, "'runs' has no valid run"),
    ("long-lr-10kB", {"lr": "1" * LONG}, "URL value of 'lr' is too long"),
]


def _train_page():
    from explorer.ui import runtime, train

    runtime.keep_keras_state_between_reruns()
    train.page()


def _editor_page():
    from explorer.ui import editor

    editor.page()


def _open(app: AppTest, query: dict) -> AppTest:
    for key, value in query.items():
        app.query_params[key] = value
    app.run()
    return app


def _assert_rendered(app: AppTest, must_mention: str) -> None:
    assert not app.exception, [e.value for e in app.exception]
    warnings = [shown(w) for w in app.warning]
    assert any(must_mention in text for text in warnings), warnings
    assert app.get("plotly_chart"), "the page drew no figure"


def _move_first_slider(app: AppTest):
    """Move the first slider to about a third of its range; returns (label, value)."""
    slider = app.slider[0]
    step = slider.step or (slider.max - slider.min) / 100
    value = slider.min + step * round((slider.max - slider.min) / 3 / step)
    value = int(value) if isinstance(slider.value, int) else round(value, 10)
    slider.set_value(value).run()
    return slider.label, value


def _url_keys_the_pages_write() -> set[str]:
    """Every URL key the Explore and Editor pages write (``p.`` for all parameters): taken from the
    product's own serialisers, with every field away from its default in both compare modes."""
    from dataclasses import replace

    from explorer import state as url_state

    base = url_state.default_state().with_op(SPEC.key)
    full = replace(base, params={PARAM.name: PARAM.low}, lo=-1.0, hi=2.0, n=11, dtype="float64", upstream=2.0, overlay=True)
    keys = set(url_state.to_query(full)) | set(url_state.to_query(replace(full, compare="ops")))
    keys |= set(url_state.editor_to_query(url_state.EditorSource()))
    from explorer.train import trainer as train

    train_state = url_state.TrainState(
        task="moons", n=100, noise=0.2, width=3, depth=2, optimizer="sgd", learning_rate=0.5, batch_size=10,
        epochs=9, seed=3, runs=(train.Run("atan", {"alpha": 3.0}, learn=True),), preset="dann",
    )  # fmt: skip
    keys |= {f"train:{key}" for key in url_state.train_to_query(train_state)}
    return {"p." if key.startswith("p.") else key for key in keys}


def test_the_tour_tries_a_bad_value_for_every_url_key():
    """Measured against what the pages write, not the list's length: a new URL key without a bad
    case here fails this test."""
    tried = {"p." if key.startswith("p.") else key for _, query, *_ in EXPLORE_CASES + EDITOR_CASES for key in query}
    tried |= {f"train:{key}" for _, query, _ in TRAIN_CASES for key in query}
    assert sorted(_url_keys_the_pages_write() - tried) == []
    assert {f"train:{key}" for key in __import__("explorer.state").state.TRAIN_URL_KEYS} <= _url_keys_the_pages_write()
    assert len({case[0] for case in EXPLORE_CASES + EDITOR_CASES}) == len(EXPLORE_CASES) + len(EDITOR_CASES)
    assert any(len("&".join(f"{k}={v}" for k, v in query.items())) >= LONG for _, query, _ in EXPLORE_CASES)


@pytest.mark.parametrize(
    ("query", "must_mention"), [case[1:] for case in EXPLORE_CASES], ids=[c[0] for c in EXPLORE_CASES]
)
def test_bad_explore_url_shows_a_notice_and_stays_usable(query, must_mention):
    app = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), query)
    _assert_rendered(app, must_mention)

    shown_op = app.query_params["op"]
    assert shown_op in ops.names()
    if ops.get(shown_op).params:
        name, value = _move_first_slider(app)
        assert not app.exception, [e.value for e in app.exception]
        assert float(app.query_params[f"p.{name}"]) == pytest.approx(value)
    hi = app.number_input(key="w.hi")
    new_hi = 2.5 if not math.isclose(hi.value, 2.5) else 2.0
    hi.set_value(new_hi).run()
    assert not app.exception, [e.value for e in app.exception]
    assert float(app.query_params["hi"]) == new_hi
    assert app.get("plotly_chart")


@pytest.mark.parametrize(
    ("query", "must_mention", "error_text"), [case[1:] for case in EDITOR_CASES], ids=[c[0] for c in EDITOR_CASES]
)
def test_bad_editor_url_shows_a_notice_and_stays_usable(query, must_mention, error_text):
    app = _open(AppTest.from_function(_editor_page, default_timeout=TIMEOUT), query)
    _assert_rendered(app, must_mention)
    errors = [shown(e) for e in app.error if shown(e).startswith("Not compiled")]
    if error_text is not None:
        assert len(errors) == 1 and error_text in errors[0], errors
    for key, value in query.items():  # a value that was refused never reaches the URL
        assert app.query_params.get(key) != value

    name, value = _move_first_slider(app)
    assert not app.exception, [e.value for e in app.exception]
    assert app.slider[0].value == pytest.approx(value)
    assert app.get("plotly_chart")


@pytest.mark.parametrize(("query", "must_mention"), [case[1:] for case in TRAIN_CASES], ids=[c[0] for c in TRAIN_CASES])
def test_bad_train_url_shows_a_notice_uses_the_default_and_keeps_the_rest(query, must_mention):
    from explorer import state as url_state

    key = next(iter(query))
    kept_key, kept_widget = ("seed", "train.seed") if key == "epochs" else ("epochs", "train.epochs")
    app = _open(AppTest.from_function(_train_page, default_timeout=TIMEOUT), {**query, kept_key: "7"})
    assert not app.exception, [e.value for e in app.exception]
    warnings = [shown(w) for w in app.warning]
    assert any(must_mention in text for text in warnings), warnings
    assert app.number_input(key=kept_widget).value == 7  # the good value beside the bad one is kept
    default = url_state.TrainState()
    shown_query = dict(app.query_params)
    if key in ("task", "n", "noise", "width", "depth", "opt", "lr", "batch", "seed", "epochs"):  # the default is used
        assert key not in shown_query, shown_query
        field = {"opt": "optimizer", "lr": "learning_rate", "batch": "batch_size"}.get(key, key)
        assert app.session_state["train.state"].__getattribute__(field) == getattr(default, field)
    for value in query.values():  # a refused value never reaches the URL
        assert value not in shown_query.values()
    app.slider(key="train.width").set_value(5).run()
    assert not app.exception and app.query_params["width"] == "5"  # the next interaction works
