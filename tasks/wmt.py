"""The paper's three WMT translation tasks, as the ``t5`` library registers them (``t5/data/tasks.py``).

=====================  =========  ==========================  ================  ================
task (alias)           hub        direction                   validation        test
=====================  =========  ==========================  ================  ================
``wmt_t2t_ende_v003``  wmt14      English → German (ende)     newstest2013      newstest2014
``wmt15_enfr_v003``    wmt15      English → French (enfr)     newstest2014      newstest2015
``wmt16_enro_v003``    wmt16      English → Romanian (enro)   newsdev2016       newstest2016
=====================  =========  ==========================  ================  ================

- text: ``"translate English to German: <en>"`` → ``<de>`` (``t2t.preprocessors.translate``);
- metric: corpus BLEU from sacrebleu as T5 computes it (``t2t.metrics.bleu``: ``exp`` smoothing, ``intl``
  tokenisation, no lowercasing).

Splits are the paper's (§2.3). Local copies: ``<data dir>/wmt/<en-de|en-fr|en-ro>/`` holding, per split, the
official SGML pair ``<test set>-src.<en>.sgm`` / ``-ref.<xx>.sgm`` or aligned plain text ``<test set>.en`` /
``.xx`` (names below); otherwise the hub: ``wmt14``/``wmt15``/``wmt16`` (configs de-en, fr-en, ro-en).
Differences from T5 to know: T5 trained en-de on TFDS ``wmt_t2t_translate`` (the tensor2tensor corpus), the hub
has ``wmt14`` de-en. En-fr validation from local files is newstest2014 alone, the paper's validation set (§2.3);
the ``t5`` library read TFDS's ``wmt15`` fr-en, whose validation split, like the hub's, also holds
newsdiscussdev2015, so a validation BLEU from the hub is t5's number and one from local files the paper's set.
The test split is newsdiscusstest2015 (what WMT15 called its French-English news test).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Iterator

from t2t import HFDataset, T2TError, Task, metrics, register_task
from t2t.data.sources import LocalOrHub
from t2t.preprocessors import translate

_SEG = re.compile(r'<seg id="?\d+"?>(.*)</seg>')


def read_segments(path: Path) -> list[str]:
    """The sentences of one test-set file: ``<seg>`` contents in file order for SGML (as TFDS and the hub's
    WMT builders read them), every line for plain text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sgm":
        return [m.group(1) for m in map(_SEG.match, text.splitlines()) if m]
    return text.splitlines()


def read_parallel(paths: list[Path], *, source_language: str, target_language: str) -> Iterator[dict]:
    """Two aligned files as the hub's rows ``{"translation": {source: …, target: …}}``."""
    source_path, target_path = paths
    sources, targets = read_segments(source_path), read_segments(target_path)
    if len(sources) != len(targets) or not sources:
        raise T2TError(f"{source_path} has {len(sources)} sentences but {target_path} has {len(targets)}; the "
                       f"two files of a test set must be aligned (and not empty).")
    for source, target in zip(sources, targets):
        yield {"translation": {source_language: source, target_language: target}}


def local_files(pair: str, test_set: str, language: str) -> list[tuple[str, str]]:
    """Where a test set may lie: the official SGML pair, then aligned plain text."""
    folder = f"wmt/{pair}"
    return [(f"{folder}/{test_set}-src.en.sgm", f"{folder}/{test_set}-ref.{language}.sgm"),
            (f"{folder}/{test_set}.en", f"{folder}/{test_set}.{language}")]


# task → (hub dataset, hub config, target language, {split: local test-set names}, known split sizes)
WMT_TASKS = {
    "wmt_t2t_ende_v003": ("wmt14", "de-en", "de", {"validation": ["newstest2013"],
                                                    "test": ["newstest2014-deen", "newstest2014"]},
                          {"train": 4_508_785, "validation": 3_000, "test": 3_003}),
    "wmt15_enfr_v003": ("wmt15", "fr-en", "fr", {"validation": ["newstest2014-fren", "newstest2014"],
                                                  "test": ["newsdiscusstest2015-enfr", "newstest2015"]},
                        {"train": 40_853_298}),
    "wmt16_enro_v003": ("wmt16", "ro-en", "ro", {"validation": ["newsdev2016-enro", "newsdev2016"],
                                                  "test": ["newstest2016-enro", "newstest2016"]},
                        {"train": 610_320, "validation": 1_999, "test": 1_999}),
}
ALIASES = {"wmt_t2t_ende_v003": "wmt_ende", "wmt15_enfr_v003": "wmt_enfr", "wmt16_enro_v003": "wmt_enro"}


def wmt_source(name: str, hub_path: str | None = None) -> LocalOrHub:
    hub, config, language, test_sets, sizes = WMT_TASKS[name]
    pair = f"en-{language}"
    files = {split: [group for test_set in names for group in local_files(pair, test_set, language)]
             for split, names in test_sets.items()}
    read = functools.partial(read_parallel, source_language="en", target_language=language)
    return LocalOrHub(f"WMT {pair}", HFDataset(hub_path or hub, config), files, read,
                      splits=("train", "validation", "test"), sizes=sizes)


def make_wmt_task(name: str, data_source=None) -> Task:
    language = WMT_TASKS[name][2]
    return Task(
        name=name,
        source=data_source or wmt_source(name),
        preprocessors=(functools.partial(translate, source_language="en", target_language=language),),
        metric_fns=(metrics.bleu,),
        sequence_length={"inputs": 512, "targets": 512},  # t5's sequence_lengths/wmt_*.gin
        description=f"WMT English to {language} translation as in T5 (sacreBLEU)",
    )


for _name in WMT_TASKS:
    register_task(make_wmt_task(_name), aliases=(ALIASES[_name],))
