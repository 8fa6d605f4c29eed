"""Sweep an op over a range of x: forward, true gradient and custom gradient in one compiled call.

:func:`sweep` returns a :class:`Sweep`: the op's spec, its resolved parameters, the range, dtype and
upstream gradient, and the table (``.frame``, a :class:`pandas.DataFrame` with one row per x, sorted):

* ``x``, ``forward``, ``true_grad``, ``custom_grad``: float64 columns for a float64 sweep, float32
  columns otherwise, holding the values of the sweep dtype exactly (a float16 sweep holds float16
  values widened to float32);
* ``true_grad_missing``: True on every row when autodiff of the plain forward returns ``None``
  (``tf.cast``/``tf.round`` forwards); ``true_grad`` is then 0, as the catalogue asks;
* ``point``: the declared special-point kind at that row, ``""`` elsewhere (a categorical column
  with categories ``"" + ops.KINDS``; where two declared points share an x, the first kind in
  ``ops.KINDS`` order is shown, e.g. ``"jump"`` before ``"kink"``).

The special points, metrics, figures and checks take the :class:`Sweep`, so they never have to
look the op up again; :meth:`Sweep.evaluate` computes the same op at other x (to zoom in).

The x grid is ``numpy.linspace(lo, hi, n)`` rounded to the sweep dtype, plus every declared point in
``[lo, hi]`` at its exact dtype value, so that the value a convention gives AT the point is in the
data. Duplicates are dropped, so ``len(sweep) <= n + len(points)``; it is less than ``n`` when the
dtype cannot hold ``n`` distinct values in the range (bfloat16 on [-3, 3] keeps about 1,000).

``true_grad`` and ``custom_grad`` are for a constant upstream gradient ``dy = upstream``: both are
``dy`` times the local factor, except ops whose backward acts on ``dy`` itself (``clip_gradient``).

Speed: one ``tf.function`` per (op, dtype), cached, with x of any length and the parameters and the
upstream gradient as tensors, so neither a new parameter value nor a new ``n`` retraces it
(:func:`trace_count` counts traces). The grid and its tensor are cached on (range, n, dtype, special
points), so a slider that moves a parameter but no special point reuses them. The results leave
TensorFlow in the sweep dtype through DLPack without a copy (only half-precision results are
widened, by NumPy). It is not XLA-compiled although that was 2-3x faster: XLA changes the numbers
(its exp/tanh differ from TensorFlow's by up to 1e-4 relative in float32, and it rewrites the
deliberately naive ``log(1 + exp(x))`` of ``log1pexp``), and it recompiles for every new length of
x. The sweep must show what eager TensorFlow training computes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

import ops
from explorer.explore import detect

COLUMNS = ("x", "forward", "true_grad", "custom_grad", "true_grad_missing", "point")
POINT_CATEGORIES = ("", *ops.KINDS)
# made once: a CategoricalDtype checks its categories when made (half of a 2,001-point sweep's frame)
POINT_DTYPE = pd.CategoricalDtype(list(POINT_CATEGORIES))
MAX_ABS_X = 1e6
MIN_N, MAX_N = 11, 1_000_000
USER_CACHE_SIZE = 32  # compiled functions kept for user ops (built-in ops are always kept)

Evaluator = Callable[..., tuple[tf.Tensor, ...]]

_BUILTIN_FUNCTIONS: dict[tuple[str, str], Evaluator] = {}
_USER_FUNCTIONS: OrderedDict[tuple[ops.OpSpec, str], Evaluator] = OrderedDict()
_TRACES: dict[tuple[int, str], int] = {}
_EAGER: weakref.WeakSet[ops.OpSpec] = weakref.WeakSet()  # user ops swept eagerly (run_eagerly)
GRID_CACHE_SIZE = 8  # grids kept for reuse: at 1M points ~18 MB each with their tensors and columns (float64 ~35 MB)


# -- validation ---------------------------------------------------------------------------------
def _real(value: Any, name: str, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}; allowed: {allowed}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} = {number} is not finite; allowed: {allowed}")
    return number


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of a sweep dtype name (bfloat16 is ``ml_dtypes.bfloat16``)."""
    return np.dtype(tf.as_dtype(dtype).as_numpy_dtype)


def validate_dtype(dtype: Any) -> str:
    if dtype not in ops.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(ops.DTYPES)}, got {dtype!r}")
    return dtype


def validate_range(lo: Any, hi: Any, n: Any, dtype: str) -> tuple[float, float, int]:
    """ValueError naming the argument and its allowed range."""
    largest = min(MAX_ABS_X, float(tf.as_dtype(dtype).max))
    allowed = f"a finite number in [{-largest:g}, {largest:g}]"
    lo = _real(lo, "lo", allowed)
    hi = _real(hi, "hi", allowed)
    for name, value in (("lo", lo), ("hi", hi)):
        if abs(value) > largest:
            raise ValueError(f"{name} = {value:g} is outside the allowed range [{-largest:g}, {largest:g}] ({dtype})")
    if not lo < hi:
        raise ValueError(f"lo ({lo:g}) must be below hi ({hi:g})")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"n must be a whole number in [{MIN_N}, {MAX_N:_}], got {n!r}")
    if not MIN_N <= int(n) <= MAX_N:
        raise ValueError(f"n = {n} is outside the allowed range [{MIN_N}, {MAX_N:_}]")
    return lo, hi, int(n)


def validate_upstream(upstream: Any, dtype: str) -> float:
    largest = float(tf.as_dtype(dtype).max)
    value = _real(upstream, "upstream", f"a finite number in [{-largest:g}, {largest:g}]")
    if abs(value) > largest:
        raise ValueError(f"upstream = {value:g} is outside the allowed range [{-largest:g}, {largest:g}] ({dtype})")
    return value


@dataclass(frozen=True)
class SweepRange:
    """What a sweep covers: ``n`` points of [``lo``, ``hi``] in ``dtype``, with the constant upstream gradient
    ``upstream``. Validated once, when made: ValueError naming the argument and its allowed range (lo and hi
    finite, ``|x| <= min(1e6, the dtype's largest value)``, lo < hi; n a whole number in [11, 1,000,000];
    dtype one of ``ops.DTYPES``; upstream finite within the dtype). Whoever takes one does not check again."""

    lo: float = -3.0
    hi: float = 3.0
    n: int = 2001
    dtype: str = "float32"
    upstream: float = 1.0

    def __post_init__(self) -> None:
        dtype = validate_dtype(self.dtype)
        lo, hi, n = validate_range(self.lo, self.hi, self.n, dtype)
        upstream = validate_upstream(self.upstream, dtype)
        for name, value in (("lo", lo), ("hi", hi), ("n", n), ("upstream", upstream)):
            object.__setattr__(self, name, value)


def sweep_range_of(
    lo: Any = -3.0,
    hi: Any = 3.0,
    n: Any = 2001,
    upstream: Any = 1.0,
    dtype: Any = "float32",
    sweep_range: SweepRange | None = None,
) -> SweepRange:
    """``sweep_range``, or the :class:`SweepRange` of the separate arguments (the older call form); ValueError
    if both are given (separate arguments other than the defaults beside a ``sweep_range``)."""
    if sweep_range is None:
        return SweepRange(lo, hi, n, dtype, upstream)
    if not isinstance(sweep_range, SweepRange):
        raise ValueError(f"sweep_range must be a SweepRange, got {type(sweep_range).__name__}")
    if (lo, hi, n, upstream, dtype) != (-3.0, 3.0, 2001, 1.0, "float32"):
        raise ValueError("give the range either as sweep_range=SweepRange(...) or as lo, hi, n, upstream, dtype, not both")
    return sweep_range


# -- the compiled evaluator ---------------------------------------------------------------------
def _is_registered(spec: ops.OpSpec) -> bool:
    try:
        return ops.get(spec.key) is spec
    except KeyError:
        return False


def _build(spec: ops.OpSpec, dtype: str, compiled: bool = True) -> Evaluator:
    names = spec.param_names
    trace_key = (id(spec), dtype)
    x_dtype = tf.as_dtype(dtype)

    def evaluate(x, dy, *param_values):
        _TRACES[trace_key] = _TRACES.get(trace_key, 0) + 1  # runs once per trace, not per call
        params = dict(zip(names, param_values, strict=True))
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            forward = spec.forward(x, **params)
            custom_forward = spec.apply(x, **params)
        true_grad = tape.gradient(forward, x, output_gradients=dy)
        custom_grad = tape.gradient(custom_forward, x, output_gradients=dy)
        missing = true_grad is None  # static: decided once, at trace time
        if missing:
            true_grad = tf.zeros([0], x.dtype)  # the caller fills zeros: no work for a known answer
        if custom_grad is None:
            custom_grad = tf.zeros_like(x)
        # returned in the sweep dtype: NumPy widens them to float64 faster than tf.cast does
        return forward, true_grad, custom_grad, tf.constant(missing)

    # TensorFlow's "frequent retracing" warning counts traces per code object, so the closures
    # for 26 ops x 4 dtypes would look like one function retracing: give each its own code object.
    evaluate.__code__ = evaluate.__code__.replace(co_name=f"sweep_{spec.key}_{dtype}")
    if not compiled:
        return evaluate
    return _Compiled(tf.function(
        evaluate,
        input_signature=[
            tf.TensorSpec([None], x_dtype),
            tf.TensorSpec([None], x_dtype),  # the upstream gradient at each x
            *[tf.TensorSpec([], tf.float64) for _ in names],
        ],
        reduce_retracing=True,
        autograph=False,  # no Python control flow on tensors here; AutoGraph's rewrite cost ~1 s at first use
    ))


class _Compiled:
    """A sweep's ``tf.function`` (fixed input signature: one trace) called through its one concrete
    function: that skips tf.function's argument binding and cache lookup, about 40% of a call on a
    few dozen points (special points zoom in with ~10 such calls per sweep). Traces on first call."""

    __slots__ = ("_concrete", "_flat", "function")

    def __init__(self, function) -> None:
        self.function = function
        self._concrete = None
        self._flat = None

    def __call__(self, *args: tf.Tensor) -> tuple[tf.Tensor, ...]:
        if self._concrete is None:
            self._concrete = self.function.get_concrete_function()
            # The inputs are already the flat list of tensors of the fixed signature: calling the concrete
            # function's _call_flat skips binding them to the signature again (half of a call on a few
            # dozen points; the zoom of special points makes ~10 such calls). Private: if it moves, the
            # public call is used. tests/test_sweep.py checks both paths give the same tensors.
            call_flat = getattr(self._concrete, "_call_flat", None)
            if call_flat is not None:
                concrete = self._concrete
                self._flat = lambda inputs: call_flat(inputs, concrete.captured_inputs)
        if self._flat is not None:
            return self._flat(list(args))
        return self._concrete(*args)


def evaluator(op: str | ops.OpSpec, dtype: str = "float32") -> Evaluator:
    """The cached compiled ``(x, dy, *params) -> (forward, true, custom, missing)`` of an op (``dy``: the
    upstream gradient at each x, the shape of ``x``).

    Built-in ops are cached by (key, dtype); user OpSpecs by identity (the last
    :data:`USER_CACHE_SIZE` of them), so an edited user op with the same key gets a new function.
    """
    spec = ops.get(op)
    dtype = validate_dtype(dtype)
    if spec in _EAGER:
        return _build(spec, dtype, compiled=False)
    if _is_registered(spec):
        key = (spec.key, dtype)
        if key not in _BUILTIN_FUNCTIONS:
            _BUILTIN_FUNCTIONS[key] = _build(spec, dtype)
        return _BUILTIN_FUNCTIONS[key]
    user_key = (spec, dtype)
    if user_key in _USER_FUNCTIONS:
        _USER_FUNCTIONS.move_to_end(user_key)
    else:
        _USER_FUNCTIONS[user_key] = _build(spec, dtype)
        while len(_USER_FUNCTIONS) > USER_CACHE_SIZE:
            _USER_FUNCTIONS.popitem(last=False)
    return _USER_FUNCTIONS[user_key]


def run_eagerly(spec: ops.OpSpec) -> None:
    """Sweep this (user) op eagerly from now on: for a function that fails inside ``tf.function``
    (NumPy in its backward), so that it can still be seen; slower, but the same numbers."""
    if _is_registered(spec):
        raise ValueError(f"built-in op {spec.key!r} runs compiled; run_eagerly is for user ops")
    _EAGER.add(spec)
    for dtype in ops.DTYPES:
        _USER_FUNCTIONS.pop((spec, dtype), None)


def is_eager(spec: ops.OpSpec) -> bool:
    return spec in _EAGER


def trace_count(op: str | ops.OpSpec, dtype: str | None = None) -> int:
    """How many times the compiled function of ``op`` was traced (for ``dtype``, or summed over dtypes)."""
    spec = ops.get(op)
    return sum(count for (spec_id, d), count in _TRACES.items() if spec_id == id(spec) and dtype in (None, d))


def storage_dtype(dtype: str) -> np.dtype:
    """Column dtype of a sweep: float64 for float64 sweeps, else float32 (holds every half value exactly)."""
    return np.dtype(np.float64) if dtype == "float64" else np.dtype(np.float32)


def _to_numpy(tensor: tf.Tensor, storage: np.dtype) -> np.ndarray:
    """The tensor's values as ``storage``: read through DLPack (no copy) where it allows, else numpy().

    Read-only: without a copy the array may be the grid's own cached tensor (an identity forward's
    ``forward`` is the grid, a pass-through gradient is the cached upstream), which every later sweep on
    that grid reads. NumPy marks DLPack views read-only today; this does not rely on it."""
    try:
        values = np.from_dlpack(tensor)
    except (BufferError, TypeError, RuntimeError, ValueError):  # bfloat16 has no DLPack type in NumPy
        values = tensor.numpy()
    values = values.astype(storage, copy=False)
    values.flags.writeable = False
    return values


# Up to this many points a function call runs its kernels one after the other on the calling thread
# (TensorFlow's SINGLE_THREADED_EXECUTOR): the same kernels, so the same numbers, without handing
# each node to the inter-op thread pool, which costs more than the kernels themselves on a few
# thousand points (a sweep's special points make ~5 such calls). Bigger sweeps keep the
# default executor, which runs the forward and the gradient nodes side by side.
SINGLE_THREADED_POINTS = 10_000


@functools.lru_cache(maxsize=256)
def _scalar(value_hex: str, dtype: str) -> tf.Tensor:
    """A scalar tensor, made once per value: the special points call the same sweep's function ~5 times
    with the same parameters. Keyed by ``float.hex`` so that -0.0 and 0.0 (equal as floats) and NaN
    (unequal to itself) each have one entry. Eager tensors are immutable: safe to share."""
    return tf.constant(float.fromhex(value_hex), tf.as_dtype(dtype))


@functools.lru_cache(maxsize=256)
def _filled(size: int, value_hex: str, dtype: str) -> tf.Tensor:
    """The upstream gradient of a small evaluation (the special points' zooms), made once per size."""
    return tf.fill([size], _scalar(value_hex, dtype))


def evaluate(
    op: str | ops.OpSpec,
    x: np.ndarray,
    params: Mapping[str, float],
    upstream: float,
    dtype: str,
    grid: _Grid | None = None,
) -> dict[str, np.ndarray | bool]:
    """Forward, true and custom gradient at ``x`` (cast to ``dtype``) as :func:`storage_dtype` arrays, by column name,
    plus the bool ``"true_grad_missing"`` (the true gradient is then zeros). ``params`` must already be
    resolved (``spec.resolve``). ``grid``, if given, is the cached grid ``x`` is: its tensor, filled upstream
    gradient and zero column are used instead of new ones (a copy, a pass and an allocation saved)."""
    spec = ops.get(op)
    fn = evaluator(spec, dtype)
    x_values = np.asarray(x).astype(numpy_dtype(dtype), copy=False)
    param_values = [_scalar(float(params[name]).hex(), "float64") for name in spec.param_names]
    small = x_values.size <= SINGLE_THREADED_POINTS
    if grid is not None:
        x_tensor, dy = grid.tensor, grid.upstream(upstream)
    else:
        upstream_hex = float(upstream).hex()
        x_tensor = tf.constant(x_values)
        dy = _filled(x_values.size, upstream_hex, dtype) if small else tf.fill([x_values.size], _scalar(upstream_hex, dtype))
    with tf.experimental.function_executor_type("SINGLE_THREADED_EXECUTOR" if small else None):
        forward, true_grad, custom_grad, missing = fn(x_tensor, dy, *param_values)
    missing = bool(missing.numpy())
    storage = storage_dtype(dtype)
    if not missing:
        true_values = _to_numpy(true_grad, storage)
    elif grid is not None:
        true_values = grid.constant(0, storage)
    else:
        true_values = np.zeros(x_values.size, storage)
    return {
        "x": x_values.astype(storage, copy=False),
        "forward": _to_numpy(forward, storage),
        "true_grad": true_values,
        "custom_grad": _to_numpy(custom_grad, storage),
        "true_grad_missing": missing,
    }


# -- the sweep --------------------------------------------------------------------------------------
def _sorted_points(points: list[ops.Point], np_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Point x values in the dtype, sorted and unique (the first kind in KINDS order wins), and their codes."""
    point_x = np.array([p.x for p in points], dtype=np.float64).astype(np_dtype)
    point_code = np.array([POINT_CATEGORIES.index(p.kind) for p in points], dtype=np.int8)
    order = np.lexsort((point_code, point_x))
    point_x, point_code = point_x[order], point_code[order]
    first = np.concatenate(([True], point_x[1:] != point_x[:-1]))
    return point_x[first], point_code[first]


def grid(lo: float, hi: float, n: int, dtype: str, points: list[ops.Point]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, unique x values in ``dtype`` and the point-kind code (index into POINT_CATEGORIES) per row."""
    np_dtype = numpy_dtype(dtype)
    base = np.linspace(lo, hi, n)
    point_x, point_code = _sorted_points(points, np_dtype) if points else (np.zeros(0, np_dtype), np.zeros(0, np.int8))
    # rounding to the dtype merges grid values only where the step is below the spacing of the dtype
    spacing = float(np.finfo(np_dtype).eps) * max(abs(lo), abs(hi), float(np.finfo(np_dtype).tiny))
    if (hi - lo) / (n - 1) <= 2 * spacing:
        x = base.astype(np_dtype)
        x = x[np.concatenate(([True], x[1:] != x[:-1]))]
        codes = np.zeros(x.size, dtype=np.int8)
        where = np.searchsorted(x, point_x)
        on_grid = (where < x.size) & (x[np.minimum(where, x.size - 1)] == point_x)
        codes[where[on_grid]] = point_code[on_grid]
        new = ~on_grid
        return np.insert(x, where[new], point_x[new]), np.insert(codes, where[new], point_code[new])
    # Fast path (one casting pass, no np.insert copies): the rounded grid is strictly increasing, so
    # a point can only coincide with one of the two grid values around it.
    where = np.searchsorted(base, point_x.astype(np.float64))
    below = np.maximum(where - 1, 0)
    above = np.minimum(where, n - 1)
    same_below = base[below].astype(np_dtype) == point_x
    same_above = base[above].astype(np_dtype) == point_x
    on_grid = same_below | same_above
    grid_row = np.where(same_below, below, above)
    new_at = where[~on_grid]  # insert before this grid row
    x = np.empty(n + new_at.size, dtype=np_dtype)
    codes = np.zeros(x.size, dtype=np.int8)
    start = 0
    for shift, (row, value) in enumerate(zip(new_at.tolist(), point_x[~on_grid], strict=True)):
        x[start + shift : row + shift] = base[start:row]
        x[row + shift] = value
        start = row
    x[start + new_at.size :] = base[start:]
    shifts = np.searchsorted(new_at, grid_row[on_grid], side="right")  # inserted rows before each grid row
    codes[grid_row[on_grid] + shifts] = point_code[on_grid]
    codes[new_at + np.arange(new_at.size)] = point_code[~on_grid]
    return x, codes


class _Grid:
    """:func:`grid` of one sweep range with what every sweep on it shares, all read-only: the values,
    the point codes and their categorical column, the tensor, the index, and, made on first use,
    constant columns (a zero ``true_grad``, the ``true_grad_missing`` flags) and the filled upstream
    gradient. A frame takes them without copying (~0.4 ms of a warm 1M-point sweep), and the compiled
    function takes the upstream gradient as an input instead of filling it (one pass over the grid)."""

    __slots__ = ("_constants", "_upstream", "codes", "index", "points", "tensor", "x")

    def __init__(self, x: np.ndarray, codes: np.ndarray) -> None:
        x.flags.writeable = False
        codes.flags.writeable = False
        self.x, self.codes, self.tensor = x, codes, tf.constant(x)
        self.index = pd.RangeIndex(x.size)
        self.points = pd.Categorical.from_codes(codes, dtype=POINT_DTYPE, validate=False)
        self._constants: dict[tuple[Any, np.dtype], np.ndarray] = {}
        self._upstream: tuple[str, tf.Tensor] | None = None

    def upstream(self, value: float) -> tf.Tensor:
        """The upstream gradient ``value`` at every x, as a tensor of the grid's dtype (the last value kept)."""
        value_hex = float(value).hex()
        cached = self._upstream  # read once: another session may replace it meanwhile
        if cached is None or cached[0] != value_hex:
            cached = (value_hex, tf.fill(tf.shape(self.tensor), _scalar(value_hex, self.tensor.dtype.name)))
            self._upstream = cached
        return cached[1]

    def constant(self, value: Any, dtype: np.dtype) -> np.ndarray:
        """``value`` at every row, made once per grid."""
        key = (value, np.dtype(dtype))
        if key not in self._constants:
            values = np.full(self.x.size, value, dtype=dtype)
            values.flags.writeable = False
            self._constants[key] = values
        return self._constants[key]


@functools.lru_cache(maxsize=GRID_CACHE_SIZE)
def _cached_grid(lo: float, hi: float, n: int, dtype: str, points: tuple[tuple[float, str], ...]) -> _Grid:
    """:func:`grid` and what sweeps share on it, cached on the inputs: moving a slider that does not
    move a special point reuses all of it (a third of a warm 1M-point sweep)."""
    return _Grid(*grid(lo, hi, n, dtype, [ops.Point(px, kind, "") for px, kind in points]))


@dataclass(frozen=True, eq=False)
class Sweep:
    """One sweep: what was swept (``spec``, resolved ``params``, ``lo``, ``hi``, ``n``, ``dtype``,
    ``upstream``) and the result ``frame``. Immutable; treat ``frame`` as read-only (it may be shared
    by caches), or take :meth:`to_pandas` for a copy of your own. ``sweep["x"]`` is a column."""

    spec: ops.OpSpec
    params: Mapping[str, float]
    lo: float
    hi: float
    n: int
    dtype: str
    upstream: float
    frame: pd.DataFrame
    # (sweep, x, dtype) -> the columns of :func:`evaluate` at x; None: evaluate here
    reevaluate: Callable[[Sweep, np.ndarray, str], dict[str, np.ndarray | bool]] | None = None

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def sweep_range(self) -> SweepRange:
        return SweepRange(self.lo, self.hi, self.n, self.dtype, self.upstream)

    @property
    def grid_step(self) -> float:
        return (self.hi - self.lo) / (self.n - 1)

    @property
    def declared_points(self) -> list[ops.Point]:
        """The op's declared points in ``[lo, hi]`` at these parameters (sorted)."""
        return self.spec.points(self.lo, self.hi, self.dtype, **self.params)

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def true_gradient_label(self) -> str:
        """"true gradient (autodiff)", or "true gradient (numerical)" for a user op without a declared forward."""
        return self.spec.true_gradient_label

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, column: str) -> pd.Series:
        return self.frame[column]

    def to_pandas(self) -> pd.DataFrame:
        """A copy of the table, for CSV export or your own analysis."""
        return self.frame.copy()

    def evaluate(self, x: np.ndarray, dtype: str | None = None) -> dict[str, np.ndarray | bool]:
        """The same op, parameters and upstream gradient at other ``x`` (in ``dtype``, default the
        sweep's own), as :func:`evaluate` returns them: zooming in on a point needs nothing else.
        A sweep made elsewhere (a loaded op's, in its worker) carries the function that evaluates it
        again there (:attr:`reevaluate`)."""
        if self.reevaluate is not None:
            return self.reevaluate(self, np.asarray(x), dtype or self.dtype)
        return evaluate(self.spec, x, self.params, self.upstream, dtype or self.dtype)

    def with_frame(self, frame: pd.DataFrame) -> Sweep:
        """The same sweep description with other rows (e.g. fewer, for plotting)."""
        return dataclasses.replace(self, frame=frame)


def sweep(
    op: str | ops.OpSpec,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: SweepRange | None = None,
) -> Sweep:
    """Forward, true gradient and custom gradient of ``op`` on ``n`` points of [lo, hi] plus its special points.
    The range is ``sweep_range`` or the separate arguments (:func:`sweep_range_of`)."""
    spec = ops.get(op)
    span = sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
    lo, hi, n, dtype, upstream = span.lo, span.hi, span.n, span.dtype, span.upstream
    resolved = spec.resolve(params)
    points = spec.points(lo, hi, dtype, **resolved)
    shared = _cached_grid(lo, hi, n, dtype, tuple((p.x, p.kind) for p in points))
    values = evaluate(spec, shared.x, resolved, upstream, dtype, shared)
    frame = pd.DataFrame(
        {
            **{column: values[column] for column in COLUMNS[:4]},
            "true_grad_missing": shared.constant(values["true_grad_missing"], np.dtype(bool)),
            "point": shared.points,
        },
        index=shared.index,
        copy=False,  # the new arrays are ours; the shared ones are read-only
    )
    return Sweep(spec, MappingProxyType(dict(resolved)), lo, hi, n, dtype, upstream, frame)


# -- decimation for plotting ---------------------------------------------------------------------------
VALUE_COLUMNS = ("forward", "true_grad", "custom_grad")


def decimate(result: Sweep, max_points: int = 5000) -> Sweep:
    """At most ~``max_points`` rows that keep the shape of every curve, for plotting.

    Keeps every special-point row and both its neighbours, both sides of every jump candidate
    (:func:`explorer.explore.detect.jump_intervals`) and of every NaN/inf edge of the forward / true /
    custom columns (at most ``max_points // 4`` of them, the largest first), and per bucket of
    consecutive rows the first, last, minimum and maximum row of each value column (M4
    aggregation). Returns ``result`` itself when it is already small enough.
    """
    if isinstance(max_points, bool) or not isinstance(max_points, numbers.Integral) or max_points < 100:
        raise ValueError(f"max_points must be a whole number >= 100, got {max_points!r}")
    df = result.frame
    size = len(df)
    if size <= max_points:
        return result
    keep = np.zeros(size, dtype=bool)
    keep[[0, size - 1]] = True
    special = np.flatnonzero(np.asarray(df["point"] != ""))
    for offset in (-1, 0, 1):
        keep[np.clip(special + offset, 0, size - 1)] = True
    budget = max_points // 4
    x = df["x"].to_numpy(dtype=np.float64)
    eps = float(np.finfo(numpy_dtype(ops.compute_dtype(result.dtype))).eps)
    for column in VALUE_COLUMNS:
        values = df[column].to_numpy(dtype=np.float64)
        rows = np.union1d(detect.jump_intervals(x, values, eps), detect.finite_edges(values))
        if rows.size > budget // len(VALUE_COLUMNS):
            sizes = np.abs(np.nan_to_num(values[rows + 1] - values[rows], nan=np.inf, posinf=np.inf, neginf=np.inf))
            rows = rows[np.argsort(-sizes, kind="stable")[: budget // len(VALUE_COLUMNS)]]
        keep[rows] = True
        keep[rows + 1] = True
    remaining = max(max_points - int(keep.sum()), 4 * (2 * len(VALUE_COLUMNS) + 2))
    per_bucket = 2 * len(VALUE_COLUMNS) + 2
    buckets = max(1, remaining // per_bucket)
    width = math.ceil(size / buckets)
    buckets = math.ceil(size / width)
    starts = np.arange(buckets) * width
    keep[starts] = True
    keep[np.minimum(starts + width - 1, size - 1)] = True
    padded_size = buckets * width
    for column in VALUE_COLUMNS:
        values = df[column].to_numpy(dtype=np.float64)
        low = np.full(padded_size, np.inf)
        high = np.full(padded_size, -np.inf)
        finite = np.isfinite(values)
        low[:size] = np.where(finite, values, np.inf)
        high[:size] = np.where(finite, values, -np.inf)
        keep[np.minimum(starts + low.reshape(buckets, width).argmin(axis=1), size - 1)] = True
        keep[np.minimum(starts + high.reshape(buckets, width).argmax(axis=1), size - 1)] = True
    return result.with_frame(df.iloc[np.flatnonzero(keep)])
