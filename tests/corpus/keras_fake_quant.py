"""Corpus (issue 44): Keras's own fake quantisation, called, not copied.

Source: https://github.com/keras-team/keras, path keras/src/quantizers/quantizers.py, commit
2422af1d63bb5854a53c2298a1f15ccdae3b82e4: ``fake_quant_with_min_max_vars``, whose custom gradient (a nested
``ops.custom_gradient``) passes the input's gradient inside [min, max] and gives the range the upstream of the
elements outside it. ``fake_quant`` only calls it with a learned range, as a quantisation-aware layer does.
The truth each test asserts is in tests/test_corpus.py.
"""

import keras

# ours: compare it across backends, with a per-tensor range (two scalars), as the layer calls it
GRADIENT_EXPLORER = {"fake_quant": {"compare_backends": True, "input_shapes": [((4, 3), (), ())]}}


def fake_quant(x, min_vals, max_vals):
    return keras.quantizers.fake_quant_with_min_max_vars(x, min_vals, max_vals, num_bits=8)
