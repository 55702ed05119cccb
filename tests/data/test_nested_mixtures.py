"""Mixtures that contain mixtures: seqio's rates, lazy member lookup, loops, and training on one."""

import pytest

from t2t.data.mixing import rate_num_examples
from t2t.data.pipeline import build_train_batches
from t2t.data.task import Mixture, get_mixture
from t2t.errors import T2TError
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary


def rows(n, word):
    return {"train": [{"inputs": f"{word} {i}", "targets": word} for i in range(n)]}


TASK_A, TASK_B, TASK_C = (in_memory_task(name, rows(n, name)) for name, n in (("nest_a", 30), ("nest_b", 10),
                                                                                 ("nest_c", 60)))


def test_a_member_mixture_shares_its_rate_among_its_tasks_like_seqio():
    inner = Mixture("nest_inner", [("nest_a", 3.0), ("nest_b", 1.0)])
    outer = Mixture("nest_outer", [("nest_inner", 2.0), ("nest_c", 5.0)])
    with temporarily_registered(TASK_A, TASK_B, TASK_C, inner, outer):
        # inner gives a 3/4 and b 1/4 of its rate 2
        assert outer.rates() == {"nest_a": pytest.approx(1.5), "nest_b": pytest.approx(0.5), "nest_c": 5.0}
        assert outer.task_names == ["nest_a", "nest_b", "nest_c"]


def test_a_task_reached_twice_gets_the_sum_and_function_rates_stay_functions():
    inner = Mixture("nest_inner2", [("nest_a", rate_num_examples()), ("nest_c", rate_num_examples())])
    outer = Mixture("nest_outer2", [("nest_inner2", 9.0), ("nest_a", 1.0)])
    with temporarily_registered(TASK_A, TASK_C, inner, outer):
        # sizes 30 and 60: the inner mixture passes on 9 x 30/90 = 3 to a, 9 x 60/90 = 6 to c
        assert outer.rates() == {"nest_a": pytest.approx(3.0 + 1.0), "nest_c": pytest.approx(6.0)}


def test_members_are_looked_up_when_used_so_registration_order_does_not_matter():
    outer = Mixture("nest_late_outer", [("nest_late_inner", 1.0), ("nest_c", 1.0)])
    with temporarily_registered(TASK_A, TASK_C, outer):
        assert outer.task_names == ["nest_late_inner", "nest_c"]  # not registered yet: an unknown task name
        with temporarily_registered(Mixture("nest_late_inner", [("nest_a", 1.0)])):
            assert get_mixture("nest_late_outer").rates() == {"nest_a": 1.0, "nest_c": 1.0}


def test_a_loop_and_a_function_rate_for_a_mixture_are_clear_errors():
    loop_a = Mixture("nest_loop_a", [("nest_loop_b", 1.0)])
    loop_b = Mixture("nest_loop_b", [("nest_loop_a", 1.0)])
    with temporarily_registered(loop_a, loop_b):
        with pytest.raises(T2TError, match="contains itself"):
            loop_a.rates()
    bad = Mixture("nest_bad", [("nest_inner3", rate_num_examples())])
    with temporarily_registered(TASK_A, Mixture("nest_inner3", [("nest_a", 1.0)]), bad):
        with pytest.raises(T2TError, match="needs a number as its rate"):
            bad.rates()


def test_training_batches_draw_from_the_tasks_of_a_nested_mixture():
    inner = Mixture("nest_inner4", [("nest_a", 1.0), ("nest_b", 1.0)])
    outer = Mixture("nest_outer4", [("nest_inner4", 1.0), ("nest_c", 2.0)])
    with temporarily_registered(TASK_A, TASK_B, TASK_C, inner, outer):
        batches = build_train_batches("nest_outer4", vocab=tiny_vocabulary(), batch_size=4, input_length=16,
                                      target_length=4, pack=False)
        assert batches.rates == {"nest_a": 0.5, "nest_b": 0.5, "nest_c": 2.0}
        assert set(batches.streams) == {"nest_a", "nest_b", "nest_c"}


def test_limit_and_temperature_replace_those_of_examples_proportional_rates_only():
    mixture = Mixture("nest_kt", [("nest_a", rate_num_examples()), ("nest_c", rate_num_examples(num_examples=1000)),
                                  ("nest_b", 7.0), ("nest_inner5", 10.0)])
    inner = Mixture("nest_inner5", [("nest_a", rate_num_examples(maximum=20))])
    with temporarily_registered(TASK_A, TASK_B, TASK_C, inner, mixture):
        assert mixture.rates() == {"nest_a": 30.0 + 10.0, "nest_c": 1000.0, "nest_b": 7.0}
        # K = 100 caps c's written-down 1,000; T = 2 then takes square roots; the number 7 stays
        assert mixture.rates(maximum=100, temperature=2) == {
            "nest_a": pytest.approx(30 ** 0.5 + 10.0), "nest_c": pytest.approx(10.0), "nest_b": 7.0}
        batches = build_train_batches("nest_kt", vocab=tiny_vocabulary(), batch_size=4, input_length=16,
                                      target_length=4, pack=False, mixing_maximum=100, mixing_temperature=2)
        assert batches.rates == {"nest_a": pytest.approx(30 ** 0.5 + 10.0), "nest_c": pytest.approx(10.0),
                                 "nest_b": 7.0}


def test_an_evaluation_only_member_gets_examples_proportional_rate_zero():
    mixture = Mixture("nest_eval_only", [("glue_mnli_matched_v002", rate_num_examples()),
                                         ("glue_cola_v002", rate_num_examples())])
    with temporarily_registered(mixture):
        assert mixture.rates() == {"glue_mnli_matched_v002": 0.0, "glue_cola_v002": 8551.0}
