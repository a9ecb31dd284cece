"""Test-session set-up shared by every test package.

``MIXNET_ONLY=1`` makes ``cloaknet`` unimportable for the session: ``make test`` runs
``tests/mixnet`` that way, which shows that the mixnet and its tests stand on their own.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest


class _BlockCloaknet(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "cloaknet" or fullname.startswith("cloaknet."):
            raise ModuleNotFoundError(f"{fullname} is blocked (MIXNET_ONLY=1)", name=fullname)
        return None


if os.environ.get("MIXNET_ONLY") == "1":
    sys.meta_path.insert(0, _BlockCloaknet())


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Undo what a test's in-process ``configure_logging`` (a CLI command's ``main``) did to
    the root logger: its handler (over a stream pytest has closed by then) and its level
    would otherwise reach every later test of the session — INFO lines of libraries
    in another test's ``caplog``, "Logging error" on a closed stream. pytest's own capture
    handlers are left to pytest."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
