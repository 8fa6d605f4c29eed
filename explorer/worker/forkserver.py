"""``python -m explorer.worker.forkserver FD``: the fork server (see :mod:`explorer.worker.forking`)."""

import sys

from explorer.worker.forking import main
from explorer.worker.process import serve

if __name__ == "__main__":
    main(int(sys.argv[1]), serve)
