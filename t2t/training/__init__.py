"""The training recipe (train.py), optimizers and schedules, which parameters train (transfer.py), progress
and metrics logging, and t2t-study's grids of runs."""
