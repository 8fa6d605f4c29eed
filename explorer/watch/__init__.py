"""What each custom gradient sees inside a real training run.

``explorer.watch.run_folder`` writes and reads ``runs/<name>/`` (Parquet tables appended while training goes on);
``explorer.watch.callback`` has ``Watch``, the Keras callback that records into it, and ``watch``. The package
itself can be called: ``explorer.watch(model, (x, y))`` is :func:`explorer.watch.callback.watch` (one record now,
in a notebook), so the name means the same whether or not a submodule was imported first.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from explorer.watch.callback import watch

        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
