"""SuperGLUE mixture as in the ``t5`` library (``t5/data/mixtures.py``, ``glue_utils.SUPER_GLUE_WEIGHT_MAPPING``).

``super_glue_v102_proportional`` (alias ``super_glue_v102``) mixes the SuperGLUE tasks examples-proportionally;
each rate is the number t5 writes down (constants, so listing the mixture needs no data): training-set sizes,
MultiRC counted in answers (27,243), ReCoRD in answers (138,854, one example each), WSC in rows whose candidate
is the referent (259), with DPR (1,322) standing in for WNLI. The WSC evaluation task and the AX-b/AX-g
diagnostics are members with rate 0, so the mixture's evaluation covers them but they are never sampled.
Each positive rate is ``rate_num_examples(num_examples=size)``, so §3.5.2's K and T apply (as for GLUE).
"""

from __future__ import annotations

from t2t import Mixture, register_mixture
from t2t.data.mixing import proportional_rates

SUPER_GLUE_WEIGHT_MAPPING = {
    "dpr_v001_simple": 1_322.0,
    "super_glue_wsc_v102_simple_train": 259.0,
    "super_glue_wsc_v102_simple_eval": 0.0,
    "super_glue_boolq_v102": 9_427.0,
    "super_glue_cb_v102": 250.0,
    "super_glue_copa_v102": 400.0,
    "super_glue_multirc_v102": 27_243.0,
    "super_glue_record_v102": 138_854.0,
    "super_glue_rte_v102": 2_490.0,
    "super_glue_wic_v102": 5_428.0,
    "super_glue_axb_v102": 0.0,
    "super_glue_axg_v102": 0.0,
}

register_mixture(Mixture("super_glue_v102_proportional", proportional_rates(SUPER_GLUE_WEIGHT_MAPPING)),
                 aliases=("super_glue_v102",))
