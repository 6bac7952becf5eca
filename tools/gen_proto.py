"""Generate the gRPC code in goka/grpc/v1 from proto/ (``make proto``), reproducibly.

protoc names generated modules after the proto package (``goka.view.v1``), which would clash with
the ``goka.view`` module, so the code is generated into a scratch directory and moved to
``goka/grpc/v1`` with its one cross-import rewritten.

    python -m tools.gen_proto [--check]   # --check: fail if goka/grpc/v1 is not current
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = "goka/view/v1/view.proto"
TARGET = ROOT / "goka" / "grpc" / "v1"
FILES = ("view_pb2.py", "view_pb2.pyi", "view_pb2_grpc.py")


def generate() -> dict[str, str]:
    """Return ``{file name: content}`` of the generated modules."""
    with tempfile.TemporaryDirectory() as scratch:
        args = ["protoc", f"-I{ROOT / 'proto'}", f"--python_out={scratch}", f"--pyi_out={scratch}",
                f"--grpc_python_out={scratch}", PROTO]  # fmt: skip
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed for {PROTO}")
        out = Path(scratch) / "goka" / "view" / "v1"
        return {
            name: (out / name)
            .read_text()
            .replace("from goka.view.v1 import view_pb2", "from goka.grpc.v1 import view_pb2")
            for name in FILES
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    generated = generate()
    if args.check:
        stale = [n for n, text in generated.items() if (TARGET / n).read_text() != text]
        if stale:
            print(f"stale generated code: {stale}; run `make proto`", file=sys.stderr)
            return 1
        return 0
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        (TARGET / name).write_text(text)
    print(f"generated {', '.join(FILES)} in {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
