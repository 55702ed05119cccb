"""Preprocessors and postprocessors for tasks.

Text stage (``Task.preprocessors``): plain ``fn(example) -> example`` functions over raw dicts, parametrised
with ``functools.partial`` — ``rekey``, ``glue``, ``stsb``, ``prefix_text``, ``translate``, ``summarize``,
``squad`` (with ``pad_punctuation``); ``record`` is one-to-many (a list of examples, one per answer).
``text_field`` reads a field that must be text, so that a missing or non-string one is an error (``FieldError``).
T5's "simple" Winograd formulations (WSC, DPR, WNLI) are in ``t2t.data.winograd``.

Tokenized stage (``Task.tokenized_preprocessors``): deterministic functions over a whole split's token dicts,
cached with the tokens — ``concat_and_split`` (T5's ``reduce_concat_tokens`` + ``split_tokens``) and
``append_eos`` (each document's end marked before they are concatenated, as t5's ``full_lm`` does).

Per-draw token stage (``Task.token_preprocessors``): ``fn(features, rng, *, vocab, sequence_length)``; the
objectives themselves (``span_corruption``, ``random_spans_helper``, ...) live in ``t2t.data.objectives`` and are
re-exported here under the names of the public contract.

Postprocessors (``Task.postprocess_fn``): ``fn(text, example=None, is_target=False)`` —
``string_label_to_class_id``, ``string_to_float``, ``qa``, ``multirc``, ``record_answers`` (T5's ``record``).
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from t2t.errors import T2TError

# ------------------------------------------------------------------------------------------ text stage


class FieldError(T2TError):
    """A field a preprocessor reads is missing from an example or is not what it needs. Raised with the
    example's part of the sentence (``problem``, ``fix``) so that ``Task.text_examples`` can say which file
    and line the example is."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"the example {problem}; {fix}.")
        self.problem, self.fix = problem, fix


def text_field(example: Mapping, key: str) -> str:
    """``example[key]``, which the caller turns into text: a string, else a ``FieldError``.

    Formatting the value would hide bad data: a field that a JSON-lines line leaves out reads as None
    (``datasets`` fills it in) and becomes the text "None", a number becomes its digits. Read fields that
    hold numbers on purpose (a regression score) directly.
    """
    value = example.get(key)
    if isinstance(value, str):
        return value
    if value is None:
        fields = ", ".join(str(k) for k, v in example.items() if v is not None)
        has = f"its fields: {fields}" if fields else "it has none"
        raise FieldError(f"has no field {key!r} ({has})", f"add {key!r} to it, or leave it out of the data")
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise FieldError(f"has {shown} in field {key!r} where text is expected", "make it a string")


def rekey(example: Mapping, *, key_map: Mapping[str, str | None]) -> dict:
    """``{new: example[old]}`` for each ``new: old`` in ``key_map``; ``old=None`` gives an empty string."""
    out = {}
    for new, old in key_map.items():
        if old is None:
            out[new] = ""
        elif old in example:
            out[new] = example[old]
        else:
            raise T2TError(f"example has no field {old!r} to rename to {new!r} (fields: "
                           f"{', '.join(map(str, example))}); fix the task's key_map.")
    return out


def prefix_text(example: Mapping, *, prefix: str, key: str = "inputs") -> dict:
    """Prepend ``prefix`` to ``example[key]`` (e.g. ``"summarize: "``), which must be text (``text_field``)."""
    out = dict(example)
    out[key] = prefix + text_field(example, key)
    return out


def _check_label(label, label_names: Sequence[str], benchmark_name: str, example: Mapping) -> int:
    try:
        value = int(label)
    except (TypeError, ValueError):
        value = None
    if value is None or value != label or not -1 <= value < len(label_names):
        raise T2TError(f"{benchmark_name} example idx={example.get('idx', '?')} has label {label!r}, outside "
                       f"0..{len(label_names) - 1} (or -1 for unlabeled); fix the data.")
    return value


def glue(example: Mapping, *, benchmark_name: str, label_names: Sequence[str],
         feature_names: Sequence[str] | None = None, id_key: str | None = "idx") -> dict:
    """A GLUE-style example as text, the way T5 writes it.

    ``inputs`` = the benchmark name, then ``"key: value"`` for each text field (``feature_names`` in order,
    else every field but ``label`` and ``idx``, sorted by name), all joined with single spaces;
    ``targets`` = ``label_names[label]``, or ``"<unk>"`` for unlabeled rows (``label == -1``).
    """
    keys = list(feature_names) if feature_names else sorted(set(example) - {"label", "idx"})
    parts = [benchmark_name]
    for key in keys:
        parts += [f"{key}:", str(example[key])]
    inputs = " ".join(parts)
    if benchmark_name == "multirc":  # as T5: the paragraphs' HTML line breaks and bold tags, over the whole text
        inputs = re.sub("<(/)?b>", "", inputs.replace("<br>", " "))
    label = _check_label(example.get("label", -1), label_names, benchmark_name, example)
    out = {"inputs": inputs, "targets": "<unk>" if label == -1 else label_names[label]}
    if id_key and id_key in example:
        out["idx"] = example[id_key]
    return out


def record(example: Mapping) -> list[dict]:
    """ReCoRD as T5 writes it, one example per answer (one with target ``"<unk>"`` when there is none):
    ``"record query: <query> entities: <e1>, <e2>, … passage: <passage>"`` → the answer.

    The passage's ``@highlight`` lines (CNN/Daily Mail bullet points) become sentences: after end punctuation
    or a quote the marker becomes a space, elsewhere ``". "``. ``answers`` and ``idx`` (passage, query) stay
    for evaluation, where the copies of one query are scored once (``deduplicate_metric``). The entities are
    listed as TFDS's ``super_glue/record`` gives them to t5, a sorted set of their texts, so the input does not
    depend on the order (or repeats) of the source's list.
    """
    passage = re.sub(r"([.?!\"'])\n@highlight\n", r"\1 ", example["passage"])
    passage = passage.replace("\n@highlight\n", ". ")
    inputs = " ".join(["record query:", example["query"], "entities:", ", ".join(sorted(set(example["entities"]))),
                       "passage:", passage])
    answers = list(example["answers"])
    return [{"inputs": inputs, "targets": answer, "answers": answers, "idx": example["idx"]}
            for answer in answers or ["<unk>"]]


def stsb_target(score: float) -> str:
    """STS-B's similarity score as T5's target string: rounded to the nearest 0.2 with ties to even on
    ``score * 5`` (float32, as ``tf.round``), printed with one decimal (``3.5 → 17.5 → 18 → "3.6"``)."""
    value = np.round(np.float32(score) * np.float32(5)) / np.float32(5)
    return "%.1f" % float(value)


def stsb(example: Mapping) -> dict:
    """STS-B as T5 writes it: ``"stsb sentence1: … sentence2: …"`` → ``stsb_target(label)``.

    As in T5, unlabeled test rows (label -1) are not special-cased: their target is ``"-1.0"``.
    """
    try:
        score = float(example["label"])
    except (TypeError, ValueError):
        raise T2TError(f"stsb example idx={example.get('idx', '?')} has score {example['label']!r}, not a "
                       f"number; fix the data.") from None
    if not (score == -1 or 0 <= score <= 5):
        raise T2TError(f"stsb example idx={example.get('idx', '?')} has score {score}, outside 0..5 (or -1 for "
                       f"unlabeled); fix the data.")
    out = {"inputs": " ".join(["stsb sentence1:", str(example["sentence1"]), "sentence2:",
                                str(example["sentence2"])]),
           "targets": stsb_target(score)}
    if "idx" in example:
        out["idx"] = example["idx"]
    return out


# English names of the language codes T5's translation tasks use (t5 asks babel for ``english_name``).
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "ro": "Romanian"}


def translate(example: Mapping, *, source_language: str, target_language: str) -> dict:
    """T5's ``translate``: ``"translate English to German: <en>"`` → ``<de>``.

    Reads the hub's ``{"translation": {"en": …, "de": …}}`` rows (or flat ``{"en": …, "de": …}`` like TFDS).
    """
    pair = example.get("translation", example)
    names = []
    for code in (source_language, target_language):
        if code not in LANGUAGE_NAMES:
            raise T2TError(f"no English name for language code {code!r}; use one of {', '.join(LANGUAGE_NAMES)} "
                           f"or add it to t2t.data.preprocessors.LANGUAGE_NAMES.")
        if code not in pair:
            raise T2TError(f"translation example has no {code!r} text (it has {', '.join(map(str, pair))}); "
                           f"check the language pair.")
        names.append(LANGUAGE_NAMES[code])
    return {"inputs": f"translate {names[0]} to {names[1]}: {pair[source_language]}",
            "targets": pair[target_language]}


def summarize(example: Mapping, *, article_key: str = "article", summary_key: str = "highlights") -> dict:
    """T5's ``summarize``: ``"summarize: <article>"`` → the summary."""
    return {"inputs": f"summarize: {example[article_key]}", "targets": example[summary_key]}


# T5 runs these through TensorFlow's RE2, where [[:punct:]] and \s are ASCII classes: the 32 ASCII punctuation
# characters are padded (``_`` included; accented letters and dashes are not), and only [\t\n\f\r ] counts as
# space. Until April 2022 t5 padded every character outside [0-9A-Za-z_] ("Introducción" became
# "Introducci ó n"); today's rule fixes that, so t2t follows it (docs/tasks.md, "Which definition").
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")
_SPACES = re.compile(r"[\t\n\f\r ]+")


@functools.lru_cache(maxsize=4096)  # SQuAD asks about each paragraph about five times
def pad_punctuation(text: str) -> str:
    """T5's ``_pad_punctuation``: a space on each side of every ASCII punctuation character, runs of spaces
    made one (leading and trailing spaces stay, as in T5: ``"50?"`` → ``"50 ? "``)."""
    return _SPACES.sub(" ", _PUNCTUATION.sub(lambda m: f" {m.group()} ", text))


def squad(example: Mapping) -> dict:
    """T5's ``squad``: ``"question: <q> context: <c>"`` → the first answer, all three punctuation-padded.

    Like T5 it also replaces ``question``, ``context`` and ``answers`` (now the list of padded answer texts,
    which the ``qa`` postprocessor hands to the metric).
    """
    question, context = pad_punctuation(example["question"]), pad_punctuation(example["context"])
    answers = [pad_punctuation(a) for a in example["answers"]["text"]]
    if not answers:
        raise T2TError(f"SQuAD example id={example.get('id', '?')} has no answers; SQuAD v1.1 rows all have one.")
    return {"inputs": _SPACES.sub(" ", f"question: {question} context: {context}"), "targets": answers[0],
            "id": example.get("id", ""), "question": question, "context": context, "answers": answers}


# ------------------------------------------------------------------------------------------ tokenized stage


def append_eos(examples: Iterable[Mapping[str, np.ndarray]], *, vocab, sequence_length=None,
               feature_key: str = "targets") -> Iterator[dict]:
    """seqio's ``append_eos`` on every document before ``concat_and_split``, so that EOS marks document
    boundaries in the concatenated text (t5's ``full_lm``) instead of the end of every piece."""
    del sequence_length
    for example in examples:
        yield {**example, feature_key: np.append(np.asarray(example[feature_key]), vocab.eos_id)}


def concat_and_split(examples: Iterable[Mapping[str, np.ndarray]], *, vocab=None,
                     sequence_length: Mapping[str, int] | None = None,
                     length: int | Callable[[Mapping[str, int]], int], feature_key: str = "targets",
                     docs_per_group: int | None = None) -> Iterator[dict]:
    """T5's ``reduce_concat_tokens`` + ``split_tokens``: concatenate ``feature_key`` over consecutive
    documents (groups of ``docs_per_group``, or the whole split) and cut it into pieces of ``length`` tokens
    (the last piece of a group may be shorter). ``length`` may be a function of ``sequence_length``, e.g.
    ``lambda sl: random_spans_helper(sl["inputs"], 0.15, 3.0)[0]`` for span corruption."""
    size = length(sequence_length) if callable(length) else length
    if not isinstance(size, (int, np.integer)) or size < 1:
        raise T2TError(f"concat_and_split needs a positive chunk length, got {size!r}.")
    size = int(size)
    buffer: list[np.ndarray] = []
    docs = 0

    def pieces(parts: list[np.ndarray]) -> Iterator[dict]:
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        for start in range(0, tokens.size, size):
            yield {feature_key: tokens[start:start + size]}

    for example in examples:
        buffer.append(np.asarray(example[feature_key]))
        docs += 1
        if docs_per_group and docs == docs_per_group:
            yield from pieces(buffer)
            buffer, docs = [], 0
    yield from pieces(buffer)


# ------------------------------------------------------------------------------------------ postprocessors


def string_label_to_class_id(text: str, *, label_classes: Sequence[str], default: int = -1, example=None,
                             is_target: bool = False) -> int:
    """The position of ``text`` in ``label_classes``, or ``default`` (-1) for anything else."""
    text = text.decode("utf-8") if isinstance(text, bytes) else text
    return label_classes.index(text) if text in label_classes else default


def qa(text: str, *, example: Mapping | None = None, is_target: bool = False):
    """T5's ``qa`` postprocessor: a target becomes the example's list of answers, a prediction stays text."""
    if is_target:
        return list(example["answers"])
    return text


def string_to_float(text: str, *, default: float = -1.0, example=None, is_target: bool = False) -> float:
    """``float(text)``, or ``default`` (-1.0) when the text is not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def multirc(text: str, *, example: Mapping | None = None, is_target: bool = False) -> dict:
    """T5's ``multirc`` postprocessor: ``{"value": class id of "False"/"True"}``, plus the question as
    ``"group"`` for a target (MultiRC's exact match is per question)."""
    out = {"value": string_label_to_class_id(text, label_classes=("False", "True"))}
    if is_target:
        out["group"] = example["idx"]["question"]
    return out


def record_answers(text: str, *, example: Mapping | None = None, is_target: bool = False) -> dict:
    """T5's ``record`` postprocessor: ``{"value": text}`` for a prediction; for a target every answer of
    the query and the (passage, query) pair as ``"group"``, so each query is scored once."""
    if is_target:
        return {"value": list(example["answers"]), "group": (example["idx"]["passage"], example["idx"]["query"])}
    return {"value": text}
