"""Loading a script of bench/ as a module, for the tests of its pure parts.

bench/ is no package: each script is loaded from its path under a name of its own, and
registered in ``sys.modules`` before it runs, because dataclasses look their module up
there while being defined."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(relative: str) -> ModuleType:
    """``bench/<relative>`` as a module named after its path (``engine/wakeups.py`` is
    ``bench_engine_wakeups``)."""
    path = BENCH / relative
    name = "bench_" + relative.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
