"""Kept for run folders written before t2t had subpackages: their copied --module files import this path.

GLUE's reader and tables moved to the built-in GLUE tasks (t2t.tasks.glue); they are looked up there on
first use, since importing that module registers the GLUE tasks (as loading the built-in modules does).
"""

import importlib

from t2t.data.sources import *  # noqa: F401,F403

_MOVED_TO_GLUE_TASKS = ("GLUE_HUB_ID", "GLUE_LABELS", "GLUE_SIZES", "GLUE_FILES", "read_glue_tsv", "GlueSource")


def __getattr__(name: str):
    if name in _MOVED_TO_GLUE_TASKS:
        return getattr(importlib.import_module("t2t.tasks.glue"), name)
    raise AttributeError(f"module 't2t.sources' has no attribute {name!r}")
