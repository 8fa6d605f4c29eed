"""Corpus (issue 44): copied, not written here.

Sources: https://github.com/nroope/PQuant, ``binary_step`` from pquant/pruning_methods/dst.py at commit
edfcdcaefaaf650a0905699c191582e32f88bad4, ``autosparse_prune`` (with its ``BACKWARD_SPARSITY`` switch) from
pquant/pruning_methods/autosparse.py at commit d2f3988769653758daf7eb852f13f670f5cee443. Both copied verbatim;
the modules' ``os.environ["KERAS_BACKEND"] = "torch"`` lines are left out (the checker sets each worker's
backend). The truth each test asserts is in tests/test_corpus.py.
"""

from keras import ops

BACKWARD_SPARSITY = False


@ops.custom_gradient
def binary_step(weight):
    output = ops.cast(weight > 0, dtype=weight.dtype)
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        abs_weight = ops.abs(weight)
        idx_lt04 = ops.where(abs_weight <= 0.4, 2 - 4 * abs_weight, 0.0)
        idx_04to1 = ops.where(ops.logical_and(abs_weight > 0.4, abs_weight <=1.0), 0.4, 0.0)
        idx_gt1 = ops.where(abs_weight > 1.0, 0.0, 0.0)
        grads = idx_lt04 + idx_04to1 + idx_gt1
        return grads * upstream
    return output, grad


@ops.custom_gradient
def autosparse_prune(x, alpha):
    mask = ops.relu(x)
    backward_sparsity = 0.5
    x_flat = ops.reshape(x, -1)
    k = int(ops.size(x_flat) * backward_sparsity)
    topks, _ = ops.top_k(x_flat, k)
    kth_value = topks[-1]
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        grads = ops.where(x <= 0, alpha, 1.0)
        if BACKWARD_SPARSITY:
            grads = ops.where(x < kth_value, 0., grads)
        return grads * upstream, None
    return mask, grad
