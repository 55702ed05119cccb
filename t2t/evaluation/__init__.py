"""Metrics as t5.evaluation.metrics defines them, evaluation of tasks and mixtures, result files and the
paper's benchmark averages, and t2t-predict's decoding of strings."""
