"""The paper's multi-task mixtures (§3.5.2, §3.7), as the ``t5`` library registers them (``t5/data/mixtures.py``).

=================================  ===========================================================================
mixture                            members and rates
=================================  ===========================================================================
``en_mix``                         C4 (``rate_unsupervised``), GLUE, SuperGLUE and SQuAD examples-proportional
``all_equal``                      every supervised task and C4, rate 1 each
``all_proportional``               every supervised task and C4, examples-proportional (GLUE/SuperGLUE at t5's
                                   written-down sizes, both RTEs halved: they overlap)
``all_mix``                        ``all_proportional`` with C4 at ``rate_unsupervised`` instead
``leave_one_out_<task>``           ``all_proportional`` without one fine-tuning target (GLUE and SuperGLUE leave
                                   out all of their tasks), for "multi-task pre-training + fine-tuning"
``large_supervised_equal``,        WMT en-de, WMT en-fr and CNN/DM, equal or examples-proportional; and the two
``large_supervised_proportional``, translation tasks, equal
``large_translation_equal``
``glue_mnli_and_dev_v002``         MNLI and its matched/mismatched evaluation tasks, rate 1
``wsc_dpr_simple_proportional``    DPR and WSC "simple", at SuperGLUE's written-down sizes
=================================  ===========================================================================

The supervised tasks are GLUE's, SuperGLUE's, CNN/DM, SQuAD and the three WMT pairs; C4 is
``c4_v020_unsupervised`` (the paper's baseline objective). Examples-proportional rates are
``t2t.data.mixing.rate_num_examples``: train with ``--set mixing_maximum=K --set mixing_temperature=T`` for §3.5.2's
limit and temperature (they then apply to GLUE's and SuperGLUE's written-down sizes too, as in the paper; the
t5 library left those constants alone). Evaluation-only members (no train split) get rate 0. t5's
``squad_trivia_qa_equal`` is not registered: TriviaQA is not a t2t task.
"""

from __future__ import annotations

from t2t import Mixture, register_mixture
from t2t.data.mixing import rate_num_examples, rate_unsupervised
from t2t.mixtures.glue import GLUE_WEIGHT_MAPPING
from t2t.mixtures.superglue import SUPER_GLUE_WEIGHT_MAPPING

C4 = "c4_v020_unsupervised"
SUPERVISED_TASKS = (list(GLUE_WEIGHT_MAPPING) + list(SUPER_GLUE_WEIGHT_MAPPING)
                    + ["cnn_dailymail_v002", "squad_v010_allanswers", "wmt_t2t_ende_v003", "wmt15_enfr_v003",
                       "wmt16_enro_v003"])
# The fine-tuning targets of §3.7 (GLUE and SuperGLUE each count as one): one leave-one-out mixture each.
FINETUNE_TASKS = ("glue_v002_proportional", "super_glue_v102_proportional", "cnn_dailymail_v002",
                  "squad_v010_allanswers", "wmt_t2t_ende_v003", "wmt15_enfr_v003", "wmt16_enro_v003")
LARGE_TRANSLATION_TASKS = ("wmt_t2t_ende_v003", "wmt15_enfr_v003")
LARGE_SUPERVISED_TASKS = LARGE_TRANSLATION_TASKS + ("cnn_dailymail_v002",)
_WRITTEN_DOWN = {**GLUE_WEIGHT_MAPPING, **SUPER_GLUE_WEIGHT_MAPPING}


def deduplicated_rate(name: str, halve_rte: bool = True):
    """t5's ``_dedupe``: GLUE and SuperGLUE tasks at their written-down sizes, the two RTEs (the same data in
    both benchmarks) at half; every other task examples-proportional."""
    if name not in _WRITTEN_DOWN:
        return rate_num_examples()
    scale = 0.5 if halve_rte and "glue" in name and "rte" in name else 1.0
    return rate_num_examples(num_examples=_WRITTEN_DOWN[name], scale=scale)


def leave_one_out(target: str) -> list[tuple[str, object]]:
    """``all_proportional``'s members without ``target``; for GLUE or SuperGLUE without all of its tasks, and
    then the other benchmark's RTE is not halved (t5's ``assign_weight_or_rate_num_examples``)."""
    benchmarks = {"glue_v002_proportional": GLUE_WEIGHT_MAPPING,
                  "super_glue_v102_proportional": SUPER_GLUE_WEIGHT_MAPPING}
    left_out = set(benchmarks.get(target, (target,)))
    return [(name, deduplicated_rate(name, halve_rte=target not in benchmarks))
            for name in SUPERVISED_TASKS + [C4] if name not in left_out]


register_mixture(Mixture("glue_mnli_and_dev_v002", [t for t in GLUE_WEIGHT_MAPPING if "mnli" in t]))
register_mixture(Mixture(
    "en_mix", [(C4, rate_unsupervised())] + list(GLUE_WEIGHT_MAPPING) + list(SUPER_GLUE_WEIGHT_MAPPING)
    + ["squad_v010_allanswers"], default_rate=rate_num_examples()))
register_mixture(Mixture("all_equal", SUPERVISED_TASKS + [C4], default_rate=1.0))
register_mixture(Mixture("all_proportional", [(t, deduplicated_rate(t)) for t in SUPERVISED_TASKS + [C4]]))
register_mixture(Mixture("all_mix", [(C4, rate_unsupervised())]
                         + [(t, deduplicated_rate(t)) for t in SUPERVISED_TASKS]))
for _target in FINETUNE_TASKS:
    register_mixture(Mixture(f"leave_one_out_{_target}", leave_one_out(_target)))
register_mixture(Mixture("large_supervised_equal", LARGE_SUPERVISED_TASKS, default_rate=1.0))
register_mixture(Mixture("large_supervised_proportional", LARGE_SUPERVISED_TASKS, default_rate=rate_num_examples()))
register_mixture(Mixture("large_translation_equal", LARGE_TRANSLATION_TASKS, default_rate=1.0))
register_mixture(Mixture("wsc_dpr_simple_proportional", [
    (name, rate_num_examples(num_examples=SUPER_GLUE_WEIGHT_MAPPING[name]))
    for name in ("dpr_v001_simple", "super_glue_wsc_v102_simple_train", "super_glue_wsc_v102_simple_eval")]))
