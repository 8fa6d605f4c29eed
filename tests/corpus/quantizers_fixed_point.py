"""Corpus (issue 44): copied, not written here.

Source: https://github.com/calad0i/quantizers, path src/quantizers/fixed_point/_fixed_point_ops.py,
commit c2aa6127eff48ee989f4e81242952789b7507fe2. ``_clip`` is copied verbatim. ``_round_scaled`` is the body of
``rnd_mode``'s ``inner_wrapper`` copied verbatim, bound at module level with ``func = ops.floor`` (the 'TRN'
mode) instead of inside the decorator factory. The declaration below is ours (the shapes the library calls it
with; the justification after its docstring: "differentiable w.r.t. to the input and f"). The truth each test asserts is in tests/test_corpus.py.
"""

from keras import ops

GRADIENT_EXPLORER = {  # ours: how the library calls it (f broadcast to x's shape by its bw_to_x) and why
    "_round_scaled": {
        "justification": "straight-through rounding; the fraction bits f learn from the rounding error",
        "input_shapes": [((4, 3), (4, 3))],
    },
}


@ops.custom_gradient
def _clip(x, min_value, max_value):
    r = ops.clip(x, min_value, max_value)

    def grad(*args, upstream=None):
        mask1 = x > max_value
        mask2 = x < min_value
        if upstream is None:
            (upstream,) = args
        dy = upstream
        dx = ops.where(~(mask1 | mask2), dy, 0.0)
        dmax = ops.where(mask1, dy, 0.0)
        dmin = ops.where(mask2, dy, 0.0)
        return dx, dmin, dmax

    return r, grad


func = ops.floor


@ops.custom_gradient
def _round_scaled(x, f):
    scale = 2.0**f
    sx = x * scale
    sxq = func(sx)
    xq = sxq / scale
    delta = xq - x

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        dy = upstream
        dx = dy
        df = -ops.log(2.0) * delta * dy  # type: ignore
        return dx, df

    return ops.stop_gradient(xq), grad
