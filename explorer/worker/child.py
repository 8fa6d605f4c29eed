"""``python -m explorer.worker.child FD NAME``: a worker process (see :mod:`explorer.worker.process`).

FD is the inherited end of the parent's pipe; NAME only labels the process in ``ps``.
"""

import sys
from multiprocessing.connection import Connection

from explorer.worker.process import serve

if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])))
