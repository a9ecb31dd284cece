"""Test-session set-up shared by every test package.

``MIXNET_ONLY=1`` makes ``cloaknet`` unimportable for the session: ``make test`` runs
``tests/mixnet`` that way, which shows that the mixnet and its tests stand on their own.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType


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
