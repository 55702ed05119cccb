"""SuperGLUE, registered the way the ``t5`` library registers it (``t5/data/glue_utils.py``, ``tasks.py``).

One task per SuperGLUE config, named ``super_glue_<config>_v102``, plus T5's "simple" Winograd tasks:

- text: ``<benchmark> key1: value1 …`` (``t2t.preprocessors.glue``) with the text fields sorted by name, except
  MultiRC (question, answer, paragraph; HTML ``<br>``/``<b>`` removed) and WiC (sentence1, sentence2, word);
  AX-b and AX-g are cast as RTE (AX-b's sentence1/sentence2 renamed premise/hypothesis first);
  ReCoRD is ``record query: … entities: … passage: …``, one example per answer (``t2t.preprocessors.record``);
- WSC, DPR and WNLI in T5's simple form, ``wsc: … *pronoun* …`` → the referent (``t2t.data.winograd``):
  ``super_glue_wsc_v102_simple_train`` keeps only rows whose candidate is the referent,
  ``super_glue_wsc_v102_simple_eval`` keeps all and scores with T5's ``wsc_simple`` postprocessor,
  ``dpr_v001_simple`` (Definite Pronoun Resolution) and ``glue_wnli_v002_simple_eval`` (GLUE WNLI, eval only);
- targets: the label words of the hub's ClassLabel (class id = position), ``<unk>`` for unlabeled test rows;
- metrics: t5's ``SUPERGLUE_METRICS``. T5 gives AX-b and AX-g none (their public test labels are hidden);
  the official local files carry labels, so AX-b reports the Matthews correlation and AX-g accuracy and
  gender parity, as the SuperGLUE leaderboard does (scores of unlabeled hub rows mean nothing).

Short aliases: boolq, cb, copa, multirc, record, super_glue_rte (``rte`` is GLUE's), wic, axb, axg, wsc,
wsc_train, dpr, wnli_simple. Data: ``<data dir>/superglue/<Task>/{train,val,test}.jsonl`` and
``AX-b/AX-b.jsonl``, ``AX-g/AX-g.jsonl`` (the official download; MultiRC's and ReCoRD's nested records are
flattened into the hub's rows), else the hub's ``aps/super_glue``; DPR from the hub; WNLI as GLUE's.
"""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path
from typing import Iterator

from t2t import HFDataset, T2TError, Task, metrics, register_task
from t2t.data.sources import LocalOrHub
from t2t.data.winograd import dpr_simple, referent_match, wnli_simple, wsc_simple
from t2t.preprocessors import glue, multirc, record, record_answers, rekey, string_label_to_class_id
from t2t.tasks.glue import GlueSource

SUPER_GLUE_HUB_ID = "aps/super_glue"
DPR_HUB_ID = "community-datasets/definite_pronoun_resolution"

# config → (folder of the official download, the hub row's fields besides idx and label, label words or None)
CONFIGS = {
    "boolq": ("BoolQ", ("question", "passage"), ("False", "True")),
    "cb": ("CB", ("premise", "hypothesis"), ("entailment", "contradiction", "neutral")),
    "copa": ("COPA", ("premise", "choice1", "choice2", "question"), ("choice1", "choice2")),
    "multirc": ("MultiRC", ("paragraph", "question", "answer"), ("False", "True")),
    "record": ("ReCoRD", ("passage", "query", "entities", "answers"), None),
    "rte": ("RTE", ("premise", "hypothesis"), ("entailment", "not_entailment")),
    "wic": ("WiC", ("word", "sentence1", "sentence2", "start1", "start2", "end1", "end2"), ("False", "True")),
    "wsc.fixed": ("WSC", ("text", "span1_index", "span2_index", "span1_text", "span2_text"), ("False", "True")),
    "axb": ("AX-b", ("sentence1", "sentence2"), ("entailment", "not_entailment")),
    "axg": ("AX-g", ("premise", "hypothesis"), ("entailment", "not_entailment")),
}

# Split sizes of the hub's super_glue (== TFDS super_glue 1.0.2), so listings need no data.
SIZES = {
    "boolq": {"train": 9427, "validation": 3270, "test": 3245},
    "cb": {"train": 250, "validation": 56, "test": 250},
    "copa": {"train": 400, "validation": 100, "test": 500},
    "multirc": {"train": 27243, "validation": 4848, "test": 9693},
    "record": {"train": 100730, "validation": 10000, "test": 10000},
    "rte": {"train": 2490, "validation": 277, "test": 3000},
    "wic": {"train": 5428, "validation": 638, "test": 1400},
    "wsc.fixed": {"train": 554, "validation": 104, "test": 146},
    "axb": {"test": 1104},
    "axg": {"test": 356},
}
DPR_SIZES = {"train": 1322, "test": 564}

SUPERGLUE_METRICS = {
    "boolq": (metrics.accuracy,),
    "cb": (metrics.mean_multiclass_f1(num_classes=3), metrics.accuracy),
    "copa": (metrics.accuracy,),
    "multirc": (metrics.multirc_f1_over_all_answers, metrics.mean_group_metric(metrics.all_match)),
    "record": (metrics.deduplicate_metric(metrics.squad),),
    "rte": (metrics.accuracy,),
    "wic": (metrics.accuracy,),
    "axb": (metrics.matthews_corrcoef,),  # t5: none (test only); scored on the labeled official file
    "axg": (metrics.on_values(metrics.accuracy), metrics.gender_parity),  # likewise
}

# t5's models/gin/sequence_lengths/super_glue_v102_proportional.gin: T5's SuperGLUE lengths (WSC/DPR included).
SUPERGLUE_SEQUENCE_LENGTH = {"inputs": 512, "targets": 62}

# ------------------------------------------------------------------------------------------ local files


def _label_id(value, labels: tuple[str, ...], where: str) -> int:
    """A label of the official files (JSON boolean, label word, or class id) as the hub's class id."""
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value in labels:
        return labels.index(value)
    if isinstance(value, int) and 0 <= value < len(labels):
        return value
    raise T2TError(f"{where} has label {value!r}, expected one of {', '.join(labels)}; fix or re-download the file.")


def _fix_wsc_spans(row: dict) -> None:
    """The hub's ``wsc.fixed`` corrections: a span text that is not in the text gets the case of the word it
    starts at, loses trailing full stops and newlines (the same rule as the hub's builder)."""
    for span in ("span1", "span2"):
        text, index = row[f"{span}_text"], row[f"{span}_index"]
        if text in row["text"] or text in ("Kamenev and Zinoviev", "Kamenev, Zinoviev, and Stalin"):
            continue  # the last two have words between them in the text: nothing to fix
        if "theyscold" in text:
            row["span2_index"] = 10
        first = row["text"].split()[index]
        text = (text[0].lower() if first[0].islower() else text[0].upper()) + text[1:]
        row[f"{span}_text"] = text.rstrip(".").replace("\n", " ")


def _json_rows(path: Path) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except ValueError:
                    raise T2TError(f"SuperGLUE file {path} line {number} is not JSON; re-download the file.") from None


def _multirc_rows(row: dict) -> Iterator[dict]:
    """One hub row per answer of each question of a paragraph record."""
    paragraph = row["passage"]
    for question in paragraph["questions"]:
        for answer in question["answers"]:
            label = answer.get("label")
            yield {"paragraph": paragraph["text"], "question": question["question"], "answer": answer["text"],
                   "idx": {"paragraph": row["idx"], "question": question["idx"], "answer": answer["idx"]},
                   "label": -1 if label is None else int(bool(label))}


def _record_rows(row: dict) -> Iterator[dict]:
    """One hub row per query of a passage record: entities and answers as sorted sets of their texts
    (entity ``end`` offsets are inclusive)."""
    passage = row["passage"]
    entities = sorted({passage["text"][e["start"]:e["end"] + 1] for e in passage["entities"]})
    for qa in row["qas"]:
        yield {"passage": passage["text"], "query": qa["query"], "entities": entities,
               "answers": sorted({a["text"] for a in qa.get("answers", ())}),
               "idx": {"passage": row["idx"], "query": qa["idx"]}}


def read_superglue_jsonl(paths: list[Path], *, config: str) -> Iterator[dict]:
    """Rows of an official SuperGLUE ``.jsonl`` file as the hub's ``super_glue/<config>`` has them, in file
    order (``idx`` as an int, labels as class ids, -1 for unlabeled rows)."""
    (path,) = paths
    _, fields, labels = CONFIGS[config]
    for number, row in _json_rows(path):
        try:
            if config == "multirc":
                yield from _multirc_rows(row)
            elif config == "record":
                yield from _record_rows(row)
            else:
                row.update(row.get("target", {}))  # WSC keeps its spans under "target"
                example = {key: row[key] for key in fields}
                if config == "wsc.fixed":
                    _fix_wsc_spans(example)
                example["idx"] = int(row["idx"])
                where = f"SuperGLUE file {path} line {number}"
                example["label"] = _label_id(row["label"], labels, where) if "label" in row else -1
                yield example
        except (KeyError, TypeError, IndexError) as e:
            raise T2TError(f"SuperGLUE file {path} line {number} is not in the official {CONFIGS[config][0]} "
                           f"layout ({type(e).__name__}: {e}); re-download the file.") from None


def _local_files(config: str) -> dict[str, list[tuple[str]]]:
    folder = CONFIGS[config][0]
    if config in ("axb", "axg"):
        return {"test": [(f"superglue/{folder}/{folder}.jsonl",)]}
    return {split: [(f"superglue/{folder}/{name}.jsonl",)]
            for split, name in (("train", "train"), ("validation", "val"), ("test", "test"))}


def superglue_source(config: str, splits: tuple[str, ...] | None = None,
                     hub_path: str = SUPER_GLUE_HUB_ID) -> LocalOrHub:
    """The official local files of a SuperGLUE config under the data dir, else the hub (``splits``: a subset,
    as t5 registers WSC's train and eval tasks on one dataset)."""
    return LocalOrHub(f"SuperGLUE {CONFIGS[config][0]}", HFDataset(hub_path, config), _local_files(config),
                      functools.partial(read_superglue_jsonl, config=config), splits=splits or tuple(SIZES[config]),
                      sizes=SIZES[config])


# ------------------------------------------------------------------------------------------ tasks


def axg_postprocess(text: str, *, example=None, is_target: bool = False) -> dict:
    """AX-g's class id, and for a target its pair (the hypothesis both gender variants share) for parity."""
    out = {"value": string_label_to_class_id(text, label_classes=CONFIGS["axg"][2])}
    if is_target:
        out["group"] = example["hypothesis"]
    return out


def superglue_text_preprocessors(config: str) -> tuple:
    """The text preprocessors t5's ``get_glue_text_preprocessor`` (and the AX-b rekey) pick for a config."""
    if config == "record":
        return (record,)
    labels = CONFIGS[config][2]
    feature_names = {"multirc": ("question", "answer", "paragraph"), "wic": ("sentence1", "sentence2", "word")}
    benchmark = "rte" if config in ("axb", "axg") else config
    as_text = functools.partial(glue, benchmark_name=benchmark, label_names=labels,
                                feature_names=feature_names.get(config))
    if config == "axb":
        return (functools.partial(rekey, key_map={"premise": "sentence1", "hypothesis": "sentence2",
                                                  "label": "label", "idx": "idx"}), as_text)
    return (as_text,)


def superglue_postprocess_fn(config: str):
    special = {"multirc": multirc, "record": record_answers, "axg": axg_postprocess}
    return special.get(config) or functools.partial(string_label_to_class_id, label_classes=CONFIGS[config][2])


def make_superglue_task(config: str, data_source=None) -> Task:
    """The ``super_glue_<config>_v102`` task (``data_source`` defaults to the local-files-then-hub source)."""
    return Task(
        name=f"super_glue_{config}_v102",
        source=data_source or superglue_source(config),
        preprocessors=superglue_text_preprocessors(config),
        postprocess_fn=superglue_postprocess_fn(config),
        metric_fns=SUPERGLUE_METRICS[config],
        # the label words; ReCoRD's choices are the passage's entities
        rank_choices=CONFIGS[config][2] or operator.itemgetter("entities"),
        sequence_length=SUPERGLUE_SEQUENCE_LENGTH,
        description=f"SuperGLUE {config} as in T5" + (" (diagnostic, test only)" if config.startswith("ax") else ""),
    )


def make_wsc_tasks() -> tuple[Task, Task]:
    """T5's simple WSC: a training task of the rows whose candidate is the referent, and an eval task."""
    train = Task(name="super_glue_wsc_v102_simple_train", source=superglue_source("wsc.fixed", ("train",)),
                 preprocessors=(functools.partial(wsc_simple, correct_referent_only=True),),
                 sequence_length=SUPERGLUE_SEQUENCE_LENGTH,
                 description="SuperGLUE WSC in T5's simple form, correct referents only (training)")
    evaluation = Task(name="super_glue_wsc_v102_simple_eval",
                      source=superglue_source("wsc.fixed", ("validation", "test")),
                      preprocessors=(functools.partial(wsc_simple, correct_referent_only=False),),
                      postprocess_fn=referent_match, metric_fns=(metrics.accuracy,),
                      sequence_length=SUPERGLUE_SEQUENCE_LENGTH,
                      description="SuperGLUE WSC in T5's simple form (evaluation)")
    return train, evaluation


def make_dpr_task(data_source=None) -> Task:
    return Task(name="dpr_v001_simple",
                source=data_source or HFDataset(DPR_HUB_ID, "plain_text", splits=("train", "test"), sizes=DPR_SIZES),
                preprocessors=(dpr_simple,), metric_fns=(metrics.accuracy,),
                rank_choices=operator.itemgetter("candidates"), sequence_length=SUPERGLUE_SEQUENCE_LENGTH,
                description="Definite Pronoun Resolution in T5's simple WSC form")


def make_wnli_simple_task(data_source=None) -> Task:
    return Task(name="glue_wnli_v002_simple_eval",
                source=data_source or GlueSource("wnli", splits=("validation", "test")),
                preprocessors=(wnli_simple,), postprocess_fn=referent_match, metric_fns=(metrics.accuracy,),
                sequence_length=SUPERGLUE_SEQUENCE_LENGTH,
                description="GLUE WNLI in T5's simple WSC form (evaluation only)")


_ALIASES = {"boolq": "boolq", "cb": "cb", "copa": "copa", "multirc": "multirc", "record": "record",
            "rte": "super_glue_rte", "wic": "wic", "axb": "axb", "axg": "axg"}

for _config, _alias in _ALIASES.items():
    register_task(make_superglue_task(_config), aliases=(_alias,))
_wsc_train, _wsc_eval = make_wsc_tasks()
register_task(_wsc_train, aliases=("wsc_train",))
register_task(_wsc_eval, aliases=("wsc",))
register_task(make_dpr_task(), aliases=("dpr",))
register_task(make_wnli_simple_task(), aliases=("wnli_simple",))
