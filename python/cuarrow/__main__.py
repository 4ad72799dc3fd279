"""``python -m cuarrow``: the ``cuarrow`` command (cuarrow._cli)."""

import sys

from cuarrow._cli import main

if __name__ == "__main__":
    sys.exit(main())
