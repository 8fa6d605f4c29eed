"""``python -m explorer run|verify|bench ...`` (installed: ``gradient-explorer ...``): the command line."""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # fewer TensorFlow C++ log lines on stderr (not those before absl starts)

COMMANDS = {
    "run": ("explorer.serve.cli", "start the app (--ops FILE_OR_MODULE adds your own ops)"),
    "verify": ("explorer.checker.runner", "run the gradient checker on the built-in ops, or on your code: verify TARGET..."),
    "bench": ("explorer.bench.speed", "measure speed against the targets"),
}


def version() -> str:
    """The installed distribution's version (pyproject.toml's, raised with each change of a public name or
    verdict: CHANGELOG.md)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("gradient-explorer")
    except PackageNotFoundError:  # a clone used without `pip install -e .`
        return "unknown (not installed: run `make test` or `pip install -e .`)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-V"]):
        print(f"gradient-explorer {version()}")
        return 0
    if not argv or argv[0] not in COMMANDS:
        lines = [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
        print(f"usage: gradient-explorer [--version] {{{','.join(COMMANDS)}}} [options]\n" + "\n".join(lines), file=sys.stderr)
        return 2
    module_name, _ = COMMANDS[argv[0]]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:  # the wheel leaves the benchmark (tooling) out
        if not error.name or not module_name.startswith(error.name):
            raise
        print(f"{argv[0]}: not in this installation; run it from a clone of the repository", file=sys.stderr)
        return 2
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
