"""``python -m engine``: see :mod:`engine.tools.cli`."""
import sys

from engine.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
