"""``python -m pplsamplers.cli``: the ``pplsamplers`` command."""

import sys

from pplsamplers.cli import main

sys.exit(main())
