"""Start the inspector from a checkout: ``python app.py [MODEL] [--weights W] ...``.

The same as the installed ``caffe-inspector`` command (:mod:`inspector.cli`).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from inspector.cli import config_from_args, main, parse_args  # noqa: E402,F401

if __name__ == "__main__":
    main()
