"""Task/Mixture dataclasses, the registries, load_modules, task.examples, and the docs' custom task."""

import dataclasses
import functools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import t2t.data.task as task_module
from t2t.data.sources import InMemorySource, JsonlFiles
from t2t.data.task import (
    MIXTURES,
    TASKS,
    Feature,
    Mixture,
    Task,
    get_mixture,
    get_task,
    get_task_or_mixture,
    load_modules,
    member_tasks,
    register_mixture,
    register_task,
)
from t2t.errors import T2TError
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
ROWS = [{"inputs": "the first question", "targets": "yes"}, {"inputs": "a second one", "targets": "no"}]


def test_task_is_frozen_and_normalises_lists():
    task = in_memory_task("t", {"train": ROWS}, preprocessors=[lambda ex: ex])
    assert isinstance(task.preprocessors, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.name = "other"
    with pytest.raises(T2TError, match="must hold functions"):
        Task("bad", InMemorySource({"train": ROWS}), preprocessors=["not a function"])
    with pytest.raises(T2TError, match="Feature"):
        Task("bad", InMemorySource({"train": ROWS}), output_features={"targets": "vocab"})


def test_preprocessors_compose_in_order_over_raw_fields():
    def add_prefix(ex, *, prefix):
        return {"inputs": prefix + ex["question"], "targets": ex["answer"]}

    def shout(ex):
        return {**ex, "targets": ex["targets"].upper()}

    task = in_memory_task("qa", {"train": [{"question": "why?", "answer": "because", "id": 7}]},
                          preprocessors=[functools.partial(add_prefix, prefix="q: "), shout])
    (example,) = task.text_examples("train")
    assert example == {"question": "why?", "answer": "because", "id": 7, "inputs": "q: why?", "targets": "BECAUSE"}


def test_preprocessor_must_return_a_dict():
    task = in_memory_task("t", {"train": ROWS}, preprocessors=[lambda ex: None])
    with pytest.raises(T2TError, match="returned NoneType"):
        list(task.text_examples("train"))


def test_a_feature_that_is_not_text_names_the_example(monkeypatch):
    """A JSON-lines example without 'targets' reads as None there: the error says which example."""
    from t2t.data import tokenized
    monkeypatch.setattr(tokenized, "TOKENIZE_CHUNK", 2)  # the example is in the second chunk: counted from 0
    rows = ROWS + [{"inputs": "third", "targets": "yes"}, {"inputs": "fourth", "targets": None}]
    task = in_memory_task("t", {"train": rows})
    with pytest.raises(T2TError, match=r"feature 'targets' of example 3 \(counting from 0 in the data's order\) "
                                       r"must be a string after the text preprocessors, got NoneType \(a field "
                                       r"missing from a data file reads as None\)"):
        task.examples("train", tiny_vocabulary())


def _per_answer(ex):
    return [{"inputs": f"q: {ex['question']}", "targets": answer} for answer in ex["answers"]]


def _drop_short(ex):
    return [ex] if len(ex["targets"]) > 2 else []


def test_one_to_many_preprocessors_expand_and_filter_in_order():
    rows = [{"question": "who?", "answers": ["Ann", "Bo", "Cy Young"], "id": 1},
            {"question": "none?", "answers": [], "id": 2},
            {"question": "where?", "answers": ["Rome"], "id": 3}]
    upper = lambda ex: {**ex, "targets": ex["targets"].upper()}  # noqa: E731  a 1->1 step after the 1->many ones
    task = in_memory_task("expand", {"train": rows}, preprocessors=[_per_answer, _drop_short, upper])
    got = [(ex["id"], ex["inputs"], ex["targets"]) for ex in task.text_examples("train")]
    assert got == [(1, "q: who?", "ANN"), (1, "q: who?", "CY YOUNG"), (3, "q: where?", "ROME")]
    first = task.preprocess_all(rows[0])[0]
    assert first["answers"] == ["Ann", "Bo", "Cy Young"]  # raw fields stay underneath every expanded example
    assert task.preprocess_all(rows[1]) == []
    assert task.preprocess(rows[2])["targets"] == "ROME"
    with pytest.raises(T2TError, match="turns this example into 2 examples; use task.preprocess_all"):
        task.preprocess(rows[0])


def test_one_to_many_preprocessor_errors():
    rows = [{"question": "who?", "answers": ["A"]}]
    dropped = in_memory_task("drop_all", {"train": rows}, preprocessors=[lambda ex: []])
    with pytest.raises(T2TError, match="preprocessors of task 'drop_all' drop all 1 examples of split 'train'"):
        list(dropped.text_examples("train"))
    bad = in_memory_task("bad_list", {"train": rows}, preprocessors=[lambda ex: ["text"]])
    with pytest.raises(T2TError, match="returned a list holding str"):
        list(bad.text_examples("train"))
    text = in_memory_task("bad_text", {"train": rows}, preprocessors=[lambda ex: "text"])
    with pytest.raises(T2TError, match="returned str, not an example dict or a list"):
        list(text.text_examples("train"))


def test_task_module_does_not_import_the_pipeline():
    import subprocess
    code = ("import sys, t2t.data.task; assert 't2t.data.pipeline' not in sys.modules, 'task imports pipeline'; "
            "import t2t.data.tokenized as tk; assert not hasattr(tk, 'get_task')")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_and_empty_split():
    task = in_memory_task("t", {"train": ROWS, "validation": []})
    with pytest.raises(T2TError, match="no split 'valdation'.*did you mean 'validation'"):
        list(task.text_examples("valdation"))
    with pytest.raises(T2TError, match="split 'validation' of task 't' is empty"):
        list(task.text_examples("validation"))


def test_examples_for_evaluation():
    vocab = tiny_vocabulary()
    task = in_memory_task("t", {"validation": ROWS}, output_features={"inputs": Feature(), "targets": Feature()})
    examples = task.examples("validation", vocab)
    assert [e["inputs_pretokenized"] for e in examples] == ["the first question", "a second one"]
    for example, row in zip(examples, ROWS):
        assert example["inputs"].dtype == np.int64
        assert list(example["inputs"]) == vocab.encode(row["inputs"]) + [vocab.eos_id]
        assert list(example["targets"]) == vocab.encode(row["targets"]) + [vocab.eos_id]
    no_eos = in_memory_task("n", {"validation": ROWS}, output_features={"inputs": Feature(add_eos=False),
                                                                        "targets": Feature()})
    assert list(no_eos.examples("validation", vocab)[0]["inputs"]) == vocab.encode(ROWS[0]["inputs"])


def test_registry_duplicates_aliases_and_suggestions():
    task = in_memory_task("my_unique_task", {"train": ROWS})
    with temporarily_registered(task, aliases={"my_unique_task": ["mut"]}):
        assert get_task("mut") is task and get_task_or_mixture("my_unique_task") is task
        with pytest.raises(T2TError, match="already registered"):
            register_task(in_memory_task("my_unique_task", {"train": ROWS}))
        with pytest.raises(T2TError, match="already registered"):
            register_mixture(Mixture("mut", [("my_unique_task", 1.0)]))
        with pytest.raises(T2TError, match="did you mean my_unique_task"):
            get_task("my_uniqe_task")
    assert "my_unique_task" not in TASKS and "mut" not in TASKS


def test_misspelt_builtin_names_suggest_the_right_one():
    with pytest.raises(T2TError, match=r"unknown task or mixture 'glue_stbs_v002'; did you mean glue_stsb_v002"):
        get_task_or_mixture("glue_stbs_v002")
    with pytest.raises(T2TError, match="did you mean .*glue_v002"):
        get_mixture("glue_v02")
    with pytest.raises(T2TError, match="is a mixture, not a task"):
        get_task("glue_v002")


def test_mixture_members_and_rates():
    a, b = in_memory_task("mix_a", {"train": ROWS}), in_memory_task("mix_b", {"train": ROWS * 3})
    from t2t.data.mixing import rate_num_examples
    mixture = Mixture("mix_ab", [("mix_a", 2.0), (b, rate_num_examples())])
    with temporarily_registered(a, b, mixture):
        assert mixture.rates() == {"mix_a": 2.0, "mix_b": 6.0}
        assert [t.name for t in member_tasks("mix_ab")] == ["mix_a", "mix_b"]
        assert member_tasks(a) == [a]
    assert Mixture("m", {"x": 1, "y": 3}).tasks == (("x", 1), ("y", 3))
    assert Mixture("m", ["x", "y"], default_rate=2.0).tasks == (("x", 2.0), ("y", 2.0))
    with pytest.raises(T2TError, match="non-negative"):
        Mixture("m", [("x", -1)])
    with pytest.raises(T2TError, match="twice"):
        Mixture("m", [("x", 1), ("x", 2)])
    with pytest.raises(T2TError, match="no tasks"):
        Mixture("m", [])


REPO = Path(__file__).resolve().parents[2]


def test_builtins_are_every_module_of_the_packages_tasks_first_loaded_once():
    on_disk = {f"t2t.{folder}.{path.stem}" for folder in ("tasks", "mixtures")
               for path in (REPO / folder).glob("*.py") if path.stem != "__init__"}
    found = task_module.builtin_modules()
    assert set(found) == on_disk and len(found) == len(on_disk)
    assert found == sorted(found, key=lambda name: (name.startswith("t2t.mixtures."), name))  # tasks first
    first = load_modules()
    assert load_modules() == first  # no duplicate-registration error the second time
    assert first[:len(found)] == found
    assert "glue_stsb_v002" in TASKS and "glue_v002_proportional" in MIXTURES


@pytest.fixture
def fresh_module_loading(monkeypatch, tmp_path):
    """``load_modules`` as in a new process, with ``tmp_path`` importable; what it registers is removed after."""
    monkeypatch.setattr(task_module, "_builtin_modules_loaded", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(TASKS.names())
    yield tmp_path
    for name in set(TASKS.names()) - before:
        TASKS.unregister(name)
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


TASK_MODULE_TEXT = ("from t2t import InMemorySource, Task, register_task\n"
                    "register_task(Task({name!r}, InMemorySource({{'train': [{{'inputs': 'a', 'targets': 'b'}}]}})))\n")


def test_a_new_module_in_a_builtin_package_is_found_without_a_list(fresh_module_loading, monkeypatch):
    for package, modules in {"found_tasks": ("zeta", "alpha"), "found_mixtures": ("mix",)}.items():
        (fresh_module_loading / package).mkdir()
        (fresh_module_loading / package / "__init__.py").write_text("")
        for module in modules:
            (fresh_module_loading / package / f"{module}.py").write_text(
                TASK_MODULE_TEXT.format(name=f"{package}_{module}_task"))
    monkeypatch.setattr(task_module, "BUILTIN_PACKAGES", ("found_tasks", "found_mixtures"))
    assert load_modules()[:3] == ["found_tasks.alpha", "found_tasks.zeta", "found_mixtures.mix"]
    assert {"found_tasks_alpha_task", "found_tasks_zeta_task", "found_mixtures_mix_task"} <= set(TASKS.names())


def install_fake_package(folder: Path, module_text: str) -> None:
    """What ``pip install`` leaves for a package whose ``setup.cfg`` has
    ``[options.entry_points] t2t.tasks = acme = acme_t2t_tasks``: a dist-info folder and the module."""
    dist_info = folder / "acme_t2t-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-t2t\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[t2t.tasks]\nacme = acme_t2t_tasks\n")
    (folder / "acme_t2t_tasks.py").write_text(module_text)


def test_an_installed_package_ships_tasks_through_its_entry_point(fresh_module_loading):
    install_fake_package(fresh_module_loading, TASK_MODULE_TEXT.format(name="acme_task"))
    assert "acme_t2t_tasks" in load_modules()
    assert get_task("acme_task").name == "acme_task"


def test_a_failing_package_module_is_one_sentence_naming_package_and_module(fresh_module_loading):
    install_fake_package(fresh_module_loading, "import no_such_dependency_of_acme\n")
    with pytest.raises(T2TError) as failure:
        load_modules()
    message = str(failure.value)
    assert message == ("package 'acme-t2t' ships task module 'acme_t2t_tasks' (entry point 'acme' of group "
                       "'t2t.tasks'), which raised ModuleNotFoundError (No module named "
                       "'no_such_dependency_of_acme') while it was imported; upgrade or fix that package, or "
                       "uninstall it.")


def test_load_user_module_by_name_and_path(tmp_path, monkeypatch):
    (tmp_path / "pkg_user_tasks.py").write_text(
        "from t2t.data.sources import InMemorySource\nfrom t2t.data.task import Task, register_task\n"
        "register_task(Task('user_mod_task', InMemorySource({'train': [{'inputs': 'a', 'targets': 'b'}]})))\n")
    (tmp_path / "file_tasks.py").write_text(
        "from t2t.data.sources import InMemorySource\nfrom t2t.data.task import Task, register_task\n"
        "register_task(Task('user_file_task', InMemorySource({'train': [{'inputs': 'a', 'targets': 'b'}]})))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        load_modules(["pkg_user_tasks", str(tmp_path / "file_tasks.py")])
        load_modules(["pkg_user_tasks", str(tmp_path / "file_tasks.py")])  # again: imported once
        assert "user_mod_task" in TASKS and "user_file_task" in TASKS
    finally:
        TASKS.unregister("user_mod_task")
        TASKS.unregister("user_file_task")
        sys.modules.pop("pkg_user_tasks", None)
    with pytest.raises(T2TError, match="task module 'no_such_module_xyz' cannot be found"):
        load_modules(["no_such_module_xyz"])
    with pytest.raises(T2TError, match="does not exist"):
        load_modules([str(tmp_path / "missing.py")])


def test_has_split(tmp_path):
    task = Task("files", JsonlFiles({"train": "train.jsonl", "validation": "validation.jsonl"}))
    (tmp_path / "train.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    assert task.has_split("train", tmp_path)
    assert not task.has_split("validation", tmp_path)
    assert not task.has_split("test", tmp_path)


# ---------------------------------------------------------------------------------------------- docs/tasks.md

def _custom_task_code() -> str:
    text = DOCS.read_text()
    section = text.split("## Custom tasks", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def custom_task_module(tmp_path):
    path = tmp_path / "my_tasks.py"
    path.write_text(_custom_task_code())
    yield path
    TASKS.unregister("my_sentiment")


def test_docs_custom_task_imports_from_t2t_alone():
    imports = [line for line in _custom_task_code().splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import functools", "from t2t import JsonlFiles, T2TError, Task, metrics, preprocessors, register_task"]


def test_docs_custom_task_runs_verbatim(tmp_path, custom_task_module):
    from t2t.data.pipeline import build_train_batches
    from t2t.data.show import show_examples

    data = tmp_path / "data"
    (data / "sentiment").mkdir(parents=True)
    train = [{"text": f"review number {i} was {'great' if i % 2 else 'bad'}", "label": LABEL}
             for i, LABEL in zip(range(20), ["negative", "positive"] * 10)]
    validation = [{"text": "a warm, funny film", "label": "positive"}, {"text": "dull", "label": "negative"}]
    (data / "sentiment" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (data / "sentiment" / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in validation))

    load_modules([str(custom_task_module)])
    task = get_task("sentiment")
    assert task.name == "my_sentiment"
    shown = list(show_examples("sentiment", "validation", 2, data_dir=data))
    assert shown == [{"inputs": "sentiment: a warm, funny film", "targets": "positive"},
                     {"inputs": "sentiment: dull", "targets": "negative"}]

    vocab = tiny_vocabulary()
    examples = task.examples("validation", vocab, data_dir=data)
    assert examples[0]["text"] == "a warm, funny film" and examples[0]["label"] == "positive"
    targets = [task.postprocess(e["targets_pretokenized"], e, is_target=True) for e in examples]
    assert targets == [1, 0]
    assert task.metric_fns[0](targets, [1, 1]) == {"accuracy": 50.0}

    batches = iter(build_train_batches("my_sentiment", vocab=vocab, batch_size=4, input_length=32,
                                       target_length=4, data_dir=data))
    batch = next(batches)
    assert batch["encoder_input_tokens"].shape == (4, 32)

    (data / "sentiment" / "validation.jsonl").write_text(json.dumps({"text": "meh", "label": "neutral"}) + "\n")
    with pytest.raises(T2TError, match="has label 'neutral'; use one of negative, positive"):
        list(show_examples("my_sentiment", "validation", 1, data_dir=data))


def test_a_row_without_the_fields_the_preprocessors_read_is_one_sentence(tmp_path, custom_task_module):
    """The docs' task on a JSON-lines row without fields (they read as None) and on a TSV whose header renamed
    'label': the error names the task, the file and line, the field and the fields the example has."""
    from t2t.data.sources import TsvFiles

    (tmp_path / "sentiment").mkdir()
    (tmp_path / "sentiment" / "validation.jsonl").write_text('{"text": "fine", "label": "positive"}\n{}\n')
    load_modules([str(custom_task_module)])
    task = get_task("my_sentiment")
    path = tmp_path / "sentiment" / "validation.jsonl"
    with pytest.raises(T2TError, match=rf"^task 'my_sentiment': jsonl file {re.escape(str(path))}, line 2 has no "
                                       rf"field 'text' \(it has none\); add 'text' to it, or leave it out of the "
                                       rf"data\.$"):
        list(task.text_examples("validation", tmp_path))

    (tmp_path / "renamed.tsv").write_text("text\tlabl\nfine\tpositive\n")
    renamed = dataclasses.replace(task, source=TsvFiles({"validation": str(tmp_path / "renamed.tsv")}))
    with pytest.raises(T2TError, match=r"renamed\.tsv, line 2 has no field 'label' \(its fields: text, labl\)"):
        list(renamed.text_examples("validation"))


@pytest.mark.parametrize("lines, line, said", [
    (['{"text": "fine", "label": "positive"}', '{"label": "positive"}'], 2,
     "has no field 'text' (its fields: label); add 'text' to it, or leave it out of the data."),
    (['{"text": "fine", "label": "positive"}', '{"text": "good", "label": "positive"}',
      '{"text": 5, "label": "positive"}'], 3,
     "has 5 in field 'text' where text is expected; make it a string."),
    (['{"text": 5, "label": "positive"}', '{"text": 7, "label": "negative"}'], 1,  # a number in every line
     "has 5 in field 'text' where text is expected; make it a string."),
    (['{"text": "fine", "label": null}'], 1,
     "has no field 'label' (its fields: text); add 'label' to it, or leave it out of the data."),
    (['{"text": ["a", "list"], "label": "positive"}'], 1,
     "has ['a', 'list'] in field 'text' where text is expected; make it a string."),
])
def test_the_docs_task_never_trains_on_a_missing_or_non_string_field(lines, line, said, tmp_path,
                                                                      custom_task_module):
    """Such a line used to become the input "sentiment: None" (or "sentiment: 5") with exit 0."""
    path = tmp_path / "sentiment" / "train.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    load_modules([str(custom_task_module)])
    with pytest.raises(T2TError) as info:
        list(get_task("my_sentiment").text_examples("train", tmp_path))
    assert str(info.value) == f"task 'my_sentiment': jsonl file {path}, line {line} {said}"


def test_t2t_show_refuses_the_line_in_one_sentence(tmp_path, custom_task_module, capsys):
    from t2t.cli import show_main

    path = tmp_path / "sentiment" / "validation.jsonl"
    path.parent.mkdir()
    path.write_text('{"text": "fine", "label": "positive"}\n{"label": "positive"}\n')
    code = show_main(["--module", str(custom_task_module), "--task", "sentiment", "--data-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # datasets may draw a progress bar
    assert code == 2 and "None" not in out
    assert errors == [f"error: task 'my_sentiment': jsonl file {path}, line 2 has no field 'text' (its fields: "
                      f"label); add 'text' to it, or leave it out of the data."]


def test_a_regression_task_still_reads_numbers_from_json_lines(tmp_path):
    """Numbers where a task wants them (a float score, ints among floats) are read as they are."""
    from t2t.data.preprocessors import text_field

    def score_to_text(example):
        return {"inputs": f"rate: {text_field(example, 'text')}", "targets": f"{float(example['score']):.1f}"}

    path = tmp_path / "scores.jsonl"
    path.write_text('{"text": "great", "score": 4.5}\n{"text": "bad", "score": 1}\n')
    task = Task("scores", JsonlFiles({"train": str(path)}), preprocessors=[score_to_text])
    assert [(e["inputs"], e["targets"]) for e in task.text_examples("train")] == [("rate: great", "4.5"),
                                                                                  ("rate: bad", "1.0")]


def test_a_failing_preprocessor_names_the_line_of_a_file_and_the_place_of_python_data(tmp_path):
    def question_to_answer(example):
        return {"inputs": example["question"], "targets": example["answer"]}

    path = tmp_path / "qa.jsonl"
    path.write_text('\n{"question": "why?"}\n')  # no line has an answer: the rows have no such field
    in_file = Task("qa", JsonlFiles({"train": str(path)}), preprocessors=[question_to_answer])
    with pytest.raises(T2TError, match=rf"^task 'qa' cannot preprocess jsonl file {re.escape(str(path))}, line 2: "
                                       rf"KeyError: 'answer'; the example has fields question; fix"):
        list(in_file.text_examples("train"))
    in_memory = Task("qa", InMemorySource({"train": [{"question": "why?"}]}), preprocessors=[question_to_answer])
    with pytest.raises(T2TError, match=r"cannot preprocess example 0 of split 'train' \(counting from 0 in the "
                                       r"data's order\): KeyError: 'answer'"):
        list(in_memory.text_examples("train"))


# ---------------------------------------------------------------------------------------------- T5's lengths

@pytest.mark.parametrize("name, lengths", [
    ("glue_rte_v002", (512, 84)), ("glue_v002", (512, 84)),            # t5's sequence_lengths/*.gin
    ("super_glue_v102", (512, 62)), ("wsc", (512, 62)), ("squad", (512, 97)),
    ("cnn_dailymail", (512, 512)), ("wmt_t2t_ende_v003", (512, 512)),
    ("all_equal", (512, 512)),                                         # a mixture: its longest member's
    ("corpus_span_corruption", (512, 128)),                            # no T5 lengths: the default
])
def test_tasks_carry_t5s_fine_tuning_lengths(name, lengths):
    got = task_module.sequence_length_for(name)
    assert (got["inputs"], got["targets"]) == lengths
    assert task_module.sequence_length_for(name, targets=16) == {"inputs": lengths[0], "targets": 16}


def test_training_takes_the_tasks_lengths_unless_set():
    from t2t.training.train import TrainConfig, with_sequence_lengths
    assert TrainConfig().input_length is None and TrainConfig().target_length is None
    filled = with_sequence_lengths(TrainConfig(mixture="glue_v002"), None)
    assert (filled.input_length, filled.target_length) == (512, 84)
    chosen = with_sequence_lengths(TrainConfig(mixture="glue_v002", target_length=128), None)
    assert (chosen.input_length, chosen.target_length) == (512, 128)


def test_the_finetune_recipe_leaves_the_lengths_to_the_task():
    import yaml
    recipe = yaml.safe_load((Path(__file__).parents[2] / "configs" / "recipes" / "finetune.yaml").read_text())
    assert "input_length" not in recipe and "target_length" not in recipe


def test_a_bad_sequence_length_is_one_sentence():
    with pytest.raises(T2TError, match="sequence_length must be"):
        in_memory_task("t", {"train": ROWS}, sequence_length={"inputs": 512})
    with pytest.raises(T2TError, match="sequence_length must be"):
        in_memory_task("t", {"train": ROWS}, sequence_length={"inputs": 512, "targets": 0})


def test_evaluation_decodes_at_most_the_tasks_target_length():
    """A decode that never stops ends at the task's T5 target length (CNN/DM: 512, not its longest
    reference's 938 tokens); a task without T5 lengths decodes up to its longest target."""
    from t2t.evaluation.evaluate import decode_length
    examples = [{"targets": np.ones(n, dtype=np.int64)} for n in (3, 938, 20)]
    assert decode_length(get_task("cnn_dailymail"), examples) == 512
    assert decode_length(in_memory_task("t", {"train": ROWS}), examples) == 938
    assert decode_length(get_task("cnn_dailymail"), examples[:1]) == 3


# ---------------------------------------------------------------------------------------------- built-in modules

ROOT = Path(__file__).parents[2]
# internal paths whose public names a user imports from t2t, t2t.preprocessors or t2t.metrics instead
PUBLIC_PATHS = {"t2t.data.task": "t2t", "t2t.data.sources": "t2t", "t2t.errors": "t2t",
                "t2t.data.preprocessors": "t2t.preprocessors", "t2t.data.objectives": "t2t.preprocessors",
                "t2t.evaluation.metrics": "t2t.metrics"}


def test_builtin_tasks_and_mixtures_import_what_a_user_would():
    """tasks/ and mixtures/ take every name the public surface has from it (``from t2t import Task, metrics``),
    as a user's task module does; only what it lacks comes from an internal module."""
    import ast
    import importlib

    import t2t
    wrong = []
    for path in sorted([*(ROOT / "tasks").glob("*.py"), *(ROOT / "mixtures").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "t2t.evaluation" or (
                    isinstance(node, ast.ImportFrom) and node.module == "t2t.data"):
                wrong += [f"{path.name}: {node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module in PUBLIC_PATHS:
                public = importlib.import_module(PUBLIC_PATHS[node.module])
                wrong += [f"{path.name}: {a.name} from {node.module}" for a in node.names
                          if hasattr(public, a.name) and (public is not t2t or a.name in t2t.__all__)]
    assert not wrong


def test_glues_reader_labels_and_sizes_live_with_its_tasks():
    import t2t.data.sources as sources
    import t2t.tasks.glue as glue
    for name in ("GlueSource", "read_glue_tsv", "GLUE_LABELS", "GLUE_SIZES", "GLUE_FILES", "GLUE_HUB_ID"):
        assert hasattr(glue, name) and not hasattr(sources, name), name
