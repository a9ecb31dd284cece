"""The mixnet is generic: it never imports the application and never speaks of it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

MIXNET = Path(__file__).resolve().parents[2] / "mixnet"
TESTS = Path(__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path", sorted([*MIXNET.rglob("*.py"), *TESTS.rglob("*.py")]), ids=lambda p: p.name
)
def test_no_mixnet_module_or_test_imports_cloaknet(path: Path) -> None:
    assert not any(n == "cloaknet" or n.startswith("cloaknet.") for n in _imports(path))


def test_the_mixnet_package_does_not_say_analyzer() -> None:
    offenders = [
        str(p.relative_to(MIXNET)) for p in MIXNET.rglob("*.py") if "analyzer" in p.read_text()
    ]
    assert offenders == []


@pytest.mark.skipif(os.environ.get("MIXNET_ONLY") != "1", reason="run by make test")
def test_cloaknet_is_not_importable_in_this_session() -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__("cloaknet")
