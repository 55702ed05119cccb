"""CNN/Daily Mail summarisation as the ``t5`` library registers it (``cnn_dailymail_v002``).

- text: ``"summarize: <article>"`` → the highlights (``t2t.preprocessors.summarize``);
- metrics: ROUGE-1, ROUGE-2 and ROUGE-Lsum F-measures from rouge-score (``t2t.metrics.rouge``, T5's
  " . " → " .\\n" sentence split for Lsum).

Alias ``cnn_dailymail``. Data: aligned ``<data dir>/cnn_dailymail/<split>.source`` / ``<split>.target`` files
(one article / one summary a line, ``split`` = train, val or test), else the hub's ``abisee/cnn_dailymail``
3.0.0 (T5 used TFDS 3.1.0, the same articles and highlights).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from t2t import HFDataset, T2TError, Task, metrics, register_task
from t2t.data.sources import LocalOrHub
from t2t.preprocessors import summarize

CNN_DAILYMAIL_SIZES = {"train": 287_113, "validation": 13_368, "test": 11_490}
_FILE_SPLITS = {"train": "train", "validation": "val", "test": "test"}
CNN_DAILYMAIL_FILES = {split: [(f"cnn_dailymail/{name}.source", f"cnn_dailymail/{name}.target")]
                       for split, name in _FILE_SPLITS.items()}
_HIGHLIGHT_GAP = re.compile(r"\s{2,}")


def read_source_target(paths: list[Path]) -> Iterator[dict]:
    """Aligned ``.source``/``.target`` lines as the hub's rows ``{"article", "highlights"}``.

    These files separate a summary's highlights with runs of spaces; the hub separates them with newlines,
    which is what ROUGE-Lsum splits sentences on, so each run becomes one newline.
    """
    source, target = paths
    articles = source.read_text(encoding="utf-8").splitlines()
    summaries = target.read_text(encoding="utf-8").splitlines()
    if len(articles) != len(summaries):
        raise T2TError(f"{source} has {len(articles)} lines but {target} has {len(summaries)}; the article and "
                       f"summary files must be aligned line by line.")
    for article, summary in zip(articles, summaries):
        yield {"article": article.strip(), "highlights": _HIGHLIGHT_GAP.sub("\n", summary.strip())}


def cnn_dailymail_source(hub_path: str = "abisee/cnn_dailymail") -> LocalOrHub:
    return LocalOrHub("CNN/Daily Mail", HFDataset(hub_path, "3.0.0"), CNN_DAILYMAIL_FILES, read_source_target,
                      splits=tuple(_FILE_SPLITS), sizes=CNN_DAILYMAIL_SIZES)


def make_cnn_dailymail_task(data_source=None) -> Task:
    return Task(
        name="cnn_dailymail_v002",
        source=data_source or cnn_dailymail_source(),
        preprocessors=(summarize,),
        metric_fns=(metrics.rouge,),
        sequence_length={"inputs": 512, "targets": 512},  # t5's sequence_lengths/cnn_dailymail_v002.gin
        description="CNN/Daily Mail summarisation as in T5 (ROUGE-1/2/Lsum)",
    )


register_task(make_cnn_dailymail_task(), aliases=("cnn_dailymail",))
