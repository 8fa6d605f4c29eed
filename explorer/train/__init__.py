"""Train with one custom gradient: the Train page's computation, with no streamlit.

``trainer`` trains the same small Keras network with different ops and gradient modes (:func:`compare`,
:class:`Session`); ``tasks`` generates the seeded data sets; ``presets`` reproduces published results;
``figures`` and ``preset_figures`` draw them. The trainer's public names are re-exported here
(``explorer.train.compare``, ``explorer.train.Run``), imported on first use so that ``tasks`` loads without
TensorFlow.
"""

import importlib

_TRAINER_NAMES = ("Run", "TrainState", "RunResult", "Session", "GridPrediction", "compare", "predict_grid", "build_model",
                  "batch_order", "MAX_EPOCHS", "MAX_WIDTH", "MAX_DEPTH", "MAX_LEARNING_RATE", "STATUSES")

__all__ = sorted(_TRAINER_NAMES)


def __getattr__(name: str):
    if name not in _TRAINER_NAMES:
        raise AttributeError(f"module 'explorer.train' has no attribute {name!r}")
    value = getattr(importlib.import_module("explorer.train.trainer"), name)
    globals()[name] = value
    return value
