"""``python -m pipeline.play``: see :mod:`pipeline.play.command`."""

import sys

from pipeline.play.command import run

run(sys.argv[1:])
