"""The packages' re-exports are imported where first used: all of them resolve, and a module
of the package imports without the others."""

from __future__ import annotations

import importlib

import pytest

from .interpreter import fresh_output


@pytest.mark.parametrize("package", ["goka", "goka.spark"])
def test_every_exported_name_resolves_to_its_module_s_object(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        home = getattr(value, "__module__", "")  # a type alias's is typing's
        if home.startswith("goka"):
            assert getattr(importlib.import_module(home), name) is value, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'Nothing'"):
        module.Nothing  # noqa: B018  # the attribute access is the test


def test_the_data_source_imports_without_the_processor_the_emitter_or_the_metrics() -> None:
    """Each Python process Spark starts for a query imports ``goka.spark.source``: with the
    packages' re-exports imported eagerly, each paid ~0.28 s for modules it never used."""
    code = (
        "import sys\n"
        "import goka.spark.source\n"
        "from goka import ConfigurationError\n"
        "print(sorted(m for m in ('goka.spark.processor', 'goka.emitter', 'goka.metrics',"
        " 'goka.view', 'prometheus_client') if m in sys.modules))\n"
    )
    assert fresh_output(code) == "[]"
