"""What-if shares from a recorded histogram, against the same shares worked out by hand."""

import math

import numpy as np
import pytest

from explorer.runs.what_if import Histogram, surrogate_at, what_if

# 8 bins of width 0.5 over [-2, 2]: centres -1.75, -1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1.75;
# 1 + 2 + 3 + 4 + 4 + 3 + 2 + 1 = 20 inputs placed, 2 below -2 and 3 above 2: 25 in all.
KNOWN = Histogram(-2.0, 2.0, np.array([1, 2, 3, 4, 4, 3, 2, 1]), underflow=2, overflow=3)


def test_the_known_histogram_has_the_bins_worked_out_by_hand():
    assert KNOWN.centres.tolist() == [-1.75, -1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1.75]
    assert KNOWN.total == 25


def test_ste_sign_clip_one_passes_the_four_middle_bins():
    result = what_if(KNOWN, "ste_sign", {"clip_value": 1.0})
    # g = [|x| <= 1]: bins at +-0.25 and +-0.75 pass (3 + 4 + 4 + 3 = 14); +-1.25 and +-1.75 get 0 (2 + 1 + 1 + 2 = 6)
    assert result.zero_share == pytest.approx(6 / 25)
    assert result.mass == pytest.approx(14 / 25)
    assert result.outside_share == pytest.approx(5 / 25)
    assert result.total == 25


def test_a_wider_clip_gives_fewer_zero_gradients():
    result = what_if(KNOWN, "ste_sign", {"clip_value": 1.5})
    # |x| <= 1.5 now takes the bins at +-1.25 too: only +-1.75 (1 + 1) get 0
    assert result.zero_share == pytest.approx(2 / 25)
    assert result.mass == pytest.approx(18 / 25)


def test_a_clip_exactly_on_a_bin_centre_passes_that_bin_closed_boundary():
    result = what_if(KNOWN, "ste_sign", {"clip_value": 1.25})
    assert result.zero_share == pytest.approx(2 / 25)  # |1.25| <= 1.25: closed, as the catalogue says


def test_a_gentle_spike_slope_by_hand():
    slope = 2.0
    result = what_if(KNOWN, "fast_sigmoid", {"slope": slope, "threshold": 0.0})
    counts = [1, 2, 3, 4, 4, 3, 2, 1]
    centres = [-1.75, -1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1.75]
    expected = sum(c / (slope * abs(x) + 1.0) ** 2 for c, x in zip(counts, centres, strict=True)) / 25
    assert result.zero_share == 0.0  # a fast sigmoid is never exactly 0
    assert result.mass == pytest.approx(expected, rel=1e-12)
    # 1/(2*0.25 + 1)^2 = 0.444..., by hand
    assert result.grad[3] == pytest.approx(1 / 1.5**2)


def test_leaky_clip_leaks_outside_its_window():
    result = what_if(KNOWN, "leaky_clip", {"lo": -1.0, "hi": 1.0, "leak": 0.1})
    assert result.zero_share == 0.0
    assert result.mass == pytest.approx((14 * 1.0 + 6 * 0.1) / 25)


def test_a_shifted_threshold_moves_the_surrogate():
    centred = surrogate_at("fast_sigmoid", {"slope": 1.0, "threshold": 0.5}, [0.5, 1.5])
    assert centred.tolist() == pytest.approx([1.0, 1 / 4])


def test_an_empty_histogram_has_no_shares_rather_than_a_division_by_zero():
    empty = Histogram(-1.0, 1.0, np.zeros(4, dtype=np.int64))
    result = what_if(empty, "ste_sign")
    assert math.isnan(result.zero_share) and math.isnan(result.mass) and result.total == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.0, -1.0, [1]), "lo < hi"),
        ((float("nan"), 1.0, [1]), "lo < hi"),
        ((-1.0, 1.0, []), "1 to"),
        ((-1.0, 1.0, [[1, 2]]), "1 to"),
        ((-1.0, 1.0, [1, -2]), ">= 0"),
        ((-1.0, 1.0, [1.5]), ">= 0"),
    ],
)
def test_a_histogram_that_is_not_one_is_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        Histogram(args[0], args[1], np.asarray(args[2]))


def test_an_unknown_op_or_a_parameter_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="not a built-in op"):
        what_if(KNOWN, "no_such_op")
    with pytest.raises(ValueError, match="clip_value"):
        what_if(KNOWN, "ste_sign", {"clip_value": -5.0})
