"""``python -m goka.commands.class_data``: write the driver JVM's class-data archive for this
pyspark install (:mod:`goka.spark.class_data`), where ``GOKA_SPARK_CDS`` says (default: the
place processors look for it; ``off``: none). ``make`` and the Docker image run it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from goka.spark.class_data import write_archive
    from goka.spark.session import cds_archive

    setting = os.environ.get("GOKA_SPARK_CDS", "")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", type=Path,
                        default=cds_archive(setting=None if setting == "off" else setting),
                        help="where to write it (default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.archive is None:
        print("GOKA_SPARK_CDS=off: no class-data archive written")
        return 0
    try:
        took = write_archive(args.archive)
    except (OSError, subprocess.SubprocessError, ImportError) as exc:
        print(f"goka: no class-data archive (processors start as usual): {exc}", file=sys.stderr)
        return 1
    size = args.archive.stat().st_size / 1e6
    print(f"class-data archive for processors: {args.archive} ({size:.0f} MB, {took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
