"""GLUE mixture as in the ``t5`` library (``t5/data/mixtures.py``, ``glue_utils.GLUE_WEIGHT_MAPPING``).

``glue_v002_proportional`` (alias ``glue_v002``) mixes the GLUE tasks examples-proportionally: each rate is the
task's training-set size as t5 writes it down (a constant, so listing the mixture needs no data).

WNLI is left out, as t5 does ("we train on WSC/DPR simple instead"); the MNLI matched/mismatched evaluation
tasks and the AX diagnostic are members with rate 0, as in t5, so the mixture's evaluation covers them but
they are never sampled for training. t5's QQP weight is 363,849 (the HF/TFDS train split has 363,846 rows);
we keep t5's number. Each positive rate is ``rate_num_examples(num_examples=size)``: the same number, and
§3.5.2's limit K and temperature T (``mixing_maximum``, ``mixing_temperature``) apply to it, since the
mixture is examples-proportional.
"""

from __future__ import annotations

from t2t import Mixture, register_mixture
from t2t.data.mixing import proportional_rates

GLUE_WEIGHT_MAPPING = {
    "glue_cola_v002": 8_551.0,
    "glue_sst2_v002": 67_349.0,
    "glue_mrpc_v002": 3_668.0,
    "glue_qqp_v002": 363_849.0,
    "glue_stsb_v002": 5_749.0,
    "glue_mnli_v002": 392_702.0,
    "glue_qnli_v002": 104_743.0,
    "glue_rte_v002": 2_490.0,
    "glue_mnli_mismatched_v002": 0.0,
    "glue_mnli_matched_v002": 0.0,
    "glue_ax_v002": 0.0,
}

register_mixture(Mixture("glue_v002_proportional", proportional_rates(GLUE_WEIGHT_MAPPING)), aliases=("glue_v002",))
