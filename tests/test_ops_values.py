"""Registry metadata, forward values against the NumPy reference, and argument checks.

Every test is parametrised over ``ops.names()``: a new op is covered automatically, and fails
until it has an entry in ``tests/reference.py``.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import ops
from tests.reference import (
    CATALOGUE_FAMILIES,
    POINT_RANGE,
    assert_close,
    param_sets,
    reference_for,
    sweep_grid,
    tolerances,
)
from tests.reference import declared_points_via as _declared_points_via

OP_KEYS = ops.names()
FLOAT_DTYPES = ("float32", "float64")


def _cases_with_param_sets():
    return [pytest.param(key, name, id=f"{key}-{name}") for key in OP_KEYS for name in param_sets(key)]


def declared_points(spec, dtype, params):
    """spec.points(-1e3, 1e3, dtype, **params), robust to op params named lo / hi."""
    return _declared_points_via(spec, -POINT_RANGE, POINT_RANGE, dtype, params)


def _grid_for(spec, dtype, params):
    return sweep_grid([p.x for p in declared_points(spec, dtype, params)], dtype)


# -- registry --------------------------------------------------------------------------------


def test_names_are_the_catalogue_keys_in_catalogue_order():
    assert ops.names() == list(CATALOGUE_FAMILIES)


@pytest.mark.parametrize("key", OP_KEYS)
def test_every_registered_op_has_a_reference(key):
    reference_for(key)  # fails with a message saying what to add


@pytest.mark.parametrize("key", OP_KEYS)
def test_metadata_is_complete(key):
    spec = ops.get(key)
    assert spec.key == key
    assert spec.builtin is True
    for attribute in ("title", "forward_tex", "grad_tex", "why", "reference"):
        value = getattr(spec, attribute)
        assert isinstance(value, str) and value.strip(), f"{key}.{attribute} is empty"
    assert spec.family in ops.FAMILIES
    assert spec.family == reference_for(key).family == CATALOGUE_FAMILIES[key]


@pytest.mark.parametrize("key", OP_KEYS)
def test_params_match_catalogue_defaults_and_ranges(key):
    spec = ops.get(key)
    assert spec.defaults() == reference_for(key).defaults
    for param in spec.params:
        assert param.low <= param.default <= param.high, f"{key}.{param.name} default outside its range"
        assert param.low < param.high
        if param.integer:
            assert float(param.default).is_integer()
    for name, values in param_sets(key).items():
        assert spec.resolve(values) == pytest.approx(values), f"{key} {name} parameter set is not valid"


@pytest.mark.parametrize("key", OP_KEYS)
def test_nondefault_set_changes_every_param(key):
    ref = reference_for(key)
    changed = {k for k, v in ref.nondefault.items() if v != ref.defaults[k]}
    assert changed == set(ref.defaults), f"{key}: the non-default set leaves {set(ref.defaults) - changed} at default"


@pytest.mark.parametrize(("key", "set_name"), _cases_with_param_sets())
def test_points_sorted_valid_and_contain_catalogue_points(key, set_name):
    spec = ops.get(key)
    params = param_sets(key)[set_name]
    for dtype in ops.DTYPES:
        points = declared_points(spec, dtype, params)
        xs = [p.x for p in points]
        assert xs == sorted(xs)
        assert all(p.kind in ops.KINDS for p in points)
        assert all(isinstance(p.note, str) for p in points)
    points = declared_points(spec, "float32", params)
    for x, kind in reference_for(key).expected_points(params):
        matches = [p for p in points if math.isclose(p.x, x, rel_tol=1e-6, abs_tol=1e-9)]
        assert matches, f"{key}: catalogue special point x={x} not declared; declared: {points}"
        if kind is not None:
            assert kind in {p.kind for p in matches}, f"{key}: point x={x} should be a {kind!r}, got {matches}"


def test_points_accept_op_params_named_lo_and_hi():
    """leaky_clip's parameters are called lo and hi, like points()' own range arguments."""
    points = ops.get("leaky_clip").points(-5.0, 5.0, lo=-0.5, hi=2.0)
    assert [p.x for p in points] == [-0.5, 2.0]


def test_points_filter_to_range():
    spec = ops.get("ste_sign")
    assert [p.x for p in spec.points(-0.5, 2.0)] == [0.0, 1.0]
    assert spec.points(0.1, 0.9) == []


# -- forward values ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize(("key", "set_name"), _cases_with_param_sets())
def test_forward_matches_reference_on_grid_with_special_points(key, set_name, dtype):
    spec, ref = ops.get(key), reference_for(key)
    params = param_sets(key)[set_name]
    x = _grid_for(spec, dtype, params)
    expected = ref.forward(x, params)
    assert expected.dtype == x.dtype
    rtol, atol = tolerances(dtype, scale=float(np.nanmax(np.abs(expected[np.isfinite(expected)]))))
    for method in (spec.forward, spec.apply):
        y = method(tf.constant(x), **params)
        assert y.dtype.name == dtype and y.shape == x.shape
        assert_close(y.numpy(), expected, x, rtol=rtol, atol=atol, what=f"{key} {set_name} {method.__name__} {dtype}")


@pytest.mark.parametrize("key", OP_KEYS)
def test_python_numbers_and_lists_become_float32(key):
    spec = ops.get(key)
    assert spec.apply(0.25).dtype == tf.float32
    assert spec.apply(0.25).shape == ()
    assert spec.apply([0.25, -0.5]).shape == (2,)


def test_sign_of_zero_is_plus_one():
    for key in ("ste_sign", "approx_sign", "swish_sign"):
        assert ops.get(key).apply(tf.constant(0.0)).numpy() == 1.0


def test_step_value_at_threshold_is_zero():
    spec = ops.get("atan")
    y = spec.apply(tf.constant([0.25, 0.5, 0.75]), threshold=0.5).numpy()
    np.testing.assert_array_equal(y, [0.0, 0.0, 1.0])


def test_ste_tern_is_plus_minus_one_exactly_at_threshold():
    y = ops.get("ste_tern").apply(tf.constant([-0.25, -0.125, 0.0, 0.125, 0.25]), threshold_value=0.25)
    np.testing.assert_array_equal(y.numpy(), [-1.0, 0.0, 0.0, 0.0, 1.0])


def test_dorefa_rounds_half_to_even_at_level_midpoints():
    spec = ops.get("dorefa")
    # k_bit=1: n=1, x=0.5 -> round(0.5)=0; k_bit=2: n=3, x=0.5 -> round(1.5)=2 -> 2/3
    assert spec.apply(tf.constant(0.5), k_bit=1).numpy() == 0.0
    assert spec.apply(tf.constant(0.5, tf.float64), k_bit=2).numpy() == pytest.approx(2 / 3, abs=1e-15)
    # k_bit=3: n=7, x=0.5 -> round(3.5)=4 -> 4/7
    assert spec.apply(tf.constant(0.5, tf.float64), k_bit=3).numpy() == pytest.approx(4 / 7, abs=1e-15)


# -- bad input ---------------------------------------------------------------------------------


def test_unknown_key_lists_valid_keys():
    with pytest.raises(KeyError) as info:
        ops.get("no_such_op")
    message = str(info.value)
    assert "no_such_op" in message
    assert all(key in message for key in OP_KEYS)


def _bad_values(param):
    span = param.high - param.low
    return {
        "above_high": param.high + 0.5 * span + 1.0,
        "below_low": param.low - 0.5 * span - 1.0,
        "nan": float("nan"),
        "string": "1.0",
        "bool": True,
    }


def _param_cases():
    return [pytest.param(key, param.name, id=f"{key}-{param.name}") for key in OP_KEYS for param in ops.get(key).params]


@pytest.mark.parametrize(("key", "param_name"), _param_cases())
def test_bad_parameter_value_names_parameter_and_range(key, param_name):
    spec = ops.get(key)
    param = next(p for p in spec.params if p.name == param_name)
    x = tf.constant([0.25])
    for label, bad in _bad_values(param).items():
        for call, arguments in ((spec.apply, (x,)), (spec.resolve, ())):
            with pytest.raises(ValueError) as info:
                call(*arguments, **{param_name: bad})
            message = str(info.value)
            assert param_name in message, f"{key} {label}: message does not name {param_name}: {message}"
            assert f"{param.low:g}" in message and f"{param.high:g}" in message, (
                f"{key} {label}: message does not give the range [{param.low:g}, {param.high:g}]: {message}"
            )


@pytest.mark.parametrize("key", OP_KEYS)
def test_unknown_parameter_name_is_rejected(key):
    with pytest.raises(ValueError, match="not_a_param"):
        ops.get(key).apply(tf.constant([0.25]), not_a_param=1.0)


@pytest.mark.parametrize("key", OP_KEYS)
@pytest.mark.parametrize("int_dtype", [tf.int32, tf.int64])
def test_integer_input_is_a_type_error(key, int_dtype):
    spec = ops.get(key)
    x = tf.constant([1, 2], dtype=int_dtype)
    for method in (spec.apply, spec.forward, spec.surrogate_grad):
        with pytest.raises(TypeError):
            method(x)


@pytest.mark.parametrize(("lo", "hi"), [(0.5, 0.5), (1.0, -1.0)])
def test_leaky_clip_requires_lo_below_hi(lo, hi):
    spec = ops.get("leaky_clip")
    with pytest.raises(ValueError, match="lo"):
        spec.apply(tf.constant([0.0]), lo=lo, hi=hi)
    with pytest.raises(ValueError, match="lo"):
        spec.resolve({"lo": lo, "hi": hi})


def test_dorefa_k_bit_must_be_whole():
    with pytest.raises(ValueError, match="k_bit"):
        ops.get("dorefa").apply(tf.constant([0.5]), k_bit=2.5)


def test_points_reject_unknown_dtype():
    with pytest.raises(ValueError, match="dtype"):
        ops.get("atan").points(-1, 1, dtype="int8")
