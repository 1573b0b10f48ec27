"""atheris target: the uwsgi codec on both backends (see fuzz/runner.py, fuzz/README.md)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz import runner  # noqa: E402

if __name__ == '__main__':
    runner.main('uwsgi')
