"""Optional packages (setup.cfg's extras), imported only where a feature uses them: a missing one is one
sentence naming the extra to install, found before anything is loaded or written."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from t2t.errors import T2TError


def require_extra(package: str, extra: str, needed_by: str, instead: str = "") -> None:
    """One sentence if ``package`` is not installed (looked up without importing it), naming the extra and
    what to do ``instead`` of installing it, if anything."""
    if importlib.util.find_spec(package) is None:
        alternative = f", or {instead}" if instead else ""
        raise T2TError(f"{needed_by} needs {package}, which is not installed; pip install 't2t[{extra}]'"
                       f"{alternative}.")


def import_extra(module: str, extra: str, needed_by: str, instead: str = "") -> ModuleType:
    """``module`` of the optional package of ``extra``, imported now (``require_extra`` first)."""
    require_extra(module.split(".")[0], extra, needed_by, instead)
    return importlib.import_module(module)
