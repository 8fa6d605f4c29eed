"""URL state: round trips, and every malformed value falls back with a notice, never an exception."""

from dataclasses import replace

import pytest

import ops
from explorer import state as url_state


def test_default_state_tells_the_story():
    state = url_state.default_state()
    assert state.op == "ste_sign"
    assert (state.lo, state.hi, state.n, state.dtype) == (-3.0, 3.0, 2001, "float32")
    assert state.compare_param == "clip_value" and state.compare_values == (0.5, 1.0, 2.0)


@pytest.mark.parametrize("key", ops.names())
def test_round_trip_every_op(key):
    spec = ops.get(key)
    params = {p.name: (p.low + p.high) / 2 if not p.integer else float(round((p.low + p.high) / 2)) for p in spec.params}
    if key == "leaky_clip":
        params.update(lo=-0.5, hi=2.0)
    state = url_state.default_state().with_op(key)
    state = replace(state, params=params, lo=-2.5, hi=4.25, n=777, dtype="bfloat16", upstream=3.0, overlay=True)
    restored, notices = url_state.from_query(url_state.to_query(state))
    assert notices == []
    assert restored.op == key
    assert restored.resolved_params() == pytest.approx(spec.resolve(params))
    assert (restored.lo, restored.hi, restored.n, restored.dtype, restored.upstream, restored.overlay) == (
        -2.5, 4.25, 777, "bfloat16", 3.0, True,
    )


# Values whose short forms (:g, .10g) are not the value: 1/3 loses digits at any fixed precision,
# -2.123456789 at six significant digits, 1e-7 is where fixed-point formats give 0.
LONG_VALUES = (1 / 3, -2.123456789, 1e-7)


def _long_value_in(low: float, high: float, which: int) -> float:
    """A value in [low, high] that needs every digit: low + (high - low) * 1/3 (or * 1e-7)."""
    fraction = (1 / 3, 1e-7, 2 / 3)[which % 3]
    return low + (high - low) * fraction


@pytest.mark.parametrize("key", ops.names())
def test_every_float_of_every_op_round_trips_exactly(key):
    spec = ops.get(key)
    params = {
        p.name: float(round((p.low + p.high) / 2)) if p.integer else _long_value_in(p.low, p.high, i)
        for i, p in enumerate(spec.params)
    }
    if key == "leaky_clip":
        params.update(lo=-1 / 3, hi=2.123456789)
    state = url_state.default_state().with_op(key)
    state = replace(state, params=params, lo=-2.123456789, hi=1 / 3, upstream=1e-7)
    first_float = next((p for p in spec.params if not p.integer), None)
    if first_float is not None:
        compare = tuple(_long_value_in(first_float.low, first_float.high, i) for i in range(3))
        state = replace(state, compare_param=first_float.name, compare_values=compare)
    restored, notices = url_state.from_query(url_state.to_query(state))
    assert notices == []
    assert dict(restored.params) == params  # exact: no approx anywhere
    assert (restored.lo, restored.hi, restored.upstream) == (-2.123456789, 1 / 3, 1e-7)
    assert restored.compare_values == state.compare_values


def test_the_link_in_the_issue_reproduces_its_exact_values():
    query = {"op": "atan", "p.alpha": "1.23456789", "lo": "-2.123456789", "hi": "2.987654321"}
    state, notices = url_state.from_query(query)
    assert notices == []
    written = url_state.to_query(state)
    assert (written["p.alpha"], written["lo"], written["hi"]) == ("1.23456789", "-2.123456789", "2.987654321")


@pytest.mark.parametrize("value", [*LONG_VALUES, 1e22, -0.0, 25.0, 0.1 + 0.2, 5e-324, 1.7976931348623157e308])
def test_url_number_is_the_shortest_text_that_parses_back_exactly(value):
    text = url_state.url_number(value)
    assert float(text) == value and "+" not in text and " " not in text
    assert len(text) <= len(repr(value))  # never longer than Python's own shortest round trip


def test_editor_parameters_round_trip_exactly():
    params = tuple((name, v, v - 1e-7, v + 2.123456789) for name, v in zip("kab", LONG_VALUES, strict=True))
    source = url_state.EditorSource(params=params, gradient="k + a + b")
    back, notices = url_state.editor_from_query(url_state.editor_to_query(source))
    assert notices == [] and back.params == params


def test_compare_round_trip():
    state = replace(url_state.default_state(), compare="ops", compare_ops=("atan", "sigmoid"))
    restored, notices = url_state.from_query(url_state.to_query(state))
    assert notices == [] and restored.compare == "ops" and restored.compare_ops == ("atan", "sigmoid")
    state = replace(url_state.default_state(), compare_values=(0.25, 3.0))
    restored, _ = url_state.from_query(url_state.to_query(state))
    assert restored.compare_values == (0.25, 3.0)


MALFORMED = [
    ({"op": "nope"}, "Unknown op"),
    ({"op": ""}, "Unknown op"),
    ({"op": "atan", "p.alpha": "nan"}, "alpha"),
    ({"op": "atan", "p.alpha": "inf"}, "alpha"),
    ({"op": "atan", "p.alpha": "-inf"}, "alpha"),
    ({"op": "atan", "p.alpha": "1e9"}, "alpha"),
    ({"op": "atan", "p.alpha": "two"}, "alpha"),
    ({"op": "atan", "p.alpha": ""}, "alpha"),
    ({"op": "dorefa", "p.k_bit": "2.5"}, "k_bit"),
    ({"op": "leaky_clip", "p.lo": "2", "p.hi": "-2"}, "below"),
    ({"op": "atan", "p.clip_value": "1"}, "Ignored parameter"),
    ({"lo": "5", "hi": "-5"}, "lo < hi"),
    ({"lo": "1", "hi": "1"}, "lo < hi"),
    ({"lo": "nan"}, "'lo'"),
    ({"hi": "inf"}, "'hi'"),
    ({"lo": "-1e300"}, "'lo'"),
    ({"hi": "abc"}, "'hi'"),
    ({"n": "-5"}, "'n'"),
    ({"n": "0"}, "'n'"),
    ({"n": "10"}, "'n'"),
    ({"n": "1000001"}, "'n'"),
    ({"n": "1e12"}, "'n'"),
    ({"n": "20.5"}, "'n'"),
    ({"n": "many"}, "'n'"),
    ({"dtype": "int8"}, "dtype"),
    ({"dtype": "float128"}, "dtype"),
    ({"upstream": "nan"}, "upstream"),
    ({"upstream": "1e99"}, "upstream"),
    ({"overlay": "maybe"}, "overlay"),
    ({"cmp": "everything"}, "cmp"),
    ({"cmp": "ops", "cmp_ops": "atan,__import__,rect"}, "unknown op"),
    ({"cmp_param": "alpha"}, "cmp_param"),
    ({"cmp_values": "0.5,zero,99"}, "compare value"),
    ({"op": "x" * 10_000}, "too long"),
    ({"op": "<script>alert(1)</script>"}, "Unknown op"),
]


@pytest.mark.parametrize("query, fragment", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_values_fall_back_with_a_notice(query, fragment):
    state, notices = url_state.from_query(query)
    assert notices, "a malformed value must produce a visible notice"
    assert any(fragment.lower() in notice.lower() for notice in notices), notices
    # whatever fell back is valid: the state resolves and sweeps would accept it
    state.spec.resolve(state.params)
    assert state.lo < state.hi and url_state.N_RANGE[0] <= state.n <= url_state.N_RANGE[1]
    assert state.dtype in ops.DTYPES


def test_repeated_keys_take_the_last_value():
    state, notices = url_state.from_query({"op": ["atan", "sigmoid"], "n": ["101", "501"]})
    assert notices == [] and state.op == "sigmoid" and state.n == 501


def test_valid_values_next_to_invalid_ones_are_kept():
    state, notices = url_state.from_query({"op": "atan", "p.alpha": "3.5", "n": "-1", "lo": "-2"})
    assert state.op == "atan" and state.params == {"alpha": 3.5} and state.lo == -2.0
    assert state.n == 2001 and len(notices) == 1


# -- the editor's state ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,expected",
    [
        ("k:25:1:100", (("k", 25.0, 1.0, 100.0),)),
        ("k:1:0.1:10; a:2:1:5", (("k", 1.0, 0.1, 10.0), ("a", 2.0, 1.0, 5.0))),
        ("", ()),
    ],
)
def test_params_text_round_trip(text, expected):
    assert url_state.params_from_text(text) == expected
    assert url_state.params_from_text(url_state.params_to_text(expected)) == expected


@pytest.mark.parametrize("text", ["k:25:1", "k:a:1:2", "a:1:0:2;b:1:0:2;c:1:0:2;d:1:0:2", "k:inf:0:1"])
def test_bad_params_text_raises_value_error(text):
    with pytest.raises(ValueError):
        url_state.params_from_text(text)


def test_points_text():
    assert url_state.points_from_text("0, -1/k, 1:kink") == [0.0, "-1/k", (1.0, "kink")]


def test_editor_source_round_trips_through_its_url_and_compiles_once():
    source = url_state.EditorSource(name="ramp", forward="clip(x, -1, 1)", gradient="where(abs(x) <= a, 1, 0)",
                                params=(("a", 1.0, 0.5, 2.0),), points="-a:boundary, a:boundary")  # fmt: skip
    back, notices = url_state.editor_from_query(url_state.editor_to_query(source))
    assert back == source and notices == []
    spec = url_state.editor_op(source)
    assert spec is url_state.editor_op(source)  # compiled once (cached on the source)
    assert [(p.x, p.kind) for p in spec.points(-3, 3)] == [(-1.0, "boundary"), (1.0, "boundary")]
    assert url_state.editor_from_query({"op": "atan"}) == (None, [])  # no editor key: no editor source


def test_editor_op_is_none_for_no_source_and_for_a_rejected_one():
    assert url_state.editor_op(None) is None
    assert url_state.editor_op(url_state.EditorSource(forward="log(")) is None


def test_train_from_query_takes_a_known_preset_and_names_anything_else():
    from explorer.train import presets

    assert url_state.train_from_query({}) == (url_state.TrainState(), [])
    assert url_state.train_from_query({"preset": "dann"})[0] == presets.get("dann").state
    assert url_state.train_from_query({"preset": ["nope", "yin2019"]})[0].preset == "yin2019"  # the last wins
    kept = url_state.TrainState(epochs=7)
    state, notices = url_state.train_from_query({"preset": "Dann"}, kept)
    assert state == kept and "Unknown preset 'Dann'" in notices[0] and "yin2019, dann" in notices[0]
    state, notices = url_state.train_from_query({"preset": "x" * 201}, kept)
    assert state == kept and "too long (201 characters)" in notices[0]


def test_a_train_state_round_trips_through_its_url_with_shortest_numbers():
    from explorer.train import trainer as train

    state = url_state.TrainState(
        task="circles", n=300, noise=0.1 + 0.2, width=7, depth=3, optimizer="rmsprop", learning_rate=1e-3 / 3,
        batch_size=17, epochs=11, seed=2**31 - 1,
        runs=(train.Run("fast_sigmoid", {"slope": 12.5, "threshold": -0.25}), train.Run("ste_sign", gradient="true"),
              train.Run("sigmoid", learn=True)),
    )  # fmt: skip
    query = url_state.train_to_query(state)
    assert query == {
        "task": "circles", "opt": "rmsprop", "n": "300", "width": "7", "depth": "3", "epochs": "11",
        "seed": "2147483647", "noise": "0.30000000000000004", "lr": "0.0003333333333333333", "batch": "17",
        "runs": "fast_sigmoid:custom:slope=12.5,threshold=-0.25;ste_sign:true;sigmoid:custom::learn",
    }  # fmt: skip
    assert url_state.train_from_query(query) == (state, [])
    assert url_state.train_from_query({**query, "batch": "full"})[0].batch_size is None
    assert url_state.train_to_query(url_state.TrainState()) == {}  # the defaults: an empty query


def test_a_train_url_changes_only_the_keys_it_has_and_a_preset_is_the_base_of_the_others():
    from explorer.train import presets

    current = url_state.TrainState(epochs=9, seed=4)
    state, notices = url_state.train_from_query({"lr": "0.5"}, current)
    assert notices == [] and state == current.replace(learning_rate=0.5)
    state, _ = url_state.train_from_query({"preset": "depth", "epochs": "20"}, current)
    assert state == presets.get("depth").state.replace(epochs=20)
    assert url_state.train_to_query(state) == {"preset": "depth", "epochs": "20", "runs": url_state.runs_to_text(state.runs)}


# -- a preset's own view controls ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("preset", "view"),
    [
        ("yin2019", url_state.PresetView(yin_steps=1234, yin_lr=0.003, yin_monte_carlo=True)),
        ("ste_bias", url_state.PresetView(ste_p=1.5, ste_t=0.07, ste_surrogate="triangle")),
        ("ste_bias", url_state.PresetView()),
    ],
)
def test_a_preset_view_round_trips_through_its_url_keys(preset, view):
    query = url_state.preset_view_to_query(view, preset)
    assert all(key.startswith(("yin.", "ste.")) for key in query)
    back, notices = url_state.preset_view_from_query({key: [value] for key, value in query.items()}, preset)
    assert notices == [] and back == view


def test_only_the_active_presets_view_keys_are_written_and_read():
    view = url_state.PresetView(yin_steps=500, ste_t=0.3)
    assert url_state.preset_view_to_query(view, "ste_bias") == {"ste.t": "0.3"}
    assert url_state.preset_view_to_query(view, "dann") == {}
    back, notices = url_state.preset_view_from_query({"yin.steps": ["500"], "ste.t": ["0.3"]}, "yin2019")
    assert back == url_state.PresetView(yin_steps=500) and notices == []


@pytest.mark.parametrize(
    ("key", "raw", "words"),
    [
        ("yin.steps", "0", "a whole number in [1, 10000]; using 3000"),
        ("yin.steps", "10001", "a whole number in [1, 10000]"),
        ("yin.lr", "inf", "a number in [0.0001, 10]; using 0.1"),
        ("yin.mc", "true", "0 or 1; using 0"),
        ("ste.p", "2.5", "one of 1.5, 2, 3; using 2"),
        ("ste.t", "0.5", "a number in [0.05, 0.49]; using 0.45"),
        ("ste.op", "relu", "one of atan, "),
    ],
)
def test_a_bad_preset_view_value_is_a_notice_naming_the_allowed_values(key, raw, words):
    preset = "yin2019" if key.startswith("yin.") else "ste_bias"
    view, notices = url_state.preset_view_from_query({key: [raw]}, preset)
    assert view == url_state.PresetView()
    assert len(notices) == 1 and notices[0].startswith(f"'{key}' = '{raw}' must be ") and words in notices[0]


def test_a_url_number_in_range_is_finite_inside_its_bounds_and_whole_where_asked():
    from explorer.state.query import number_in_range

    assert number_in_range(" 2.5 ", -3, 3) == 2.5
    assert number_in_range("-3", -3, 3) == -3.0 and number_in_range("3", -3, 3) == 3.0  # both bounds allowed
    whole = number_in_range("300", 1, 2000, integer=True)
    assert whole == 300 and isinstance(whole, int)
    assert number_in_range("3e2", 1, 2000, integer=True) == 300
    for text, integer in (("3.0001", False), ("-3.5", False), ("2.5", True), ("nan", False), ("inf", False), ("x", False)):
        with pytest.raises(ValueError):
            number_in_range(text, -3, 3, integer=integer)
