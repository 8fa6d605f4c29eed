"""Corpus (issue 44): copied, not written here.

Source: https://github.com/keras-team/keras, path keras/src/ops/core.py, commit
aa39874b43b5c7caac4a6b81e821c1b4facffe3c: the three ``log1pexp`` examples of ``custom_gradient``'s docstring
(backend-agnostic, TensorFlow-specific, PyTorch-specific), copied verbatim and renamed apart (all three are
``log1pexp`` there). The truth each test asserts is in tests/test_corpus.py.
"""

from keras import ops


@ops.custom_gradient
def log1pexp(x):
    e = ops.exp(x)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))

    return ops.log(1 + e), grad


@ops.custom_gradient
def log1pexp_tensorflow(x):
    e = ops.exp(x)
    def grad(upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
    return ops.log(1 + e), grad


@ops.custom_gradient
def log1pexp_torch(x):
    e = ops.exp(x)
    def grad(*args, upstream):
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
    return ops.log(1 + e), grad
