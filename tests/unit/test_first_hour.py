"""The documentation's newcomer path: ``docs/first-hour.md``'s group and its tester test,
written to files as the page shows them and run; every page reachable from the index."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from goka import Context, StringCodec, define_group, input

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def files_of(page: Path) -> dict[str, str]:
    """The page's Python blocks that begin with ``# <file name>``, by file name."""
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)```", page.read_text(), re.DOTALL)
    return dict(blocks)


def test_the_first_hours_group_and_its_test_run_as_the_page_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = files_of(DOCS / "first-hour.md")
    assert sorted(files) == ["clicks.py", "test_clicks.py"]
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("clicks", "test_clicks"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module("test_clicks")
    tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
    assert len(tests) == 1
    tests[0]()  # (it asserts the counts)


def test_every_page_is_in_the_site_and_reachable_from_the_index() -> None:
    nav = re.findall(r"^  - [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))
    linked = set(re.findall(r"\]\(([\w-]+\.md)", (DOCS / "index.md").read_text()))
    assert sorted(set(nav) - linked - {"index.md"}) == []


def test_a_window_read_in_a_group_without_windows_names_the_edge_to_declare() -> None:
    from goka.errors import ContextError, ProcessingError
    from goka.tester import Tester

    def read(ctx: Context[object], msg: str) -> None:
        ctx.window("minute")

    tester = Tester(define_group("g", input("in", StringCodec(), read)))
    with pytest.raises(
        ProcessingError, match=r"keeps no windows: declare window\(name, spec, co"
    ) as raised:
        tester.consume("in", "k", "v")
    assert isinstance(raised.value.__cause__, ContextError)
