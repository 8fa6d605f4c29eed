"""How TensorFlow uses the CPU in the app's server process (and in the benchmark, which measures it).

Not applied on ``import explorer`` or ``import ops``: a library must not change the threading of a
user's own TensorFlow program.
"""

from __future__ import annotations

import os

INTRA_OP_THREADS = 1
INTRA_OP_ENV = "TF_NUM_INTRAOP_THREADS"  # TensorFlow's own variable: an operator's value wins


def one_thread_per_op() -> int:
    """Run each TensorFlow op on one thread (intra-op parallelism 1), once per process, before its first op.

    By default TensorFlow splits every op over all cores. The app's ops are small (a 2,001-point sweep,
    a 16-unit network, at most 1M elements, which is memory-bound) and on a shared 2-core server several
    users' sessions already run side by side: splitting adds hand-offs between threads, and with the
    other core busy an op waits for its slowest part. Measured with ``python -m explorer bench`` on the
    2-core machine, default -> 1 thread: training steps/s with ``fast_sigmoid`` 3,549 -> 5,850, warm
    300 epochs 0.085 -> 0.048 s, the 1M-point sweep beside a busy core 4.07 -> 3.21 ms, the explore
    rerun 33 -> 25 ms; an idle 1M-point sweep 3.2 -> 2.7-2.9 ms.

    Returns the intra-op threads in effect as far as Python knows (0: TensorFlow's default). Leaves
    everything as it is when ``TF_NUM_INTRAOP_THREADS`` is set or TensorFlow's runtime has started
    (too late to change in this process: e.g. an AppTest in a process that already ran ops). Process-wide
    and for good: running the app in your own process (an AppTest in a notebook) sets it there too.
    """
    import tensorflow as tf

    if os.environ.get(INTRA_OP_ENV):
        return tf.config.threading.get_intra_op_parallelism_threads()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(INTRA_OP_THREADS)
    except RuntimeError:  # "cannot be modified after initialization"
        pass
    return tf.config.threading.get_intra_op_parallelism_threads()
