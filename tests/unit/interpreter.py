"""Run code in a fresh Python interpreter: what a module imports shows only in a new process."""

from __future__ import annotations

import subprocess
import sys


def fresh_output(code: str) -> str:
    """What ``code`` prints when run by a new interpreter (stripped); fails if it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    return done.stdout.strip()
