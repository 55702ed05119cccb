"""Objectives by name: the registry tasks name their objective in, and a user's own objective through the public API."""

import re
from pathlib import Path

import numpy as np
import pytest

import t2t
from t2t.data import objectives as ob
from t2t.data.pipeline import build_train_batches
from t2t.data.task import TASKS, load_modules
from t2t.tasks.text_files import unsupervised_task
from t2t.testing import temporarily_registered, tiny_vocabulary

VOCAB = 32_100
TOKENS = np.arange(3, 60)


def test_the_papers_objectives_have_names_and_t5s_aliases():
    assert set(ob.PAPER_OBJECTIVES) == {"span_corruption", "random_spans", "iid_noise_replace_spans", "iid_noise_drop",
                                        "bert_style", "mass_style", "deshuffling", "prefix_lm", "full_lm"}
    assert ob.OBJECTIVES.get("iid_denoising") is ob.iid_noise_replace_spans  # t5's name for the baseline
    assert ob.OBJECTIVES.get("deshuffle") is ob.deshuffling
    assert t2t.get_objective is ob.get_objective and t2t.register_objective is ob.register_objective


def test_get_objective_binds_the_options():
    bound = t2t.get_objective("span_corruption", noise_density=0.5, mean_noise_span_length=1.0)
    got = bound(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(4))
    direct = ob.span_corruption(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(4), noise_density=0.5,
                                mean_noise_span_length=1.0)
    for key in ("inputs", "targets"):
        np.testing.assert_array_equal(got[key], direct[key])
    assert got["targets"].size > 20  # half the tokens are noise, not the default 15%


def test_bad_names_and_options_are_one_sentence():
    with pytest.raises(t2t.T2TError, match=r"unknown objective 'span_corupption'; did you mean span_corruption"):
        t2t.get_objective("span_corupption")
    with pytest.raises(t2t.T2TError, match=r"unknown objective 'xyz'; the registered names are bert_style, "):
        t2t.get_objective("xyz")
    with pytest.raises(t2t.T2TError, match=r"'span_corruption' has no option noise_rate; its options are "
                                           r"noise_density, mean_noise_span_length\."):
        t2t.get_objective("span_corruption", noise_rate=0.5)
    with pytest.raises(t2t.T2TError, match=r"'prefix_lm' has no option noise_density; it takes no options\."):
        unsupervised_task("bad", t2t.InMemorySource({"train": []}), "prefix_lm", noise_density=0.5)
    with pytest.raises(t2t.T2TError, match="already registered"):
        t2t.register_objective("span_corruption", ob.random_spans)
    with pytest.raises(t2t.T2TError, match="must be a function"):
        t2t.register_objective("not_a_function", "span_corruption")


def test_a_task_takes_a_bound_objective_with_its_options():
    """The options of ``get_objective`` reach the chunk length (span corruption's t5 arithmetic) and every draw."""
    bound = t2t.get_objective("span_corruption", noise_density=0.5)
    task = unsupervised_task("bound", t2t.InMemorySource({"train": []}), bound)
    denoise = task.token_preprocessors[0]
    assert denoise.keywords == {"objective": ob.span_corruption, "noise_density": 0.5}
    assert task.tokenized_preprocessors[0].keywords["length"]({"inputs": 512}) == ob.random_spans_helper(512, .5, 3)[0]
    assert task.description.startswith("span_corruption over")


@pytest.fixture
def reversal_objective():
    """A toy objective registered the way a user registers one: the inputs are the chunk reversed."""

    @t2t.register_objective("test_reversal")
    def reversal(tokens, *, vocab_size, rng, keep=None):
        del vocab_size, rng
        ids = np.asarray(tokens, dtype=np.int64)[:keep]
        return {"inputs": ids[::-1].copy(), "targets": ids}

    yield reversal
    ob.OBJECTIVES.unregister("test_reversal")


def test_a_registered_objective_trains_by_name(reversal_objective):
    vocab = tiny_vocabulary()
    texts = [{"text": "the harbour town woke slowly on the first cold morning of autumn"}] * 8
    task = unsupervised_task("reversal_task", t2t.InMemorySource({"train": texts}), "test_reversal", keep=6)
    with temporarily_registered(task):
        batch = next(iter(build_train_batches("reversal_task", vocab=vocab, batch_size=2, input_length=16,
                                              target_length=16, pack=False)))
    for inputs, targets in zip(batch["encoder_input_tokens"], batch["decoder_target_tokens"], strict=True):
        inputs, targets = inputs[inputs > 0].tolist(), targets[targets > 0].tolist()
        assert inputs[-1] == targets[-1] == vocab.eos_id and len(targets) == 6 + 1  # keep=6 reached the draws
        assert inputs[:-1] == targets[:-1][::-1]
    assert task.token_preprocessors[0].keywords["objective"] is reversal_objective


def docs_section_code(title: str) -> str:
    section = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text().split(f"## {title}\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def docs_objective_module(tmp_path):
    path = tmp_path / "my_objective.py"
    path.write_text(docs_section_code("Register an objective"))
    yield path
    ob.OBJECTIVES.unregister("reverse")
    TASKS.unregister("my_corpus_reverse")
    TASKS.unregister("my_reverse")


def test_docs_objective_example_runs_verbatim(docs_objective_module):
    load_modules([str(docs_objective_module)])
    corpus = TASKS.get("my_corpus_reverse")
    assert corpus.token_preprocessors[0].keywords == {"objective": ob.OBJECTIVES.get("reverse"), "keep": 64}
    out = t2t.get_objective("reverse", keep=3)(np.arange(3, 9), vocab_size=VOCAB, rng=np.random.default_rng(0))
    assert out["inputs"].tolist() == [5, 4, 3] and out["targets"].tolist() == [3, 4, 5]
    assert TASKS.get("my_reverse").description.startswith("reverse over")
