"""Metric functions ``fn(targets, predictions) -> {name: value}``, named and defined as t5.evaluation.metrics.

Scores are on t5's 0-100 scale, except where t5 leaves them unscaled: ``auc`` and ``score_auc`` (0-1) and
``edit_distance`` (numbers of words). Targets and predictions are already postprocessed (e.g. class ids, floats,
strings); each function takes them as two equally long sequences and raises T2TError when the lengths
differ or there are no examples. Correlations of a constant sequence are NaN, as in scipy (and t5).

Where t5 is silent or quirky, t2t does the following (the numbers are otherwise t5's):
- ``rouge`` aggregates with rouge-score's ``BootstrapAggregator`` and reports the "mid" F-measure, as t5;
  its resampling draws from a fixed seed so that the same predictions always give the same score.
- ``bleu`` with several references per example transposes them into sacrebleu's reference streams
  (examples with fewer references are padded with None, which sacrebleu skips).
- ``f1_score_with_invalid`` does not modify the caller's arrays.
- ``auc``, ``score_auc`` and ``rank_classification``'s areas are NaN when the targets hold a single class:
  neither curve exists then, and sklearn's answer depends on its version (an error, 0 or NaN).
- ``trivia_qa`` and ``coqa_f1`` take a single answer string as one answer, as ``squad`` does (t5 would
  iterate over its characters).
- ``rank_classification`` checks every target's idx (t5 checks the first) and, with ``num_classes``, that
  every example has that many choices (t5 only checks that the total divides).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import re
import string
import warnings
from collections.abc import Callable, Mapping, Sequence

import nltk  # comes with rouge-score; its edit_distance is the Levenshtein distance t5 takes from editdistance
import numpy as np
import sacrebleu
import scipy.special
import scipy.stats
import sklearn.metrics
from rouge_score import rouge_scorer, scoring

from t2t.errors import T2TError

MetricFn = Callable[[Sequence, Sequence], dict]


def _check(name: str, targets, predictions) -> tuple[list, list]:
    targets, predictions = list(targets), list(predictions)
    if len(targets) != len(predictions):
        raise T2TError(
            f"metric {name} got {len(targets)} targets but {len(predictions)} predictions; "
            "pass exactly one prediction per target."
        )
    if not targets:
        raise T2TError(f"metric {name} got no examples; evaluate on at least one example.")
    return targets, predictions


# -- classification and regression --------------------------------------------------------------------------


def accuracy(targets, predictions) -> dict:
    """Percentage of predictions equal to their target: {"accuracy"}."""
    targets, predictions = _check("accuracy", targets, predictions)
    return {"accuracy": 100 * sklearn.metrics.accuracy_score(targets, predictions)}


def sequence_accuracy(targets, predictions) -> dict:
    """Percentage of predicted sequences (strings, id lists) exactly equal to their target: {"sequence_accuracy"}."""
    targets, predictions = _check("sequence_accuracy", targets, predictions)
    return {"sequence_accuracy": 100 * float(np.mean([p == t for t, p in zip(targets, predictions)]))}


def all_match(targets, predictions) -> dict:
    """100 if every prediction equals its target, else 0: {"exact_match"} (t5's ``all_match``)."""
    targets, predictions = _check("all_match", targets, predictions)
    return {"exact_match": 100 * float(np.array_equal(np.asarray(targets), np.asarray(predictions)))}


exact_match = all_match  # t5 calls the function all_match and its value "exact_match"


def pearson_corrcoef(targets, predictions) -> dict:
    """Pearson's r × 100: {"pearson_corrcoef"}."""
    targets, predictions = _check_correlation("pearson_corrcoef", targets, predictions)
    with _constant_input_is_nan():
        return {"pearson_corrcoef": 100 * float(scipy.stats.pearsonr(targets, predictions)[0])}


def spearman_corrcoef(targets, predictions) -> dict:
    """Spearman's rank correlation × 100: {"spearman_corrcoef"}."""
    targets, predictions = _check_correlation("spearman_corrcoef", targets, predictions)
    with _constant_input_is_nan():
        return {"spearman_corrcoef": 100 * float(scipy.stats.spearmanr(targets, predictions)[0])}


@contextlib.contextmanager
def _constant_input_is_nan():
    """Constant predictions give NaN (as in t5) without scipy's warning on every evaluation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.stats.ConstantInputWarning)
        yield


def _check_correlation(name: str, targets, predictions) -> tuple[np.ndarray, np.ndarray]:
    targets, predictions = _check(name, targets, predictions)
    if len(targets) < 2:
        raise T2TError(f"metric {name} needs at least 2 examples, got 1; evaluate on more examples.")
    return _as_floats(name, targets, predictions)


def _as_floats(name: str, targets: list, predictions: list) -> tuple[np.ndarray, np.ndarray]:
    try:
        arrays = np.asarray(targets, dtype=np.float64), np.asarray(predictions, dtype=np.float64)
    except (TypeError, ValueError):
        arrays = None
    if arrays is None or any(array.ndim != 1 for array in arrays):
        raise T2TError(
            f"metric {name} needs one number per example, got e.g. {targets[0]!r} and {predictions[0]!r}; "
            "add a postprocess_fn that turns the text into floats."
        )
    return arrays


def matthews_corrcoef(targets, predictions) -> dict:
    """Matthews correlation × 100 (CoLA): {"matthews_corrcoef"}."""
    targets, predictions = _check("matthews_corrcoef", targets, predictions)
    return {"matthews_corrcoef": 100 * float(sklearn.metrics.matthews_corrcoef(targets, predictions))}


def f1_score_with_invalid(targets, predictions) -> dict:
    """Binary F1 × 100 where any prediction other than 0 or 1 counts as wrong: {"f1"}.

    As t5: an invalid prediction (e.g. -1 from a label postprocessor that saw unknown text) is replaced by
    the opposite of its target, so it becomes a false positive or a false negative.
    """
    targets, predictions = _check("f1_score_with_invalid", targets, predictions)
    targets = np.asarray(targets).astype(np.int64)
    predictions = np.array(predictions, dtype=object)
    invalid = np.array([not (_is_numeric(p) and p in (0, 1)) for p in predictions], dtype=bool)
    predictions = np.where(invalid, 1 - targets, predictions).astype(np.int64)
    return {"f1": 100 * float(sklearn.metrics.f1_score(targets, predictions))}


def _is_numeric(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating, np.bool_))


def sklearn_metrics_wrapper(
    metric_str: str, metric_dict_str: str | None = None, metric_post_process_fn: Callable | None = None, **kwargs
) -> MetricFn:
    """A metric fn calling ``sklearn.metrics.<metric_str>(targets, predictions, **kwargs)`` (as t5's)."""
    if not hasattr(sklearn.metrics, metric_str):
        raise T2TError(f"sklearn.metrics has no {metric_str!r}; pass the name of a function in sklearn.metrics.")
    key = metric_dict_str or metric_str

    def metric(targets, predictions) -> dict:
        targets, predictions = _check(key, targets, predictions)
        value = getattr(sklearn.metrics, metric_str)(targets, predictions, **kwargs)
        return {key: metric_post_process_fn(value) if metric_post_process_fn else value}

    metric.__name__ = key
    return metric


def mean_multiclass_f1(num_classes: int, **kwargs) -> MetricFn:
    """Unweighted mean of the per-class F1 over classes 0..num_classes-1, × 100: {"mean_<n>class_f1"} (CB).

    Predictions outside those classes (invalid text) only ever count as misses.
    """
    return sklearn_metrics_wrapper(
        "fbeta_score",
        metric_dict_str=f"mean_{num_classes}class_f1",
        metric_post_process_fn=lambda value: 100 * float(value),
        beta=1,
        labels=range(num_classes),
        average="macro",
        **kwargs,
    )


def auc(targets, predictions, targets_threshold: float | None = None) -> dict:
    """Areas under the ROC curve and the precision-recall curve (sklearn's ``roc_auc_score`` and
    ``average_precision_score``) of scores against binary targets: {"auc-roc", "auc-pr"}.

    On t5's scale, which for these two is 0-1, not 0-100. Targets are 0 or 1; continuous targets are
    binarised with ``targets_threshold`` (below it 0, else 1), as t5. Both are NaN when the targets hold a
    single class.
    """
    return _areas_under_curves("auc", targets, predictions, targets_threshold)


def score_auc(targets, scores, targets_threshold: float | None = None) -> dict:
    """``auc`` of the model's scores (e.g. log likelihoods) rather than its predictions: {"auc-roc", "auc-pr"},
    0-1 as t5. The second parameter is named ``scores`` as t5's, whose evaluator passes scores by that name."""
    return _areas_under_curves("score_auc", targets, scores, targets_threshold)


def _areas_under_curves(name: str, targets, scores, targets_threshold: float | None) -> dict:
    targets, scores = _as_floats(name, *_check(name, targets, scores))
    if targets_threshold is not None:
        targets = np.where(targets < targets_threshold, 0, 1)
    elif not np.isin(targets, (0, 1)).all():
        raise T2TError(
            f"metric {name} needs targets 0 or 1, got {targets[~np.isin(targets, (0, 1))][0]:g}; "
            "pass targets_threshold to binarise continuous targets."
        )
    if not np.isfinite(scores).all():
        bad = scores[~np.isfinite(scores)][0]
        raise T2TError(f"metric {name} got a score of {bad}; give every example a finite score.")
    return _curve_areas(targets, scores)


def _curve_areas(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray | None = None) -> dict:
    """{"auc-roc", "auc-pr"} on 0-1, NaN for labels of a single class (sklearn's value there depends on its
    version: an error, 0 or NaN)."""
    if len(np.unique(labels)) < 2:
        return {"auc-roc": float("nan"), "auc-pr": float("nan")}
    return {
        "auc-roc": float(sklearn.metrics.roc_auc_score(labels, scores, sample_weight=weights)),
        "auc-pr": float(sklearn.metrics.average_precision_score(labels, scores, sample_weight=weights)),
    }


# -- generation -----------------------------------------------------------------------------------------------


def bleu(targets, predictions, tokenizer: str = "intl") -> dict:
    """Corpus BLEU from sacrebleu with t5's settings: {"bleu"}.

    ``targets`` holds one reference string per example, or a list of reference strings per example.
    """
    targets, predictions = _check("bleu", targets, predictions)
    if isinstance(targets[0], (list, tuple)):
        most = max(len(refs) for refs in targets)
        streams = [[refs[k] if k < len(refs) else None for refs in targets] for k in range(most)]
    else:
        streams = [targets]
    score = sacrebleu.corpus_bleu(
        predictions,
        streams,
        smooth_method="exp",
        smooth_value=0.0,
        force=False,
        lowercase=False,
        tokenize=tokenizer,
        use_effective_order=False,
    )
    return {"bleu": score.score}


def rouge(targets, predictions, score_keys: Sequence[str] | None = None, tokenizer=None, bootstrap_seed: int = 0):
    """ROUGE F-measures × 100 as t5 reports them: {"rouge1", "rouge2", "rougeLsum"} by default.

    As t5: no stemming; " . " becomes " .\\n" in both texts so that rougeLsum sees sentences; scores are
    aggregated with rouge-score's BootstrapAggregator and the median ("mid") of the resampled means is
    reported (resampling seeded with ``bootstrap_seed``, numpy's global random state left as it was).
    """
    targets, predictions = _check("rouge", targets, predictions)
    score_keys = list(score_keys or ["rouge1", "rouge2", "rougeLsum"])
    scorer = rouge_scorer.RougeScorer(score_keys, tokenizer=tokenizer)
    aggregator = scoring.BootstrapAggregator()
    for target, prediction in zip(targets, predictions):
        aggregator.add_scores(scorer.score(target=_sentence_lines(target), prediction=_sentence_lines(prediction)))
    saved = np.random.get_state()
    np.random.seed(bootstrap_seed)
    try:
        result = aggregator.aggregate()
    finally:
        np.random.set_state(saved)
    return {key: 100 * float(result[key].mid.fmeasure) for key in score_keys}


def _sentence_lines(summary: str) -> str:
    return summary.replace(" . ", " .\n")


def edit_distance(targets, predictions, lower: bool = True) -> dict:
    """Word-level Levenshtein distance from each target to its prediction, summarised over the examples:
    {"min_edit", "max_edit", "mean_edit", "median_edit", "sum_edit"}, in words (unscaled, as t5).

    As t5: both texts are lowercased (unless ``lower`` is False) and split at every non-word character
    (regex ``\\W``), so two separators in a row ("a, b") leave an empty word between them that counts like
    any other.
    """
    targets, predictions = _check("edit_distance", targets, predictions)
    distances = [
        nltk.edit_distance(_words(target, lower), _words(prediction, lower))
        for target, prediction in zip(targets, predictions)
    ]
    return {
        "min_edit": min(distances),
        "max_edit": max(distances),
        "mean_edit": float(np.mean(distances)),
        "median_edit": float(np.median(distances)),
        "sum_edit": sum(distances),
    }


def _words(text: str, lower: bool) -> list[str]:
    return re.split(r"\W", text.lower() if lower else text)


# -- question answering -------------------------------------------------------------------------------------


def normalize_squad(answer: str) -> str:
    """The official SQuAD v1.1 normalisation: lowercase, drop ASCII punctuation, drop a/an/the, collapse
    whitespace."""
    return _normalize_answer(answer, _SQUAD_PUNCTUATION, "")


def normalize_trivia_qa(answer: str) -> str:
    """The official TriviaQA normalisation (t5's): as SQuAD's, except that punctuation (ASCII plus ‘ ’ ´)
    becomes a space instead of vanishing, so "U.S." is "u s" where SQuAD has "us"."""
    return _normalize_answer(answer, _TRIVIA_QA_PUNCTUATION, " ")


def _normalize_answer(answer: str, punctuation: frozenset, replacement: str) -> str:
    answer = "".join(replacement if ch in punctuation else ch for ch in answer.lower())
    answer = re.sub(r"\b(a|an|the)\b", " ", answer)
    return " ".join(answer.split())


_SQUAD_PUNCTUATION = frozenset(string.punctuation)
# TriviaQA's script also lists ` and _, which are ASCII punctuation already
_TRIVIA_QA_PUNCTUATION = _SQUAD_PUNCTUATION | frozenset("‘’´")


def _token_f1(target: str, prediction: str) -> float:
    predicted, expected = prediction.split(), target.split()
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def _normalized_answers(name: str, targets: list, normalize: Callable[[str], str]) -> list[list[str]]:
    """Each example's reference answers, normalised; a single string counts as one answer."""
    answers = [[normalize(a) for a in ([t] if isinstance(t, str) else t)] for t in targets]
    if any(not a for a in answers):
        raise T2TError(f"metric {name} got an example with no reference answers; give every example at least one.")
    return answers


def _best_answer_scores(name: str, targets, predictions, normalize: Callable[[str], str]) -> dict:
    """Exact match and token F1 × 100 of normalised texts, each the best over an example's answers (t5's
    ``qa_metrics``): {"em", "f1"}."""
    targets, predictions = _check(name, targets, predictions)
    answers = _normalized_answers(name, targets, normalize)
    predictions = [normalize(p) for p in predictions]
    em = np.mean([max(float(a == p) for a in refs) for refs, p in zip(answers, predictions)])
    f1 = np.mean([max(_token_f1(a, p) for a in refs) for refs, p in zip(answers, predictions)])
    return {"em": 100 * float(em), "f1": 100 * float(f1)}


def squad(targets, predictions) -> dict:
    """SQuAD exact match and token F1 × 100, each the best over an example's answers: {"em", "f1"}.

    ``targets`` holds a list of answer strings per example (a single string counts as one answer).
    """
    return _best_answer_scores("squad", targets, predictions, normalize_squad)


def trivia_qa(targets, predictions) -> dict:
    """TriviaQA exact match and token F1 × 100, as ``squad`` but with ``normalize_trivia_qa``: {"em", "f1"}."""
    return _best_answer_scores("trivia_qa", targets, predictions, normalize_trivia_qa)


def span_squad(targets, predictions) -> dict:
    """SQuAD exact match and token F1 × 100 of answers predicted as word positions in the context: {"em", "f1"}.

    Targets are dicts holding the example's "answers" (strings) and its "context"; a prediction reads
    "start: 3 end: 6", the first and last word of the answer (words are runs of word characters, regex
    ``\\w+``, counted from 0). As t5: the second and fourth words of the prediction are taken as the positions
    whatever precedes them, and a prediction without them (a model early in training writes anything) is an
    empty answer.
    """
    targets, predictions = _check("span_squad", targets, predictions)
    if not all(isinstance(t, Mapping) and {"answers", "context"} <= t.keys() for t in targets):
        raise T2TError(
            f"metric span_squad needs each target as a dict with \"answers\" and \"context\", got e.g. {targets[0]!r}; "
            "keep both fields in the postprocessed target."
        )
    spans = [_span_text(_WORD.findall(t["context"]), _WORD.findall(p)) for t, p in zip(targets, predictions)]
    return _best_answer_scores("span_squad", [t["answers"] for t in targets], spans, normalize_squad)


_WORD = re.compile(r"\w+")


def _span_text(context_words: list[str], prediction_words: list[str]) -> str:
    """The context's words from the predicted start to end position, inclusive; "" if they cannot be read."""
    if len(prediction_words) < 4:
        return ""
    try:
        start, end = int(prediction_words[1]), int(prediction_words[3])
    except ValueError:
        return ""
    return " ".join(context_words[start:end + 1])


def coqa_f1(targets, predictions) -> dict:
    """CoQA's token F1 × 100, the best over an example's answers, averaged over the turns: {"f1"}.

    Words are normalised as SQuAD's (the official CoQA script's rules are the same). Unlike ``squad``'s F1,
    an answer with no words left that is predicted with none scores 1, as in t5.
    """
    targets, predictions = _check("coqa_f1", targets, predictions)
    answers = _normalized_answers("coqa_f1", targets, normalize_squad)
    predictions = [normalize_squad(p) for p in predictions]
    f1 = np.mean([max(_coqa_token_f1(a, p) for a in refs) for refs, p in zip(answers, predictions)])
    return {"f1": 100 * float(f1)}


def _coqa_token_f1(target: str, prediction: str) -> float:
    return 1.0 if not target and not prediction else _token_f1(target, prediction)


# -- rank classification ------------------------------------------------------------------------------------


def rank_classification(
    targets, scores, num_classes: int | None = None, normalize_by_target_length: bool = False, idx_len: int = 2
) -> dict:
    """Classification by the likeliest of an example's choices, from one score per (example, choice), as t5's.

    Each target is a tuple ``(idx, is_correct, weight, target_length)`` for one choice, ``idx`` being
    ``(input index, choice index)`` (``idx_len`` numbers); ``scores`` holds each choice's log likelihood
    (divided by ``target_length`` with ``normalize_by_target_length``). An example weighs its first choice's
    ``weight`` (with ``num_classes``) or its chosen choice's (without), as in t5.

    - ``num_classes=None`` (examples with varying numbers of choices): {"accuracy"}.
    - an example with several correct choices (any counts): {"accuracy"}.
    - 2 classes: {"accuracy", "f1", "auc-roc", "auc-pr"}, the areas for choice 1 by its softmax probability
      (NaN when choice 1 is correct in every example or in none).
    - more: {"accuracy", "mean_<n>class_f1"}.
    Everything × 100 (t5 scales these areas, unlike ``auc``'s). Scores are compared in float32, as t5.
    """
    targets, scores = _check("rank_classification", targets, scores)
    rows = _rank_rows(targets, scores, idx_len)
    if normalize_by_target_length:
        rows = [(target, score / target[3]) for target, score in rows]
    if not num_classes:
        return {"accuracy": _likeliest_choice_accuracy(rows)}
    _check_choices_per_example(rows, num_classes)
    is_correct = np.array([target[1] for target, _ in rows], dtype=bool).reshape(-1, num_classes)
    weights = np.array([target[2] for target, _ in rows], dtype=np.float64).reshape(-1, num_classes)[:, 0]
    log_likelihoods = np.array([score for _, score in rows], dtype=np.float32).reshape(-1, num_classes)
    predictions = log_likelihoods.argmax(-1)
    if not weights.any():
        raise _weightless()
    accuracy = 100 * float(np.average(is_correct[np.arange(len(predictions)), predictions], weights=weights))
    if (is_correct.sum(-1) > 1).any():
        return {"accuracy": accuracy}
    if num_classes > 2:
        predicted = np.eye(num_classes, dtype=bool)[predictions]
        return {"accuracy": accuracy, **mean_multiclass_f1(num_classes, sample_weight=weights)(is_correct, predicted)}
    probabilities = scipy.special.softmax(log_likelihoods, axis=-1)[:, 1]
    areas = _curve_areas(is_correct[:, 1], probabilities, weights)
    return {
        "accuracy": accuracy,
        "f1": 100 * float(sklearn.metrics.f1_score(is_correct.argmax(-1), predictions, sample_weight=weights)),
        **{name: 100 * value for name, value in areas.items()},
    }


def _rank_rows(targets: list, scores: list, idx_len: int) -> list[tuple[tuple, float]]:
    """(target, score) pairs sorted by idx, so that each example's choices are adjacent and in order."""
    try:
        scores = [float(score) for score in scores]
    except (TypeError, ValueError):
        raise T2TError(
            f"metric rank_classification needs one number per score, got e.g. {scores[0]!r}; "
            "pass each choice's log likelihood."
        ) from None
    for target in targets:
        if not isinstance(target, (tuple, list)) or len(target) != 4:
            raise T2TError(
                f"metric rank_classification needs (idx, is_correct, weight, target_length) targets, got {target!r}; "
                "give one such tuple per choice, as t5's rank_classification postprocessor does."
            )
        if not hasattr(target[0], "__len__") or len(target[0]) != idx_len:
            raise T2TError(
                f"metric rank_classification needs idx of {idx_len} numbers (input, choice), got {target[0]!r}; "
                "pass idx_len to match."
            )
    indices = collections.Counter(tuple(target[0]) for target in targets)
    if len(indices) < len(targets):
        duplicate = next(index for index, count in indices.items() if count > 1)
        raise T2TError(
            f"metric rank_classification got idx {duplicate} more than once; give every (example, choice) its own idx."
        )
    return sorted(zip(targets, scores), key=lambda row: tuple(row[0][0]))


def _likeliest_choice_accuracy(rows: list[tuple[tuple, float]]) -> float:
    """Weighted percentage of examples whose likeliest choice is correct (t5's accuracy for varying choices)."""
    correct = total = 0.0
    for _, choices in itertools.groupby(rows, key=lambda row: row[0][0][0]):
        targets, scores = zip(*choices)
        _, is_correct, weight, _ = targets[int(np.argmax(scores))]
        correct += is_correct * weight
        total += weight
    if not total:
        raise _weightless()
    return 100 * float(correct) / float(total)


def _weightless() -> T2TError:
    return T2TError("metric rank_classification got weight 0 for every example, so it has no accuracy to report; "
                    "give the examples that count a positive weight.")


def _check_choices_per_example(rows: list[tuple[tuple, float]], num_classes: int) -> None:
    if num_classes < 2:
        raise T2TError(f"metric rank_classification needs num_classes of at least 2, got {num_classes}; "
                       "pass None for examples with varying numbers of choices.")
    counts = collections.Counter(target[0][0] for target, _ in rows)
    for example, count in counts.items():
        if count != num_classes:
            raise T2TError(
                f"metric rank_classification got {count} choices for example {example} but num_classes={num_classes}; "
                "score every choice of every example, or pass num_classes=None."
            )


# -- grouped examples (MultiRC, ReCoRD) ---------------------------------------------------------------------


def mean_group_metric(metric_fn: MetricFn, group_key: str = "group", value_key: str = "value") -> MetricFn:
    """A metric fn averaging ``metric_fn`` over groups; targets and predictions are dicts holding
    ``group_key`` (targets) and ``value_key`` (both), as t5's (e.g. MultiRC's per-question exact match)."""

    def metric(targets, predictions) -> dict:
        targets, predictions = _check("mean_group_metric", targets, predictions)
        groups: dict = collections.defaultdict(lambda: ([], []))
        for target, prediction in zip(targets, predictions):
            group = groups[target[group_key]]
            group[0].append(target[value_key])
            group[1].append(prediction[value_key])
        scores = collections.defaultdict(list)
        for group_targets, group_predictions in groups.values():
            for name, value in metric_fn(group_targets, group_predictions).items():
                scores[name].append(value)
        return {name: float(np.mean(values)) for name, values in scores.items()}

    return metric


def deduplicate_metric(metric_fn: MetricFn, group_key: str = "group", value_key: str = "value") -> MetricFn:
    """A metric fn that scores only the first example of each group (t5's, e.g. for ReCoRD)."""

    def metric(targets, predictions) -> dict:
        targets, predictions = _check("deduplicate_metric", targets, predictions)
        seen, kept_targets, kept_predictions = set(), [], []
        for target, prediction in zip(targets, predictions):
            if target[group_key] not in seen:
                seen.add(target[group_key])
                kept_targets.append(target[value_key])
                kept_predictions.append(prediction[value_key])
        return metric_fn(kept_targets, kept_predictions)

    return metric


def on_values(metric_fn: MetricFn, value_key: str = "value") -> MetricFn:
    """A metric fn scoring the ``value_key`` of target and prediction dicts with ``metric_fn`` (every example
    counts, its group is ignored), e.g. AX-g's accuracy beside its per-pair gender parity."""

    def metric(targets, predictions) -> dict:
        targets, predictions = _check(getattr(metric_fn, "__name__", "on_values"), targets, predictions)
        return metric_fn([t[value_key] for t in targets], [p[value_key] for p in predictions])

    metric.__name__ = getattr(metric_fn, "__name__", "on_values")
    return metric


def multirc_f1_over_all_answers(targets, predictions) -> dict:
    """``f1_score_with_invalid`` over the "value" of every MultiRC answer dict: {"f1"}."""
    return on_values(f1_score_with_invalid)(targets, predictions)


def gender_parity(targets, predictions, group_key: str = "group", value_key: str = "value") -> dict:
    """AX-g's gender parity × 100 as the SuperGLUE leaderboard reports it (jiant's ``GenderParity``): the
    share of sentence pairs that differ only in the pronoun's gender whose predictions agree:
    {"gender_parity"}.

    Targets are dicts holding the pair's ``group`` (e.g. the shared hypothesis); predictions hold ``value``.
    A pair cut short (e.g. by ``--max-examples``) is left out; with no whole pair the score is NaN.
    """
    targets, predictions = _check("gender_parity", targets, predictions)
    pairs: dict = collections.defaultdict(list)
    for target, prediction in zip(targets, predictions):
        pairs[target[group_key]].append(prediction[value_key])
    agree = [len(set(values)) == 1 for values in pairs.values() if len(values) > 1]
    return {"gender_parity": 100 * float(np.mean(agree)) if agree else float("nan")}
