"""Metric functions against the libraries t5 computes them with, plus hand-checked edge cases."""

import math
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu
import scipy.special
import scipy.stats
import sklearn.metrics
from rouge_score import rouge_scorer, scoring

from t2t.errors import T2TError
from t2t.evaluation import metrics

# STS-B-like similarity scores (targets from 0-5, predictions as a model's postprocessed floats)
STSB_TARGETS = [5.0, 3.8, 0.6, 2.4, 4.2, 1.0, 3.0, 4.75, 0.0, 2.8]
STSB_PREDICTIONS = [4.6, 3.2, 1.2, 2.6, 4.4, 0.8, 2.2, 4.0, 0.4, 3.4]

# CoLA / RTE-like class ids
LABELS = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1]
PREDS = [1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1]

TRANSLATIONS = [
    "Das Haus ist klein.",
    "Der Himmel ist heute blau und wolkenlos.",
    "Ich habe gestern ein gutes Buch gelesen.",
    "Wir treffen uns morgen um acht Uhr am Bahnhof.",
]
REFERENCES = [
    "Das Haus ist klein.",
    "Der Himmel ist heute blau.",
    "Gestern habe ich ein gutes Buch gelesen.",
    "Wir treffen uns morgen um 8 Uhr am Hauptbahnhof.",
]

SUMMARIES = [
    "a storm closed three roads . thousands of homes lost power for two days .",
    "the village festival had music , jugglers and a speech about the new bridge .",
    "scientists measured the temperature of a frozen lake for two weeks .",
]
SUMMARY_PREDICTIONS = [
    "a storm closed roads and thousands of homes lost power .",
    "the festival had music and a speech about a bridge . the square was empty at midnight .",
    "two scientists measured a lake every hour .",
]


def test_accuracy_and_sequence_accuracy():
    assert metrics.accuracy(LABELS, PREDS) == {"accuracy": 100 * sklearn.metrics.accuracy_score(LABELS, PREDS)}
    words = ["entailment", "not_entailment", "entailment", "entailment"]
    guesses = ["entailment", "entailment", "entailment", "garbage"]
    assert metrics.accuracy(words, guesses) == {"accuracy": 50.0}
    assert metrics.sequence_accuracy(words, guesses) == {"sequence_accuracy": 50.0}
    assert metrics.sequence_accuracy([[3, 4], [5]], [[3, 4], [5, 1]]) == {"sequence_accuracy": 50.0}


def test_all_match():
    assert metrics.all_match(["a", "b"], ["a", "b"]) == {"exact_match": 100.0}
    assert metrics.all_match(["a", "b"], ["a", "c"]) == {"exact_match": 0.0}
    assert metrics.exact_match is metrics.all_match


def test_correlations_match_scipy():
    pearson = metrics.pearson_corrcoef(STSB_TARGETS, STSB_PREDICTIONS)
    spearman = metrics.spearman_corrcoef(STSB_TARGETS, STSB_PREDICTIONS)
    assert pearson == {"pearson_corrcoef": pytest.approx(100 * scipy.stats.pearsonr(STSB_TARGETS, STSB_PREDICTIONS)[0])}
    assert spearman == {
        "spearman_corrcoef": pytest.approx(100 * scipy.stats.spearmanr(STSB_TARGETS, STSB_PREDICTIONS)[0])
    }
    assert 80 < pearson["pearson_corrcoef"] <= 100
    assert metrics.pearson_corrcoef(np.array(STSB_TARGETS), np.array(STSB_PREDICTIONS)) == pearson


def test_correlation_bad_input():
    with pytest.raises(T2TError, match="at least 2"):
        metrics.pearson_corrcoef([1.0], [1.0])
    with pytest.raises(T2TError, match="postprocess_fn"):
        metrics.spearman_corrcoef(["3.2", "high"], [1.0, 2.0])


def test_matthews_matches_sklearn():
    expected = 100 * sklearn.metrics.matthews_corrcoef(LABELS, PREDS)
    assert metrics.matthews_corrcoef(LABELS, PREDS) == {"matthews_corrcoef": pytest.approx(expected)}
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0]) == {"matthews_corrcoef": 100.0}


def test_f1_score_with_invalid_matches_sklearn_on_valid_predictions():
    assert metrics.f1_score_with_invalid(LABELS, PREDS) == {
        "f1": pytest.approx(100 * sklearn.metrics.f1_score(LABELS, PREDS))
    }


def test_f1_score_with_invalid_counts_invalid_as_wrong():
    targets = np.array([1, 1, 0, 0, 1])
    predictions = np.array([1, -1, -1, 0, 0])
    # -1 against target 1 becomes 0 (a miss); -1 against target 0 becomes 1 (a false alarm):
    # tp = 1, fp = 1, fn = 2 -> precision 1/2, recall 1/3, F1 = 2 * (1/6) / (5/6) = 0.4
    assert metrics.f1_score_with_invalid(targets, predictions) == {"f1": pytest.approx(40.0)}
    assert predictions.tolist() == [1, -1, -1, 0, 0]  # the caller's array is untouched
    assert metrics.f1_score_with_invalid([True, False, True], [True, "maybe", 1.0]) == {"f1": pytest.approx(80.0)}


def test_mean_multiclass_f1_matches_sklearn():
    targets = [0, 1, 2, 0, 0, 1, 2, 2, 0, 1]
    predictions = [0, 1, 1, 0, -1, 1, 2, 0, 0, 2]
    fn = metrics.mean_multiclass_f1(num_classes=3)
    expected = 100 * sklearn.metrics.fbeta_score(targets, predictions, beta=1, labels=[0, 1, 2], average="macro")
    assert fn(targets, predictions) == {"mean_3class_f1": pytest.approx(expected)}
    per_class = sklearn.metrics.f1_score(targets, predictions, labels=[0, 1, 2], average=None)
    assert fn(targets, predictions)["mean_3class_f1"] == pytest.approx(100 * per_class.mean())


def test_bleu_matches_hand_counted_ngrams():
    """Corpus BLEU from n-gram counts done by hand: the geometric mean of the four clipped precisions, summed
    over the corpus (not averaged per sentence), times the brevity penalty exp(1 - r / c) when c < r."""
    ref = "the cat sat on the mat"
    # 7 tokens against 6: 6/7 unigrams, 5/6 bigrams, 4/5 trigrams, 3/4 4-grams match; no brevity penalty
    assert metrics.bleu([ref], ["the cat sat on the mat today"])["bleu"] == pytest.approx(100 * (3 / 7) ** 0.25)
    # 5 tokens against 6: every n-gram matches; brevity penalty exp(1 - 6/5)
    assert metrics.bleu([ref], ["the cat sat on the"])["bleu"] == pytest.approx(100 * math.exp(-0.2))
    # both at once: the counts add up (11/12, 9/10, 7/8, 5/6) and the lengths too (12 against 12)
    both = metrics.bleu([ref, ref], ["the cat sat on the mat today", "the cat sat on the"])["bleu"]
    assert both == pytest.approx(100 * (11 / 12 * 9 / 10 * 7 / 8 * 5 / 6) ** 0.25)
    assert both == pytest.approx(88.0684167)
    assert metrics.bleu(REFERENCES, REFERENCES) == {"bleu": pytest.approx(100.0)}


def test_bleu_matches_sacrebleus_bleu_class_with_t5_settings():
    """The German corpus through sacrebleu's object API (``BLEU(tokenize="intl")``: exp smoothing and no
    effective order are its defaults), not the ``corpus_bleu`` call t2t makes, and as a literal number."""
    expected = sacrebleu.metrics.BLEU(tokenize="intl").corpus_score(TRANSLATIONS, [REFERENCES]).score
    assert metrics.bleu(REFERENCES, TRANSLATIONS) == {"bleu": pytest.approx(expected)}
    assert expected == pytest.approx(57.7914135)


def test_bleu_multiple_references():
    second = ["Das Haus ist sehr klein.", "Heute ist der Himmel blau.", "Ich las gestern ein gutes Buch.", None]
    targets = [[a, b] if b else [a] for a, b in zip(REFERENCES, second)]
    expected = sacrebleu.corpus_bleu(TRANSLATIONS, [REFERENCES, second], tokenize="intl").score
    assert metrics.bleu(targets, TRANSLATIONS) == {"bleu": pytest.approx(expected)}
    assert expected >= metrics.bleu(REFERENCES, TRANSLATIONS)["bleu"]


def test_rouge_matches_rouge_score_bootstrap():
    keys = ["rouge1", "rouge2", "rougeLsum"]
    scorer = rouge_scorer.RougeScorer(keys)
    aggregator = scoring.BootstrapAggregator()
    per_example = []
    for target, prediction in zip(SUMMARIES, SUMMARY_PREDICTIONS):
        scores = scorer.score(target.replace(" . ", " .\n"), prediction.replace(" . ", " .\n"))
        aggregator.add_scores(scores)
        per_example.append(scores)
    state = np.random.get_state()
    np.random.seed(0)
    expected = {key: 100 * value.mid.fmeasure for key, value in aggregator.aggregate().items()}
    np.random.set_state(state)
    before = np.random.get_state()[1].copy()
    result = metrics.rouge(SUMMARIES, SUMMARY_PREDICTIONS)
    assert (np.random.get_state()[1] == before).all()  # global random state left alone
    assert result == {key: pytest.approx(expected[key]) for key in keys}
    for key in keys:  # the bootstrap median is close to the plain mean of the per-example scores
        assert result[key] == pytest.approx(100 * np.mean([s[key].fmeasure for s in per_example]), abs=5)
    assert metrics.rouge(SUMMARIES, SUMMARY_PREDICTIONS) == result  # deterministic


def test_rouge_matches_hand_counted_overlaps():
    """One example (the bootstrap then has one value to resample): "the cat sat on the mat" against "the cat
    sat on a mat" shares 5 of 6 unigrams, 3 of 5 bigrams and a longest common subsequence of 5 tokens."""
    result = metrics.rouge(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert result == {"rouge1": pytest.approx(100 * 5 / 6), "rouge2": pytest.approx(100 * 3 / 5),
                      "rougeLsum": pytest.approx(100 * 5 / 6)}


def test_rouge_of_the_summaries_as_literal_numbers():
    """The bootstrap medians of the three summaries (seed 0), written down."""
    assert metrics.rouge(SUMMARIES, SUMMARY_PREDICTIONS) == {
        "rouge1": pytest.approx(67.5939808), "rouge2": pytest.approx(35.5599647),
        "rougeLsum": pytest.approx(61.5914265)}


def test_rouge_lsum_uses_sentence_splitting():
    target = "the cat sat . the dog ran ."
    prediction = "the dog ran . the cat sat ."
    result = metrics.rouge([target], [prediction], score_keys=["rougeL", "rougeLsum"])
    assert result["rougeLsum"] == pytest.approx(100.0)
    assert result["rougeL"] < 100.0


def test_squad_normalisation():
    assert metrics.normalize_squad("The  Eiffel Tower!") == "eiffel tower"
    assert metrics.normalize_squad("an apple, a pear; the end.") == "apple pear end"
    assert metrics.normalize_squad("theatre an-other") == "theatre another"  # whole words only


def test_squad_em_and_f1():
    targets = [["Denver Broncos", "The Denver Broncos"], ["Santa Clara, California"], ["1998"]]
    predictions = ["the Denver Broncos.", "Santa Clara", "in 1999"]
    result = metrics.squad(targets, predictions)
    # example 1: exact after normalisation; example 2: precision 1, recall 2/3 -> F1 0.8; example 3: 0
    assert result == {"em": pytest.approx(100 / 3), "f1": pytest.approx(100 * (1 + 0.8 + 0) / 3)}
    assert metrics.squad(["Paris"], ["paris"]) == {"em": 100.0, "f1": 100.0}


def test_group_metrics():
    targets = [{"group": "q1", "value": 1}, {"group": "q1", "value": 0}, {"group": "q2", "value": 1}]
    predictions = [{"value": 1}, {"value": 0}, {"value": 0}]
    assert metrics.mean_group_metric(metrics.all_match)(targets, predictions) == {"exact_match": 50.0}
    assert metrics.deduplicate_metric(metrics.accuracy)(targets, predictions) == {"accuracy": 50.0}
    expected = 100 * sklearn.metrics.f1_score([1, 0, 1], [1, 0, 0])
    assert metrics.multirc_f1_over_all_answers(targets, predictions) == {"f1": pytest.approx(expected)}


@pytest.mark.parametrize(
    "fn",
    [
        metrics.accuracy,
        metrics.sequence_accuracy,
        metrics.pearson_corrcoef,
        metrics.spearman_corrcoef,
        metrics.matthews_corrcoef,
        metrics.f1_score_with_invalid,
        metrics.mean_multiclass_f1(3),
        metrics.bleu,
        metrics.rouge,
        metrics.squad,
        metrics.all_match,
        metrics.auc,
        metrics.score_auc,
        metrics.edit_distance,
        metrics.trivia_qa,
        metrics.coqa_f1,
        metrics.span_squad,
        metrics.rank_classification,
    ],
)
def test_length_mismatch_and_empty_inputs(fn):
    with pytest.raises(T2TError, match="2 targets but 1 predictions"):
        fn(["1", "0"], ["1"])
    with pytest.raises(T2TError, match="no examples"):
        fn([], [])


def test_unknown_sklearn_metric():
    with pytest.raises(T2TError, match="no 'not_a_metric'"):
        metrics.sklearn_metrics_wrapper("not_a_metric")


@pytest.mark.integration
def test_import_t2t_leaves_the_metric_libraries_until_metrics_is_used():
    code = ("import sys, t2t; heavy = ('scipy', 'sklearn', 'sacrebleu', 'rouge_score');"
            "assert not [m for m in heavy if m in sys.modules], 'import t2t loaded a metric library';"
            "assert t2t.metrics.accuracy([1], [1]) == {'accuracy': 100.0}; assert 'sklearn' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_bleu_tokenises_like_t5_intl_not_13a():
    # 'intl' splits Unicode punctuation (Romanian quotes) off words; the default '13a' does not
    references = ["Ban spune că „nu există o soluție militară” în Siria."]
    predictions = ["Ban spune că „nu există soluție militară” în Siria."]
    ours = metrics.bleu(references, predictions)["bleu"]
    intl = sacrebleu.corpus_bleu(predictions, [references], smooth_method="exp", tokenize="intl").score
    plain = sacrebleu.corpus_bleu(predictions, [references], smooth_method="exp", tokenize="13a").score
    assert ours == pytest.approx(intl) and abs(intl - plain) > 1


def test_rouge_lsum_reads_newline_separated_highlights():
    # hub highlights are one per line; a model's prediction separates them with " . "
    result = metrics.rouge(["the cat sat .\nthe dog ran ."], ["the dog ran . the cat sat ."],
                           score_keys=["rougeLsum"])
    assert result["rougeLsum"] == pytest.approx(100.0)


def test_squad_follows_the_official_v1_1_rules():
    # ASCII punctuation only (string.punctuation): the en dash stays, the apostrophe goes
    assert metrics.normalize_squad("24–10") == "24–10"
    assert metrics.normalize_squad("Levi's") == "levis"
    assert metrics.normalize_squad("Levi ' s") == "levi s"  # T5's padded text normalises differently
    # articles only after lowercasing and as whole words
    assert metrics.normalize_squad("The Anthem") == "anthem"
    # F1 counts repeated tokens with multiplicity: common = min(2, 3) = 2, precision = recall = 2/3
    assert metrics.squad([["x y y"]], ["y y y"])["f1"] == pytest.approx(100 * 2 / 3)
    # the best answer counts for EM and F1 separately
    result = metrics.squad([["red car", "car"]], ["big red car"])
    assert result == {"em": 0.0, "f1": pytest.approx(100 * 0.8)}


NEW_METRICS = ("auc", "score_auc", "edit_distance", "trivia_qa", "coqa_f1", "span_squad", "rank_classification",
               "normalize_trivia_qa")


def test_the_new_metrics_are_reexported_by_t2t_metrics():
    import t2t.metrics

    assert all(getattr(t2t.metrics, name) is getattr(metrics, name) for name in NEW_METRICS)


def test_correlations_refuse_more_than_one_number_per_example():
    with pytest.raises(T2TError, match="one number per example"):
        metrics.pearson_corrcoef([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 5.0]])


# -- auc, score_auc ---------------------------------------------------------------------------------------------


def test_auc_from_hand_drawn_curves_on_t5s_0_to_1_scale():
    """Positives score 0.35 and 0.8, negatives 0.1 and 0.4. ROC: 3 of the 4 (positive, negative) pairs are
    ordered right -> 0.75. PR, from the top score down: 0.8 is a hit (precision 1, recall 1/2), 0.4 a miss,
    0.35 a hit (precision 2/3, recall 1) -> average precision 1/2 * 1 + 1/2 * 2/3 = 5/6."""
    targets, scores = [0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]
    assert metrics.auc(targets, scores) == {"auc-roc": pytest.approx(0.75), "auc-pr": pytest.approx(5 / 6)}
    assert metrics.score_auc(targets=targets, scores=scores) == metrics.auc(targets, scores)
    assert metrics.auc(targets, scores) == {"auc-roc": pytest.approx(sklearn.metrics.roc_auc_score(targets, scores)),
                                            "auc-pr": pytest.approx(
                                                sklearn.metrics.average_precision_score(targets, scores))}


def test_auc_with_tied_scores():
    """Positives 0.2, 0.9, 0.6 against negatives 0.2, 0.5: 4 pairs right and the tie counts half -> 4.5 / 6.
    PR: the tie at 0.2 is one threshold, so the last step adds a hit and a miss at once (precision 3/5):
    1/3 * 1 + 1/3 * 1 + 1/3 * 3/5 = 13/15."""
    result = metrics.auc([0, 1, 1, 0, 1], [0.2, 0.2, 0.9, 0.5, 0.6])
    assert result == {"auc-roc": pytest.approx(0.75), "auc-pr": pytest.approx(13 / 15)}


def test_auc_binarises_continuous_targets_at_the_threshold():
    """With threshold 3.0 the targets 1.0, 3.0, 4.5, 2.9 become 0, 1, 1, 0 (a target equal to the threshold is
    positive). Positives 0.4 and 0.35 beat the negative 0.1 but not 0.8 -> ROC 2/4. PR: 0.8 a miss, 0.4 a hit
    (precision 1/2, recall 1/2), 0.35 a hit (2/3, 1) -> 1/2 * 1/2 + 1/2 * 2/3 = 7/12."""
    result = metrics.auc([1.0, 3.0, 4.5, 2.9], [0.8, 0.4, 0.35, 0.1], targets_threshold=3.0)
    assert result == {"auc-roc": pytest.approx(0.5), "auc-pr": pytest.approx(7 / 12)}
    assert metrics.score_auc([1.0, 3.0, 4.5, 2.9], [0.8, 0.4, 0.35, 0.1], targets_threshold=3.0) == result


@pytest.mark.parametrize("targets, threshold", [([1, 1, 1], None), ([0, 0, 0], None), ([4.0, 5.0, 3.5], 3.0)])
def test_auc_of_a_single_class_is_undefined(targets, threshold):
    # sklearn raised (< 1.5), gave 0 (1.5) or gives NaN (>= 1.6) for the ROC area; t2t says NaN on every version
    result = metrics.auc(targets, [0.2, 0.5, 0.3], targets_threshold=threshold)
    assert math.isnan(result["auc-roc"]) and math.isnan(result["auc-pr"])


def test_auc_bad_input():
    with pytest.raises(T2TError, match="targets 0 or 1, got 0.5; pass targets_threshold"):
        metrics.auc([0, 0.5, 1], [0.1, 0.2, 0.3])
    with pytest.raises(T2TError, match="score_auc got a score of nan"):
        metrics.score_auc([0, 1], [0.1, float("nan")])
    with pytest.raises(T2TError, match="metric auc needs one number per example"):
        metrics.auc([0, 1], ["yes", "no"])
    with pytest.raises(T2TError, match="one number per example"):
        metrics.auc([0, 1], [[0.1, 0.9], [0.8, 0.2]])


# -- edit_distance --------------------------------------------------------------------------------------------


EDIT_TARGETS = ["The cat sat on the mat", "hello, world", "a b c"]
EDIT_PREDICTIONS = ["the cat sat on a mat", "hello world", "x y"]


def test_edit_distance_counts_word_edits():
    """1 substitution (the -> a); 1 deletion: "hello, world" splits into hello, "", world (the comma and the
    space are two separators); 2 substitutions and 1 deletion (a b c -> x y). Distances 1, 1, 3."""
    result = metrics.edit_distance(EDIT_TARGETS, EDIT_PREDICTIONS)
    assert result == {"min_edit": 1, "max_edit": 3, "mean_edit": pytest.approx(5 / 3), "median_edit": 1.0,
                      "sum_edit": 5}
    assert all(isinstance(result[key], int) for key in ("min_edit", "max_edit", "sum_edit"))
    # word-level Levenshtein's textbook case: kitten -> sitting is 3 edits
    assert metrics.edit_distance(["k i t t e n"], ["s i t t i n g"])["sum_edit"] == 3


def test_edit_distance_without_lowercasing():
    # "The" against "the" is one more substitution: distances 2, 1, 3
    result = metrics.edit_distance(EDIT_TARGETS, EDIT_PREDICTIONS, lower=False)
    assert result == {"min_edit": 1, "max_edit": 3, "mean_edit": 2.0, "median_edit": 2.0, "sum_edit": 6}


# -- trivia_qa, coqa_f1, span_squad -----------------------------------------------------------------------------


def test_trivia_qa_normalisation_turns_punctuation_into_spaces():
    assert metrics.normalize_trivia_qa("U.S.") == "u s"
    assert metrics.normalize_trivia_qa("Levi's") == "levi s"
    assert metrics.normalize_trivia_qa("‘Hamlet’ ´s") == "hamlet s"  # TriviaQA's extra quote marks
    assert metrics.normalize_trivia_qa("A_B the-end") == "b end"  # freed articles are dropped too
    assert metrics.normalize_trivia_qa("24–10") == "24–10"  # the en dash is not among them


def test_trivia_qa_against_squad_on_the_same_answers():
    """TriviaQA's rules match all four; SQuAD's keep "us", "‘hamlet’", "levis" and "theend" whole, so only the
    first example gets F1, its best answer "navy" against "u s navy": precision 1/3, recall 1 -> 1/2."""
    targets = [["U.S. Navy", "Navy"], ["‘Hamlet’"], ["Levi's"], ["the-end"]]
    predictions = ["the u s navy", "Hamlet", "levi s", "end"]
    assert metrics.trivia_qa(targets, predictions) == {"em": 100.0, "f1": 100.0}
    assert metrics.squad(targets, predictions) == {"em": 0.0, "f1": pytest.approx(100 * 0.5 / 4)}
    # token F1 as in squad: "u s army" against "u s navy" shares 2 of 3 words
    assert metrics.trivia_qa([["U.S. Navy"]], ["U.S. Army"]) == {"em": 0.0, "f1": pytest.approx(100 * 2 / 3)}


def test_coqa_f1_by_hand():
    """Best over answers: "white cat" matches its second answer (1); "the" and "" both normalise to nothing,
    which CoQA counts as 1; "park" against "in park": precision 1, recall 1/2 -> 2/3; "no" against "yes": 0.
    SQuAD's F1 scores the empty pair 0 instead."""
    targets = [["white", "white cat"], ["the"], ["in the park"], ["Yes"]]
    predictions = ["a white cat", "", "park", "no"]
    assert metrics.coqa_f1(targets, predictions) == {"f1": pytest.approx(100 * (1 + 1 + 2 / 3 + 0) / 4)}
    assert metrics.squad(targets, predictions)["f1"] == pytest.approx(100 * (1 + 0 + 2 / 3 + 0) / 4)
    assert metrics.coqa_f1(["White cat!"], ["the white cat"]) == {"f1": 100.0}  # a single string is one answer


SPAN_CONTEXT = "Super Bowl 50 was won by the Denver Broncos, 24–10."  # words 0..10; Denver is 7, Broncos 8


def test_span_squad_reads_inclusive_word_positions():
    """7-8 is "Denver Broncos" (exact); 8-9 is "Broncos 24": 1 of 2 words either way -> F1 1/2; "seven" is not
    a number and "start: 7 end:" has no end position, so both are empty answers."""
    target = {"answers": ["Denver Broncos", "The Denver Broncos"], "context": SPAN_CONTEXT}
    predictions = ["start: 7 end: 8", "start: 8 end: 9", "start: seven end: 8", "start: 7 end:"]
    result = metrics.span_squad([target] * 4, predictions)
    assert result == {"em": 25.0, "f1": pytest.approx(100 * (1 + 0.5) / 4)}
    # the en dash separates words: 9-10 is "24 10"
    assert metrics.span_squad([{"answers": ["24 10"], "context": SPAN_CONTEXT}], ["start: 9 end: 10"])["em"] == 100


def test_span_squad_bad_input():
    with pytest.raises(T2TError, match='dict with "answers" and "context"'):
        metrics.span_squad([["Denver Broncos"]], ["start: 7 end: 8"])
    with pytest.raises(T2TError, match="span_squad got an example with no reference answers"):
        metrics.span_squad([{"answers": [], "context": SPAN_CONTEXT}], ["start: 7 end: 8"])


# -- rank_classification --------------------------------------------------------------------------------------


def rank_targets(is_correct_rows, weights, lengths=None):
    """t5's (idx, is_correct, weight, target_length) per choice, from one row of is_correct flags per example."""
    return [((example, choice), flag, weights[example], lengths[example][choice] if lengths else 1)
            for example, row in enumerate(is_correct_rows) for choice, flag in enumerate(row)]


# two choices per example: choice 1 is correct in examples 0 and 2; example 2 weighs 2
BINARY_CORRECT = [(False, True), (True, False), (False, True), (True, False)]
BINARY_WEIGHTS = [1.0, 1.0, 2.0, 1.0]
BINARY_SCORES = [-1.0, -2.0, -0.5, -3.0, -4.0, -1.0, -2.0, -1.5]


def test_rank_classification_two_classes_by_hand():
    """Predicted choices 0, 0, 1, 1 (the higher log likelihood): examples 1 and 2 right -> (1 + 2) / 5.
    F1 for choice 1: true positive example 2 (weight 2), a miss (0) and a false alarm (3) of weight 1 ->
    precision = recall = 2/3. Choice 1's softmax probabilities: sigmoid(-1), sigmoid(-2.5), sigmoid(3),
    sigmoid(0.5) = 0.27, 0.08, 0.95, 0.62 for positives 0 (w 1), 2 (w 2) and negatives 1, 3 (w 1):
    weighted ordered pairs 1 + 2 + 2 of 3 * 2 -> ROC 5/6; PR from the top: 0.95 hit (precision 1, recall 2/3),
    0.62 miss, 0.27 hit (3/4, 1) -> 2/3 + 1/3 * 3/4 = 11/12. All × 100."""
    targets = rank_targets(BINARY_CORRECT, BINARY_WEIGHTS)
    expected = {"accuracy": pytest.approx(60.0), "f1": pytest.approx(200 / 3), "auc-roc": pytest.approx(500 / 6),
                "auc-pr": pytest.approx(1100 / 12)}
    assert metrics.rank_classification(targets, BINARY_SCORES, num_classes=2) == expected
    # t5 sorts by idx, so the order the choices arrive in does not matter
    assert metrics.rank_classification(targets[::-1], BINARY_SCORES[::-1], num_classes=2) == expected


def test_rank_classification_areas_match_sklearn_on_softmax_probabilities():
    targets = rank_targets(BINARY_CORRECT, BINARY_WEIGHTS)
    probabilities = scipy.special.softmax(np.reshape(BINARY_SCORES, (-1, 2)), axis=-1)[:, 1]
    positive = [row[1] for row in BINARY_CORRECT]
    result = metrics.rank_classification(targets, BINARY_SCORES, num_classes=2)
    assert result["auc-roc"] == pytest.approx(
        100 * sklearn.metrics.roc_auc_score(positive, probabilities, sample_weight=BINARY_WEIGHTS))
    assert result["auc-pr"] == pytest.approx(
        100 * sklearn.metrics.average_precision_score(positive, probabilities, sample_weight=BINARY_WEIGHTS))


def test_rank_classification_areas_of_a_single_class_are_undefined():
    targets = rank_targets([(False, True), (False, True)], [1.0, 1.0])
    result = metrics.rank_classification(targets, [-1.0, -2.0, -2.0, -1.0], num_classes=2)
    assert result["accuracy"] == 50.0 and math.isnan(result["auc-roc"]) and math.isnan(result["auc-pr"])


def test_rank_classification_normalises_by_target_length():
    # example 3's scores -2 and -1.5 over lengths 4 and 1 become -0.5 and -1.5: it now picks choice 0, correctly
    lengths = [(1, 1), (1, 1), (1, 1), (4, 1)]
    targets = rank_targets(BINARY_CORRECT, BINARY_WEIGHTS, lengths)
    plain = metrics.rank_classification(targets, BINARY_SCORES, num_classes=2)
    normalised = metrics.rank_classification(targets, BINARY_SCORES, num_classes=2, normalize_by_target_length=True)
    assert plain["accuracy"] == pytest.approx(60.0) and normalised["accuracy"] == pytest.approx(80.0)


def test_rank_classification_three_classes_by_hand():
    """Predictions 0, 1, 0, 2 against 0, 1, 2, 2: 3 of 4 right. Per-class F1: class 0 precision 1/2 recall 1
    -> 2/3; class 1 -> 1; class 2 precision 1 recall 1/2 -> 2/3; their mean 7/9."""
    correct = [(True, False, False), (False, True, False), (False, False, True), (False, False, True)]
    scores = [-1, -2, -3, -2, -1, -3, -1, -3, -2, -3, -2, -1]
    result = metrics.rank_classification(rank_targets(correct, [1.0] * 4), scores, num_classes=3)
    assert result == {"accuracy": pytest.approx(75.0), "mean_3class_f1": pytest.approx(700 / 9)}
    # t5 takes sklearn's subset accuracy of the indicator rows
    predicted = np.eye(3, dtype=bool)[[0, 1, 0, 2]]
    assert result["accuracy"] == pytest.approx(100 * sklearn.metrics.accuracy_score(np.array(correct), predicted))


def test_rank_classification_with_several_correct_choices_reports_accuracy_only():
    # example 0 accepts choices 0 and 1 and picks 1; example 1 accepts 2 and picks 0
    correct = [(True, True, False), (False, False, True)]
    scores = [-2, -1, -3, -1, -2, -3]
    assert metrics.rank_classification(rank_targets(correct, [1.0, 1.0]), scores, num_classes=3) == {
        "accuracy": 50.0}


def test_rank_classification_with_varying_numbers_of_choices():
    """Example 5 (3 choices, weight 1) picks its correct choice 2; example 9 (2 choices, weight 3) picks the
    wrong choice 1; example 2 has one choice, correct (weight 1): (1 + 0 + 1) / 5."""
    targets = [((5, 0), False, 1, 2), ((5, 1), False, 1, 2), ((5, 2), True, 1, 2), ((9, 0), True, 3, 1),
               ((9, 1), False, 3, 1), ((2, 0), True, 1, 4)]
    scores = [-3.0, -2.0, -1.0, -1.0, -0.5, -9.0]
    assert metrics.rank_classification(targets, scores) == {"accuracy": pytest.approx(40.0)}


def test_rank_classification_compares_scores_in_float32_as_t5():
    # -1 - 1e-9 and -1 are one float32 number: the tie goes to the first choice, which is correct
    targets = rank_targets([(True, False), (False, True)], [1.0, 1.0])
    assert metrics.rank_classification(targets, [-1 - 1e-9, -1.0, -2.0, -1.0], num_classes=2)["accuracy"] == 100


@pytest.mark.parametrize(
    "targets, scores, kwargs, message",
    [
        ([((0, 0), True), ((0, 1), False)], [-1.0, -2.0], {}, r"needs \(idx, is_correct, weight, target_length\)"),
        ([((0, 0, 0), True, 1, 1), ((0, 1, 0), False, 1, 1)], [-1.0, -2.0], {}, "idx of 2 numbers"),
        ([((0, 0), True, 1, 1), ((0, 0), False, 1, 1)], [-1.0, -2.0], {}, r"idx \(0, 0\) more than once"),
        ([((0, 0), True, 1, 1), ((0, 1), False, 1, 1), ((0, 2), False, 1, 1), ((1, 0), True, 1, 1)],
         [-1.0, -2.0, -3.0, -1.0], {"num_classes": 2}, "3 choices for example 0 but num_classes=2"),
        ([((0, 0), True, 1, 1)], [-1.0], {"num_classes": 1}, "num_classes of at least 2"),
        ([((0, 0), True, 1, 1)], ["likely"], {}, "one number per score"),
        ([((0, 0), True, 0, 1), ((0, 1), False, 0, 1)], [-1.0, -2.0], {}, "weight 0 for every example"),
        ([((0, 0), True, 0, 1), ((0, 1), False, 0, 1)], [-1.0, -2.0], {"num_classes": 2}, "weight 0 for every"),
    ],
)
def test_rank_classification_bad_input(targets, scores, kwargs, message):
    with pytest.raises(T2TError, match=message):
        metrics.rank_classification(targets, scores, **kwargs)
