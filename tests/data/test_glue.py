"""GLUE as T5 writes it: exact strings for real rows, label words, STS-B rounding, metrics, the mixture."""

import csv
import decimal
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from t2t.data.preprocessors import string_label_to_class_id, string_to_float, stsb_target
from t2t.data.sources import DataNotFoundError
from t2t.data.task import get_mixture, get_task, get_task_or_mixture
from t2t.errors import T2TError
from t2t.evaluation import metrics
from t2t.evaluation.evaluate import evaluate_task
from t2t.models.t5 import T5, ModelConfig
from t2t.tasks.glue import GLUE_SIZES, GlueSource
from t2t.testing import tiny_vocabulary

N_ROWS = 300


# ---------------------------------------------------------------------------------------------- expectations
# Built here from the TSV columns with T5's documented rules, independently of t2t.data.preprocessors.

def _rows(path: Path, header: bool):
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return (rows[0], rows[1:]) if header else (None, rows)


def _t5_stsb_target(score_text: str) -> str:
    # round(score * 5) / 5 with ties to even, printed with one decimal (decimal arithmetic, no floats)
    fifths = (decimal.Decimal(score_text) * 5).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_EVEN)
    return f"{fifths / 5:.1f}"


def _expected(task: str, glue: Path):
    """(inputs, targets) for the first N_ROWS dev rows of ``task``."""
    if task == "cola":
        _, rows = _rows(glue / "CoLA" / "dev.tsv", header=False)
        return [(f"cola sentence: {r[3]}", ["unacceptable", "acceptable"][int(r[1])]) for r in rows]
    if task == "sst2":
        _, rows = _rows(glue / "SST-2" / "dev.tsv", header=True)
        return [(f"sst2 sentence: {r[0]}", ["negative", "positive"][int(r[1])]) for r in rows]
    if task == "mrpc":
        _, rows = _rows(glue / "MRPC" / "dev.tsv", header=True)
        return [(f"mrpc sentence1: {r[3]} sentence2: {r[4]}", ["not_equivalent", "equivalent"][int(r[0])])
                for r in rows]
    if task == "stsb":
        _, rows = _rows(glue / "STS-B" / "dev.tsv", header=True)
        return [(f"stsb sentence1: {r[7]} sentence2: {r[8]}", _t5_stsb_target(r[9])) for r in rows]
    if task == "rte":
        _, rows = _rows(glue / "RTE" / "dev.tsv", header=True)
        return [(f"rte sentence1: {r[1]} sentence2: {r[2]}", r[3]) for r in rows]
    if task == "wnli":
        _, rows = _rows(glue / "WNLI" / "dev.tsv", header=True)
        return [(f"wnli sentence1: {r[1]} sentence2: {r[2]}", ["not_entailment", "entailment"][int(r[3])])
                for r in rows]
    if task == "qnli":  # keys sorted: question before sentence
        _, rows = _rows(glue / "QNLI" / "dev.tsv", header=True)
        return [(f"qnli question: {r[1]} sentence: {r[2]}", r[3]) for r in rows]
    raise AssertionError(task)


@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "stsb", "rte", "wnli", "qnli"])
def test_dev_rows_match_t5_strings(task, data_dir):
    glue = data_dir / "glue"
    expected = _expected(task, glue)[:N_ROWS]
    got = list(itertools.islice(get_task(task).text_examples("validation", data_dir), N_ROWS))
    assert len(got) == len(expected) == min(N_ROWS, GLUE_SIZES[task]["validation"])
    for i, (example, (inputs, targets)) in enumerate(zip(got, expected)):
        assert (example["inputs"], example["targets"]) == (inputs, targets), f"{task} dev row {i}"


LITERAL = [
    ("stsb", "validation", 0, "stsb sentence1: A man with a hard hat is dancing. sentence2: A man wearing a hard "
                              "hat is dancing.", "5.0"),
    ("stsb", "validation", 1, "stsb sentence1: A young child is riding a horse. sentence2: A child is riding a "
                              "horse.", "4.8"),  # 4.750 * 5 = 23.75 → 24 → 4.8
    ("sst2", "validation", 0, "sst2 sentence: it 's a charming and often affecting journey . ", "positive"),
    ("cola", "validation", 0, "cola sentence: The sailors rode the breeze clear of the rocks.", "acceptable"),
    ("mrpc", "validation", 0, "mrpc sentence1: He said the foodservice pie business doesn't fit the company's "
                              "long-term growth strategy. sentence2: \"The foodservice pie business does not fit "
                              "our long-term growth strategy.", "equivalent"),
    ("rte", "validation", 0, "rte sentence1: Dana Reeve, the widow of the actor Christopher Reeve, has died of lung "
                             "cancer at age 44, according to the Christopher Reeve Foundation. sentence2: "
                             "Christopher Reeve had an accident.", "not_entailment"),
    ("wnli", "validation", 0, "wnli sentence1: The drain is clogged with hair. It has to be cleaned. sentence2: "
                              "The hair has to be cleaned.", "not_entailment"),
    ("qnli", "validation", 0, "qnli question: What came into force after the new constitution was herald? "
                              "sentence: As of that day, the new constitution heralding the Second Republic came "
                              "into force.", "entailment"),
    # unlabeled test rows: "<unk>" from t5's glue(); STS-B's stsb() does not special-case -1 → "-1.0"
    ("cola", "test", 0, "cola sentence: Bill whistled past the house.", "<unk>"),
    ("stsb", "test", 0, "stsb sentence1: A girl is styling her hair. sentence2: A girl is brushing her hair.",
     "-1.0"),
]


@pytest.mark.parametrize("task,split,row,inputs,targets", LITERAL)
def test_literal_rows(task, split, row, inputs, targets, data_dir):
    example = next(itertools.islice(get_task(task).text_examples(split, data_dir), row, None))
    assert example["inputs"] == inputs
    assert example["targets"] == targets


@pytest.mark.parametrize("config,folder", [("cola", "CoLA"), ("sst2", "SST-2"), ("mrpc", "MRPC"), ("stsb", "STS-B"),
                                           ("rte", "RTE"), ("wnli", "WNLI")])
def test_local_split_sizes_and_shape(config, folder, data_dir):
    source = GlueSource(config)
    for split in ("train", "validation", "test"):
        rows = list(source.load(split, data_dir))
        assert len(rows) == GLUE_SIZES[config][split], (config, split)
        assert [r["idx"] for r in rows[:3]] == [0, 1, 2]
        if split == "test":
            assert {r["label"] for r in rows} == {-1}
    keys = {"cola": {"sentence"}, "sst2": {"sentence"}, "mrpc": {"sentence1", "sentence2"},
            "stsb": {"sentence1", "sentence2"}, "rte": {"sentence1", "sentence2"}, "wnli": {"sentence1", "sentence2"}}
    assert set(rows[0]) == keys[config] | {"label", "idx"}


def test_examples_tokens_and_raw_fields(data_dir, t5_vocab_path):
    from t2t.data.vocab import SentencePieceVocabulary
    vocab = SentencePieceVocabulary(t5_vocab_path)
    examples = get_task("stsb").examples("validation", vocab, data_dir=data_dir)
    first = examples[0]
    assert first["targets_pretokenized"] == "5.0" and first["label"] == 5.0 and first["idx"] == 0
    assert first["inputs"][-1] == vocab.eos_id and first["inputs"].dtype == np.int64
    assert vocab.decode(first["inputs"]) == first["inputs_pretokenized"]
    assert vocab.decode(first["targets"]) == "5.0"


# ---------------------------------------------------------------------------------------------- no data needed

@pytest.mark.parametrize("score,target", [
    (5.0, "5.0"), (0.0, "0.0"), (4.75, "4.8"), (3.8, "3.8"),
    (3.5, "3.6"),   # 17.5 → 18 (even)
    (2.5, "2.4"),   # 12.5 → 12 (even)
    (4.5, "4.4"),   # 22.5 → 22
    (1.5, "1.6"),   # 7.5 → 8
    (0.5, "0.4"),   # 2.5 → 2
    (0.1, "0.0"),   # 0.5 → 0
    (0.3, "0.4"),   # 1.5 → 2
    (0.7, "0.8"),   # 3.5 → 4
    (0.9, "0.8"),   # 4.5 → 4
    (4.9, "4.8"),   # 24.5 → 24
    (1.1, "1.2"),   # 5.5 → 6
    (2.59, "2.6"), (2.61, "2.6"), (2.69, "2.6"), (2.71, "2.8"), (-1.0, "-1.0"),
])
def test_stsb_rounding_half_to_even(score, target):
    assert stsb_target(score) == target
    assert _t5_stsb_target(repr(score)) == target


def test_stsb_rounding_agrees_with_decimal_on_a_grid():
    for k in range(0, 5001):
        text = f"{k / 1000:.3f}"
        assert stsb_target(float(text)) == _t5_stsb_target(text), text


LABELS = {
    "cola": ("unacceptable", "acceptable"), "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
    "mnli": ("entailment", "neutral", "contradiction"), "qnli": ("entailment", "not_entailment"),
    "rte": ("entailment", "not_entailment"), "wnli": ("not_entailment", "entailment"),
}


@pytest.mark.parametrize("config", sorted(LABELS))
def test_label_words_and_postprocess(config):
    task = get_task(f"glue_{config}_v002")
    for class_id, word in enumerate(LABELS[config]):
        assert task.postprocess(word) == class_id
    assert task.postprocess("banana") == -1
    assert task.postprocess("<unk>") == -1


def test_stsb_postprocess():
    task = get_task("stsb")
    assert task.postprocess("3.4") == 3.4
    assert task.postprocess("not a number") == -1.0
    assert string_to_float("2.0") == 2.0
    assert string_label_to_class_id("b", label_classes=("a", "b")) == 1


def test_hub_shaped_rows_preprocess_like_t5():
    qqp = get_task("qqp").preprocess({"question1": "Why?", "question2": "How?", "label": 1, "idx": 10})
    assert (qqp["inputs"], qqp["targets"], qqp["idx"]) == ("qqp question1: Why? question2: How?", "duplicate", 10)
    mnli = get_task("mnli").preprocess({"premise": "P.", "hypothesis": "H.", "label": 2, "idx": 0})
    assert (mnli["inputs"], mnli["targets"]) == ("mnli hypothesis: H. premise: P.", "contradiction")
    ax = get_task("ax").preprocess({"premise": "P.", "hypothesis": "H.", "label": -1, "idx": 0})
    assert (ax["inputs"], ax["targets"]) == ("mnli hypothesis: H. premise: P.", "<unk>")
    matched = get_task("glue_mnli_matched_v002").preprocess({"premise": "P.", "hypothesis": "H.", "label": 0,
                                                             "idx": 0})
    assert matched["inputs"].startswith("mnli hypothesis:") and matched["targets"] == "entailment"


def test_out_of_range_label_in_hub_row_is_an_error():
    with pytest.raises(T2TError, match="label 5"):
        get_task("rte").preprocess({"sentence1": "a", "sentence2": "b", "label": 5, "idx": 3})


def test_metrics_per_task():
    names = {c: [getattr(f, "__name__", "") for f in get_task(f"glue_{c}_v002").metric_fns]
             for c in ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "mnli_matched", "mnli_mismatched", "qnli",
                       "rte", "wnli", "ax")}
    assert names["cola"] == ["matthews_corrcoef"]
    assert names["sst2"] == ["accuracy"]
    assert names["mrpc"] == names["qqp"] == ["f1_score_with_invalid", "accuracy"]
    assert names["stsb"] == ["pearson_corrcoef", "spearman_corrcoef"]
    for c in ("mnli", "mnli_matched", "mnli_mismatched", "qnli", "rte", "wnli"):
        assert names[c] == ["accuracy"]
    assert names["ax"] == ["matthews_corrcoef"]  # GLUE's R3 (t5: none), scored where the labelled file is read
    assert get_task("mrpc").metric_fns[0] is metrics.f1_score_with_invalid


def test_names_aliases_and_splits():
    for short in ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli", "ax"):
        assert get_task(short).name == f"glue_{short}_v002"
    assert get_task("ax").splits == ("test",)
    assert get_task("glue_mnli_mismatched_v002").splits == ("validation", "test")
    assert "validation_matched" in get_task("mnli").splits


def test_glue_mixture_as_t5():
    mixture = get_mixture("glue_v002")
    assert get_task_or_mixture("glue_v002_proportional") is mixture
    rates = mixture.rates()
    assert "glue_wnli_v002" not in rates  # t5 trains on WSC/DPR instead
    assert rates == {"glue_cola_v002": 8551, "glue_sst2_v002": 67349, "glue_mrpc_v002": 3668,
                     "glue_qqp_v002": 363849, "glue_stsb_v002": 5749, "glue_mnli_v002": 392702,
                     "glue_qnli_v002": 104743, "glue_rte_v002": 2490, "glue_mnli_mismatched_v002": 0,
                     "glue_mnli_matched_v002": 0, "glue_ax_v002": 0}


# ---------------------------------------------------------------------------------------------- bad local files

def _glue_dir(tmp_path, folder, name, text):
    path = tmp_path / "glue" / folder
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_malformed_row_names_file_and_line(tmp_path):
    root = _glue_dir(tmp_path, "RTE", "dev.tsv",
                     "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\n")
    with pytest.raises(T2TError, match=r"RTE/dev\.tsv line 3 has 3 tab-separated fields instead of 4"):
        list(get_task("rte").text_examples("validation", root))


def test_quotes_are_not_csv_quoting(tmp_path):
    root = _glue_dir(tmp_path, "RTE", "dev.tsv",
                     'index\tsentence1\tsentence2\tlabel\n0\t"He said\tit "works"\tentailment\n')
    example = next(get_task("rte").text_examples("validation", root))
    assert example["inputs"] == 'rte sentence1: "He said sentence2: it "works"'


def test_out_of_range_label_in_file(tmp_path):
    root = _glue_dir(tmp_path, "SST-2", "dev.tsv", "sentence\tlabel\ngood \t1\nbad \t7\n")
    with pytest.raises(T2TError, match=r"SST-2/dev\.tsv line 3 has label '7'"):
        list(get_task("sst2").text_examples("validation", root))


def test_empty_split_is_an_error(tmp_path):
    root = _glue_dir(tmp_path, "SST-2", "dev.tsv", "sentence\tlabel\n")
    with pytest.raises(T2TError, match="empty"):
        list(get_task("sst2").text_examples("validation", root))


def test_mrpc_bom_and_cola_without_header(tmp_path):
    root = _glue_dir(tmp_path, "MRPC", "dev.tsv",
                     "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA.\tB.\n")
    _glue_dir(tmp_path, "CoLA", "dev.tsv", "gj04\t0\t*\tHim left.\n")
    assert next(get_task("mrpc").text_examples("validation", root))["targets"] == "equivalent"
    assert next(get_task("cola").text_examples("validation", root))["inputs"] == "cola sentence: Him left."


@pytest.fixture
def offline(monkeypatch):
    import datasets
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_missing_data_says_where_it_looked(tmp_path, offline):
    with pytest.raises(DataNotFoundError) as info:
        list(get_task("stsb").text_examples("validation", tmp_path))
    message = str(info.value)
    assert str(tmp_path / "glue" / "STS-B" / "dev.tsv") in message
    assert "nyu-mll/glue" in message and "--data-dir" in message and "\n" not in message


def test_hub_fallback_gives_the_same_rows(tmp_path, data_dir):
    """The real datasets.load_dataset hub path, on a local copy laid out like the hub repo nyu-mll/glue."""
    import datasets
    local = list(GlueSource("stsb").load("validation", data_dir))[:20]
    hub = tmp_path / "hub"
    (hub / "stsb").mkdir(parents=True)
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.Value("float32"), "idx": datasets.Value("int32")})
    datasets.Dataset.from_list(local, features=features).to_parquet(str(hub / "stsb" / "validation-00000.parquet"))
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: stsb\n  data_files:\n  - split: validation\n"
                                   "    path: stsb/validation-*\n---\n")
    source = GlueSource("stsb", hub_path=str(hub))
    (tmp_path / "no-local-copy").mkdir()  # a data dir without glue/ (one that does not exist is an error)
    rows = [dict(r) for r in source.load("validation", tmp_path / "no-local-copy")]
    assert rows == local  # same fields, same values (STS-B scores are float32 in both)


def test_hub_fallback_preprocessed_like_local(tmp_path, data_dir):
    import datasets

    from t2t.tasks.glue import make_glue_task
    local_task = make_glue_task("stsb")
    local = list(itertools.islice(local_task.text_examples("validation", data_dir), 20))
    hub = tmp_path / "hub"
    (hub / "stsb").mkdir(parents=True)
    raw = list(GlueSource("stsb").load("validation", data_dir))[:20]
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.Value("float32"), "idx": datasets.Value("int32")})
    datasets.Dataset.from_list(raw, features=features).to_parquet(str(hub / "stsb" / "validation-00000.parquet"))
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: stsb\n  data_files:\n  - split: validation\n"
                                   "    path: stsb/validation-*\n---\n")
    hub_task = make_glue_task("stsb", GlueSource("stsb", hub_path=str(hub)))
    (tmp_path / "no-local-copy").mkdir()
    from_hub = list(hub_task.text_examples("validation", tmp_path / "no-local-copy"))
    assert [(e["inputs"], e["targets"]) for e in from_hub] == [(e["inputs"], e["targets"]) for e in local]


# ---------------------------------------------------------------------------------------------- AX diagnostic

AX_HEADER = "Lexical Semantics\tPredicate-Argument Structure\tLogic\tKnowledge\tDomain\tPremise\tHypothesis\tLabel"
AX_ROWS = [("", "", "Negation", "", "Artificial", "The cat sat.", "The cat did not sit.", "contradiction"),
           ("Lexical entailment", "", "", "", "News", "A dog ran.", "An animal ran.", "entailment"),
           ("", "Coordination scope", "", "", "Reddit", "Tea and cake.", "Cake.", "neutral"),
           ("", "", "", "World knowledge", "ACL", "Paris is in France.", "Paris is in Italy.", "contradiction")]
AX_LABELLED_TEXT = "\r\n".join([AX_HEADER] + ["\t".join(row) for row in AX_ROWS]) + "\r\n"  # CRLF as published
AX_UNLABELLED_TEXT = ("index\tsentence1\tsentence2\n0\tThe cat sat.\tThe cat did not sit.\n"
                      "1\tA dog ran.\tAn animal ran.\n")


def test_labelled_ax_file_is_read_with_its_labels(tmp_path):
    root = _glue_dir(tmp_path, "AX", "diagnostic-full.tsv", AX_LABELLED_TEXT)
    rows = list(GlueSource("ax").load("test", root))
    assert rows == [{"premise": "The cat sat.", "hypothesis": "The cat did not sit.", "label": 2, "idx": 0},
                    {"premise": "A dog ran.", "hypothesis": "An animal ran.", "label": 0, "idx": 1},
                    {"premise": "Tea and cake.", "hypothesis": "Cake.", "label": 1, "idx": 2},
                    {"premise": "Paris is in France.", "hypothesis": "Paris is in Italy.", "label": 2, "idx": 3}]
    first = next(get_task("ax").text_examples("test", root))
    assert (first["inputs"], first["targets"]) == ("mnli hypothesis: The cat did not sit. premise: The cat sat.",
                                                   "contradiction")


def test_labelled_ax_file_wins_over_the_unlabelled_one(tmp_path):
    root = _glue_dir(tmp_path, "diagnostic", "diagnostic.tsv", AX_UNLABELLED_TEXT)
    assert [r["label"] for r in GlueSource("ax").load("test", root)] == [-1, -1]  # predictions only, as before
    _glue_dir(tmp_path, "AX", "diagnostic-full.tsv", AX_LABELLED_TEXT)
    assert [r["label"] for r in GlueSource("ax").load("test", root)] == [2, 0, 1, 2]


def test_labelled_ax_file_with_a_bad_label_names_file_and_line(tmp_path):
    root = _glue_dir(tmp_path, "AX", "diagnostic-full.tsv", AX_LABELLED_TEXT.replace("\tneutral", "\tmaybe"))
    with pytest.raises(T2TError, match=r"AX/diagnostic-full\.tsv line 4 has label 'maybe'"):
        list(GlueSource("ax").load("test", root))


def r3(targets, predictions) -> float:
    """GLUE's R3 (Gorodkin's K-class Matthews correlation) × 100 from its definition over the confusion
    counts: (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)), c correct, s samples, p_k/t_k predicted/true
    counts per class."""
    classes = sorted(set(targets) | set(predictions))
    s, c = len(targets), sum(t == p for t, p in zip(targets, predictions))
    t_k = [targets.count(k) for k in classes]
    p_k = [predictions.count(k) for k in classes]
    numerator = c * s - sum(p * t for p, t in zip(p_k, t_k))
    return 100 * numerator / np.sqrt((s * s - sum(p * p for p in p_k)) * (s * s - sum(t * t for t in t_k)))


def test_ax_metric_is_glues_r3():
    task = get_task("ax")
    targets, predictions = [2, 0, 1, 2, 0, 1, 1], [2, 0, 0, 1, 0, 1, -1]  # -1: a prediction that is no label
    scores = {}
    for metric_fn in task.metric_fns:
        scores.update(metric_fn(targets, predictions))
    assert scores == {"matthews_corrcoef": pytest.approx(r3(targets, predictions))}


@pytest.mark.parametrize("labelled", [True, False])
def test_ax_is_scored_only_from_the_labelled_file(tmp_path, labelled):
    root = (_glue_dir(tmp_path, "AX", "diagnostic-full.tsv", AX_LABELLED_TEXT) if labelled
            else _glue_dir(tmp_path, "diagnostic", "diagnostic.tsv", AX_UNLABELLED_TEXT))
    vocab = tiny_vocabulary()
    torch.manual_seed(0)
    model = T5(ModelConfig(vocab_size=vocab.vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                           dropout_rate=0.0)).eval()
    scores, records, stats = evaluate_task(model, get_task("ax"), vocab, "test", data_dir=root,
                                           rank_classification=True)
    assert stats["labelled"] is labelled and len(records) == (4 if labelled else 2)
    if labelled:
        assert [r["target_value"] for r in records] == [2, 0, 1, 2]
        assert list(scores) == ["matthews_corrcoef"]  # its value: test_ax_metric_is_glues_r3
    else:
        assert scores == {}  # predictions only, as before


def test_real_labelled_ax_file(data_dir):
    path = data_dir / "glue" / "AX" / "diagnostic-full.tsv"
    if not path.is_file():
        pytest.skip(f"real-data test: {path} is missing")
    rows = list(GlueSource("ax").load("test", data_dir))
    assert len(rows) == GLUE_SIZES["ax"]["test"] == 1104
    assert [sum(r["label"] == k for r in rows) for k in range(3)] == [460, 386, 258]  # as the data README counts
    assert [r["idx"] for r in rows] == list(range(1104))
    examples = list(get_task("ax").text_examples("test", data_dir))
    assert (examples[0]["inputs"], examples[0]["targets"]) == (
        "mnli hypothesis: The cat did not sit on the mat. premise: The cat sat on the mat.", "contradiction")
    assert examples[-1]["targets"] == "neutral"
