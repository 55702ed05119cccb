"""Kept for run folders written before t2t had subpackages: their copied --module files import this path."""

from t2t.evaluation.metrics import *  # noqa: F401,F403
