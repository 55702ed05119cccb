"""Optional packages (setup.cfg's extras), imported only where a feature uses them: a missing one is one
sentence naming the extra to install, found before anything is loaded or written."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from t2t.errors import T2TError


def require_extra(package: str, extra: str, needed_by: str) -> None:
    """One sentence if ``package`` is not installed (looked up without importing it)."""
    if importlib.util.find_spec(package) is None:
        raise T2TError(f"{needed_by} needs {package}, which is not installed; pip install 't2t[{extra}]'.")


def import_extra(module: str, extra: str, needed_by: str) -> ModuleType:
    """``module`` of the optional package of ``extra``, imported now (``require_extra`` first)."""
    require_extra(module.split(".")[0], extra, needed_by)
    return importlib.import_module(module)
