"""Generated tasks: shapes, dtypes, reproducibility, balance, exact noise-free geometry, noise level, errors."""

import math

import numpy as np
import pytest

from explorer.train import tasks
from tests.messages import assert_tells

ALL = tasks.names()
CLASSIFICATION = [name for name in ALL if tasks.get(name).kind == "classification"]
REGRESSION = [name for name in ALL if tasks.get(name).kind == "regression"]


def test_registry_has_the_issue_tasks_with_kinds_and_dims():
    assert set(ALL) == {"xor", "circles", "moons", "spiral", "sine", "square"}
    for name in ALL:
        spec = tasks.get(name)
        assert spec.kind in tasks.KINDS
        assert spec.input_dim == (2 if spec.kind == "classification" else 1)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [16, 101, 512])
def test_shapes_dtypes_and_metadata(name, n):
    data = tasks.make(name, n=n, noise=0.2, seed=3)
    spec = tasks.get(name)
    assert data.x.shape == (n, spec.input_dim) and data.x.dtype == np.float32
    assert data.y.shape == (n,) and data.y.dtype == np.float32
    assert (data.name, data.kind, data.input_dim, data.noise, data.seed, data.n) == (
        name,
        spec.kind,
        spec.input_dim,
        0.2,
        3,
        n,
    )
    assert np.isfinite(data.x).all() and np.isfinite(data.y).all()


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_data_other_seed_other_data(name):
    first, again, other = tasks.make(name, seed=7), tasks.make(name, seed=7), tasks.make(name, seed=8)
    assert np.array_equal(first.x, again.x) and np.array_equal(first.y, again.y)
    assert not np.array_equal(first.x, other.x)


@pytest.mark.parametrize("name", CLASSIFICATION)
@pytest.mark.parametrize("n", [16, 101, 1000])
def test_labels_are_binary_and_balanced(name, n):
    y = tasks.make(name, n=n, seed=1).y
    assert set(np.unique(y)) == {0.0, 1.0}
    assert int(y.sum()) == n // 2
    # shuffled: the classes are not stored as two blocks
    assert np.count_nonzero(np.diff(y)) > 2


def test_xor_noise_free_geometry():
    data = tasks.make("xor", n=2000, noise=0.0, seed=0)
    x0, x1 = data.x[:, 0], data.x[:, 1]
    assert np.array_equal(data.y, (x0 * x1 > 0).astype(np.float32))
    assert np.abs(data.x).max() <= 1.0 and np.abs(data.x).min() >= tasks.XOR_MARGIN
    # every quadrant is used
    assert len({(a > 0, b > 0) for a, b in zip(x0, x1, strict=True)}) == 4


def test_circles_noise_free_radii():
    data = tasks.make("circles", n=1000, noise=0.0, seed=0)
    radius = np.hypot(data.x[:, 0], data.x[:, 1])
    np.testing.assert_allclose(radius[data.y == 0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(radius[data.y == 1], 0.5, rtol=1e-6)
    angles = np.arctan2(data.x[:, 1], data.x[:, 0])
    assert angles.min() < -3.0 and angles.max() > 3.0  # the full circle is covered


def test_moons_noise_free_half_circles():
    data = tasks.make("moons", n=1000, noise=0.0, seed=0)
    # undo the documented shift (0.5, 0.25): class 0 is (cos t, sin t), class 1 is (1 - cos t, 0.5 - sin t)
    upper = data.x[data.y == 0] + np.array([0.5, 0.25])
    lower = data.x[data.y == 1] + np.array([0.5, 0.25])
    np.testing.assert_allclose(np.hypot(upper[:, 0], upper[:, 1]), 1.0, rtol=1e-5)
    assert upper[:, 1].min() >= -1e-6
    np.testing.assert_allclose(np.hypot(1.0 - lower[:, 0], 0.5 - lower[:, 1]), 1.0, rtol=1e-5)
    assert (0.5 - lower[:, 1]).min() >= -1e-6


def test_spiral_noise_free_arms():
    data = tasks.make("spiral", n=1000, noise=0.0, seed=0)
    r = np.hypot(data.x[:, 0], data.x[:, 1]).astype(np.float64)
    assert r.max() <= 1.0 + 1e-6
    for label, delta in ((0, 0.0), (1, math.pi)):
        on_arm = data.y == label
        t = 2.0 * math.pi * 1.75 * r[on_arm] + delta
        np.testing.assert_allclose(data.x[on_arm, 0], r[on_arm] * np.sin(t), atol=2e-5)
        np.testing.assert_allclose(data.x[on_arm, 1], r[on_arm] * np.cos(t), atol=2e-5)


def test_sine_and_square_noise_free_values():
    sine = tasks.make("sine", n=500, noise=0.0, seed=0)
    np.testing.assert_allclose(sine.y, np.sin(np.pi * sine.x[:, 0].astype(np.float64)), atol=1e-6)
    square = tasks.make("square", n=500, noise=0.0, seed=0)
    np.testing.assert_allclose(square.y, square.x[:, 0].astype(np.float64) ** 2, atol=1e-6)
    for data in (sine, square):
        assert data.x.min() >= -1.0 and data.x.max() <= 1.0 and data.x.min() < -0.9 and data.x.max() > 0.9


@pytest.mark.parametrize("name", REGRESSION)
def test_regression_noise_is_gaussian_with_the_given_std(name):
    clean = tasks.make(name, n=10_000, noise=0.0, seed=5)
    noisy = tasks.make(name, n=10_000, noise=0.3, seed=5)
    np.testing.assert_array_equal(clean.x, noisy.x)  # noise goes to the targets only
    residual = noisy.y - clean.y
    assert abs(residual.std() - 0.3) < 0.015 and abs(residual.mean()) < 0.015


def test_classification_noise_moves_inputs_by_the_given_std():
    # for small noise the radial displacement of a point on a circle is ~ N(0, noise)
    noisy = tasks.make("circles", n=10_000, noise=0.02, seed=2)
    radius = np.hypot(noisy.x[:, 0], noisy.x[:, 1])
    target = np.where(noisy.y == 0, 1.0, 0.5)
    assert abs((radius - target).std() - 0.02) < 0.002


@pytest.mark.parametrize(
    ("kwargs", "argument", "bounds", "allowed"),
    [
        ({"name": "blobs"}, "blobs", (), ("xor", "circles", "moons", "spiral", "sine", "square")),
        ({"n": 15}, "n", (16, 10_000), ()),
        ({"n": 10_001}, "n", (16, 10_000), ()),
        ({"n": 100.0}, "n", (16, 10_000), ()),
        ({"n": True}, "n", (16, 10_000), ()),
        ({"noise": -0.01}, "noise", (0, 1), ()),
        ({"noise": 1.5}, "noise", (0, 1), ()),
        ({"noise": float("nan")}, "noise", (0, 1), ()),
        ({"seed": -1}, "seed", (0,), ()),
    ],
)
def test_invalid_arguments_raise_value_error_naming_the_range(kwargs, argument, bounds, allowed):
    arguments = {"name": "xor", **kwargs}
    with pytest.raises(ValueError) as raised:
        tasks.make(arguments.pop("name"), **arguments)
    assert_tells(str(raised.value), argument, bounds, allowed)


def test_bounds_are_inclusive():
    assert tasks.make("xor", n=16).n == 16
    assert tasks.make("sine", n=10_000, noise=1.0).n == 10_000
