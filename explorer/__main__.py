"""``python -m explorer verify|bench ...``: the command-line entry points."""

from __future__ import annotations

import sys

COMMANDS = {
    "verify": ("explorer.verify", "run the gradient checker on the built-in ops, or on your code: verify TARGET..."),
    "bench": ("explorer.bench.speed", "measure speed against the targets"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        lines = [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
        print("usage: python -m explorer {verify,bench} [options]\n" + "\n".join(lines), file=sys.stderr)
        return 2
    module_name, _ = COMMANDS[argv[0]]
    module = __import__(module_name, fromlist=["main"])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
