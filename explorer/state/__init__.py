"""The typed state of the pages and its URL form: :class:`ExploreState`, :class:`EditorSource` and
:class:`TrainState` (defined beside the trainer, which takes it: :mod:`explorer.train.setup`).

Like TensorFlow Playground's ``state.ts``: every control of a page is a field here, the URL
query string is a serialisation of it, and a copied URL reproduces the view. Parsing never
raises: an unknown or invalid value falls back to its default and adds a notice for the page.
Nothing here imports streamlit, so all of it is tested without a page.

Why not Streamlit's ``bind="query-params"`` (1.67) on the widgets: it drops an invalid URL value
silently ("Invalid query parameter values are ignored and removed from the URL"), while every bad
value here must be named in a notice; a bound parameter "can't be set or deleted through
``st.query_params``", so the op's parameters (whose set changes with the op) and the editor's
fields (written back only when they compile) could not be managed by the page; and it names the
URL key after the widget key, which would tie ``p.<name>`` to one widget per op.

One module per page, named for it: ``explore`` (:class:`ExploreState`), ``editor`` (:class:`EditorSource`),
``train`` (the Train page's URL form and :class:`PresetView`), ``runs`` (:class:`RunsState`), and ``query``, what their URL forms share. Every
name is importable from here (``from explorer import state``).
"""

from __future__ import annotations

from explorer.state.editor import (
    DEFAULT,
    EDITOR_CACHE_SIZE,
    EDITOR_SOURCE_KEY,
    EDITOR_URL_KEYS,
    EditorSource,
    compile_editor_op,
    editor_from_query,
    editor_op,
    editor_to_query,
    params_from_text,
    params_to_text,
    points_from_text,
)
from explorer.state.explore import (
    COMPARE_MODES,
    DEFAULT_OP,
    DTYPES,
    INPUT_PREFIX,
    MAX_COMPARE,
    MAX_SEED,
    N_RANGE,
    PARAM_PREFIX,
    UPSTREAM_LIMIT,
    X_LIMIT,
    ExploreState,
    default_compare_values,
    default_state,
    from_query,
    input_params,
    parse_compare_values,
    parse_input_values,
    signature_query,
    to_query,
)
from explorer.state.query import (
    MAX_QUERY_VALUE,
    finite_number,
    last_value,
    url_number,
)
from explorer.state.runs import (
    RUNS_URL_KEYS,
    RunsState,
    is_run_name,
    runs_from_query,
    runs_to_query,
)
from explorer.state.train import (
    LEARN_FLAG,
    PRESET_URL_KEY,
    PRESET_VIEW_URL_KEYS,
    RELU_KEY,
    STE_BIAS_SURROGATE,
    TRAIN_URL_KEYS,
    YIN_LR_RANGE,
    YIN_MAX_STEPS,
    PresetView,
    TrainState,
    make_run,
    parse_run_params,
    preset_view_from_query,
    preset_view_to_query,
    run_params_text,
    runs_from_text,
    runs_to_text,
    train_from_query,
    train_to_query,
)

__all__ = [
    "COMPARE_MODES",
    "DEFAULT",
    "DEFAULT_OP",
    "DTYPES",
    "EDITOR_CACHE_SIZE",
    "EDITOR_SOURCE_KEY",
    "EDITOR_URL_KEYS",
    "EditorSource",
    "ExploreState",
    "INPUT_PREFIX",
    "LEARN_FLAG",
    "MAX_COMPARE",
    "MAX_QUERY_VALUE",
    "MAX_SEED",
    "N_RANGE",
    "PARAM_PREFIX",
    "PRESET_URL_KEY",
    "PRESET_VIEW_URL_KEYS",
    "PresetView",
    "RELU_KEY",
    "RUNS_URL_KEYS",
    "RunsState",
    "STE_BIAS_SURROGATE",
    "TRAIN_URL_KEYS",
    "TrainState",
    "UPSTREAM_LIMIT",
    "X_LIMIT",
    "YIN_LR_RANGE",
    "YIN_MAX_STEPS",
    "compile_editor_op",
    "default_compare_values",
    "default_state",
    "editor_from_query",
    "editor_op",
    "editor_to_query",
    "finite_number",
    "from_query",
    "input_params",
    "is_run_name",
    "last_value",
    "make_run",
    "params_from_text",
    "params_to_text",
    "parse_compare_values",
    "parse_input_values",
    "parse_run_params",
    "points_from_text",
    "preset_view_from_query",
    "preset_view_to_query",
    "run_params_text",
    "runs_from_query",
    "runs_from_text",
    "runs_to_query",
    "runs_to_text",
    "signature_query",
    "to_query",
    "train_from_query",
    "train_to_query",
    "url_number",
]
