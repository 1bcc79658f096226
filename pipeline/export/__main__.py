"""``python -m pipeline.export``: see :mod:`pipeline.export`."""

import sys

from pipeline.export.command import run

run(sys.argv[1:])
