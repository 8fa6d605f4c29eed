"""A correct custom gradient of two tensor inputs: gradient reversal (Ganin & Lempitsky 2015).

``lam`` is a required tensor input; the backward returns one gradient per input, ``None`` for ``lam``
(no gradient flows to it, as TensorFlow documents for an input that needs none).
"""

import tensorflow as tf

# The backward differs from autodiff on purpose; only a declaration says so (a docstring is not one).
GRADIENT_EXPLORER = {
    "grad_reverse": {
        "justification": "gradient reversal (Ganin & Lempitsky 2015): the identity's gradient times -lam, so the "
        "feature extractor learns to confuse the domain classifier"
    }
}


@tf.custom_gradient
def grad_reverse(x, lam):
    """Identity forward; the backward multiplies the upstream gradient by -lam, so the feature extractor
    learns to confuse the domain classifier (domain-adversarial training)."""

    def grad(dy):
        return -lam * dy, None

    return tf.identity(x), grad
