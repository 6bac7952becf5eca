"""The layout docs/development.md draws, checked: which layer imports what, no import cycle,
the partition runtime's modules each importable alone, and modules of a readable size."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOKA = ROOT / "goka"
#: Modules generated from proto/ (by `make proto`): not ours to shape.
GENERATED = "grpc/v1"


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(GOKA.rglob("*.py")) if GENERATED not in str(p)}


def _imports(name: str) -> set[str]:
    """What ``name`` imports when it runs: module-level and function-level imports (those
    hide cycles too), not those under ``if TYPE_CHECKING:``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (
                getattr(test, "id", None) == "TYPE_CHECKING"
                or getattr(test, "attr", None) == "TYPE_CHECKING"
            ):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = (
                package.split(".")[: len(package.split(".")) - (node.level - 1)]
                if node.level
                else []
            )
            module = ".".join([*base, node.module] if node.module else base)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def _goka_imports(name: str) -> set[str]:
    """The goka modules ``name`` imports (a name imported from a package: the package)."""
    known = set()
    for found in _imports(name):
        parts = found.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts and parts[0] == "goka":
            known.add(".".join(parts))
    return known - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_goka_module_imports_itself_back_at_run_time() -> None:
    graph = {name: _goka_imports(name) for name in MODULES}
    assert _cycles(graph) == []


@pytest.mark.parametrize(
    ("dependency", "only_under"),
    [("confluent_kafka", "goka.kafka"), ("pyspark", "goka.spark"), ("plyvel", "goka.storage")],
)
def test_each_dependency_has_one_adapter(dependency: str, only_under: str) -> None:
    importers = [n for n in MODULES if any(i.split(".")[0] == dependency for i in _imports(n))]
    assert [n for n in importers if not n.startswith(only_under)] == []


def test_layers_import_only_the_layers_above_them() -> None:
    below = {
        "goka.processing": ("goka.spark", "goka.commands", "goka.cli", "goka.web", "goka.grpc"),
        "goka.engine": ("goka.processing", "goka.spark", "goka.kafka", "goka.storage"),
        "goka.graph": ("goka.engine", "goka.processing", "goka.spark", "goka.kafka"),
        "goka.kafka": ("goka.processing", "goka.spark", "goka.storage", "goka.commands"),
        "goka.storage": ("goka.processing", "goka.spark", "goka.kafka", "goka.commands"),
    }
    wrong = {
        name: sorted(i for i in _goka_imports(name) if i.startswith(forbidden))
        for layer, forbidden in below.items()
        for name in MODULES
        if name == layer or name.startswith(f"{layer}.")
    }
    assert {name: found for name, found in wrong.items() if found} == {}
    outside = [n for n in MODULES if not n.startswith(("goka.commands", "goka.cli"))
               and any(i.startswith("goka.commands") for i in _goka_imports(n))]  # fmt: skip
    assert outside == []


def test_only_the_commands_read_the_environment() -> None:
    """Library code takes settings as arguments; the commands layer reads the environment.
    The exceptions are docs/development.md's: Spark's own variables in the session, the
    emitter's pure-Python switch, and the development brokers' Java, jar cache and binary.
    Handing the whole environment on to a child process is not reading it."""
    allowed = {"goka.cli", "goka.spark.session", "goka._accel", "goka.dev.kafka", "goka.dev.tansu"}
    readers = []
    for name, path in MODULES.items():
        if name.startswith("goka.commands") or name in allowed:
            continue
        tree = ast.parse(path.read_text())
        handed_on = {
            id(v)
            for d in ast.walk(tree)
            if isinstance(d, ast.Dict)  # {**os.environ}:
            for k, v in zip(d.keys, d.values, strict=True)
            if k is None
        }  # a child's
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and (id(node) not in handed_on)
            ):
                readers.append(f"{name}:{node.lineno}")
    assert readers == []


def test_modules_stay_under_400_lines() -> None:
    sizes = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > 400} == {}


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith("goka.processing")])
def test_each_module_of_the_partition_runtime_imports_alone(name: str) -> None:
    result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
