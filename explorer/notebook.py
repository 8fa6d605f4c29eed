"""The explorer in a notebook: sweep, plot, check, train and slide, on whatever you have at hand.

    import explorer
    explorer.sweep(my_fn, lo=-2, hi=2)    # a Sweep, as explorer.explore.sweeps.sweep gives
    explorer.sweep(my_fn, sweep_range=explorer.SweepRange(-2, 2, n=501))  # the same range as one value
    explorer.plot(my_fn)                  # the Explore page's three-panel figure
    explorer.plot([my_fn, "ste_sign"])    # the page's compare overlay
    explorer.plot(my_fn, save="fig.svg")  # and written as SVG, PNG or PDF (needs the images extra: kaleido)
    explorer.check(my_fn)                 # a report: .ok, .frame, a coloured table in the notebook
    explorer.plot_training(explorer.train.compare(task="xor", runs=[ops.from_function(my_fn), "ste_sign"], epochs=50))
    explorer.interact(my_fn)              # sliders and a figure updated in place (ipywidgets)

A *target* is a built-in op key (``"atan"``), an :class:`ops.OpSpec`, your ``@tf.custom_gradient`` function
or a Keras layer (a ``keras.layers.Layer`` subclass built with no arguments, or an instance). A function is
turned into an op by :func:`ops.from_function` once and remembered, so sliding a parameter does not recompile
it; give declarations (``forward=``, ``points=``) by passing ``ops.from_function(fn, ...)`` instead.

A layer is swept through itself: its forward, and its input gradient as the custom gradient (the input is
reshaped to ``(n, 1)``). Its true gradient is the float64 central difference of its forward (see
:mod:`ops.user`), computed by a second instance built with ``dtype="float64"`` (the first one's weights copied)
when the constructor takes it; otherwise the layer's own float32 values make the true gradient noisy, about
1e-2 relative. ``check`` runs the layer checks of :mod:`explorer.checker.plan` on the class.

The figures are the app's own (:func:`explorer.explore.figures.main_figure`, ``compare_figure``,
:func:`explorer.train.figures.loss_figure`); the verdicts are the checker's (:func:`explorer.checker.runner.check`
for keys and specs, :func:`explorer.checker.guardrail.custom_gradient_checks` for functions and layers).
"""

from __future__ import annotations

import html
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import tensorflow as tf

import ops
from explorer.explore import figures
from explorer.explore import sweeps as _sweeps
from explorer.explore.points import special_points
from explorer.explore.sweeps import Sweep, SweepRange
from explorer.explore.view_html import LEVEL_ORDER, LEVEL_STYLES, checks_html

NOTEBOOK_EXTRA = "pip install gradient-explorer[notebook]"
TARGET_KINDS = "a built-in op key, an ops.OpSpec, a @tf.custom_gradient function or a Keras layer"

_FUNCTION_SPECS: weakref.WeakKeyDictionary[Any, ops.OpSpec] = weakref.WeakKeyDictionary()
_LAYER_SPECS: weakref.WeakKeyDictionary[Any, ops.OpSpec] = weakref.WeakKeyDictionary()


# -- targets -----------------------------------------------------------------------------------------------
def _is_layer(target: Any) -> bool:
    """A keras.layers.Layer subclass or instance."""
    import keras

    return (isinstance(target, type) and issubclass(target, keras.layers.Layer)) or isinstance(
        target, keras.layers.Layer
    )


def spec_of(target: Any) -> ops.OpSpec:
    """The :class:`ops.OpSpec` a target stands for (a function's or a layer's is made once and remembered).

    KeyError for an unknown key (listing the valid ones); TypeError for anything that is not a target.
    """
    if isinstance(target, ops.OpSpec):
        return target
    if isinstance(target, str):
        return ops.get(target)
    if isinstance(target, Sweep):
        return target.spec
    if ops.is_custom_gradient(target):
        return _remembered(_FUNCTION_SPECS, target, lambda: ops.from_function(target))
    if _is_layer(target):
        return _remembered(_LAYER_SPECS, target, lambda: _layer_spec(target))
    raise TypeError(f"expected {TARGET_KINDS}, got {type(target).__name__} {target!r}")


def _remembered(cache: weakref.WeakKeyDictionary, target: Any, make: Callable[[], ops.OpSpec]) -> ops.OpSpec:
    try:
        return cache[target]
    except KeyError:
        pass
    except TypeError:  # not weakly referable or not hashable: made anew each time
        return make()
    spec = cache[target] = make()
    return spec


def _layer_instances(layer: Any) -> dict[str, Any]:
    """The layer built (float32, or the instance given) and, if its constructor takes ``dtype``, a float64 twin
    with the same weights, both called once eagerly so that no weight is created inside a ``tf.function``."""
    built = {"float32": layer() if isinstance(layer, type) else layer}
    probe = tf.zeros((1, 1), tf.float32)
    built["float32"](probe)
    if isinstance(layer, type):
        try:
            twin = layer(dtype="float64")
            twin(tf.cast(probe, tf.float64))
            twin.set_weights(built["float32"].get_weights())
            built["float64"] = twin
        except Exception:  # noqa: BLE001 - a constructor without dtype=, or weights that do not transfer
            pass
    return built


def _layer_spec(layer: Any) -> ops.OpSpec:
    layer_class = layer if isinstance(layer, type) else type(layer)
    built = _layer_instances(layer)

    # The weights go in as constants (Keras's stateless_call): a custom gradient that reads variables must take
    # them in its backward, and the numerical true gradient of ops.user does not. They are fixed for a sweep.
    weights = {
        dtype: ([v.numpy() for v in instance.trainable_variables], [v.numpy() for v in instance.non_trainable_variables])
        for dtype, instance in built.items()
    }

    @tf.custom_gradient
    def through_layer(x):
        dtype = x.dtype.name if x.dtype.name in built else "float32"
        trainable, non_trainable = weights[dtype]
        with tf.GradientTape() as tape:
            tape.watch(x)
            out, _ = built[dtype].stateless_call(trainable, non_trainable, tf.reshape(x, (-1, 1)))
            y = tf.cast(tf.reshape(out, tf.shape(x)), x.dtype)

        def grad(dy):
            return tape.gradient(y, x, output_gradients=dy)

        return y, grad

    return ops.from_function(
        through_layer,
        key=layer_class.__name__,
        title=f"{layer_class.__name__} (Keras layer)",
    )


def _label(result: Sweep) -> str:
    """A sweep's name in a legend: its key, and the parameters that differ from the defaults."""
    defaults = result.spec.defaults()
    changed = ", ".join(f"{k}={v:g}" for k, v in result.params.items() if v != defaults[k])
    return f"{result.key} ({changed})" if changed else result.key


# -- sweep and plot ----------------------------------------------------------------------------------------
def sweep(
    target: Any,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: SweepRange | None = None,
) -> Sweep:
    """:func:`explorer.explore.sweeps.sweep` of any target (see the module docstring) over ``sweep_range`` or
    the separate range arguments; ValueError names the allowed range of a bad argument."""
    spec = spec_of(target)
    return _sweeps.sweep(spec, params=params, sweep_range=_sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range))


def plot(
    target: Any,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: SweepRange | None = None,
    overlay: bool = False,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    save: str | Path | None = None,
    backends: str | Sequence[str] | None = None,
) -> go.Figure:
    """The Explore page's figure of a target (or of a :class:`Sweep`): forward | true | custom gradient with the
    special points marked, or both gradients in one panel with ``overlay``.

    ``backends="all"`` (or ``"tensorflow,jax"``): your ``keras.ops.custom_gradient`` function of one input on
    each installed Keras backend, drawn over TensorFlow's, the inputs where they differ shaded and the
    ``backends`` verdict as the title (:func:`explorer.explore.backend_figure.backends_figure`).

    A list of targets or sweeps gives the page's compare figure (custom gradients overlaid, ``labels`` or the
    keys in the legend); the same range, dtype and ``params`` apply to each target that is not a sweep.
    ``save="fig.svg"`` (or ``.png``, ``.pdf``) also writes the figure there (:func:`save_figure`).
    """
    if isinstance(target, (list, tuple)) and not target:
        raise ValueError(f"plot([...]) needs at least one target: {TARGET_KINDS}, or a Sweep")
    span = _sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)
    if backends is not None:
        return save_figure(_backends_plot(target, backends, span.lo, span.hi, span.n, title), save)
    if isinstance(target, (list, tuple)):
        results = [_as_sweep(item, params, span) for item in target]
        names = [_label(result) for result in results] if labels is None else list(labels)
        points = [special_points(result) for result in results]
        return save_figure(figures.compare_figure(results, names, points, title=title), save)
    result = _as_sweep(target, params, span)
    return save_figure(figures.main_figure(result, special_points(result), overlay=overlay, title=title), save)


def _backends_plot(target: Any, backends: str | Sequence[str], lo: float, hi: float, n: int, title: str | None):
    from explorer.checker import backends as across
    from explorer.explore.backend_figure import backends_figure

    file, name = across.where_defined(target)
    found = across.sweep_backends(file, name, across.parse_backends(backends), lo, hi, min(n, 2001))
    verdict = f"backends {found.verdict.level}: {found.verdict.message}"
    return backends_figure(found.x, found.curves, found.differs, verdict, title or name)


def save_figure(figure: go.Figure, path: str | Path | None) -> go.Figure:
    """``figure``, written to ``path`` first when one is given: SVG, PNG or PDF by the suffix, through plotly's
    static-image writer (:func:`explorer.explore.figures.write_image`: needs kaleido and a Chrome or Chromium,
    ``pip install 'gradient-explorer[images]'``; the ImportError says so)."""
    if path is not None:
        figures.write_image(figure, path)
    return figure


def _as_sweep(target: Any, params: Mapping[str, float] | None, span: SweepRange) -> Sweep:
    return target if isinstance(target, Sweep) else sweep(target, params=params, sweep_range=span)


# -- check -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckReport:
    """The checker's verdict on one target: ``ok`` is True when no check failed (warnings allowed)."""

    op: str
    checks: tuple  # of explorer.checker.common.Check

    @property
    def ok(self) -> bool:
        return all(check.passed for check in self.checks)

    @cached_property
    def frame(self) -> pd.DataFrame:
        """One row per check: op, check, level ("pass", "skip", "warn" or "fail"), message; in the checker's order."""
        rows = [(self.op, check.name, check.level, check.message) for check in self.checks]
        return pd.DataFrame(rows, columns=["op", "check", "level", "message"])

    def summary(self) -> str:
        counts = {level: sum(check.level == level for check in self.checks) for level in LEVEL_ORDER}
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.op}: {verdict}, {len(self.checks)} checks: {counts['pass']} pass, {counts['warn']} warn, "
            f"{counts['fail']} fail, {counts['skip']} skip"
        )

    def __repr__(self) -> str:
        from explorer.checker.runner import format_table

        return f"{self.summary()}\n{format_table(self.frame)}" if self.checks else self.summary()

    def _repr_html_(self) -> str:
        """A table, failed checks first, then warnings, skips (checks that do not apply), passes; each row
        coloured by its level (the table of a downloaded view, :func:`explorer.explore.view_html.checks_html`)."""
        return checks_html(self.checks, self.summary())


def check(
    target: Any,
    params: Mapping[str, float] | None = None,
    *,
    backends: str | Sequence[str] | None = None,
    forward_mode: bool = False,
    **declarations: Any,
) -> CheckReport:
    """Run the gradient checker on a target, as ``python -m explorer verify`` does.

    ``backends="all"`` (or ``"tensorflow,jax"``) adds the ``backends`` row for your function: it compared on
    each installed Keras backend (``verify --backends``; the function must be defined in a ``.py`` module).

    A key or an OpSpec gets :func:`explorer.checker.runner.check` at ``params``; a function or a layer class
    the checks of :func:`explorer.testing.assert_custom_gradient` (``declarations``: ``forward``, ``points``,
    ``ranges``, ``time_limit`` for a function; ``op``, ``time_limit`` for a layer), which never raise.
    ``forward_mode=True`` adds the opt-in ``forward_mode`` check (a function's or an op's, not a layer's).
    """
    from explorer.checker import guardrail, runner

    if isinstance(target, (str, ops.OpSpec)):
        if declarations:
            raise TypeError(
                f"{', '.join(sorted(declarations))}: declarations are for your own function; an op key or OpSpec "
                "takes only params"
            )
        spec = ops.get(target)
        return CheckReport(spec.key, tuple(runner.check(spec, forward_mode=forward_mode, **dict(params or {}))))
    if ops.is_custom_gradient(target):
        name = ops.user.undecorated(target).__name__
        if params:
            declarations["params"] = dict(params)
        if forward_mode:
            declarations["forward_mode"] = True
        found = tuple(guardrail.custom_gradient_checks(target, **declarations))
        if backends is not None:
            from explorer.checker import backends as across

            found += (across.check_callable(target, backends),)
        return CheckReport(name, found)
    if _is_layer(target):
        if params or forward_mode:
            raise TypeError("a layer is built with no arguments: it takes no params (and no forward_mode)")
        name = target.__name__ if isinstance(target, type) else type(target).__name__
        return CheckReport(name, tuple(guardrail.custom_gradient_checks(target, **declarations)))
    raise TypeError(f"expected {TARGET_KINDS}, got {type(target).__name__} {target!r}")


# -- training ----------------------------------------------------------------------------------------------
def plot_training(results: Any, *, log_y: bool = False, metric: str = "loss", save: str | Path | None = None) -> go.Figure:
    """The Train page's loss figure of :func:`explorer.train.compare`'s results (one RunResult or a list),
    each run labelled as the page labels it (``ste_sign (custom)``); ``save`` as :func:`plot`'s."""
    from explorer.train.figures import loss_figure

    runs = [results] if hasattr(results, "history") else list(results)
    if not runs:
        raise ValueError("plot_training needs at least one result of explorer.train.compare")
    for run in runs:
        if not hasattr(run, "history") or not hasattr(run, "run"):
            raise TypeError(f"expected the results of explorer.train.compare (RunResult), got {type(run).__name__}")
        if metric not in run.history:
            raise ValueError(f"metric must be a column of the history: {', '.join(map(str, run.history.columns))}")
    return save_figure(loss_figure([run.history for run in runs], [run.run.label for run in runs], log_y=log_y, metric=metric), save)


# -- interact ----------------------------------------------------------------------------------------------
def _widgets():
    try:
        import anywidget  # noqa: F401  (plotly's FigureWidget needs it)
        import ipywidgets
    except ImportError as error:
        raise ImportError(
            f"explorer.interact needs ipywidgets and anywidget ({error.name} is missing): {NOTEBOOK_EXTRA}"
        ) from None
    return ipywidgets


@dataclass
class Panel:
    """What :func:`interact` returns: ``widget`` (shown by the notebook), the ``figure`` it updates in place,
    the ``controls`` by name (a parameter's name, ``lo``, ``hi``, ``n``, ``dtype``, ``upstream``,
    ``overlay``) and the ``message`` line where a bad value is explained."""

    widget: Any
    figure: go.FigureWidget
    controls: dict[str, Any]
    message: Any
    spec: ops.OpSpec

    def _repr_mimebundle_(self, **kwargs: Any):
        return self.widget._repr_mimebundle_(**kwargs)

    def current(self) -> dict[str, Any]:
        """The controls' values, as :func:`plot` takes them."""
        values = {name: control.value for name, control in self.controls.items()}
        return {
            "params": {p.name: float(values[p.name]) for p in self.spec.params},
            **{name: values[name] for name in ("lo", "hi", "n", "dtype", "upstream", "overlay")},
        }

    def update(self, _change: Any = None) -> None:
        """Redraw the figure from the controls; a bad value leaves it as it was and says why."""
        values = self.current()
        try:
            fresh = plot(self.spec, **values)
        except ValueError as error:  # a value out of range: the message names the allowed one
            self._say(str(error))
            return
        except Exception as error:  # noqa: BLE001 - your function raised: said here, not lost in the widget log
            self._say(f"your op raised {type(error).__name__}: {error}")
            return
        self.message.value = ""
        with self.figure.batch_update():
            self.figure.data = ()
            self.figure.add_traces(list(fresh.data))
            self.figure.layout = fresh.layout


    def _say(self, text: str) -> None:
        self.message.value = f'<span style="color:{LEVEL_STYLES["fail"][0]}">{html.escape(text)}</span>'


def _param_control(widgets, param: ops.Param, value: float):
    style = {"description_width": "initial"}
    if param.integer:
        return widgets.IntSlider(value=int(value), min=int(param.low), max=int(param.high), description=param.name,
                                 style=style, continuous_update=False)  # fmt: skip
    if param.low > 0 and param.high / param.low > 1e4:  # many decades: the page's number box, here a log slider
        import math

        return widgets.FloatLogSlider(value=value, min=math.log10(param.low), max=math.log10(param.high),
                                      description=param.name, style=style, continuous_update=False)  # fmt: skip
    return widgets.FloatSlider(value=value, min=param.low, max=param.high, step=(param.high - param.low) / 500,
                               description=param.name, style=style, continuous_update=False, readout_format=".4g")  # fmt: skip


def interact(
    target: Any,
    lo: float = -3.0,
    hi: float = 3.0,
    n: int = 2001,
    params: Mapping[str, float] | None = None,
    upstream: float = 1.0,
    dtype: str = "float32",
    *,
    sweep_range: SweepRange | None = None,
    overlay: bool = False,
) -> Panel:
    """The Explore page's controls (parameters, range, points, dtype, upstream gradient, overlay) beside its
    figure, redrawn in place when a control changes. Needs ipywidgets (``pip install gradient-explorer[notebook]``)."""
    widgets = _widgets()
    spec = spec_of(target)
    span = _sweeps.sweep_range_of(lo, hi, n, upstream, dtype, sweep_range)  # bad arguments fail here, plainly
    lo, hi, n, upstream, dtype = span.lo, span.hi, span.n, span.upstream, span.dtype
    start = plot(spec, params=params, sweep_range=span, overlay=overlay)
    resolved = spec.resolve(params)
    controls: dict[str, Any] = {p.name: _param_control(widgets, p, resolved[p.name]) for p in spec.params}
    controls["lo"] = widgets.FloatText(value=lo, description="x from")
    controls["hi"] = widgets.FloatText(value=hi, description="x to")
    controls["n"] = widgets.BoundedIntText(value=n, min=_sweeps.MIN_N, max=_sweeps.MAX_N, step=500,
                                           description="points")  # fmt: skip
    controls["dtype"] = widgets.ToggleButtons(options=list(ops.DTYPES), value=dtype, description="dtype")
    controls["upstream"] = widgets.FloatText(value=upstream, description="upstream dy")
    controls["overlay"] = widgets.Checkbox(value=overlay, description="gradients in one panel")
    figure = go.FigureWidget(start)
    message = widgets.HTML("")
    box = widgets.VBox([widgets.HBox([widgets.VBox(list(controls.values())), figure]), message])
    panel = Panel(box, figure, controls, message, spec)
    for control in controls.values():
        control.observe(panel.update, names="value")
    return panel
