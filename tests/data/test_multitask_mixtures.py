"""The paper's multi-task mixtures, member for member and rate for rate against t5/data/mixtures.py."""

import contextlib
import dataclasses
import logging
import re

import pytest

from t2t.data.pipeline import build_train_batches
from t2t.data.sources import InMemorySource
from t2t.data.task import TASKS, default_output_features, get_mixture, get_task, rate_value
from t2t.errors import T2TError
from t2t.mixtures.glue import GLUE_WEIGHT_MAPPING
from t2t.mixtures.superglue import SUPER_GLUE_WEIGHT_MAPPING
from t2t.testing import tiny_vocabulary
from t2t.training.train import TrainConfig

SUPERVISED = (list(GLUE_WEIGHT_MAPPING) + list(SUPER_GLUE_WEIGHT_MAPPING)
              + ["cnn_dailymail_v002", "squad_v010_allanswers", "wmt_t2t_ende_v003", "wmt15_enfr_v003",
                 "wmt16_enro_v003"])


def rate_of(mixture: str, task: str, **options) -> float:
    """One member's rate, without computing the others' (no data is read: every size used is declared)."""
    rates = dict(get_mixture(mixture).task_rates(**options))
    return rate_value(rates[task], get_task(task))


def test_members_are_t5s():
    assert get_mixture("all_equal").task_names == SUPERVISED + ["c4_v020_unsupervised"]
    assert get_mixture("all_mix").task_names == ["c4_v020_unsupervised"] + SUPERVISED
    assert get_mixture("en_mix").task_names == (["c4_v020_unsupervised"] + list(GLUE_WEIGHT_MAPPING)
                                                 + list(SUPER_GLUE_WEIGHT_MAPPING) + ["squad_v010_allanswers"])
    assert get_mixture("large_supervised_equal").task_names == ["wmt_t2t_ende_v003", "wmt15_enfr_v003",
                                                                 "cnn_dailymail_v002"]
    assert get_mixture("large_translation_equal").task_names == ["wmt_t2t_ende_v003", "wmt15_enfr_v003"]
    glue_left_out = get_mixture("leave_one_out_glue_v002_proportional").task_names
    assert not set(glue_left_out) & set(GLUE_WEIGHT_MAPPING) and "super_glue_rte_v102" in glue_left_out
    assert get_mixture("leave_one_out_squad_v010_allanswers").task_names == [
        t for t in SUPERVISED + ["c4_v020_unsupervised"] if t != "squad_v010_allanswers"]
    for target in ("super_glue_v102_proportional", "cnn_dailymail_v002", "wmt_t2t_ende_v003", "wmt15_enfr_v003",
                   "wmt16_enro_v003"):
        assert get_mixture(f"leave_one_out_{target}")


def test_rates_are_t5s():
    assert rate_of("en_mix", "c4_v020_unsupervised") == 1e6                # rate_unsupervised
    assert rate_of("en_mix", "glue_cola_v002") == 8551                     # the train split's size
    assert rate_of("en_mix", "glue_mnli_matched_v002") == 0                # evaluation only: never sampled
    assert rate_of("en_mix", "squad_v010_allanswers") == 87_599
    assert rate_of("all_equal", "wmt16_enro_v003") == 1.0
    assert rate_of("all_proportional", "glue_qqp_v002") == 363_849        # t5's written-down size
    assert rate_of("all_proportional", "glue_rte_v002") == 2490 / 2        # RTE is in both benchmarks: halved
    assert rate_of("all_proportional", "super_glue_rte_v102") == SUPER_GLUE_WEIGHT_MAPPING["super_glue_rte_v102"] / 2
    assert rate_of("all_proportional", "c4_v020_unsupervised") == 364_868_892
    assert rate_of("all_mix", "c4_v020_unsupervised") == 1e6
    assert rate_of("leave_one_out_glue_v002_proportional", "super_glue_rte_v102") == (
        SUPER_GLUE_WEIGHT_MAPPING["super_glue_rte_v102"])                  # no halving there, as in t5
    assert rate_of("leave_one_out_squad_v010_allanswers", "glue_rte_v002") == 2490 / 2
    assert rate_of("large_supervised_proportional", "cnn_dailymail_v002") == 287_113


def test_limit_and_temperature_of_section_3_5_2():
    assert rate_of("all_proportional", "c4_v020_unsupervised", maximum=2 ** 16) == 2 ** 16
    assert rate_of("all_proportional", "glue_mnli_v002", maximum=2 ** 16) == 2 ** 16
    assert rate_of("all_proportional", "glue_cola_v002", maximum=2 ** 16) == 8551
    assert rate_of("all_proportional", "glue_cola_v002", maximum=2 ** 16, temperature=2) == pytest.approx(8551 ** 0.5)
    assert rate_of("all_mix", "c4_v020_unsupervised", maximum=2 ** 16, temperature=2) == 1e6  # a fixed rate stays


@contextlib.contextmanager
def stand_ins(names):
    """Each named task replaced (for the block) by an in-memory task with the same splits: two rows a split,
    already text, so a whole mixture trains without its data."""
    saved = {n: (TASKS.get(n), [a for a, t in TASKS.aliases().items() if t == n]) for n in names}
    for name, (task, _) in saved.items():
        rows = [{"inputs": f"{name} {i}", "targets": "yes"} for i in range(2)]
        TASKS.unregister(name)
        TASKS.register(name, dataclasses.replace(
            task, source=InMemorySource({split: rows for split in task.splits}), preprocessors=(),
            tokenized_preprocessors=(), token_preprocessors=(), output_features=default_output_features()))
    try:
        yield
    finally:
        for name, (task, aliases) in saved.items():
            TASKS.unregister(name)
            TASKS.register(name, task)
            for alias in aliases:
                TASKS.alias(alias, name)


NO_TRAIN_SPLIT = {"glue_mnli_mismatched_v002", "glue_mnli_matched_v002", "glue_ax_v002",
                  "super_glue_wsc_v102_simple_eval", "super_glue_axb_v102", "super_glue_axg_v102"}


@pytest.mark.parametrize("mixture", ["all_equal", "glue_mnli_and_dev_v002"])
def test_members_without_a_train_split_are_left_out_with_a_warning(mixture, caplog):
    """As seqio: a member with no train split (MNLI matched/mismatched, AX, WSC eval, AX-b, AX-g) is not
    sampled, and one warning names them; the rest train (it raised "has no split 'train'")."""
    names = get_mixture(mixture).task_names
    with stand_ins(names), caplog.at_level(logging.WARNING, logger="t2t.data.pipeline"):
        batches = build_train_batches(mixture, vocab=tiny_vocabulary(), batch_size=4, input_length=64,
                                      target_length=4, pack=False)
        drawn = {tuple(e["inputs"][:-1]) for e in batches.next_examples(400)}
    vocab = tiny_vocabulary()
    seen = {name for name in names if {tuple(vocab.encode(f"{name} {i}")) for i in range(2)} & drawn}
    left_out = NO_TRAIN_SPLIT & set(names)
    assert left_out and set(batches.rates) == set(names) - left_out
    assert seen == set(names) - left_out
    warning = next(r.getMessage() for r in caplog.records if "no train split" in r.getMessage())
    assert all(name in warning for name in left_out)


@pytest.mark.parametrize("mixture", ["glue_v002", "super_glue_v102"])
def test_limit_and_temperature_apply_to_glue_and_superglue(mixture):
    """§3.5.2's K and T change the rates training draws with (they were ignored: identical losses)."""
    names = get_mixture(mixture).task_names
    with stand_ins(names):
        plain, limited, tempered = (build_train_batches(mixture, vocab=tiny_vocabulary(), batch_size=4,
                                                        input_length=64, target_length=4, pack=False, **options).rates
                                    for options in ({}, {"mixing_maximum": 3000},
                                                    {"mixing_maximum": 3000, "mixing_temperature": 2}))
    written = {**GLUE_WEIGHT_MAPPING, **SUPER_GLUE_WEIGHT_MAPPING}
    assert plain == {name: written[name] for name in plain} and max(plain.values()) > 3000
    assert limited == {name: min(size, 3000) for name, size in plain.items()}
    assert tempered == pytest.approx({name: min(size, 3000) ** 0.5 for name, size in plain.items()})


@pytest.mark.parametrize("name, options, message", [
    ("all_equal", {"mixing_temperature": 2.0}, "'all_equal' has no examples-proportional rates"),
    ("glue_rte_v002", {"mixing_maximum": 100}, "'glue_rte_v002' is a task, not a mixture"),
    ("glue_v002", {"mixing_temperature": 0}, "mixing_temperature must be > 0, got 0"),
    ("glue_v002", {"mixing_maximum": -1}, "mixing_maximum must be > 0, got -1"),
])
def test_limit_and_temperature_are_refused_where_they_cannot_apply(name, options, message):
    with pytest.raises(T2TError, match=re.escape(message)):
        build_train_batches(name, vocab=tiny_vocabulary(), batch_size=4, input_length=64, target_length=4,
                            **options)


@pytest.mark.parametrize("key", ["mixing_maximum", "mixing_temperature"])
def test_train_settings_check_the_mixing_ranges(key):
    with pytest.raises(T2TError, match=key):
        TrainConfig(**{key: 0.0})
