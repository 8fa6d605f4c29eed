"""explorer.explore.sweeps: the Sweep, grid, values against NumPy formulas, argument checks, no retracing, decimation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer.explore.sweeps import decimate, sweep, trace_count
from tests.messages import assert_tells

FLOAT_COLUMNS = ["x", "forward", "true_grad", "custom_grad"]


def _row(df, x):
    rows = df.index[df["x"] == x]
    assert len(rows) == 1, f"x = {x!r} is not exactly once in the sweep"
    return df.loc[rows[0]]


# -- shape of the result -----------------------------------------------------------------------------
def test_columns_dtypes_and_description():
    result = sweep("atan", n=2001, params={"alpha": 3.0})
    df = result.frame
    assert list(df.columns) == ["x", "forward", "true_grad", "custom_grad", "true_grad_missing", "point"]
    for column in FLOAT_COLUMNS:  # float32 sweeps are stored as float32; float64 ones as float64
        assert df[column].dtype == np.float32
        assert sweep("atan", n=11, dtype="float64")[column].dtype == np.float64
    assert df["true_grad_missing"].dtype == bool
    assert set(df["point"].unique()) <= {"", *ops.KINDS}
    assert df["x"].is_monotonic_increasing and df["x"].is_unique
    # linspace(-3, 3, 2001) already holds the threshold 0, so nothing is inserted
    assert len(df) == 2001
    assert result.spec is ops.get("atan") and result.key == "atan"
    assert dict(result.params) == {"alpha": 3.0, "threshold": 0.0}
    assert (result.lo, result.hi, result.n, result.dtype, result.upstream) == (-3.0, 3.0, 2001, "float32", 1.0)
    assert len(result) == 2001 and result["x"].equals(df["x"])
    with pytest.raises(TypeError):
        result.params["alpha"] = 1.0  # a sweep is immutable: its parameters too


@pytest.mark.parametrize("key", ops.names())
def test_every_declared_point_is_in_the_grid_exactly(key):
    spec = ops.get(key)
    df = sweep(key, lo=-3.0, hi=3.0, n=1000).frame  # step 6/999: no catalogue point lies on this grid by chance
    declared = spec.points(-3.0, 3.0, "float32")
    for point in declared:
        exact = float(np.float32(point.x))
        row = _row(df, exact)
        assert row["point"] != "", f"{key}: row at {exact} is not marked"
    linspace = np.linspace(-3.0, 3.0, 1000).astype(np.float32)
    expected = np.union1d(linspace, np.array([p.x for p in declared], dtype=np.float32))
    np.testing.assert_array_equal(df["x"].to_numpy(), expected.astype(np.float64))


def test_point_marks_the_declared_kind():
    df = sweep("ste_sign", params={"clip_value": 0.5}).frame
    marked = df[df["point"] != ""]
    assert marked["x"].tolist() == [-0.5, 0.0, 0.5]
    assert marked["point"].tolist() == ["boundary", "jump", "boundary"]


def test_point_in_float16_is_the_rounded_value():
    # rect's boundaries at +-0.5/3 are not float16 numbers: the grid holds the float16 rounding
    df = sweep("rect", params={"alpha": 3.0}, dtype="float16").frame
    for sign in (-1, 1):
        exact = float(np.float16(sign * 0.5 / 3.0))
        assert exact != sign * 0.5 / 3.0
        assert _row(df, exact)["point"] == "boundary"


# -- values against NumPy -------------------------------------------------------------------------------
def test_atan_against_numpy():
    alpha, threshold = 3.0, 0.25
    df = sweep("atan", params={"alpha": alpha, "threshold": threshold}, upstream=2.0).frame
    x = df["x"].to_numpy()
    np.testing.assert_array_equal(df["forward"], (x > threshold).astype(np.float64))
    surrogate = (alpha / 2) / (1 + (math.pi * alpha * (x - threshold) / 2) ** 2)
    np.testing.assert_allclose(df["custom_grad"], 2.0 * surrogate, rtol=2e-6, atol=1e-7)
    # tf.cast(x > threshold) has no gradient: plotted as 0 with the flag
    assert df["true_grad_missing"].all()
    assert (df["true_grad"] == 0).all()
    assert _row(df, threshold)["forward"] == 0.0  # H(0) = 0


def test_ste_sign_closed_boundary_and_zero_true_gradient():
    df = sweep("ste_sign", n=2001).frame
    x = df["x"].to_numpy()
    np.testing.assert_array_equal(df["forward"], np.where(x >= 0, 1.0, -1.0))  # sign(0) = +1
    np.testing.assert_array_equal(df["custom_grad"], (np.abs(x) <= 1.0).astype(np.float64))
    assert _row(df, 1.0)["custom_grad"] == 1.0 and _row(df, -1.0)["custom_grad"] == 1.0  # closed
    after = df[df["x"] > 1.0].iloc[0]
    assert after["custom_grad"] == 0.0
    # tf.sign has a gradient, and it is 0
    assert not df["true_grad_missing"].any()
    assert (df["true_grad"] == 0).all()


def test_clip_gradient_clips_the_upstream_gradient():
    df = sweep("clip_gradient", upstream=3.0).frame
    np.testing.assert_array_equal(df["forward"], df["x"])
    assert (df["true_grad"] == 3.0).all()  # autodiff of the identity passes dy = 3
    assert (df["custom_grad"] == 1.0).all()  # clip(3, -1, 1)
    negative = sweep("clip_gradient", upstream=-0.25).frame
    assert (negative["custom_grad"] == -0.25).all()  # inside the clip: unchanged


def test_log1pexp_against_numpy_including_the_overflow():
    df = sweep("log1pexp", lo=-20.0, hi=100.0, n=2401).frame
    x32 = df["x"].to_numpy().astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.log(np.float32(1) + np.exp(x32))
        autodiff = np.exp(x32) / (np.float32(1) + np.exp(x32))
    np.testing.assert_allclose(df["forward"], naive.astype(np.float64), rtol=2e-6, atol=1e-7)
    # TensorFlow's float32 exp/reciprocal drift up to ~1e-4 relative for x > 60: compare below, bound above
    moderate = x32 < 60
    np.testing.assert_allclose(df["true_grad"][moderate], autodiff[moderate].astype(np.float64), rtol=2e-6, atol=1e-7)
    overflow = x32 >= np.log(np.finfo(np.float32).max)  # the float32 nearest log(max) is just above it
    assert np.isnan(df["true_grad"][overflow]).all()  # exp overflows: inf / inf
    assert np.isfinite(df["true_grad"][~overflow]).all()
    np.testing.assert_allclose(df["true_grad"][~moderate & (x32 < 87)], 1.0, rtol=1e-3)
    logistic = 1.0 / (1.0 + np.exp(-x32.astype(np.float64)))
    np.testing.assert_allclose(df["custom_grad"], logistic, rtol=2e-6, atol=1e-7)
    singular = df[df["point"] == "singular"]
    assert singular["x"].tolist() == [float(np.float32(np.log(np.finfo(np.float32).max)))]


@pytest.mark.parametrize("key", [spec.key for spec in ops.by_family()["spike"]])
def test_spike_ops_have_no_true_gradient(key):
    df = sweep(key, n=101).frame
    assert df["true_grad_missing"].all()
    assert (df["true_grad"] == 0).all()


def test_float16_columns_hold_float16_values():
    df = sweep("atan", dtype="float16", params={"alpha": 3.0}).frame
    for column in FLOAT_COLUMNS:
        values = df[column].to_numpy()
        np.testing.assert_array_equal(values.astype(np.float16).astype(np.float64), values)
    # the op computes in float32 and rounds once to float16
    x = df["x"].to_numpy()
    reference = ((1.5 / (1 + (math.pi * 3.0 * x / 2) ** 2)).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(df["custom_grad"], reference.astype(np.float64))
    # float16 holds about 2^10 values per octave: the grid near 3 is coarser than 6/2000
    assert len(df) <= 2001 and df["x"].is_unique


@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_other_dtypes(dtype):
    df = sweep("gaussian", dtype=dtype, n=301).frame
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype
    x = df["x"].to_numpy()
    np.testing.assert_array_equal(x.astype(np_dtype).astype(np.float64), x)
    expected = (2.0 / math.sqrt(math.pi) * np.exp(-((2.0 * x) ** 2))).astype(np_dtype).astype(np.float64)
    np.testing.assert_allclose(df["custom_grad"], expected, rtol=1e-2 if dtype == "bfloat16" else 1e-12)


# -- argument checks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "argument", "bounds"),
    [
        ({"lo": 1.0, "hi": 1.0}, "lo", ()),
        ({"lo": 2.0, "hi": -2.0}, "hi", ()),
        ({"lo": float("nan")}, "lo", (-1e6, 1e6)),
        ({"hi": float("inf")}, "hi", (-1e6, 1e6)),
        ({"lo": -2e6}, "lo", (-1e6, 1e6)),
        ({"hi": 1e5, "dtype": "float16"}, "hi", (-65504, 65504)),  # float16's largest finite value
        ({"n": 10}, "n", (11, 1_000_000)),
        ({"n": 1_000_001}, "n", (11, 1_000_000)),
        ({"n": 100.0}, "n", (11, 1_000_000)),
        ({"n": True}, "n", (11, 1_000_000)),
        ({"dtype": "int32"}, "dtype", ()),
        ({"upstream": float("nan")}, "upstream", ()),
        ({"upstream": "1"}, "upstream", ()),
        ({"params": {"alpha": float("nan")}}, "alpha", (0.1, 10)),
        ({"params": {"alpha": 50.0}}, "alpha", (0.1, 10)),
        ({"params": {"beta": 1.0}}, "beta", ()),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument_and_what_is_allowed(kwargs, argument, bounds):
    with pytest.raises(ValueError) as raised:
        sweep("atan", **kwargs)
    allowed = {"dtype": ops.DTYPES, "beta": ("alpha", "threshold")}.get(argument, ())
    assert_tells(str(raised.value), argument, bounds, allowed)


def test_unknown_op_lists_valid_keys():
    with pytest.raises(KeyError, match="valid ops: atan"):
        sweep("no_such_op")


def test_sweeps_on_one_grid_share_its_columns_read_only_and_each_keeps_its_own_upstream():
    """Sweeps on the same range share the cached grid's x, point and constant columns without copies;
    they are read-only, so a write through one frame cannot change another. The cached upstream
    tensor follows the upstream argument (2, 1, 2 again on the same grid)."""
    results = [sweep("fast_sigmoid", n=3001, upstream=upstream) for upstream in (2.0, 1.0, 2.0)]
    frames = [result.frame for result in results]
    for column in ("x", "true_grad", "true_grad_missing"):
        assert np.shares_memory(frames[0][column].to_numpy(), frames[1][column].to_numpy()), column
    x = frames[0]["x"].to_numpy(np.float64)
    expected_x = np.linspace(-3.0, 3.0, 3001).astype(np.float32)
    np.testing.assert_array_equal(frames[0]["x"].to_numpy(), expected_x)
    surrogate = 1.0 / (25.0 * np.abs(x) + 1.0) ** 2  # fast_sigmoid, slope 25 (the catalogue's default)
    for frame, upstream in zip(frames, (2.0, 1.0, 2.0), strict=True):
        np.testing.assert_allclose(frame["custom_grad"], upstream * surrogate, rtol=1e-6)
        np.testing.assert_array_equal(frame["true_grad"], np.zeros(3001))  # a step: no true gradient
        assert frame["true_grad_missing"].all()
        assert frame.loc[frame["x"] == 0.0, "point"].tolist() == ["jump"]
    with pytest.raises(ValueError, match="read-only"):
        frames[0].loc[0, "x"] = 99.0
    mine = results[0].to_pandas()
    mine.loc[0, "x"] = 99.0
    mine.loc[0, "true_grad"] = 5.0
    assert frames[1]["x"].iloc[0] == np.float32(-3.0) and frames[1]["true_grad"].iloc[0] == 0.0


def test_a_pass_through_ops_columns_are_read_only_views_of_nothing_a_later_sweep_reads():
    """clip_gradient's forward is the grid itself and its true gradient the cached upstream: without a copy,
    a write to either would change every later sweep on that range, so each column is read-only."""
    first = sweep("clip_gradient", n=2001, upstream=1.5)
    for column in ("forward", "true_grad", "custom_grad"):
        values = first.frame[column].to_numpy()
        assert not values.flags.writeable, column
        with pytest.raises(ValueError, match="read-only"):
            values[0] = 99.0
    again = sweep("clip_gradient", n=2001, upstream=1.5).frame
    np.testing.assert_array_equal(again["forward"], np.linspace(-3.0, 3.0, 2001).astype(np.float32))
    np.testing.assert_array_equal(again["true_grad"], np.full(2001, 1.5, dtype=np.float32))  # d(x)/dx * 1.5


# -- speed: no retracing ----------------------------------------------------------------------------------
def test_parameter_and_length_changes_do_not_retrace():
    sweep("sigmoid", params={"slope": 10.0})
    traced = trace_count("sigmoid", "float32")
    assert traced >= 1
    first = sweep("sigmoid", params={"slope": 10.0}).frame
    for slope, n, upstream in [(20.0, 2001, 1.0), (55.5, 501, 2.0), (99.0, 4000, -1.0)]:
        df = sweep("sigmoid", params={"slope": slope, "threshold": 0.1}, n=n, upstream=upstream).frame
        u = df["x"].to_numpy(np.float64) - 0.1
        with np.errstate(over="ignore"):  # cosh overflows to inf far out, where the surrogate is 0
            expected = upstream * slope / (4 * np.cosh(slope * u / 2) ** 2)  # slope * s(z) * s(-z)
        np.testing.assert_allclose(df["custom_grad"], expected, rtol=1e-5, atol=1e-6)
    assert trace_count("sigmoid", "float32") == traced
    assert not first.equals(df)


def test_user_ops_are_cached_by_identity():
    def make(height):
        return ops.OpSpec(
            key="user_box",
            title="box",
            family="override",
            params=(),
            forward_fn=lambda x, p: x,
            surrogate=lambda x, p: height * tf.ones_like(x),
            forward_tex="x",
            grad_tex="h",
            why="",
            reference="",
            builtin=False,
        )

    first, second = make(2.0), make(3.0)
    assert (sweep(first, n=11)["custom_grad"] == 2.0).all()
    assert (sweep(second, n=11)["custom_grad"] == 3.0).all()  # same key, new function
    assert trace_count(first) == 1 and trace_count(second) == 1
    again = sweep(first, n=11)
    assert trace_count(first) == 1
    assert again.spec is first and sweep(second, n=11).spec is second  # a sweep keeps the op it was made with


def test_million_point_sweep():
    """Values only: the sweep's speed is checked by ``python -m explorer bench`` (sweep_1m_vs_numpy)."""
    df = sweep("fast_sigmoid", n=1_000_000).frame
    assert len(df) == 1_000_000 + 1  # linspace(-3, 3, 1e6) misses 0: the threshold is inserted
    assert _row(df, 0.0)["point"] == "jump"
    x = df["x"].to_numpy()[::997]
    np.testing.assert_allclose(df["custom_grad"].to_numpy()[::997], 1 / (25 * np.abs(x) + 1) ** 2, rtol=2e-6)


# -- decimation ------------------------------------------------------------------------------------------------
def test_decimate_keeps_points_jumps_and_extremes():
    result = sweep("ste_tern", n=1_000_000, params={"threshold_value": 0.25})
    df = result.frame
    small = decimate(result, max_points=5000)
    specials = int((df["point"] != "").sum())
    assert len(small) <= 5000 + 3 * specials
    assert small["x"].is_monotonic_increasing
    assert small.spec is result.spec and small.params == result.params and small.n == result.n
    kept = set(small["x"])
    position = {x: i for i, x in enumerate(df["x"])}
    for x in df.loc[df["point"] != "", "x"]:
        i = position[x]
        assert {df["x"].iloc[i - 1], x, df["x"].iloc[i + 1]} <= kept
    # both sides of every jump of the forward survive, so the steps stay vertical
    forward = df["forward"].to_numpy()
    for i in np.flatnonzero(np.diff(forward) != 0):
        assert df["x"].iloc[i] in kept and df["x"].iloc[i + 1] in kept
    for column in FLOAT_COLUMNS:
        assert small[column].min() == df[column].min() and small[column].max() == df[column].max()


def test_decimate_keeps_the_shape_of_a_smooth_curve():
    result = sweep("gaussian", n=200_000, params={"alpha": 4.0})
    df = result.frame
    small = decimate(result, max_points=2000)
    assert len(small) <= 2000 + 3
    dense = np.interp(df["x"], small["x"], small["custom_grad"])
    assert np.max(np.abs(dense - df["custom_grad"])) < 0.01 * df["custom_grad"].max()


def test_decimate_leaves_small_sweeps_alone():
    result = sweep("atan", n=101)
    assert decimate(result, max_points=5000) is result
    with pytest.raises(ValueError, match=r"max_points.*100"):
        decimate(result, max_points=10)


def test_package_exports_the_computation_functions():
    import importlib
    import pkgutil

    import explorer

    for module in pkgutil.iter_modules(explorer.__path__):  # no submodule may hide an export of the same name
        if module.name not in ("__main__", "bench", "ui"):
            importlib.import_module(f"explorer.{module.name}")

    result = explorer.sweep("atan", n=11)
    assert isinstance(result, explorer.Sweep)
    assert list(result.to_pandas().columns) == ["x", "forward", "true_grad", "custom_grad", "true_grad_missing", "point"]
    assert explorer.special_points(result)["x"].tolist() == [0.0]
    assert explorer.metrics(result)["peak"].iloc[0] == pytest.approx(1.0)  # alpha / 2 at the threshold



@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_flat_call_of_the_compiled_sweep_equals_its_public_call(dtype):
    """sweeps._Compiled calls the concrete function's _call_flat; it must give what the public call gives."""
    from explorer.explore import sweeps

    for key in ops.names():
        spec = ops.get(key)
        compiled = sweeps.evaluator(spec, dtype)
        x = tf.constant(np.linspace(-3, 3, 301).astype(sweeps.numpy_dtype(dtype)))
        dy = tf.fill(tf.shape(x), tf.constant(1.5, tf.as_dtype(dtype)))
        args = [x, dy, *[tf.constant(p.default, tf.float64) for p in spec.params]]
        flat = compiled(*args)
        assert compiled._flat is not None  # the fast path is taken (TensorFlow still has _call_flat)
        public = compiled.function.get_concrete_function()(*args)
        assert len(flat) == len(public) == 4
        for ours, theirs in zip(flat, public, strict=True):
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
