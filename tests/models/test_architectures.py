"""The architectures of T5 §3.2 (Figure 4, Table 2): masks, loss positions, sizes, cached decoding."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from t2t.checkpoints.loading import load_model
from t2t.data.features import get_converter
from t2t.models import decoding, t5
from t2t.models.presets import resolve_model_config
from t2t.models.t5 import T5
from t2t.training.train import TrainingObjective

ARCHITECTURES = ["encoder_decoder", "shared_encoder_decoder", "decoder_only", "prefix_lm"]
A = {"inputs": [5, 6, 1], "targets": [7, 1]}
B = {"inputs": [8, 1], "targets": [9, 1]}


def tiny(architecture: str, **fields) -> T5:
    torch.manual_seed(0)
    model = T5(resolve_model_config({"preset": "t5-tiny", "vocab_size": 64, "dropout_rate": 0.0,
                                     "architecture": architecture, **fields}))
    return model.eval()


def packed_row(architecture: str) -> dict[str, torch.Tensor]:
    """A and B packed into one row: encoder 6 + decoder 4 tokens, or one decoder row of 6 + 4."""
    return get_converter(architecture, 6, 4, pack=True).convert([A, B], batch_size=1)


def grid(*rows: str) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in row] for row in rows])


# decoder-only row: 5 6 1 7 1 | 8 1 9 1 | pad; the inputs' prefix is A's first 4 and B's first 3 positions
CAUSAL = grid("1000000000", "1100000000", "1110000000", "1111000000", "1111100000",
              "0000010000", "0000011000", "0000011100", "0000011110", "0000000001")
PREFIX = grid("1111000000", "1111000000", "1111000000", "1111000000", "1111100000",
              "0000011100", "0000011100", "0000011100", "0000011110", "0000000001")
# encoder-decoder: encoder 5 6 1 | 8 1 | pad, decoder 7 1 | 9 1
ENCODER = grid("111000", "111000", "111000", "000110", "000110", "000001")
DECODER = grid("1000", "1100", "0010", "0011")
CROSS = grid("111000", "111000", "000110", "000110")


@pytest.mark.parametrize("architecture, expected", [
    ("encoder_decoder", {"encoder": ENCODER, "decoder": DECODER, "cross": CROSS}),
    ("shared_encoder_decoder", {"encoder": ENCODER, "decoder": DECODER, "cross": CROSS}),
    ("decoder_only", {"decoder": CAUSAL}),
    ("prefix_lm", {"decoder": PREFIX}),
])
def test_attention_masks_of_a_two_segment_packed_row(architecture, expected):
    masks = tiny(architecture).attention_masks(packed_row(architecture))
    assert masks.keys() == expected.keys()
    for name, mask in expected.items():
        assert torch.equal(masks[name][0], mask), name


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_fused_projections_give_the_separate_products_loss_and_gradients(architecture, monkeypatch):
    """On CUDA, attention multiplies by q|k|v (cross-attention: k|v) concatenated (``t5.fused_projections``);
    forced either way by ``Attention.fused`` (on the GPU where there is one: run_gpu.sh runs this test), a
    packed row's loss and every parameter's gradient are those of separate products."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, runs, concatenated = {k: v.to(device) for k, v in packed_row(architecture).items()}, {}, []
    project_qkv = t5.Attention.project_qkv

    def counted(self, h, weight):  # training multiplies by concatenated weights only in the fused form
        concatenated.append(self.fused)
        return project_qkv(self, h, weight)

    monkeypatch.setattr(t5.Attention, "project_qkv", counted)
    for fused in (False, True):
        model = tiny(architecture).to(device).train()
        for module in model.modules():
            if isinstance(module, t5.Attention):
                module.fused = fused
        total, _ = model.loss_sums(batch)
        total.backward()
        runs[fused] = total.detach(), {name: p.grad for name, p in model.named_parameters()}
    assert concatenated and set(concatenated) == {True}  # the forced forms were the ones taken
    torch.testing.assert_close(runs[True][0], runs[False][0], rtol=1e-6, atol=0)
    for name, grad in runs[False][1].items():  # fp32 sums in another order: off by rounding, at the tensor's scale
        torch.testing.assert_close(runs[True][1][name], grad, rtol=1e-5, atol=1e-5 * grad.abs().max().item(),
                                   msg=name)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_training_objective_gives_the_loss_and_gradients_of_the_packed_positions(architecture):
    """The trainer leaves packed rows' positions out (one position bias for every row): on rows the packer made,
    with distances past the exact buckets, its loss is the model's with the positions and its gradients equal
    theirs to float32 rounding (the bias gradient is summed in another order)."""
    rng = np.random.default_rng(0)
    examples = [{"inputs": rng.integers(2, 64, n).tolist() + [1], "targets": rng.integers(2, 64, m).tolist() + [1]}
                for n, m in [(20, 9), (13, 6), (30, 12), (7, 3)]]
    batch = get_converter(architecture, 48, 24, pack=True).convert(examples, batch_size=2)
    assert batch["decoder_positions"].max() > 8  # past the 8 exact buckets of each direction
    runs = []
    for loss_of in (lambda model: model.loss_sums(batch)[0], lambda model: TrainingObjective(model)(batch)):
        model = tiny(architecture).train()
        loss = loss_of(model)
        loss.backward()
        runs.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    assert torch.equal(runs[0][0], runs[1][0])
    for name, grad in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][name], grad, rtol=1e-5, atol=1e-6 * grad.abs().max().item(), msg=name)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_packed_segments_do_not_see_each_other(architecture):
    model, batch = tiny(architecture), packed_row(architecture)
    changed = {k: v.clone() for k, v in batch.items()}
    segments = changed["decoder_segment_ids"]
    changed["decoder_input_tokens"][segments == 2] = 11
    if "encoder_input_tokens" in changed:
        changed["encoder_input_tokens"][changed["encoder_segment_ids"] == 2] = 11
    with torch.no_grad():
        first, second = model.hidden_states(batch), model.hidden_states(changed)
    torch.testing.assert_close(first[segments == 1], second[segments == 1])
    assert not torch.allclose(first[segments == 2], second[segments == 2])


def test_only_the_prefix_lm_sees_later_input_tokens():
    """Changing A's second input token changes the first position's output in a prefix LM only."""
    for architecture, sees in (("prefix_lm", True), ("decoder_only", False)):
        model, batch = tiny(architecture), packed_row(architecture)
        changed = {k: v.clone() for k, v in batch.items()}
        changed["decoder_input_tokens"][0, 2] = 11
        with torch.no_grad():
            h, h_changed = model.hidden_states(batch)[0, 0], model.hidden_states(changed)[0, 0]
        assert (not torch.allclose(h, h_changed)) == sees, architecture


@pytest.mark.parametrize("architecture", ["decoder_only", "prefix_lm"])
def test_the_loss_counts_exactly_the_target_positions(architecture):
    model, batch = tiny(architecture), packed_row(architecture)
    targets = batch["decoder_target_tokens"][0]
    assert batch["decoder_loss_weights"][0].nonzero().flatten().tolist() == [3, 4, 7, 8]
    assert targets[[3, 4, 7, 8]].tolist() == A["targets"] + B["targets"]
    with torch.no_grad():
        loss, weight = model.loss_sums(batch)
        logits = model(None, batch["decoder_input_tokens"], decoder_segment_ids=batch["decoder_segment_ids"],
                       decoder_positions=batch["decoder_positions"],
                       decoder_causal_attention=batch["decoder_causal_attention"])[0]
    expected = F.cross_entropy(logits[[3, 4, 7, 8]], targets[[3, 4, 7, 8]], reduction="sum")
    assert weight == 4
    torch.testing.assert_close(loss, expected)


def non_embedding_parameters(model: T5) -> int:
    return model.num_parameters() - model.shared.weight.numel()


def test_parameter_counts_follow_table_2():
    """t5-tiny (d_model 64, 4 heads of 16, d_ff 256, 2 layers): attention 4·64·64 = 16384, feed-forward
    2·64·256 = 32768, norms 64 each, 32 buckets × 4 heads of position bias per stack (Table 2's P: one stack)."""
    counts = {a: non_embedding_parameters(tiny(a)) for a in ARCHITECTURES}
    encoder_block, decoder_block = 16384 + 32768 + 2 * 64, 2 * 16384 + 32768 + 3 * 64
    stack_extras = 32 * 4 + 64  # position bias, final norm
    assert counts["encoder_decoder"] == 2 * encoder_block + 2 * decoder_block + 2 * stack_extras == 230400
    assert counts["shared_encoder_decoder"] == 2 * decoder_block + stack_extras == 131648  # 0.57 of 2P
    assert counts["decoder_only"] == counts["prefix_lm"] == 2 * encoder_block + stack_extras == 98752
    half_depth = non_embedding_parameters(tiny("encoder_decoder", num_layers=1))
    assert half_depth == encoder_block + decoder_block + 2 * stack_extras == 115392  # Table 2's "6 layers": P


def ragged_inputs() -> torch.Tensor:
    return torch.tensor([[5, 6, 7, 1], [8, 1, 0, 0], [9, 10, 11, 1]])


def uncached_greedy(model: T5, inputs: torch.Tensor, steps: int) -> list[list[int]]:
    """Greedy decoding that re-runs the whole sequence for every token, one row at a time."""
    rows = []
    for row in inputs:
        prompt = row[row != 0][None]
        out: list[int] = []
        for _ in range(steps):
            generated = torch.tensor([[0] + out])
            if model.config.has_encoder:
                logits = model(prompt, generated)
            else:
                sequence = torch.cat([generated[:, :1], prompt, generated[:, 1:]], dim=1)
                prefix = (torch.arange(sequence.shape[1]) <= prompt.shape[1]).long()[None]
                logits = model(None, sequence, decoder_causal_attention=prefix)
            out.append(int(logits[0, -1].argmax()))
            if out[-1] == 1:
                break
        rows.append(out)
    return rows


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_cached_decoding_equals_rerunning_the_sequence(architecture):
    model, inputs = tiny(architecture), ragged_inputs()
    with torch.no_grad():
        cached = model.generate(inputs, max_new_tokens=6)
    assert [[t for t in row if t] for row in cached.tolist()] == [
        [t for t in row if t] for row in uncached_greedy(model, inputs, 6)]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_scores_equal_the_full_forward_pass(architecture):
    model, inputs = tiny(architecture), ragged_inputs()
    targets = torch.tensor([[12, 13, 1], [14, 1, 0], [15, 16, 1]])
    expected = []
    with torch.no_grad():
        for row, target in zip(inputs, targets):
            prompt, target = row[row != 0][None], target[target != 0][None]
            if model.config.has_encoder:
                logits = model(prompt, torch.cat([torch.zeros_like(target[:, :1]), target[:, :-1]], 1))
            else:
                sequence = torch.cat([torch.zeros_like(prompt[:, :1]), prompt, target[:, :-1]], 1)
                prefix = (torch.arange(sequence.shape[1]) <= prompt.shape[1]).long()[None]
                logits = model(None, sequence, decoder_causal_attention=prefix)[:, prompt.shape[1]:]
            expected.append(-F.cross_entropy(logits[0], target[0], reduction="sum"))
        torch.testing.assert_close(model.score(inputs, targets), torch.stack(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("architecture", ["decoder_only", "prefix_lm"])
def test_beam_search_and_sampling_condition_on_the_prefix(architecture):
    model, inputs = tiny(architecture), ragged_inputs()
    with torch.no_grad():
        greedy = model.generate(inputs, max_new_tokens=5)
        beam = model.generate(inputs, max_new_tokens=5, num_beams=4)
        top1 = model.generate(inputs, max_new_tokens=5, temperature=1.0, top_k=1)

        def score(ids):
            return decoding.score(model, inputs, ids)
        assert (score(beam) >= score(greedy) - 1e-4).all()
    assert torch.equal(top1, greedy)


@pytest.mark.integration
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_each_architecture_learns_rte_and_t2t_eval_reports_accuracy(architecture, data_dir, tmp_path):
    from t2t.cli import eval_main, train_main
    run = tmp_path / "run"
    assert train_main(["--task", "rte", "--data-dir", str(data_dir), "--output-dir", str(run), "--model", "t5-tiny",
                       "--train-steps", "100", "--batch-size", "8", "--log-every", "1", "--save-every", "100",
                       "--set", "threads=1",
                       "--set", f"model.architecture={architecture}", "--set", "input_length=48",
                       "--set", "target_length=4", "--set", "dropout_rate=0.0", "--set", "optimizer.name=adamw",
                       "--set", "optimizer.learning_rate=3e-3"]) == 0
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 100 and sum(losses[-10:]) < 0.5 * sum(losses[:10]), losses[::10]
    assert eval_main(["--task", "rte", "--checkpoint", str(run), "--data-dir", str(data_dir),
                      "--max-examples", "16", "--output-dir", str(tmp_path / "eval")]) == 0
    result = json.loads((tmp_path / "eval" / "validation" / "glue_rte_v002.metrics.json").read_text())
    assert result["num_examples"] == 16 and set(result["metrics"]) == {"accuracy"}
    assert 0 <= result["metrics"]["accuracy"] <= 100
    assert load_model(run).config.architecture == architecture
