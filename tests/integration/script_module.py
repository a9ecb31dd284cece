"""Importing a script of ``scripts/`` (not a package) from its path, for tests of its pure
parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The repository's ``scripts/`` directory.
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(filename: str, module_name: str) -> ModuleType:
    """The module ``scripts/<filename>`` executed under ``module_name`` (registered in
    ``sys.modules`` only while it runs: dataclasses look their module up then)."""
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(module_name, None)
    return module
