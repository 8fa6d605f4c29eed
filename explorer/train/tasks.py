"""Toy learning tasks generated in code from a seed (no downloads), like TensorFlow Playground's
``dataset.ts``: one registry maps a task name to its generator, kind and input dimension.

Conventions shared by every task:

- ``x`` is float32 of shape ``(n, input_dim)``; ``y`` is float32 of shape ``(n,)``.
- Classification labels are 0.0 / 1.0 and exactly balanced (``n // 2`` points of class 1).
- ``noise`` is the standard deviation of Gaussian noise: added to the *inputs* of a
  classification task (the label stays the one of the clean point, as in scikit-learn's
  ``make_moons``), and to the *targets* of a regression task. ``noise=0`` gives the exact geometry
  documented on each generator.
- The same ``(name, n, noise, seed)`` always gives the same arrays (``numpy.random.default_rng``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

KINDS = ("classification", "regression")
MIN_POINTS, MAX_POINTS = 16, 10_000
MAX_NOISE = 1.0
DEFAULT_POINTS, DEFAULT_NOISE = 512, 0.1
XOR_MARGIN = 0.05  # xor points keep this distance from the axes, so noise=0 labels are unambiguous
CIRCLES_INNER_RADIUS = 0.5  # outer circle radius 1
SPIRAL_TURNS = 1.75  # as in TensorFlow Playground's classifySpiralData

Generator = Callable[[int, float, np.random.Generator], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class TaskSpec:
    """One registered task: ``generator(n, noise, rng) -> (x, y)`` in float64."""

    name: str
    title: str
    kind: str
    input_dim: int
    generator: Generator
    description: str


@dataclass(frozen=True, eq=False)
class Dataset:
    """Generated data plus how it was made (enough to regenerate it)."""

    name: str
    x: np.ndarray
    y: np.ndarray
    kind: str
    input_dim: int
    noise: float
    seed: int

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def is_classification(self) -> bool:
        return self.kind == "classification"


def _class_sizes(n: int) -> tuple[int, int]:
    """(class 0, class 1) sizes; class 1 gets ``n // 2``."""
    return n - n // 2, n // 2


def _with_input_noise(x: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    return x + noise * rng.standard_normal(x.shape)


def _shuffled(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(len(y))
    return x[order], y[order]


def xor(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Uniform points in [-1, 1]^2 at least ``XOR_MARGIN`` from both axes; class 1 where x0 * x1 > 0."""
    n0, n1 = _class_sizes(n)
    magnitude = rng.uniform(XOR_MARGIN, 1.0, size=(n, 2))
    first_sign = rng.choice([-1.0, 1.0], size=n)
    # class 1: both coordinates share a sign (quadrants I, III); class 0: opposite signs.
    second_sign = np.concatenate([-first_sign[:n0], first_sign[n0:]])
    x = magnitude * np.stack([first_sign, second_sign], axis=1)
    y = np.concatenate([np.zeros(n0), np.ones(n1)])
    return _shuffled(_with_input_noise(x, noise, rng), y, rng)


def circles(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Class 0 on the unit circle, class 1 on the circle of radius ``CIRCLES_INNER_RADIUS`` (scikit-learn's make_circles)."""
    n0, n1 = _class_sizes(n)
    angle = rng.uniform(0.0, 2.0 * math.pi, size=n)
    radius = np.concatenate([np.ones(n0), np.full(n1, CIRCLES_INNER_RADIUS)])
    x = radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    y = np.concatenate([np.zeros(n0), np.ones(n1)])
    return _shuffled(_with_input_noise(x, noise, rng), y, rng)


MOONS_SHIFT = np.array([0.5, 0.25])  # centres the two moons on the origin


def moons(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's make_moons, shifted by ``-MOONS_SHIFT``.

    Class 0: ``(cos t, sin t)``; class 1: ``(1 - cos t, 0.5 - sin t)``, t uniform in [0, pi].
    """
    n0, n1 = _class_sizes(n)
    t = rng.uniform(0.0, math.pi, size=n)
    upper = np.stack([np.cos(t[:n0]), np.sin(t[:n0])], axis=1)
    lower = np.stack([1.0 - np.cos(t[n0:]), 0.5 - np.sin(t[n0:])], axis=1)
    x = np.concatenate([upper, lower]) - MOONS_SHIFT
    y = np.concatenate([np.zeros(n0), np.ones(n1)])
    return _shuffled(_with_input_noise(x, noise, rng), y, rng)


def spiral(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals (TensorFlow Playground): radius r uniform in [0, 1],
    angle ``t = 2 pi SPIRAL_TURNS r + delta`` with delta = 0 (class 0) or pi (class 1), point ``(r sin t, r cos t)``.
    """
    n0, n1 = _class_sizes(n)
    r = rng.uniform(0.0, 1.0, size=n)
    delta = np.concatenate([np.zeros(n0), np.full(n1, math.pi)])
    t = 2.0 * math.pi * SPIRAL_TURNS * r + delta
    x = r[:, None] * np.stack([np.sin(t), np.cos(t)], axis=1)
    y = np.concatenate([np.zeros(n0), np.ones(n1)])
    return _shuffled(_with_input_noise(x, noise, rng), y, rng)


def sine(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x uniform in [-1, 1], y = sin(pi x) + noise * N(0, 1): one full period."""
    x = rng.uniform(-1.0, 1.0, size=(n, 1))
    y = np.sin(math.pi * x[:, 0]) + noise * rng.standard_normal(n)
    return x, y


def square(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x uniform in [-1, 1], y = x^2 + noise * N(0, 1)."""
    x = rng.uniform(-1.0, 1.0, size=(n, 1))
    y = x[:, 0] ** 2 + noise * rng.standard_normal(n)
    return x, y


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("xor", "XOR", "classification", 2, xor, "class 1 in quadrants I and III"),
        TaskSpec("circles", "Circles", "classification", 2, circles, "inner circle (class 1) inside a ring"),
        TaskSpec("moons", "Two moons", "classification", 2, moons, "two interleaved half circles"),
        TaskSpec("spiral", "Spiral", "classification", 2, spiral, "two interleaved spirals; the hardest"),
        TaskSpec("sine", "Sine", "regression", 1, sine, "y = sin(pi x) on [-1, 1]"),
        TaskSpec("square", "Square", "regression", 1, square, "y = x^2 on [-1, 1]"),
    )
}


def names() -> list[str]:
    """Every task name, in registry order."""
    return list(TASKS)


def get(name: str) -> TaskSpec:
    """The spec of task ``name``; ValueError lists the valid names."""
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]


def make(name: str, n: int = DEFAULT_POINTS, noise: float = DEFAULT_NOISE, seed: int = 0) -> Dataset:
    """Generate task ``name`` with ``n`` points in [16, 10000] and noise in [0, 1] from ``seed``."""
    spec = get(name)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not MIN_POINTS <= n <= MAX_POINTS:
        raise ValueError(f"n must be a whole number in [{MIN_POINTS}, {MAX_POINTS}], got {n!r}")
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not 0.0 <= noise <= MAX_NOISE:
        raise ValueError(f"noise must be a number in [0, {MAX_NOISE:g}], got {noise!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    x, y = spec.generator(int(n), float(noise), rng)
    return Dataset(
        name=spec.name,
        x=np.ascontiguousarray(x, dtype=np.float32),
        y=np.ascontiguousarray(y, dtype=np.float32),
        kind=spec.kind,
        input_dim=spec.input_dim,
        noise=float(noise),
        seed=int(seed),
    )
