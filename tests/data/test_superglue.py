"""SuperGLUE as T5 writes it: exact strings for real rows (written out by hand from the t5 library's rules),
ReCoRD's and WSC's one-to-many expansion, the hub-row flattening of the official files, metrics, the mixture."""

import itertools
import json
import re
import string
from collections import Counter

import pytest
import sklearn.metrics

from t2t.data.sources import InMemorySource
from t2t.data.task import get_mixture, get_task
from t2t.errors import T2TError
from t2t.evaluation import metrics
from t2t.testing import temporarily_registered

# ---------------------------------------------------------------------------------------------- real rows

# (task, split, row, inputs, targets): the first rows of the official files, written out by hand.
# Text fields sorted by name unless T5 gives an order (MultiRC, WiC); AX-b/AX-g cast as RTE.
LITERAL = [
    ("cb", "validation", 0,
     "cb hypothesis: Valence was helping premise: Valence the void-brain, Valence the virtuous valet. Why "
     "couldn't the figger choose his own portion of titanic anatomy to shaft? Did he think he was helping?",
     "contradiction"),
    ("cb", "validation", 1,
     "cb hypothesis: there is a shipment premise: ``Who knows? The point is, do we go with it or not?'' Do we "
     "assume there is a shipment?", "neutral"),
    ("copa", "validation", 0,
     "copa choice1: The toilet filled with water. choice2: Water flowed from the spout. premise: The man turned "
     "on the faucet. question: effect", "choice2"),
    ("copa", "validation", 2,
     "copa choice1: She received her pension. choice2: She paid off her mortgage. premise: The woman retired. "
     "question: effect", "choice1"),
    ("super_glue_rte", "validation", 0,
     "rte hypothesis: Christopher Reeve had an accident. premise: Dana Reeve, the widow of the actor "
     "Christopher Reeve, has died of lung cancer at age 44, according to the Christopher Reeve Foundation.",
     "not_entailment"),
    ("wic", "validation", 0,
     "wic sentence1: An emerging professional class. sentence2: Apologizing for losing your temper, even though "
     "you were badly provoked, showed real class. word: class", "False"),
    ("boolq", "validation", 2,
     "boolq passage: Phantom pain -- Phantom pain sensations are described as perceptions that an individual "
     "experiences relating to a limb or an organ that is not physically part of the body. Limb loss is a result "
     "of either removal by amputation or congenital limb deficiency. However, phantom limb sensations can also "
     "occur following nerve avulsion or spinal cord injury. question: is pain experienced in a missing body "
     "part or paralyzed area", "True"),
    ("boolq", "test", 0,
     "boolq passage: 20 euro note -- Until now there has been only one complete series of euro notes; however a "
     "new series, similar to the current one, is being released. The European Central Bank will, in due time, "
     "announce when banknotes from the first series lose legal tender status. question: is the first series "
     "20 euro note still legal tender", "<unk>"),
    ("axb", "test", 0, "rte hypothesis: The cat did not sit on the mat. premise: The cat sat on the mat.",
     "not_entailment"),
    ("axg", "test", 1,
     "rte hypothesis: The accountant sought help filing taxes. premise: The taxpayer met with the accountant to "
     "get help filing her taxes.", "not_entailment"),
    ("multirc", "validation", 1,
     "multirc question: Would the mass of a baseball affect how much force you have to use to pick it up? "
     "answer: Yes paragraph: What causes a change in motion? The application of a force. Any time an object "
     "changes motion, a force has been applied. In what ways can this happen? Force can cause an object at rest "
     "to start moving. Forces can cause objects to speed up or slow down. Forces can cause a moving object to "
     "stop. Forces can also cause a change in direction. In short, forces cause changes in motion. The moving "
     "object may change its speed, its direction, or both. We know that changes in motion require a force. We "
     "know that the size of the force determines the change in motion. How much an objects motion changes when "
     "a force is applied depends on two things. It depends on the strength of the force. It also depends on the "
     "objects mass. Think about some simple tasks you may regularly do. You may pick up a baseball. This requires "
     "only a very small force. ", "True"),  # the paragraph ends with a space
    # the pronoun (word span2_index of the space-split text) marked, the candidate as target
    ("wsc", "validation", 0,
     "wsc: Bernard , who had not told the government official that he was less than 21 when he filed for a "
     "homestead claim, did not consider that he had done anything dishonest. Still, anyone who knew that he was "
     "19 years old could take his claim away from *him* .", "anyone"),
    ("wsc", "validation", 1,
     "wsc: Mr. Moncrieff visited Chester 's luxurious New York apartment, thinking that it belonged to his son "
     "Edward . The result was that Mr. Moncrieff has decided to cancel Edward 's allowance on the ground that he "
     "no longer requires *his* financial support.", "Mr. Moncrieff"),
    # training keeps only rows whose candidate is the referent: the first are train rows 3 and 4
    ("wsc_train", "train", 0,
     "wsc: The pony behaved well, sir, and showed no vice; but at last he just threw up his heels and tipped the "
     "young gentleman into the thorn hedge. *He* wanted me to help him out, but I hope you will excuse me, sir, "
     "I did not feel inclined to do so.", "young gentleman"),
    ("wsc_train", "train", 1, "wsc: I poured water from the bottle into the cup until *it* was full.", "the cup"),
    # WNLI: the premise's pronoun whose surroundings the hypothesis repeats; what stands in its place
    ("wnli_simple", "validation", 0, "wsc: The drain is clogged with hair. *It* has to be cleaned.", "The hair"),
    ("wnli_simple", "validation", 1, "wsc: Jane knocked on Susan's door but *she* did not answer.", "Susan"),
]


@pytest.mark.parametrize("task,split,row,inputs,targets", LITERAL)
def test_literal_rows(task, split, row, inputs, targets, data_dir):
    example = next(itertools.islice(get_task(task).text_examples(split, data_dir), row, None))
    assert (example["inputs"], example["targets"]) == (inputs, targets)


def test_t2t_show_prints_a_superglue_row(data_dir, capsys):
    from t2t.cli import show_main
    assert show_main(["--task", "copa", "--split", "validation", "-n", "1", "--data-dir", str(data_dir)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "inputs": "copa choice1: The toilet filled with water. choice2: Water flowed from the spout. premise: "
                  "The man turned on the faucet. question: effect", "targets": "choice2"}


def _official_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_multirc_is_flattened_like_the_hub(data_dir):
    """One example per answer, in file order, grouped by question; the label words of each answer."""
    paragraphs = _official_rows(data_dir / "superglue" / "MultiRC" / "val.jsonl")
    expected = [(q["idx"], a["idx"], f"multirc question: {q['question']} answer: {a['text']} paragraph: "
                                     f"{p['passage']['text']}", ["False", "True"][a["label"]])
                for p in paragraphs for q in p["passage"]["questions"] for a in q["answers"]]
    got = [(e["idx"]["question"], e["idx"]["answer"], e["inputs"], e["targets"])
           for e in get_task("multirc").text_examples("validation", data_dir)]
    assert len(got) == len(expected) == 4848
    assert got == expected


@pytest.mark.parametrize("task,folder,size", [("boolq", "BoolQ", 3270), ("cb", "CB", 56), ("copa", "COPA", 100),
                                              ("super_glue_rte", "RTE", 277), ("wic", "WiC", 638)])
def test_validation_labels_and_sizes(task, folder, size, data_dir):
    rows = _official_rows(data_dir / "superglue" / folder / "val.jsonl")
    words = {"copa": ["choice1", "choice2"]}.get(task)
    expected = [words[r["label"]] if words else str(r["label"]) for r in rows]
    got = [e["targets"] for e in get_task(task).text_examples("validation", data_dir)]
    assert len(got) == size and got == expected


def test_wsc_train_keeps_the_correct_referents_only(data_dir):
    rows = _official_rows(data_dir / "superglue" / "WSC" / "train.jsonl")
    kept = list(get_task("wsc_train").text_examples("train", data_dir))
    assert len(kept) == sum(r["label"] for r in rows) == 259  # t5's rate for this task
    assert [e["idx"] for e in kept] == [r["idx"] for r in rows if r["label"]]


def test_every_wsc_and_wnli_row_fits_the_simple_form(data_dir):
    for task, split in (("wsc", "validation"), ("wsc", "test"), ("wsc_train", "train"),
                        ("wnli_simple", "validation"), ("wnli_simple", "test")):
        examples = list(get_task(task).text_examples(split, data_dir))
        assert all(e["inputs"].startswith("wsc: ") and e["inputs"].count("*") == 2 for e in examples), task



@pytest.mark.parametrize("empty", ["", "the", " The  "])
def test_empty_wsc_predictions_score_nothing_on_the_real_rows(empty, data_dir):
    """T5's wsc_simple returns -1 for an empty prediction: all-empty decodes of WSC validation score 0, not
    the share of label-0 rows (66 of 104, 63.46%)."""
    task = get_task("wsc")
    examples = [{**e, "targets_pretokenized": e["targets"]} for e in task.text_examples("validation", data_dir)]
    targets = [task.postprocess(e["targets"], e, is_target=True) for e in examples]
    assert len(examples) == 104 and targets.count(0) == 66
    predictions = [task.postprocess(empty, e) for e in examples]
    assert set(predictions) == {-1}
    assert metrics.accuracy(targets, predictions) == {"accuracy": 0.0}

# ---------------------------------------------------------------------------------------------- fixtures
# Rows in the hub's format for what is not on disk (ReCoRD, BoolQ train, DPR), written here.

RECORD_ROWS = [
    {"passage": "Rain hit Oslo on Monday.\n@highlight\nOslo flooded\n@highlight\nTrains stopped",
     "query": "@placeholder closed its schools.", "entities": ["Monday", "Oslo", "Rain"],
     "answers": ["Oslo", "Rain"], "idx": {"passage": 0, "query": 0}},
    {"passage": "Ada wrote \"Notes\"\n@highlight\nShe was 27", "query": "@placeholder wrote the notes.",
     "entities": ["Ada", "Notes"], "answers": [], "idx": {"passage": 1, "query": 1}},
]


def _fixture_task(name, rows, split="validation"):
    from dataclasses import replace
    return replace(get_task(name), name=f"fixture_{name}", source=InMemorySource({split: rows}))


def test_record_gives_one_example_per_answer():
    task = _fixture_task("record", RECORD_ROWS)
    got = [(e["inputs"], e["targets"]) for e in task.text_examples("validation")]
    first = ("record query: @placeholder closed its schools. entities: Monday, Oslo, Rain passage: Rain hit Oslo on "
             "Monday. Oslo flooded. Trains stopped")
    second = "record query: @placeholder wrote the notes. entities: Ada, Notes passage: Ada wrote \"Notes\" She was 27"
    assert got == [(first, "Oslo"), (first, "Rain"), (second, "<unk>")]


def test_record_entities_are_a_sorted_set_whatever_the_source_order():
    """TFDS gives t5 ReCoRD's entities as sorted(set(...)); a source listing them in passage order, with
    repeats, gives the same input string."""
    shuffled = [{**RECORD_ROWS[0], "entities": ["Rain", "Oslo", "Monday", "Oslo"]}]
    inputs = {e["inputs"] for e in _fixture_task("record", shuffled).text_examples("validation")}
    assert inputs == {"record query: @placeholder closed its schools. entities: Monday, Oslo, Rain passage: Rain "
                      "hit Oslo on Monday. Oslo flooded. Trains stopped"}


def test_record_training_stream_draws_each_answer_once_per_epoch():
    from t2t.data.pipeline import build_train_batches
    from t2t.testing import tiny_vocabulary
    vocab = tiny_vocabulary()
    with temporarily_registered(_fixture_task("record", RECORD_ROWS, split="train")):
        batches = build_train_batches("fixture_record", vocab=vocab, batch_size=1, input_length=64,
                                      target_length=8, pack=False)
        epoch = [vocab.decode(b["decoder_target_tokens"][0].tolist()) for b in itertools.islice(batches, 3)]
    assert sorted(epoch) == sorted(vocab.decode(vocab.encode(t)) for t in ("Oslo", "Rain", "<unk>"))


def test_official_record_file_is_flattened_like_the_hub(tmp_path):
    from t2t.tasks.superglue import read_superglue_jsonl
    text = "Rain hit Oslo on Monday. Oslo flooded."
    record = {"idx": 7, "source": "Daily mail",
              "passage": {"text": text, "entities": [{"start": 9, "end": 12}, {"start": 17, "end": 22},
                                                     {"start": 25, "end": 28}, {"start": 0, "end": 3}]},
              "qas": [{"idx": 70, "query": "@placeholder got wet.",
                       "answers": [{"start": 9, "end": 12, "text": "Oslo"}, {"start": 25, "end": 28, "text": "Oslo"}]},
                      {"idx": 71, "query": "It rained on @placeholder."}]}
    path = tmp_path / "val.jsonl"
    path.write_text(json.dumps(record) + "\n")
    rows = list(read_superglue_jsonl([path], config="record"))
    assert rows == [
        {"passage": text, "query": "@placeholder got wet.", "entities": ["Monday", "Oslo", "Rain"],
         "answers": ["Oslo"], "idx": {"passage": 7, "query": 70}},
        {"passage": text, "query": "It rained on @placeholder.", "entities": ["Monday", "Oslo", "Rain"],
         "answers": [], "idx": {"passage": 7, "query": 71}}]


def test_wsc_train_fixture_drops_wrong_referents():
    rows = [{"text": "Tom thanked Ann because she helped him .", "span1_index": 2, "span1_text": "Ann",
             "span2_index": 4, "span2_text": "she", "label": 1, "idx": 0},
            {"text": "Tom thanked Ann because she helped him .", "span1_index": 0, "span1_text": "Tom",
             "span2_index": 4, "span2_text": "she", "label": 0, "idx": 1},
            {"text": "The cup fell because it was light .", "span1_index": 1, "span1_text": "The cup",
             "span2_index": 4, "span2_text": "it", "label": 1, "idx": 2}]
    task = _fixture_task("wsc_train", rows, split="train")
    assert [(e["inputs"], e["targets"]) for e in task.text_examples("train")] == [
        ("wsc: Tom thanked Ann because *she* helped him .", "Ann"),
        ("wsc: The cup fell because *it* was light .", "The cup")]
    evaluation = _fixture_task("wsc", rows)
    assert len(list(evaluation.text_examples("validation"))) == 3


def test_boolq_train_and_dpr_fixtures():
    boolq = _fixture_task("boolq", [{"question": "is it wet", "passage": "Rain -- It rained.", "idx": 0, "label": 1}],
                          split="train")
    assert [(e["inputs"], e["targets"]) for e in boolq.text_examples("train")] == [
        ("boolq passage: Rain -- It rained. question: is it wet", "True")]
    dpr = _fixture_task("dpr", [{"sentence": "Bob asked Tom if he can lend some money.", "pronoun": "he",
                                 "candidates": ["Bob", "Tom"], "label": 1}], split="train")
    assert [(e["inputs"], e["targets"]) for e in dpr.text_examples("train")] == [
        ("wsc: Bob asked Tom if *he* can lend some money.", "Tom")]


def test_multirc_html_is_removed_over_the_whole_text():
    row = {"paragraph": "<b>Sent 1: </b>It rained.<br><b>Sent 2: </b>We stayed in.<br>", "question": "Why?",
           "answer": "<b>Rain</b>", "idx": {"paragraph": 0, "question": 0, "answer": 0}, "label": 1}
    (example,) = _fixture_task("multirc", [row]).text_examples("validation")
    assert example["inputs"] == "multirc question: Why? answer: Rain paragraph: Sent 1: It rained. Sent 2: We stayed in. "


# ---------------------------------------------------------------------------------------------- scoring

def _score(task_name, rows, predictions):
    task = _fixture_task(task_name, rows)
    examples = [{**e, "targets_pretokenized": e["targets"]} for e in task.text_examples("validation")]
    targets = [task.postprocess(e["targets"], e, is_target=True) for e in examples]
    predicted = [task.postprocess(p, e) for p, e in zip(predictions, examples)]
    out = {}
    for fn in task.metric_fns:
        out.update(fn(targets, predicted))
    return out


def test_cb_scores_match_scikit_learn():
    words = ["entailment", "contradiction", "neutral"]
    labels = [0, 1, 2, 0, 2, 1, 0, 2]
    guesses = ["entailment", "neutral", "neutral", "maybe", "neutral", "contradiction", "contradiction", "entailment"]
    rows = [{"premise": "p", "hypothesis": "h", "idx": i, "label": y} for i, y in enumerate(labels)]
    ids = [words.index(g) if g in words else -1 for g in guesses]
    result = _score("cb", rows, guesses)
    f1 = sklearn.metrics.f1_score(labels, ids, labels=[0, 1, 2], average="macro")
    assert result == {"mean_3class_f1": pytest.approx(100 * f1),
                      "accuracy": pytest.approx(100 * sklearn.metrics.accuracy_score(labels, ids))}


def test_multirc_scores_match_scikit_learn_and_group_by_question():
    labels = [1, 0, 1, 1, 0]
    questions = [0, 0, 1, 1, 2]
    guesses = ["True", "False", "True", "False", "nonsense"]
    rows = [{"paragraph": "p", "question": "q", "answer": "a", "label": y,
             "idx": {"paragraph": 0, "question": q, "answer": i}} for i, (y, q) in enumerate(zip(labels, questions))]
    result = _score("multirc", rows, guesses)
    # "nonsense" counts as wrong: the opposite of its label (0 -> 1)
    assert result["f1"] == pytest.approx(100 * sklearn.metrics.f1_score(labels, [1, 0, 1, 0, 1]))
    assert result["exact_match"] == pytest.approx(100 / 3)  # question 0 all right, 1 and 2 not


def _official_squad_normalize(text):
    """The SQuAD v1.1 evaluation script's normalize_answer (also ReCoRD's official evaluation)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _official_f1(prediction, truth):
    pred, gold = _official_squad_normalize(prediction).split(), _official_squad_normalize(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def test_record_scores_each_query_once_with_the_best_answer():
    rows = [dict(RECORD_ROWS[0]),
            {"passage": "The Eiffel Tower is tall.", "query": "@placeholder is tall.",
             "entities": ["The Eiffel Tower"], "answers": ["The Eiffel Tower"], "idx": {"passage": 2, "query": 2}}]
    # three examples (Oslo and Rain for the first query); the model's answer to each copy of a query is the
    # same text in practice, but only the first copy counts
    predictions = ["rain.", "Oslo", "the Eiffel"]
    result = _score("record", rows, predictions)
    em = [max(float(_official_squad_normalize("rain.") == _official_squad_normalize(a)) for a in ("Oslo", "Rain")),
          float(_official_squad_normalize("the Eiffel") == _official_squad_normalize("The Eiffel Tower"))]
    f1 = [max(_official_f1("rain.", a) for a in ("Oslo", "Rain")), _official_f1("the Eiffel", "The Eiffel Tower")]
    assert result == {"em": pytest.approx(100 * sum(em) / 2), "f1": pytest.approx(100 * sum(f1) / 2)}
    assert result["em"] == pytest.approx(50.0) and result["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)


def test_wsc_postprocessor_names_the_referent():
    rows = [{"text": "The cup fell because it was light .", "span1_index": 1, "span1_text": "the cup",
             "span2_index": 4, "span2_text": "it", "label": 1, "idx": 0}] * 4
    result = _score("wsc", rows, ["The Cup", "the blue cup", "the cup's handle", "the table"])
    # determiners and case ignored, one's words may contain the other's; a possessive or another noun is not it
    assert result == {"accuracy": 50.0}


def test_axg_accuracy_and_gender_parity():
    pairs = [("The nurse was tired.", 0), ("The doctor left.", 1), ("The chef cooked.", 0)]
    rows = [{"premise": f"{h} {pronoun}", "hypothesis": h, "idx": 2 * i + j, "label": y}
            for i, (h, y) in enumerate(pairs) for j, pronoun in enumerate(("He did.", "She did."))]
    guesses = ["entailment", "entailment", "entailment", "not_entailment", "not_entailment", "not_entailment"]
    result = _score("axg", rows, guesses)
    assert result == {"accuracy": pytest.approx(100 * 3 / 6), "gender_parity": pytest.approx(100 * 2 / 3)}
    # a pair cut in half is left out
    assert metrics.gender_parity([{"group": "a"}, {"group": "a"}, {"group": "b"}],
                                 [{"value": 1}, {"value": 1}, {"value": 0}]) == {"gender_parity": 100.0}


def test_axb_scores_matthews_correlation():
    labels, guesses = [0, 1, 1, 0, 1], ["entailment", "not_entailment", "entailment", "entailment", "x"]
    rows = [{"sentence1": "a", "sentence2": "b", "idx": i, "label": y} for i, y in enumerate(labels)]
    expected = 100 * sklearn.metrics.matthews_corrcoef(labels, [0, 1, 0, 0, -1])
    assert _score("axb", rows, guesses) == {"matthews_corrcoef": pytest.approx(expected)}


# ---------------------------------------------------------------------------------------------- registry

def test_names_aliases_and_mixture_rates():
    for alias, name in [("boolq", "super_glue_boolq_v102"), ("super_glue_rte", "super_glue_rte_v102"),
                        ("wsc", "super_glue_wsc_v102_simple_eval"), ("wsc_train", "super_glue_wsc_v102_simple_train"),
                        ("dpr", "dpr_v001_simple"), ("wnli_simple", "glue_wnli_v002_simple_eval")]:
        assert get_task(alias).name == name
    assert get_task("rte").name == "glue_rte_v002"  # GLUE keeps the short name
    mixture = get_mixture("super_glue_v102")
    rates = mixture.rates()
    assert rates["super_glue_record_v102"] == 138_854 and rates["super_glue_multirc_v102"] == 27_243
    assert sorted(n for n, r in rates.items() if r == 0) == [
        "super_glue_axb_v102", "super_glue_axg_v102", "super_glue_wsc_v102_simple_eval"]
    assert get_task("axb").splits == ("test",) and get_task("wsc_train").splits == ("train",)


def test_damaged_official_file_names_file_and_line(tmp_path):
    folder = tmp_path / "superglue" / "CB"
    folder.mkdir(parents=True)
    (folder / "val.jsonl").write_text('{"premise": "p", "hypothesis": "h", "label": "entailment", "idx": 0}\n'
                                      '{"premise": "p", "hypothesis": "h", "label": "maybe", "idx": 1}\n')
    with pytest.raises(T2TError, match=r"CB/val.jsonl line 2 has label 'maybe'"):
        list(get_task("cb").text_examples("validation", tmp_path))
    (folder / "val.jsonl").write_text('{"premise": "p", "label": "entailment", "idx": 0}\n')
    with pytest.raises(T2TError, match=r"line 1 is not in the official CB layout"):
        list(get_task("cb").text_examples("validation", tmp_path))


def test_missing_local_data_falls_back_to_the_hub_and_says_so(tmp_path):
    from t2t.data.sources import DataNotFoundError
    with pytest.raises(DataNotFoundError, match="SuperGLUE ReCoRD"):
        list(get_task("record").text_examples("train", tmp_path))


def test_superglue_average_as_t5_counts_it():
    from t2t.evaluation.results import benchmark_averages
    results = {"super_glue_cb_v102": {"mean_3class_f1": 60.0, "accuracy": 80.0},
               "super_glue_multirc_v102": {"f1": 70.0, "exact_match": 20.0},
               "super_glue_copa_v102": {"accuracy": 55.0},
               "super_glue_wsc_v102_simple_eval": {"accuracy": 65.0},
               "super_glue_axb_v102": {"matthews_corrcoef": 10.0},  # diagnostics and DPR are not averaged
               "super_glue_axg_v102": {"accuracy": 50.0, "gender_parity": 90.0},
               "dpr_v001_simple": {"accuracy": 0.0}}
    average = benchmark_averages(results)["super_glue"]
    assert average["title"] == "SuperGLUE"
    assert average["value"] == pytest.approx((70.0 + 45.0 + 55.0 + 65.0) / 4)
    assert average["tasks"] == ["super_glue_cb_v102", "super_glue_copa_v102", "super_glue_multirc_v102",
                                "super_glue_wsc_v102_simple_eval"]
    assert "super_glue_record_v102" in average["missing"] and "glue" not in benchmark_averages(results)


@pytest.mark.integration
def test_train_and_evaluate_the_superglue_mixture_end_to_end(data_dir, tmp_path):
    """Trains on the SuperGLUE tasks with local train data, then evaluates every task with local validation
    data and prints the SuperGLUE average (ReCoRD, BoolQ's train split and DPR are not on disk)."""
    from test_e2e import cli
    run = tmp_path / "run"
    train = cli("train_main", "--mixture", "super_glue_v102_proportional", "--skip-unavailable", "--config",
                "cpu-smoke", "--data-dir", str(data_dir), "--train-steps", "3", "--batch-size", "4",
                "--output-dir", str(run))
    assert train.returncode == 0, train.stderr[-3000:]
    for skipped in ("super_glue_record_v102", "super_glue_boolq_v102", "dpr_v001_simple"):
        assert f"skipping {skipped}" in train.stderr
    evaluation = cli("eval_main", "--mixture", "super_glue_v102_proportional", "--skip-unavailable",
                     "--checkpoint", str(run), "--data-dir", str(data_dir), "--max-examples", "3",
                     "--batch-size", "3", "--output-dir", str(tmp_path / "eval"))
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    evaluated = ["super_glue_wsc_v102_simple_eval", "super_glue_boolq_v102", "super_glue_cb_v102",
                 "super_glue_copa_v102", "super_glue_multirc_v102", "super_glue_rte_v102", "super_glue_wic_v102"]
    for task in evaluated:
        assert task in evaluation.stdout
    assert "SuperGLUE average" in evaluation.stdout
    assert "not evaluated: super_glue_record_v102" in evaluation.stdout
    summary = json.loads((tmp_path / "eval" / "validation" / "super_glue_v102_proportional.summary.json").read_text())
    assert sorted(summary["benchmarks"]["super_glue"]["tasks"]) == sorted(evaluated)


def test_t2t_tasks_lists_superglue_with_sizes_and_local_splits(data_dir, capsys):
    from t2t.cli import tasks_main
    from t2t.data.show import registry_table
    assert tasks_main(["--data-dir", str(data_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line in ("task     super_glue_cb_v102 (cb)  [train=250, validation=56, test=250]  local: train, validation, "
                 "test",
                 "task     super_glue_record_v102 (record)  [train=100730, validation=10000, test=10000]  local: none",
                 "task     super_glue_boolq_v102 (boolq)  [train=9427, validation=3270, test=3245]  local: validation, "
                 "test",
                 "task     super_glue_axg_v102 (axg)  [test=356]  local: test",
                 "task     dpr_v001_simple (dpr)  [train=1322, test=564]"):
        assert line in lines
    mixture = next(line for line in lines if line.startswith("mixture  super_glue_v102_proportional"))
    assert "(super_glue_v102)  examples-proportional (9 tasks): dpr_v001_simple=1322, " in mixture
    rates = {row["name"]: row for row in registry_table(data_dir)}["super_glue_v102_proportional"]["rates"]
    assert rates["super_glue_record_v102"] == 138854  # t5's written-down size; the line lists the first three


def test_rank_choices_are_the_label_words_or_the_example_options():
    assert get_task("cb").rank_choices_for({}) == ["entailment", "contradiction", "neutral"]
    assert get_task("copa").rank_choices_for({}) == ["choice1", "choice2"]
    assert get_task("record").rank_choices_for(RECORD_ROWS[0]) == ["Monday", "Oslo", "Rain"]
    assert get_task("dpr").rank_choices_for({"candidates": ["Bob", "Tom"]}) == ["Bob", "Tom"]


def test_docs_name_the_metric_definitions_that_changed_since_the_paper():
    """docs/tasks.md says which MultiRC F1 and which ReCoRD scoring a t2t number is."""
    from pathlib import Path
    text = (Path(__file__).parents[2] / "docs" / "tasks.md").read_text()
    section = text[text.index("### Which definition your number is"):]
    assert "F1a" in section and "per-question F1" in section and "December 2019" in section
    assert "ReCoRD" in section and "deduplicate_metric" in section and "no labels: no metrics" in section
