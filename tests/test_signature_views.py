"""Views of custom gradients of any signature (explorer.explore.signature_views) against NumPy references."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import ops
from explorer import loaded
from explorer.explore import signature_views as sv
from explorer.explore import sweeps
from explorer.explore.points import special_points
from ops import inputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(module: str, function: str) -> ops.OpSpec:
    spec = importlib.util.spec_from_file_location(f"views_{module}", EXAMPLES / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return ops.from_function(getattr(loaded, function))


@pytest.fixture(scope="module")
def safe_norm():
    return _example("safe_norm", "safe_norm")


def _sweep(spec, layout, view, n=201, params=None, dtype="float64"):
    return sweeps.sweep(sv.view_spec(spec, layout, view), lo=-3.0, hi=3.0, n=n, params=params or {}, dtype=dtype)


def test_layouts_of_the_examples(safe_norm):
    assert sv.find_layout(_example("gradient_reversal", "grad_reverse")).elementwise
    norm = sv.find_layout(safe_norm)
    assert not norm.elementwise and norm.shapes == ((4, 3),) and norm.outputs == 1 and not norm.simple
    product = sv.find_layout(_example("matmul", "matmul"))
    assert not product.elementwise and product.shapes == ((2, 3), (3, 4))
    both = sv.find_layout(_example("sin_cos", "sin_cos"))
    assert both.elementwise and both.outputs == 2 and not both.simple
    assert sv.find_layout(_example("square", "square_with_scaled_grad")).simple


def test_the_layout_takes_the_input_assignments_found_beside_the_function():
    """A typed ops.inputs.Found: the one given is used as it is; without one the layout finds it the same way."""
    spec = _example("matmul", "matmul")
    user = spec.user_function
    declared = inputs.find_inputs(ops.from_function(user.fn, input_shapes=[((5, 2), (2, 7))]).user_function, user.call_all)
    assert [a.shapes for a in declared.working] == [((5, 2), (2, 7))]
    assert sv.find_layout(spec, declared).shapes == ((5, 2), (2, 7))
    assert sv.find_layout(spec).shapes == ((2, 3), (3, 4))  # the matrix-product rule, as the checker finds it
    none = sv.find_layout(spec, inputs.Found(tried=["(4, 3), (4, 3)"]))
    assert none.failure.startswith("matmul: no input shapes found that matmul accepts (tried (4, 3), (4, 3);")


def test_safe_norm_on_a_line_through_the_origin(safe_norm):
    """x(t) = t·u with one vector x: s(t) = |t|·‖u‖, ds/dt = ±‖u‖ off 0; the custom derivative at t = 0 is
    ⟨0, u⟩ = 0 (the backward's subgradient at the zero vector)."""
    layout = sv.Layout(("x",), ((5,),), 1, False, False, "float64")
    view = sv.View(sv.LINE, "x", "x", 0, seed=7, origin=True)
    result = _sweep(safe_norm, layout, view)
    x0, u, fixed = sv.line(layout, "x", 7, origin=True)
    assert not x0.any() and fixed == {} and np.isclose(np.linalg.norm(u), 1.0)
    t = result["x"].to_numpy()
    norm_u = np.linalg.norm(u)
    np.testing.assert_allclose(result["forward"], np.abs(t) * norm_u, rtol=1e-12, atol=1e-12)
    off = np.abs(t) > 1e-3
    np.testing.assert_allclose(result["true_grad"][off], np.sign(t[off]) * norm_u, rtol=1e-8)
    np.testing.assert_allclose(result["custom_grad"][off], np.sign(t[off]) * norm_u, rtol=1e-12)
    at_zero = np.flatnonzero(t == 0.0)
    assert at_zero.size == 1
    assert result["custom_grad"][at_zero[0]] == 0.0
    table = special_points(result)
    assert list(table["kind"]) == ["kink"] and table["x"].iloc[0] == 0.0


def test_safe_norm_of_rows_on_a_seeded_line(safe_norm):
    """(4, 3) rows: s(t) = Σ_rows ‖x0_r + t u_r‖ and its derivative Σ_rows ⟨x_r, u_r⟩ / ‖x_r‖, in NumPy."""
    layout = sv.find_layout(safe_norm)
    view = sv.View(sv.LINE, "x", "x", 0, seed=3)
    result = _sweep(safe_norm, layout, view)
    x0, u, _ = sv.line(layout, "x", 3)
    t = result["x"].to_numpy()
    points = x0[None] + t[:, None, None] * u[None]
    norms = np.linalg.norm(points, axis=-1)
    np.testing.assert_allclose(result["forward"], norms.sum(axis=1), rtol=1e-12)
    derivative = (np.sum(points * u[None], axis=-1) / norms).sum(axis=1)
    np.testing.assert_allclose(result["custom_grad"], derivative, rtol=1e-10)
    np.testing.assert_allclose(result["true_grad"], derivative, rtol=1e-6, atol=1e-8)


def test_matmul_along_a_line_with_b_fixed():
    spec = _example("matmul", "matmul")
    layout = sv.find_layout(spec)
    result = _sweep(spec, layout, sv.View(sv.LINE, "a", "a", 0, seed=1))
    a0, u, fixed = sv.line(layout, "a", 1)
    b = fixed["b"]
    t = result["x"].to_numpy()
    np.testing.assert_allclose(result["forward"], [np.sum((a0 + s * u) @ b) for s in t], rtol=1e-12)
    slope = np.sum(u @ b)
    np.testing.assert_allclose(result["custom_grad"], np.full(t.size, slope), rtol=1e-12)
    np.testing.assert_allclose(result["true_grad"], np.full(t.size, slope), rtol=1e-7)


def test_grad_reverse_curves_in_x_and_lam():
    spec = _example("gradient_reversal", "grad_reverse")
    layout = sv.find_layout(spec)
    result = _sweep(spec, layout, sv.View(sv.CURVE, "x", "x", 0), params={"lam": 0.75})
    x = result["x"].to_numpy()
    np.testing.assert_allclose(result["forward"], x)
    np.testing.assert_allclose(result["true_grad"], np.ones_like(x), rtol=1e-9)
    np.testing.assert_allclose(result["custom_grad"], np.full_like(x, -0.75))
    # the gradient with respect to lam along the same sweep: the identity does not depend on lam; its backward gives None
    wrt_lam = _sweep(spec, layout, sv.View(sv.CURVE, "x", "lam", 0), params={"lam": 0.75})
    np.testing.assert_allclose(wrt_lam["true_grad"], np.zeros_like(x), atol=1e-9)
    np.testing.assert_allclose(wrt_lam["custom_grad"], np.zeros_like(x))
    # swept lam, x held at 1.5: y = 1.5 everywhere, custom d/dx = -lam
    swept_lam = _sweep(spec, layout, sv.View(sv.CURVE, "lam", "x", 0), params={"x_held": 1.5})
    lam = swept_lam["x"].to_numpy()
    np.testing.assert_allclose(swept_lam["forward"], np.full_like(lam, 1.5))
    np.testing.assert_allclose(swept_lam["custom_grad"], -lam)


def test_sin_cos_output_choice_and_sum():
    spec = _example("sin_cos", "sin_cos")
    layout = sv.find_layout(spec)
    cos = _sweep(spec, layout, sv.View(sv.CURVE, "x", "x", 1))
    x = cos["x"].to_numpy()
    np.testing.assert_allclose(cos["forward"], np.cos(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(cos["custom_grad"], -np.sin(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(cos["true_grad"], -np.sin(x), atol=1e-8)
    both = _sweep(spec, layout, sv.View(sv.CURVE, "x", "x", sv.SUM_OF_OUTPUTS))
    np.testing.assert_allclose(both["forward"], np.sin(x) + np.cos(x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(both["custom_grad"], np.cos(x) - np.sin(x), rtol=1e-12, atol=1e-15)


def test_an_invalid_view_falls_back_to_the_defaults(safe_norm):
    layout = sv.find_layout(safe_norm)
    view = sv.validate_view(layout, sv.View(sv.CURVE, "nope", "nope", 5, seed=2))
    assert view == sv.View(sv.LINE, "x", "x", 0, 2, False)


def test_a_declared_input_range_is_the_slider():
    param = sv.input_param("lam", (0.0, 0.5))
    assert (param.low, param.high, param.default) == (0.0, 0.5, 0.5)
    assert (sv.input_param("lam").low, sv.input_param("lam").high, sv.input_param("lam").default) == (-2.0, 2.0, 1.0)


def test_disagreements_are_runs_of_rows_not_single_points():
    x = np.linspace(-1, 1, 9)
    true = np.sign(x)
    custom = true.copy()
    custom[4] = 0.5  # one row: the convention at the point itself
    assert sv.disagreements(x, true, custom) == ()
    custom[6:8] = -custom[6:8]
    assert sv.disagreements(x, true, custom) == ((0.5, 0.75),)
    assert sv.disagreements(x, np.full(9, np.nan), np.full(9, np.nan)) == ()


def test_a_module_declares_an_input_range_and_a_bad_one_is_a_load_error(tmp_path):
    source = (EXAMPLES / "gradient_reversal.py").read_text()
    good = tmp_path / "reversal_declared.py"
    good.write_text(source + '\nGRADIENT_EXPLORER = {"grad_reverse": {"input_ranges": {"lam": (0.0, 0.5)}}}\n')
    found = loaded.load(str(good), tmp_path)
    assert found.ops["grad_reverse"].input_ranges == {"lam": (0.0, 0.5)} and not found.errors
    bad = tmp_path / "reversal_bad.py"
    bad.write_text(source + '\nGRADIENT_EXPLORER = {"grad_reverse": {"input_ranges": {"lam": (1, 0)}}}\n')
    found = loaded.load(str(bad), tmp_path)
    [error] = found.errors
    assert not found.ops and "input_ranges['lam'] must be (low, high) with low < high" in error.message
