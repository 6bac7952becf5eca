"""``python -m goka`` is the ``goka`` command."""

import sys

from goka.cli import main

sys.exit(main())
