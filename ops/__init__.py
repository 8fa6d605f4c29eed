"""Custom-gradient ops for TensorFlow 2 / Keras 3: surrogates, straight-through estimators,
clipping, intentional overrides and numerically stable gradients.

    import ops
    spec = ops.get("atan")
    y = spec.apply(x, alpha=2.0)        # forward: step; backward: the atan surrogate
    mine = ops.from_function(my_custom_gradient_fn)   # your own @tf.custom_gradient function, family "yours"
"""

from ops import catalogue as _catalogue  # noqa: F401  (registers the built-in ops)
from ops.layer import GRADIENT_MODES, SurrogateLayer
from ops.registry import (
    DTYPES,
    FAMILIES,
    HALF_DTYPES,
    KINDS,
    TRUE_GRADIENTS,
    Expression,
    OpSpec,
    Param,
    Point,
    as_float_tensor,
    by_family,
    compute_dtype,
    get,
    names,
    register,
)
from ops.user import from_function, is_custom_gradient

__all__ = [
    "DTYPES",
    "Expression",
    "FAMILIES",
    "GRADIENT_MODES",
    "HALF_DTYPES",
    "KINDS",
    "OpSpec",
    "Param",
    "Point",
    "SurrogateLayer",
    "TRUE_GRADIENTS",
    "as_float_tensor",
    "by_family",
    "compute_dtype",
    "from_function",
    "get",
    "is_custom_gradient",
    "names",
    "register",
]
