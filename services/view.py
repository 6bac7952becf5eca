"""The view service: ``goka view serve`` (see ``goka view serve --help``), configured by flags
or ``GOKA_*`` environment variables, as the Docker image runs it.

    python -m services.view --table clicks-table --codec int64 --brokers kafka:9092
"""

from __future__ import annotations

import sys

from goka.cli import main

if __name__ == "__main__":
    sys.exit(main(["view", "serve", *sys.argv[1:]]))
