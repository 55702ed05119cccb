"""examples/summarize_study.py reads t2t-eval's <task>.metrics.json as written (undefined metrics are null)."""

import importlib.util
import json
import math
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "summarize_study.py"


def load_summary():
    spec = importlib.util.spec_from_file_location("summarize_study", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_undefined_correlation_reads_as_nan_and_counts_as_zero(tmp_path):
    summary = load_summary()
    scores = {"glue_cola_v002": {"matthews_corrcoef": 10.0}, "glue_sst2_v002": {"accuracy": 50.0},
              "glue_mrpc_v002": {"f1": 80.0, "accuracy": 70.0},
              "glue_stsb_v002": {"pearson_corrcoef": None, "spearman_corrcoef": None},
              "glue_rte_v002": {"accuracy": 40.0}}
    folder = tmp_path / "run" / "eval" / "validation"
    folder.mkdir(parents=True)
    for task, metrics in scores.items():  # one <task>.metrics.json per task, as t2t-eval writes them
        (folder / f"{task}.metrics.json").write_text(json.dumps({"task": task, "metrics": metrics}))
    read = summary.final_scores(tmp_path / "run")
    assert math.isnan(read["glue_stsb_v002"]["pearson_corrcoef"])
    assert summary.glue_average(read) == (10 + 50 + 75 + 0 + 40) / 5
    assert summary.fmt(read["glue_stsb_v002"]["spearman_corrcoef"]) == "—"
