"""Several sessions sweeping at once on one shared cached grid (explorer.explore.sweeps._Grid: "another
session may replace it meanwhile"): every thread must get its own upstream's values, never a neighbour's.

The reference is each op's serial sweep at upstream 1: the upstream multiplies both gradients, and every
upstream here is a power of two, so the expected values are exact (no rounding to allow for).
A race fails this test only in the runs where it happens: with threads switching every microsecond,
the unsafe variant of ``_Grid.upstream`` (reading ``self._upstream`` again after writing it) failed
it in one run of three here.
"""

import sys
import threading

import numpy as np
import pytest

from explorer.explore import sweeps

OPS = ("atan", "ste_sign", "sigmoid", "rect")
UPSTREAMS = (2.0, -4.0, 0.5, 8.0)  # one per thread, all on the same grid
ROUNDS = 40
RANGE = (-2.5, 2.5, 4001)


@pytest.fixture
def switch_threads_often():
    """Python switches threads every microsecond instead of every 5 ms, so interleavings the
    default interval makes rare (a read and the write after it) happen in every round."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("switch_threads_often")
def test_threads_sweeping_one_cached_grid_each_get_their_own_upstream():
    reference = {key: sweeps.sweep(key, *RANGE) for key in OPS}
    barrier = threading.Barrier(len(UPSTREAMS))
    problems: list[str] = []

    def session(upstream: float) -> None:
        try:
            barrier.wait(timeout=60)
            for round_ in range(ROUNDS):
                key = OPS[round_ % len(OPS)]  # every thread on the same op (so the same grid) each round
                result = sweeps.sweep(key, *RANGE, upstream=upstream)
                want = reference[key].frame
                got = result.frame
                assert np.shares_memory(got["x"].to_numpy(), want["x"].to_numpy())  # one cached grid
                np.testing.assert_array_equal(got["forward"], want["forward"])
                np.testing.assert_array_equal(got["custom_grad"], upstream * want["custom_grad"].to_numpy())
                np.testing.assert_array_equal(got["true_grad"], upstream * want["true_grad"].to_numpy())
        except Exception as error:  # noqa: BLE001 - collected and reported by the test's own thread
            problems.append(f"upstream {upstream}: {error!r}"[:2000])

    threads = [threading.Thread(target=session, args=(upstream,)) for upstream in UPSTREAMS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a sweeping thread did not finish within 300 s"
    assert problems == []
