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
#: Every importable name under goka/ (generated and compiled modules too), to tell a submodule
#: imported from its package (``from goka import _speedups``) from a name the package defines.
KNOWN = set(MODULES) | {
    _name(p).split(".cpython")[0] for p in GOKA.rglob("*") if p.suffix in (".py", ".pyi", ".so")
}


def _is_type_checking(test: ast.expr) -> bool:
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == (
        "TYPE_CHECKING"
    )


def _imports(name: str, *, typing: bool = False) -> set[str]:
    """What ``name`` imports: module-level and function-level imports (those hide cycles
    too), and with ``typing`` those under ``if TYPE_CHECKING:`` as well. ``from p import n``
    imports ``p.n`` where that is a module, else ``p``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if _is_type_checking(node.test) and not typing:
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
            named = {f"{module}.{alias.name}" for alias in node.names}
            found.update(named & KNOWN)
            if named - KNOWN:
                found.add(module)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def _goka_imports(name: str, *, typing: bool = False) -> set[str]:
    """The goka modules ``name`` imports (a name imported from a package: the package)."""
    known = set()
    for found in _imports(name, typing=typing):
        parts = found.split(".")
        while parts and ".".join(parts) not in KNOWN:
            parts.pop()
        if parts and parts[0] == "goka" and ".".join(parts) in MODULES:
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


def test_no_goka_module_imports_itself_back() -> None:
    """No circle between modules, imports for type checking included: where two modules need
    each other's types, the types move to a module both import (e.g. goka.time.ports)."""
    graph = {name: _goka_imports(name, typing=True) for name in MODULES}
    circles = _cycles(graph)
    assert circles == [], "modules that import each other, in circles: " + "; ".join(
        ", ".join(circle) for circle in circles
    )


def test_a_circle_is_found() -> None:
    """The check above finds a circle, also one of imports for type checking only."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


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
        "goka.group": ("goka.processing", "goka.spark", "goka.kafka", "goka.storage"),
        "goka.time": ("goka.processing", "goka.spark", "goka.kafka", "goka.storage"),
        "goka.group.graph": ("goka.group.engine", "goka.group.firing", "goka.time.partition"),
        "goka.kafka": ("goka.processing", "goka.spark", "goka.storage", "goka.commands"),
        "goka.storage": ("goka.processing", "goka.spark", "goka.kafka", "goka.commands"),
    }
    wrong = sorted(
        (name, found)
        for layer, forbidden in below.items()
        for name in MODULES
        if name == layer or name.startswith(f"{layer}.")
        for found in _goka_imports(name, typing=True)
        if found.startswith(forbidden)
    )
    assert wrong == []
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


def test_the_code_map_lists_every_package() -> None:
    """docs/development.md's map names each package of goka/ (as ``name/``)."""
    text = (ROOT / "docs" / "development.md").read_text()
    code_map = text[text.index("## A map of the code") : text.index("## Examples")]
    packages = sorted(
        str(p.parent.relative_to(GOKA))
        for p in GOKA.rglob("__init__.py")
        if p.parent != GOKA and GENERATED not in str(p)
    )
    assert [p for p in packages if f"`{p}/`" not in code_map] == []


def test_the_top_of_goka_holds_only_what_the_map_names() -> None:
    """Each module at the top of goka/ is in docs/development.md's map: the user API, the
    adapters' small modules and the shared helpers. Engine and time parts belong in packages."""
    text = (ROOT / "docs" / "development.md").read_text()
    code_map = text[text.index("## A map of the code") : text.index("## Examples")]
    top = sorted(p.name for p in GOKA.glob("*.py"))
    assert [name for name in top if f"`{name}`" not in code_map] == []


def test_modules_stay_under_400_lines() -> None:
    sizes = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: s for n, s in sizes.items() if s > 400} == {}


@pytest.mark.parametrize(
    "name", [n for n in MODULES if n.startswith(("goka.processing", "goka.group", "goka.time"))]
)
def test_each_module_of_the_partition_runtime_imports_alone(name: str) -> None:
    result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
