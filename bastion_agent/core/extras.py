"""Optional extras: import one if it is installed, else carry on without it.

The core is standard library only; numpy, FAISS and pypdf make it faster
or read more when present. Each feature asks here, so "not installed" means
the same thing everywhere (and a test can patch the feature's own loader).
"""

from __future__ import annotations

import importlib
from types import ModuleType


def optional(name: str) -> ModuleType | None:
    """The module ``name`` (e.g. ``"faiss"``), or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
