"""Tooling, not product: the speed benchmark (``python -m explorer bench``, :mod:`explorer.bench.speed`),
the browser benchmark (``python -m explorer.bench.browser``) and the browser harness they share with
``tests/e2e`` (:mod:`explorer.bench.harness`). The app never imports this package."""
