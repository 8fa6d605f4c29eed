"""Built-in ops in the editor's expression language, for code export.

Each built-in op declares its formulas a second time as an :class:`ops.Expression` in its
registry entry (``ops/catalogue.py``), so the exporter renders built-in and user ops with the
same code. ``tests/test_export.py`` checks every expression numerically against the op's
TensorFlow functions (forward and custom gradient, at the special points and on a grid).

Conventions the expressions reproduce: the spike forward is ``[x > threshold]``; ``sign(0) = +1``
is written ``where(x >= 0, 1, -1)`` because the language's ``sign`` is ``tf.sign``; ``round``
rounds half to even; clipping windows are closed unless the catalogue says open.
"""

from __future__ import annotations

import ops

OpSource = ops.Expression
DY = "dy"  # the name a ``backward`` expression uses for the upstream gradient


def source_for(key: str) -> ops.Expression:
    """The expression form of built-in op ``key``; KeyError says where to add a missing one."""
    spec = ops.get(key)
    if spec.expression is None:
        raise KeyError(f"built-in op {key!r} has no expression: add expression=Expression(...) to its declaration in ops/catalogue.py")
    return spec.expression
