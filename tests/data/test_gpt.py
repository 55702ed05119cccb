"""GPT's recipe (Radford et al. 2018): the auxiliary LM loss and the input transformations as text."""

import pytest
import torch
import torch.nn.functional as F

from t2t.data.features import get_converter
from t2t.models.t5 import T5, resolve_model_config

A = {"inputs": [5, 6, 1], "targets": [7, 1]}
B = {"inputs": [8, 1], "targets": [9, 1]}


def tiny(architecture: str) -> T5:
    torch.manual_seed(0)
    return T5(resolve_model_config({"preset": "t5-tiny", "vocab_size": 64, "dropout_rate": 0.0,
                                    "architecture": architecture})).eval()


@pytest.mark.parametrize("architecture", ["decoder_only", "prefix_lm"])
def test_auxiliary_lm_loss_equals_a_hand_computation(architecture):
    """Packed row 5 6 1 7 1 | 8 1 9 1 (targets after inputs): positions 3, 4, 7, 8 predict the targets
    7 1 and 9 1, positions 0-2 and 5-6 the inputs 5 6 1 and 8 1; L = L_task + λ·L_LM, each a mean over
    its own tokens once the sum is divided by the task weight (as GPT's code averages them)."""
    model = tiny(architecture)
    batch = get_converter(architecture, 6, 4, pack=True).convert([A, B], batch_size=1)
    with torch.no_grad():
        logits = model(None, batch["decoder_input_tokens"], decoder_segment_ids=batch["decoder_segment_ids"],
                       decoder_positions=batch["decoder_positions"],
                       decoder_causal_attention=batch["decoder_causal_attention"])[0]
        ce = F.cross_entropy(logits, batch["decoder_target_tokens"][0], reduction="none")
        plain, plain_weight = model.loss_sums(batch)
        with_lm, weight = model.loss_sums(batch, lm_weight=0.5)
        zero, _ = model.loss_sums(batch, lm_weight=0.0)
    task, lm = ce[[3, 4, 7, 8]].sum(), ce[[0, 1, 2, 5, 6]].sum()
    torch.testing.assert_close(plain, task)
    torch.testing.assert_close(with_lm / weight, task / 4 + 0.5 * lm / 5)
    assert torch.equal(zero, plain) and weight == plain_weight == 4


def test_lm_loss_weight_needs_a_decoder_only_model(tmp_path):
    from t2t import config
    from t2t.errors import T2TError
    from t2t.testing import tiny_vocabulary
    from t2t.training.train import TrainConfig, train
    cfg = config.from_dict(TrainConfig, {"mixture": "glue_rte_v002", "model": {"preset": "t5-tiny"},
                                         "lm_loss_weight": 0.5, "output_dir": str(tmp_path),
                                         "vocab": str(tiny_vocabulary().path)})
    with pytest.raises(T2TError, match="lm_loss_weight .* needs a decoder_only or prefix_lm model"):
        train(cfg)


def test_gpt_input_transformations_on_the_real_dev_rows(data_dir):
    from t2t.data.show import show_examples
    from t2t.data.task import get_mixture, load_modules
    load_modules([])
    rte = next(iter(show_examples("gpt_rte", "validation", 1, with_tokens=False, vocab=None, data_dir=data_dir)))
    assert rte["inputs"] == ("Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44, "
                             "according to the Christopher Reeve Foundation. $ Christopher Reeve had an accident.")
    assert rte["targets"] == "not_entailment"
    ab, ba = (next(iter(show_examples(f"gpt_stsb_{order}", "validation", 1, with_tokens=False, vocab=None,
                                      data_dir=data_dir))) for order in ("ab", "ba"))
    assert ab["inputs"] == "A man with a hard hat is dancing. $ A man wearing a hard hat is dancing."
    assert ba["inputs"] == "A man wearing a hard hat is dancing. $ A man with a hard hat is dancing."
    assert ab["targets"] == ba["targets"] == "5.0"
    assert list(get_mixture("gpt_stsb").task_names) == ["gpt_stsb_ab", "gpt_stsb_ba"]
