"""Corpus (issue 44): copied, not written here.

Source: https://github.com/calad0i/quantizers, path src/quantizers/binary/_binary_ops.py,
commit a0acf473393ea98ef090165007d38893671b230d. Copied verbatim except this header and the unused
``SeedGenerator`` import. The truth each test asserts is in tests/test_corpus.py.
"""

from keras import ops


@ops.custom_gradient
def _binary_quantize(x):
    r = ops.where(x > 0, 1., -1.)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        dy = upstream
        return dy * (1. - ops.tanh(x)**2)  # type: ignore

    return ops.stop_gradient(r), grad


@ops.custom_gradient
def _ternary_quantize(x):
    r = ops.where(x > 0.5, 1., ops.where(x < -0.5, -1., 0.))

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        dy = upstream
        return dy * (1. - ops.tanh(x)**2)  # type: ignore

    return ops.stop_gradient(r), grad
