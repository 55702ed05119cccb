"""t2t-show / t2t-tasks cores: examples in source order as JSON-able dicts, and the registry table."""

import dataclasses
import json

import pytest

from t2t.data.show import format_registry_table, registry_table, show_examples
from t2t.data.sources import GeneratorSource
from t2t.data.task import Mixture
from t2t.errors import T2TError
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary

ROWS = [{"question": f"question number {i}", "answer": "yes" if i % 2 else "no"} for i in range(600)]


def _to_text(example):
    return {"inputs": "ask: " + example["question"], "targets": example["answer"]}


@pytest.fixture
def task():
    with temporarily_registered(in_memory_task("show_me", {"validation": ROWS}, preprocessors=[_to_text])) as t:
        yield t


def test_show_examples_in_source_order(task):
    shown = list(show_examples("show_me", "validation", 3))
    assert shown == [{"inputs": "ask: question number 0", "targets": "no"},
                     {"inputs": "ask: question number 1", "targets": "yes"},
                     {"inputs": "ask: question number 2", "targets": "no"}]
    everything = list(show_examples("show_me", "validation", None))
    assert len(everything) == 600 and everything[599]["inputs"] == "ask: question number 599"
    assert list(show_examples("show_me", "validation", 0)) == []
    json.dumps(everything)


def test_show_examples_with_tokens(task):
    vocab = tiny_vocabulary()
    (first,) = show_examples("show_me", "validation", 1, with_tokens=True, vocab=vocab)
    assert first["inputs_tokens"] == vocab.encode("ask: question number 0") + [vocab.eos_id]
    assert first["targets_tokens"] == vocab.encode("no") + [vocab.eos_id]
    assert all(isinstance(i, int) for i in first["inputs_tokens"])
    with pytest.raises(T2TError, match="needs a vocabulary"):
        list(show_examples("show_me", "validation", 1, with_tokens=True))


def test_show_errors(task):
    with temporarily_registered(Mixture("show_mix", [("show_me", 1.0)])):
        with pytest.raises(T2TError, match="is a mixture; show one of its tasks"):
            list(show_examples("show_mix", "validation", 1))
    with pytest.raises(T2TError, match="did you mean show_me"):
        list(show_examples("show_mee", "validation", 1))
    with pytest.raises(T2TError, match="no split 'train'"):
        list(show_examples("show_me", "train", 1))


def test_registry_table_without_data(task):
    rows = {r["name"]: r for r in registry_table()}
    stsb = rows["glue_stsb_v002"]
    assert stsb["kind"] == "task" and stsb["aliases"] == ["stsb"]
    assert stsb["splits"] == {"train": 5749, "validation": 1500, "test": 1379}
    assert rows["show_me"]["splits"] == {"validation": 600}
    glue = rows["glue_v002_proportional"]
    assert glue["kind"] == "mixture" and glue["aliases"] == ["glue_v002"]
    assert glue["rates"]["glue_sst2_v002"] == 67349 and "glue_wnli_v002" not in glue["rates"]
    text = format_registry_table()
    assert "glue_stsb_v002 (stsb)  [train=5749, validation=1500, test=1379]" in text
    assert "mixture  glue_v002_proportional (glue_v002)" in text


def test_registry_table_local_splits(tmp_path):
    (tmp_path / "glue" / "RTE").mkdir(parents=True)
    (tmp_path / "glue" / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    rows = {r["name"]: r for r in registry_table(tmp_path)}
    assert rows["glue_rte_v002"]["local_splits"] == ["validation"]
    assert rows["glue_qqp_v002"]["local_splits"] == []


def test_callable_rates_shown_without_reading_data(task):
    from t2t.data.mixing import rate_num_examples
    big = in_memory_task("show_big", {"train": ROWS})
    with temporarily_registered(big, Mixture("show_rates", [("show_big", rate_num_examples(maximum=100))])):
        rows = {r["name"]: r for r in registry_table()}
        assert rows["show_rates"]["rates"] == {"show_big": 100.0}


def test_mixture_lines_name_the_strategy_and_cut_long_member_lists(task):
    """t2t-tasks printed each rate as a Python repr: 11 lines over 400 characters, some over 2,000."""
    from t2t.data.mixing import rate_num_examples, rate_unsupervised
    sizes = {f"show_size_{i}": 10 * (i + 1) for i in range(5)}
    members = [in_memory_task(name, {"train": ROWS[:size]}) for name, size in sizes.items()]
    eval_only = in_memory_task("show_eval_only", {"validation": ROWS})
    unknown = in_memory_task("show_unknown", {"train": ROWS})
    unknown = dataclasses.replace(unknown, source=GeneratorSource(lambda split: ROWS))  # no declared size
    tempered = rate_num_examples(maximum=2 ** 19, temperature=2.0)
    mixtures = [
        Mixture("show_equal", [(name, 1.0) for name in sizes]),
        Mixture("show_tempered", [(name, tempered) for name in list(sizes)[:2]]),
        Mixture("show_mixed", [("show_unknown", rate_unsupervised()), ("show_eval_only", rate_num_examples())]
                + [(name, rate_num_examples(maximum=1e5)) for name in sizes]),
        Mixture("show_needs_data", [("show_unknown", rate_num_examples()), ("show_size_0", float("inf"))]),
        Mixture("show_equal_and_eval", [("show_size_0", 2.0), ("show_eval_only", 0.0), ("show_size_1", 2.0)]),
    ]
    with temporarily_registered(*members, eval_only, unknown, *mixtures):
        lines = {line.split()[1]: line for line in format_registry_table().splitlines() if line.startswith("mixture")}
        assert lines["show_equal"] == ("mixture  show_equal  equal (5 tasks): show_size_0, show_size_1, show_size_2, "
                                       "... (+2 more)")
        assert lines["show_tempered"] == ("mixture  show_tempered  examples-proportional, K=2^19, temperature 2.0 "
                                          "(2 tasks): show_size_0=3.16228, show_size_1=4.47214")
        assert lines["show_mixed"] == ("mixture  show_mixed  fixed (1 task): show_unknown=1000000; rate 0, evaluation "
                                       "only (1 task): show_eval_only; examples-proportional, K=100000 (5 tasks): "
                                       "show_size_0=10, show_size_1=20, show_size_2=30, ... (+2 more)")
        assert lines["show_needs_data"] == ("mixture  show_needs_data  examples-proportional (1 task): show_unknown=?; "
                                            "fixed (1 task): show_size_0=inf")
        assert lines["show_equal_and_eval"] == ("mixture  show_equal_and_eval  equal (2 tasks): show_size_0, "
                                                "show_size_1; rate 0, evaluation only (1 task): show_eval_only")
        rows = {r["name"]: r for r in registry_table()}
        assert rows["show_needs_data"]["rates"] == {"show_unknown": None, "show_size_0": float("inf")}


def test_builtin_mixture_lines_are_short_and_free_of_python_reprs():
    lines = [line for line in format_registry_table().splitlines() if line.startswith("mixture")]
    assert len(lines) >= 20
    assert max(len(line) for line in lines) < 320
    assert not [line for line in lines if "rate_num_examples(" in line or "rate_unsupervised(" in line]
    glue = next(line for line in lines if "glue_v002_proportional (glue_v002)" in line)
    assert glue.endswith("examples-proportional (8 tasks): glue_cola_v002=8551, glue_sst2_v002=67349, "
                         "glue_mrpc_v002=3668, ... (+5 more); rate 0, evaluation only (3 tasks): "
                         "glue_mnli_mismatched_v002, glue_mnli_matched_v002, glue_ax_v002")
