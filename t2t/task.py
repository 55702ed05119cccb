"""Kept for run folders written before t2t had subpackages: their copied --module files import this path."""

from t2t.data.task import *  # noqa: F401,F403
