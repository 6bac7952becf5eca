"""The processor service: ``goka processor run`` (see ``goka processor run --help``),
configured by flags or ``GOKA_*`` environment variables, as the Docker image runs it.

    python -m services.processor examples.click_count.group:graph --brokers kafka:9092
"""

from __future__ import annotations

import sys

from goka.cli import main

if __name__ == "__main__":
    sys.exit(main(["processor", "run", *sys.argv[1:]]))
