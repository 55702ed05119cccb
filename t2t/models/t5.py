"""The T5 encoder-decoder Transformer (Raffel et al. 2020, §2.1 and §3.1.1) in plain PyTorch.

One file, read top to bottom: helpers (relative position buckets, RMS norm) → attention → feed-forward →
block → stack → the model (forward, loss, KV-cache decoding steps, init). Its settings and their presets
are ``t2t.models.presets``.
T5 1.0 (ReLU feed-forward, output layer tied to the embedding with a d_model**-0.5 rescale) and
T5 1.1 (gated-GELU feed-forward, untied ``lm_head``) are the same code with two config switches.

State-dict keys (the one-to-one map to Hugging Face's ``T5ForConditionalGeneration`` is on the right;
``{s}`` is ``encoder`` or ``decoder``, ``{i}`` a block index)::

    shared.weight                                   shared.weight  (= {s}.embed_tokens.weight)
    {s}.relative_attention_bias.weight              {s}.block.0.layer.0.SelfAttention.relative_attention_bias.weight
    {s}.blocks.{i}.self_attn.layer_norm.weight      {s}.block.{i}.layer.0.layer_norm.weight
    {s}.blocks.{i}.self_attn.{q,k,v,o}.weight       {s}.block.{i}.layer.0.SelfAttention.{q,k,v,o}.weight
    decoder.blocks.{i}.cross_attn.layer_norm.weight decoder.block.{i}.layer.1.layer_norm.weight
    decoder.blocks.{i}.cross_attn.{q,k,v,o}.weight  decoder.block.{i}.layer.1.EncDecAttention.{q,k,v,o}.weight
    encoder.blocks.{i}.ff.layer_norm.weight         encoder.block.{i}.layer.1.layer_norm.weight
    encoder.blocks.{i}.ff.{wi,wo}.weight            encoder.block.{i}.layer.1.DenseReluDense.{wi,wo}.weight
    decoder.blocks.{i}.ff.layer_norm.weight         decoder.block.{i}.layer.2.layer_norm.weight
    decoder.blocks.{i}.ff.{wi,wo}.weight            decoder.block.{i}.layer.2.DenseReluDense.{wi,wo}.weight
        (gated-gelu: ff.{wi_0,wi_1,wo} ↔ DenseReluDense.{wi_0,wi_1,wo})
    {s}.blocks.{i}.ff.adapter.{wi,wo}.weight        (adapter layers, §3.5.1; no HF counterpart)
    {s}.blocks.{i}.….{q,v,…}.lora_{A,B}              (LoRA, t2t.models.lora; peft's ….q.lora_{A,B}.weight)
    {s}.final_layer_norm.weight                     {s}.final_layer_norm.weight
    lm_head.weight   (untied configs only)          lm_head.weight

The relative attention bias is stored once per stack (HF keeps it in block 0 of each stack); every layer
of the stack uses it. With ``relative_attention_per_layer`` (UMT5) it is every layer's table side by side,
[buckets, L·H], which HF's UMT5 keeps as ``{s}.block.{i}.layer.0.SelfAttention.relative_attention_bias``.
All weights are [out_features, in_features] as in ``nn.Linear`` / HF.

Surface used by the rest of t2t: ``T5(cfg)``, ``forward`` → logits, ``loss_sums(batch)`` (the trainer's
fast path), ``generate`` / ``score`` (thin wrappers over :mod:`t2t.models.decoding`), ``encode``,
``begin_decoding`` / ``decode_step`` / ``extend`` (used by :mod:`t2t.models.decoding`), ``num_parameters``.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from t2t.errors import T2TError
from t2t.models import decoding, kernels
from t2t.models.checkpointing import checkpointed
from t2t.models.dropout import Dropout
from t2t.models.flex import FlexBias, flex_attention_of, flex_bias, require_flex_attention
from t2t.models.lora import add_lora, weight_of
from t2t.models.packed_rows import pack_rows
from t2t.models.presets import ModelConfig, resolve_model_config

# ----------------------------------------------------------------------------------------------------------
# Helpers


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int = 32,
                             max_distance: int = 128) -> torch.Tensor:
    """Map ``key_position - query_position`` to a bucket id in [0, num_buckets) (Mesh TF's scheme).

    Bidirectional: half the buckets for keys after the query, half for keys before. Within a half, the
    first half of its buckets are exact distances 0..n/2-1, the rest log-spaced up to ``max_distance``;
    anything farther shares the last bucket. Unidirectional (decoder): keys after the query share bucket 0
    (they are masked anyway).
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets; clamp(min=1) only avoids log(0) on entries that take the exact branch anyway
    large = max_exact + (
        torch.log(distance.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RMSNorm(nn.Module):
    """T5's layer norm: scale only, no mean subtraction, no bias; the variance is taken in fp32."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype == torch.float32:  # the same fp32 math as below, bf16 activations too (autocast)
            # on CUDA one fused kernel forward and one backward, where the lines below are some twenty ops
            return F.rms_norm(x.float(), self.weight.shape, self.weight, self.eps)
        variance = x.float().pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):  # half-precision weights: multiply in their dtype
            x = x.to(self.weight.dtype)
        return self.weight * x


def _clamp_fp16(x: torch.Tensor) -> torch.Tensor:
    """T5's activations overflow float16 (they are large in the feed-forward); keep them finite, as HF does."""
    if x.dtype == torch.float16:
        limit = torch.finfo(torch.float16).max - 1000
        x = x.clamp(-limit, limit)
    return x


# fp16 feed-forward outputs are computed this many times smaller, then scaled back in fp32 (``out_projection``)
FP16_OUT_SCALE = 2.0 ** -5


def out_projection(wo: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """``wo(h)``, the feed-forward's output projection; in fp16, kept from overflowing.

    T5's feed-forward outputs exceed fp16's 65,504 (fp16 NaNs are the T5 problem users report most to
    transformers). nai-t5 (NovelAI's T5: docs/float16.md, checkpoint_info.py) found it in t5-v1.1 small, xl and
    xxl, where every other product stayed in range, and scales those projections' weights down by hand-picked
    powers of two (at most 1/8 in all, t5-v1.1-xl) into an fp32 residual stream. The same here with one fixed
    power of two, 1/32: ``h`` is scaled (exact; only entries below 2e-3 lose bits, into fp16's subnormals),
    the product stays in range, and the scale is undone in fp32. Under autocast the result stays fp32, for the
    fp32 residual stream (nai-t5's "float32 residual"); a model with fp16 weights gets fp16 back, which
    ``_clamp_fp16`` keeps finite as transformers' ``clamp_value`` does. In the backward pass the gradient into
    the product is 32 times larger, which the fp16 loss scale absorbs (``t2t.training.precision``)."""
    if h.dtype != torch.float16:
        return wo(h)
    y = wo(h * FP16_OUT_SCALE).float() / FP16_OUT_SCALE
    return y if torch.is_autocast_enabled(h.device.type) else y.to(h.dtype)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype attention will run in: the autocast dtype when autocast is on for x's device."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


# ----------------------------------------------------------------------------------------------------------
# Attention


class Attention(nn.Module):
    """Pre-norm multi-head attention sublayer: ``x + dropout(o(attend(q(norm x), k(kv), v(kv))))``.

    ``bias`` is an additive float mask [B|1, H|1, T, S] holding the relative position bias and a large
    negative value where attention is not allowed; it is built once per stack (see ``Stack``) and shared by
    all layers. Scores are not scaled by 1/sqrt(d_kv): T5 folds that into the initialisation of ``q``.
    Cross-attention gets its keys/values from the block (or from the decoding cache). Where the dropout
    draws its masks by row (CPU training, ``t2t.models.dropout``), the attention probabilities are dropped by
    that module in the unfused math SDPA falls back to there anyway. On CUDA the projections
    multiply by q|k|v (cross-attention: k|v) concatenated at every call (``fused_projections``; ``fused``
    True or False forces one form, as benchmarks/bench_peers.py does to compare both); decoding does so on
    every device, with the concatenation made once per decoding call.
    """

    fused: bool | None = None  # None: the form ``fused_projections`` picks for the device
    # products by a raw weight (q|k|v concatenated) and attention; t2t.models.kernels.apply may set tuned ones
    kernel_functions = ("linear", "sdpa")
    linear = staticmethod(F.linear)
    sdpa = staticmethod(F.scaled_dot_product_attention)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.d_kv = cfg.num_heads, cfg.d_kv
        inner = cfg.num_heads * cfg.d_kv
        self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.q = nn.Linear(cfg.d_model, inner, bias=False)
        self.k = nn.Linear(cfg.d_model, inner, bias=False)
        self.v = nn.Linear(cfg.d_model, inner, bias=False)
        self.o = nn.Linear(inner, cfg.d_model, bias=False)
        self.dropout = Dropout(cfg.dropout_rate)  # also the attention-probability dropout rate

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_kv).transpose(1, 2)  # [B, H, T, d_kv]

    def qkv_weight(self) -> torch.Tensor:
        return torch.cat([weight_of(self.q), weight_of(self.k), weight_of(self.v)])  # [3·H·d_kv, d_model]

    def project_qkv(self, h: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v of ``h`` with ``weight = qkv_weight()`` (made once per decoding call), [B, H, T, d_kv] each;
        with any of the three weights stacked, those projections."""
        (B, T, _), stacked = h.shape, weight.shape[0] // (self.n_heads * self.d_kv)  # T may be 0: no -1 below
        return self.linear(h, weight).view(B, T, stacked, self.n_heads, self.d_kv).permute(2, 0, 3, 1, 4).unbind(0)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               bias: torch.Tensor | FlexBias | None) -> torch.Tensor:
        if isinstance(bias, FlexBias) and self.training and self.dropout.p > 0:
            raise T2TError(f"model.attention=flex has no attention-probability dropout, which T5 applies at "
                           f"dropout_rate {self.dropout.p}; train with model.attention=sdpa, or set "
                           f"model.dropout_rate=0.")
        if isinstance(bias, torch.Tensor) and bias.dtype != q.dtype:
            bias = bias.to(q.dtype)
        dropout_p = self.dropout.p if self.training else 0.0
        if isinstance(bias, FlexBias):
            y = flex_attention_of(q, k, v, bias)
        elif dropout_p and self.dropout.draws_by_row(q):
            scores = q @ k.transpose(-2, -1)  # [B, H, T, S]; unscaled: T5 folds 1/sqrt(d_kv) into q's init
            y = self.dropout((scores if bias is None else scores + bias).softmax(-1)) @ v
        else:
            y = self.sdpa(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=1.0)  # [B, H, T, d_kv]
        B, H, T, D = y.shape
        return self.o(y.transpose(1, 2).reshape(B, T, H * D))  # [B, T, d_model]

    def keys_values(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``h`` [B, S, d_model], [B, H, S, d_kv] each."""
        if self.uses_fused_projections(h):
            return self.project_qkv(h, torch.cat([weight_of(self.k), weight_of(self.v)]))
        return self.heads(self.k(h)), self.heads(self.v(h))

    def queries_keys_values(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``h`` [B, T, d_model], [B, H, T, d_kv] each."""
        if self.uses_fused_projections(h):
            return self.project_qkv(h, self.qkv_weight())
        return self.heads(self.q(h)), *self.keys_values(h)

    def uses_fused_projections(self, h: torch.Tensor) -> bool:
        return fused_projections(h) if self.fused is None else self.fused

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None,
                kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Self-attention (``kv`` None) or attention over precomputed keys/values ``kv`` ([B, H, S, d_kv] each)."""
        h = self.layer_norm(x)
        if kv is None:
            q, k, v = self.queries_keys_values(h)
        else:
            (k, v), q = kv, self.heads(self.q(h))
        return x + self.dropout(self.attend(q, k, v, bias))


def fused_projections(h: torch.Tensor) -> bool:
    """Whether attention multiplies ``h`` by its q|k|v (cross-attention: k|v) weights concatenated at every
    call, one product where there were three (two), checkpoint names unchanged: on CUDA, where a small batch's
    step is bound by kernel launches; not on the CPU, where the wider product is the slower
    (benchmarks/results/HISTORY.md, "Model")."""
    return h.is_cuda


# ----------------------------------------------------------------------------------------------------------
# Feed-forward


class FeedForward(nn.Module):
    """Pre-norm feed-forward sublayer: ReLU (``wi``, ``wo``; T5 1.0) or gated-GELU (``wi_0``, ``wi_1``, ``wo``; 1.1)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gated = cfg.feed_forward_proj == "gated-gelu"
        self.layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        if self.gated:
            self.wi_0 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.wi_1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        else:
            self.wi = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wo = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)
        self.relu = nn.ReLU()
        self.dropout = Dropout(cfg.dropout_rate)
        self.adapter = Adapter(cfg.d_model, cfg.adapter_dim) if cfg.adapter_dim else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer_norm(x)
        if self.gated:
            h = F.gelu(self.wi_0(h), approximate="tanh") * self.wi_1(h)  # gelu_new
        else:
            h = self.relu(self.wi(h))
        h = out_projection(self.wo, self.dropout(h))
        if self.adapter is not None:
            h = self.adapter(h)
        return x + self.dropout(h)


class Adapter(nn.Module):
    """``h + wo(relu(wi(h)))``: an adapter layer (T5 §3.5.1, Houlsby et al. 2019) inside the feed-forward
    sublayer's residual branch. ``wo`` starts near zero, so a new adapter is near the identity."""

    def __init__(self, d_model: int, dim: int):
        super().__init__()
        self.wi = nn.Linear(d_model, dim, bias=False)
        self.wo = nn.Linear(dim, d_model, bias=False)
        self.relu = nn.ReLU()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.wi.weight, std=self.wi.in_features ** -0.5)
        nn.init.normal_(self.wo.weight, std=1e-3)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.wo(self.relu(self.wi(h)))


def add_adapters(model: "T5", dim: int) -> None:
    """Give every feed-forward sublayer of ``model`` a new adapter of inner size ``dim`` (on its device)."""
    model.config.adapter_dim = dim
    for module in list(model.modules()):
        if isinstance(module, FeedForward):
            device = module.wo.weight.device
            module.adapter = Adapter(model.config.d_model, dim).to(device)
    kernels.apply(model, model.config.kernels)


# ----------------------------------------------------------------------------------------------------------
# Blocks and stacks


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, cross_attention: bool, index: int = 0):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.cross_attn = Attention(cfg) if cross_attention else None
        self.ff = FeedForward(cfg)
        # where every layer has its own position bias (UMT5), the heads of the stack's bias that are this block's
        H = cfg.num_heads
        self.bias_heads = slice(index * H, (index + 1) * H) if cfg.relative_attention_per_layer else None

    def own_bias(self, self_bias: torch.Tensor) -> torch.Tensor:
        """This block's self-attention bias [B|1, H, T, S] out of its stack's (see ``Stack``)."""
        return self_bias if self.bias_heads is None else self_bias[:, self.bias_heads]

    def forward(self, x, self_bias, enc=None, cross_bias=None):
        """``enc``: the encoder output, attended to by a decoder block (its keys and values are computed
        here, inside the block, so that FSDP can shard blocks as units); None skips cross-attention (an
        encoder pass, also of a shared stack)."""
        x = _clamp_fp16(self.self_attn(x, self.own_bias(self_bias)))
        if enc is not None:
            x = _clamp_fp16(self.cross_attn(x, cross_bias, kv=self.cross_attn.keys_values(enc)))
        return _clamp_fp16(self.ff(x))


class Stack(nn.Module):
    """Encoder or decoder: dropout(embeddings) → blocks → final RMS norm → dropout.

    The relative position bias (one scalar per head and bucket) lives here, once per stack, and the
    combined bias+mask is computed once per forward and shared by all blocks. Its buckets are bidirectional
    where the stack's attention is (an encoder pass, a prefix LM), one-sided in a causal pass. With
    ``relative_attention_per_layer`` (UMT5) the table holds every layer's heads side by side, [buckets, L·H],
    the bias is [B, L·H, T, S] and each block reads its own H heads (``Block.own_bias``).
    """

    def __init__(self, cfg: ModelConfig, num_layers: int, cross_attention: bool):
        super().__init__()
        self.num_buckets = cfg.relative_attention_num_buckets
        self.max_distance = cfg.relative_attention_max_distance
        tables = num_layers if cfg.relative_attention_per_layer else 1
        self.relative_attention_bias = nn.Embedding(cfg.relative_attention_num_buckets, cfg.num_heads * tables)
        self.blocks = nn.ModuleList([Block(cfg, cross_attention, i) for i in range(num_layers)])
        self.final_layer_norm = RMSNorm(cfg.d_model, cfg.layer_norm_epsilon)
        self.dropout = Dropout(cfg.dropout_rate)

    def position_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, bidirectional: bool) -> torch.Tensor:
        """q_pos [B|1, T], k_pos [B|1, S] → bias [B|1, H, T, S], read from the table over distances."""
        D, by_distance = self.bias_by_distance(q_pos, k_pos, bidirectional)
        distances = (k_pos[:, None, :] - q_pos[:, :, None]).clamp(-D, D) + D  # [B, T, S]
        # contiguous: with heads innermost, every layer's attention would copy the mask
        return F.embedding(distances, by_distance).permute(0, 3, 1, 2).contiguous()  # [B, H, T, S]

    def bias_by_distance(self, q_pos, k_pos, bidirectional: bool) -> tuple[int, torch.Tensor]:
        """(D, [2D + 1, H]): the bias of every key − query distance from −D to D, gathered from
        ``relative_attention_bias``. Why not index the [buckets, H] table by each pair's bucket: its gradient is
        summed by atomic adds on a GPU (compiled, and in FlexAttention), and every pair of a batch lands in one
        of a handful of buckets (every distance past ``max_distance`` shares one), so the adds serialise; by
        distance, each diagonal has its entry. D covers
        every distance between in-range positions; the buckets stop changing past ``max_distance``, so
        clamping longer distances (positions beyond the length) to ±D is exact."""
        D = max(q_pos.shape[-1], k_pos.shape[-1], self.max_distance + 1) - 1
        distances = torch.arange(-D, D + 1, device=q_pos.device)
        buckets = relative_position_bucket(distances, bidirectional, self.num_buckets, self.max_distance)
        return D, self.relative_attention_bias(buckets)

    def self_attention_bias(self, q_pos, k_pos, allowed, dtype, bidirectional: bool) -> torch.Tensor:
        """Position bias where ``allowed`` ([B|1, T, S] bool), the dtype's most negative value elsewhere."""
        bias = self.position_bias(q_pos, k_pos, bidirectional).to(dtype)
        return torch.where(allowed[:, None], bias, torch.finfo(dtype).min)  # [B, H, T, S]

    def flex_self_attention_bias(self, q_pos, k_pos, allowed, bidirectional: bool) -> FlexBias:
        """The same bias for FlexAttention: ``allowed`` as its block mask, and inside the kernel each score
        reads its bias from ``bias_by_distance`` (gathered outside the kernel, so autograd carries its gradient
        back to the buckets)."""
        D, by_distance = self.bias_by_distance(q_pos, k_pos, bidirectional)
        by_distance = by_distance.T.contiguous()  # [H, 2D + 1]: a head's diagonals side by side
        packed = q_pos.shape[0] > 1  # positions per row; else [1, T], shared by every row

        def add_position_bias(score, b, h, q, k):
            distance = k_pos[b, k] - q_pos[b, q] if packed else k_pos[0, k] - q_pos[0, q]
            return score + by_distance[h, distance.clamp(-D, D) + D].to(score.dtype)

        return flex_bias(allowed, q_pos.shape[-1], add_position_bias)

    def cross_keys_values(self, enc: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every decoder layer's cross-attention (keys, values) of the encoder output, [B, H, S, d_kv] each
        (computed once per decoding call, in ``T5.begin_decoding``). Made contiguous once, since every decoding
        step reads them: SDPA on the CPU reads the heads-transposed layout about twice as slowly in bf16."""
        return [tuple(t.contiguous() for t in b.cross_attn.keys_values(enc)) for b in self.blocks]

    checkpoint_blocks = False  # recompute each block's activations in the backward pass (t2t.models.checkpointing)

    def forward(self, x, self_bias, enc=None, cross_bias=None):
        x = self.dropout(x)
        for block in self.blocks:
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                x = checkpointed(block, x, self_bias, enc, cross_bias)
            else:
                x = block(x, self_bias, enc, cross_bias)
        return self.dropout(self.final_layer_norm(x))


# ----------------------------------------------------------------------------------------------------------
# Masks (bool, True = may attend)


def _positions(inputs: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """``positions``, or 0..T-1 shared by every row of ``inputs`` [B, T, ...] (tokens or their embeddings)."""
    if positions is not None:
        return positions
    return torch.arange(inputs.shape[1], device=inputs.device)[None, :]  # [1, T]


def _encoder_allowed(tokens, pad_id, segment_ids) -> torch.Tensor:
    """[B, S, S] (or [B, 1, S]): keys that are not padding, and of the query's segment when packed."""
    if segment_ids is not None:
        return segment_ids[:, :, None] == segment_ids[:, None, :]
    return (tokens != pad_id)[:, None, :]


def _decoder_allowed(T: int, device, segment_ids, prefix=None) -> torch.Tensor:
    """[B|1, T, T]: causal, or both positions in the input prefix (``prefix`` [B, T], 1 there: a prefix LM's
    ``decoder_causal_attention``, as t5x's ``make_decoder_mask``); within the query's segment when packed."""
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None]
    if prefix is not None:
        visible = prefix.bool()
        allowed = allowed | (visible[:, :, None] & visible[:, None, :])
    if segment_ids is not None:
        allowed = allowed & (segment_ids[:, :, None] == segment_ids[:, None, :])
    return allowed


def _cross_allowed(enc_tokens, pad_id, enc_segment_ids, dec_segment_ids) -> torch.Tensor:
    """[B, T|1, S]: encoder keys that are not padding, and of the decoder query's segment when packed."""
    if enc_segment_ids is not None and dec_segment_ids is not None:
        return dec_segment_ids[:, :, None] == enc_segment_ids[:, None, :]
    return (enc_tokens != pad_id)[:, None, :]


def _cross_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)[:, None]  # [B, 1, T|1, S]


# ----------------------------------------------------------------------------------------------------------
# The model


class DecoderCache:
    """State for incremental decoding: per decoder layer, self-attention keys/values preallocated to
    ``max_len`` (written in place, never concatenated) and, for encoder-decoders, cross-attention
    keys/values computed once.

    One buffer a layer rather than one for the whole stack: a compiled step that writes into views of a
    single [L, 2, B, H, max_len, d_kv] buffer is functionalized into copies of all of it, where separate
    buffers are written in place (a hundred times faster for the writes alone)."""

    def __init__(self, self_k, self_v, self_bias_table, cross_k=(), cross_v=(), cross_bias=None, key_valid=None):
        self.self_k, self.self_v = self_k, self_v          # lists of [B, H, max_len, d_kv]
        self.self_bias_table = self_bias_table             # [1, H, max_len, max_len] position bias + causal mask
        self.cross_k, self.cross_v = list(cross_k), list(cross_v)  # lists of [B, H, S, d_kv]; empty: no encoder
        self.cross_bias = cross_bias                       # [B, 1, 1, S]
        self.key_valid = key_valid                         # [B, max_len] bool (left-padded prefixes) or None
        self.qkv_weights: list[torch.Tensor] = []          # per layer, q|k|v concatenated once per decode
        self.weight_copies = WeakIdKeyDictionary()         # for T5.decoding_scope (kernels: packed copies)
        self.length = 0                                    # decoder tokens consumed so far

    def self_bias(self, t: int, T: int) -> torch.Tensor:
        """Bias of queries ``t..t+T-1`` over keys ``0..t+T-1``: [B|1, H, T, t+T]."""
        bias = self.self_bias_table[:, :, t:t + T, :t + T]
        if self.key_valid is not None:
            bias = bias.masked_fill(~self.key_valid[:, None, None, :t + T], torch.finfo(bias.dtype).min)
        return bias

    def tensors(self) -> tuple:
        """What ``T5.static_decode_step`` reads and writes, in its argument order."""
        return (self.self_k, self.self_v, self.qkv_weights, self.self_bias_table, self.key_valid, self.cross_k,
                self.cross_v, self.cross_bias)

    def reorder(self, index: torch.Tensor, in_place: bool = False) -> None:
        """Keep rows ``index`` (beam search); cross-attention state is shared by an example's beams. ``in_place``
        writes them into the same buffers, one copy more, as a CUDA graph of the decoding step needs."""
        def keep(buffer: torch.Tensor) -> torch.Tensor:
            rows = buffer.index_select(0, index)
            return buffer.copy_(rows) if in_place else rows

        self.self_k = [keep(k) for k in self.self_k]
        self.self_v = [keep(v) for v in self.self_v]
        if self.key_valid is not None:
            self.key_valid = keep(self.key_valid)


def left_aligned_prefixes(tokens: torch.Tensor, pad_id: int, start_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input rows [B, S] → ``[start, inputs…]`` rows aligned to the right of [B, S+1], and which
    positions hold a token. A decoder-only model decodes every row from the same position this way; its
    positions are only relative, so the left padding (masked as keys) changes nothing."""
    B, S = tokens.shape
    lengths = (tokens != pad_id).sum(1, keepdim=True)  # [B, 1]
    column = torch.arange(S + 1, device=tokens.device)[None]  # [1, S+1]
    source = column - (S - lengths) - 1  # index into the input row; -1 is the start token
    valid = source >= -1
    gathered = tokens.gather(1, source.clamp(0, max(S - 1, 0)).expand(B, S + 1)) if S else tokens.new_zeros(B, 1)
    prefix = torch.where(source >= 0, gathered, torch.full_like(gathered, start_id))
    return prefix.masked_fill(~valid, pad_id), valid


def token_losses(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Each position's cross-entropy in fp32, plus ``z_loss · log(Z)²`` when ``z_loss`` is set."""
    if not z_loss:
        return F.cross_entropy(logits.float(), targets, reduction="none")
    return _CrossEntropyWithZLoss.apply(logits.float(), targets, z_loss)


class _CrossEntropyWithZLoss(torch.autograd.Function):
    """``log Z - logit[target] + z_loss · log(Z)²`` with the gradient written in one tensor, as cross-entropy's
    own kernel does: ``softmax · (1 + 2 z_loss log Z) - onehot``, in cross-entropy's time (composed of
    logsumexp and gather, autograd's backward makes several vocabulary-sized tensors)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, z_loss: float) -> torch.Tensor:
        log_z = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(logits, targets, log_z)
        ctx.z_loss = z_loss
        return log_z - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) + z_loss * log_z.square()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, log_z = ctx.saved_tensors
        grad_logits = torch.sub(logits, log_z.unsqueeze(-1)).exp_()  # softmax
        grad_logits.mul_((grad * (1 + 2 * ctx.z_loss * log_z)).unsqueeze(-1))
        grad_logits.scatter_add_(-1, targets.unsqueeze(-1), -grad.unsqueeze(-1))
        return grad_logits, None, None


class T5(nn.Module):
    """The Transformer of every architecture in ``ModelConfig.architecture``. Encoder-decoders keep the
    encoder stack as ``encoder`` (``shared_encoder_decoder``: the ``decoder`` stack, run without its
    cross-attention); decoder-only models have the ``decoder`` stack alone.

    Built plain PyTorch, then given the kernels ``cfg.kernels`` names (``t2t.models.kernels.apply``), which
    may set ``linear`` (the products by a raw weight: the tied output layer) and ``decoding_scope`` (around a
    decoding call's steps, with the cache's ``weight_copies``) on the instance."""

    kernel_functions = ("linear", "decoding_scope")
    linear = staticmethod(F.linear)
    decoding_scope = staticmethod(lambda weight_copies: contextlib.nullcontext())

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.architecture != "encoder_decoder" and cfg.decoder_layers != cfg.num_layers:
            raise T2TError(f"num_decoder_layers applies only to the encoder_decoder architecture; "
                           f"{cfg.architecture} has one stack of num_layers layers, so leave num_decoder_layers out.")
        if cfg.attention == "flex":
            if cfg.relative_attention_per_layer:  # a settings conflict first: no torch fixes it
                raise T2TError("model.attention=flex reads one relative position bias per stack, so a model with "
                               "relative_attention_per_layer (UMT5) runs with model.attention=sdpa; set that.")
            require_flex_attention()
        self.config = cfg
        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.architecture == "encoder_decoder":
            self.encoder = Stack(cfg, cfg.num_layers, cross_attention=False)
        self.decoder = Stack(cfg, cfg.decoder_layers, cross_attention=cfg.has_encoder)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Mesh TF's Unitransformer buckets bidirectionally unless it is fully autoregressive: a prefix LM does
        self.bidirectional_decoder = cfg.architecture == "prefix_lm"
        self.reset_parameters()
        kernels.apply(self, cfg.kernels)
        if cfg.lora_rank:
            add_lora(self, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets)

    @classmethod
    def from_config(cls, cfg: ModelConfig | str | Path, device: torch.device | str | None = None) -> "T5":
        """Build from a config or preset name; ``device="meta"`` builds without allocating memory."""
        if not isinstance(cfg, ModelConfig):
            cfg = resolve_model_config(cfg)
        with torch.device(device) if device is not None else contextlib.nullcontext():
            return cls(cfg)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Mesh TF / HF initialisation (factor 1.0): embeddings N(0,1); q N(0,(d_model·d_kv)^-½);
        k, v N(0,d_model^-½); o N(0,(H·d_kv)^-½); wi N(0,d_model^-½); wo N(0,d_ff^-½);
        relative bias N(0,d_model^-½); norms 1."""
        cfg = self.config
        d, dkv, H = cfg.d_model, cfg.d_kv, cfg.num_heads
        nn.init.normal_(self.shared.weight, std=1.0)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=1.0)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
            elif isinstance(module, Attention):
                nn.init.normal_(module.q.weight, std=(d * dkv) ** -0.5)
                nn.init.normal_(module.k.weight, std=d ** -0.5)
                nn.init.normal_(module.v.weight, std=d ** -0.5)
                nn.init.normal_(module.o.weight, std=(H * dkv) ** -0.5)
            elif isinstance(module, FeedForward):
                for name in ("wi", "wi_0", "wi_1"):
                    if hasattr(module, name):
                        nn.init.normal_(getattr(module, name).weight, std=d ** -0.5)
                nn.init.normal_(module.wo.weight, std=cfg.d_ff ** -0.5)
            elif isinstance(module, Adapter):
                module.reset_parameters()
            elif isinstance(module, Stack):
                nn.init.normal_(module.relative_attention_bias.weight, std=d ** -0.5)

    def num_parameters(self) -> int:
        """Number of distinct parameters (a tied embedding counts once)."""
        return sum(p.numel() for p in self.parameters())

    # -- pieces -------------------------------------------------------------------------------------------

    @property
    def encoder_stack(self) -> Stack:
        return self.encoder if self.config.architecture == "encoder_decoder" else self.decoder

    def attention_masks(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The bool masks (True = may attend) of a batch of model features: ``decoder`` [B|1, T, T] and, for
        encoder-decoders, ``encoder`` [B, S|1, S] and ``cross`` [B, T|1, S]."""
        dec = batch["decoder_input_tokens"]
        prefix = batch.get("decoder_causal_attention") if self.bidirectional_decoder else None
        masks = {"decoder": _decoder_allowed(dec.shape[1], dec.device, batch.get("decoder_segment_ids"), prefix)}
        if self.config.has_encoder:
            enc, enc_segments = batch["encoder_input_tokens"], batch.get("encoder_segment_ids")
            masks["encoder"] = _encoder_allowed(enc, self.config.pad_id, enc_segments)
            masks["cross"] = _cross_allowed(enc, self.config.pad_id, enc_segments, batch.get("decoder_segment_ids"))
        return masks

    def encode(self, tokens: torch.Tensor, segment_ids: torch.Tensor | None = None,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """Encoder output [B, S, d_model] (final-normed)."""
        return self._encode(self.shared(tokens), _encoder_allowed(tokens, self.config.pad_id, segment_ids), positions)

    def encode_rows(self, tokens: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        """The encoder output of a padded batch ``tokens`` [B, S] for decoding, computing its rows' tokens only:
        ``(encoded, unpack)``, ``encoded`` [R, W, d_model] the rows packed side by side where that saves work
        (:mod:`t2t.models.packed_rows`; ``encode``'s values to rounding), and ``unpack`` taking any [R, W, ...]
        tensor of them to the batch's layout [B, S, ...], zeros after each row's last token. FlexAttention
        compiles a kernel per shape, so a flex model encodes the batch as it is (``unpack`` the identity)."""
        packed = None if self.config.attention == "flex" else pack_rows(tokens, self.config.pad_id)
        if packed is None:
            return self.encode(tokens), lambda x: x
        encoded = self._encode(self.shared(packed.tokens), packed.allowed(self.config.pad_id), packed.positions)
        return encoded, packed.unpack

    def _encode(self, x: torch.Tensor, allowed, positions) -> torch.Tensor:
        """Encoder output for the embedded inputs ``x`` [B, S, d_model]."""
        pos = _positions(x, positions)
        stack = self.encoder_stack
        if self.config.attention == "flex":
            return stack(x, stack.flex_self_attention_bias(pos, pos, allowed, bidirectional=True))
        return stack(x, stack.self_attention_bias(pos, pos, allowed, _compute_dtype(x), bidirectional=True))

    def _decode(self, enc: torch.Tensor | None, x: torch.Tensor, self_allowed: torch.Tensor,
                cross_allowed: torch.Tensor | None = None, decoder_positions=None) -> torch.Tensor:
        """Decoder output [B, T, d_model] (final-normed, before the output layer) for the embedded decoder
        inputs ``x`` [B, T, d_model], teacher-forced; ``enc`` None for decoder-only models."""
        dtype = _compute_dtype(x)
        pos = _positions(x, decoder_positions)
        if self.config.attention == "flex":
            self_bias = self.decoder.flex_self_attention_bias(pos, pos, self_allowed, self.bidirectional_decoder)
            cross_bias = flex_bias(cross_allowed, x.shape[1]) if enc is not None else None
        else:
            self_bias = self.decoder.self_attention_bias(pos, pos, self_allowed, dtype, self.bidirectional_decoder)
            cross_bias = _cross_bias(cross_allowed, dtype) if enc is not None else None
        return self.decoder(x, self_bias, enc, cross_bias)

    def hidden_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Decoder output [B, T, d_model] for a batch of model features (docs/internals.md)."""
        masks = self.attention_masks(batch)
        dec_tokens, dec_positions = batch["decoder_input_tokens"], batch.get("decoder_positions")
        if not self.config.has_encoder:
            return self._decode(None, self.shared(dec_tokens), masks["decoder"], None, dec_positions)
        enc_x, dec_x = self._embed(batch["encoder_input_tokens"], dec_tokens)
        enc = self._encode(enc_x, masks["encoder"], batch.get("encoder_positions"))
        return self._decode(enc, dec_x, masks["decoder"], masks["cross"], dec_positions)

    def _embed(self, *tokens: torch.Tensor) -> list[torch.Tensor]:
        """The embeddings of each token tensor, [*shape, d_model], by one lookup: the table's gradient is then
        one dense [vocab, d_model] tensor rather than one per lookup, summed; on a CPU each such tensor is a
        zero-fill and an add over the whole table (66 MB for t5-small)."""
        flat = [t.flatten() for t in tokens]
        x = self.shared(torch.cat(flat))
        return [part.view(*t.shape, -1) for part, t in zip(x.split([f.numel() for f in flat]), tokens)]

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Decoder output → logits over the vocabulary."""
        if self.lm_head is not None:
            return self.lm_head(h)
        return self.linear(h * self.config.d_model ** -0.5, self.shared.weight)  # tied: rescale first (T5 1.0)

    # -- training / scoring -------------------------------------------------------------------------------

    def forward(self, encoder_input_tokens, decoder_input_tokens, encoder_segment_ids=None, decoder_segment_ids=None,
                encoder_positions=None, decoder_positions=None, decoder_causal_attention=None) -> torch.Tensor:
        """Logits [B, T, vocab_size]; 0 is padding (see docs/internals.md for packed rows). Decoder-only
        models take ``encoder_input_tokens=None`` and the one row of inputs + targets as decoder tokens."""
        features = dict(encoder_input_tokens=encoder_input_tokens, decoder_input_tokens=decoder_input_tokens,
                        encoder_segment_ids=encoder_segment_ids, decoder_segment_ids=decoder_segment_ids,
                        encoder_positions=encoder_positions, decoder_positions=decoder_positions,
                        decoder_causal_attention=decoder_causal_attention)
        return self.project(self.hidden_states({k: v for k, v in features.items() if v is not None}))

    def loss_sums(self, batch: dict[str, torch.Tensor], lm_weight: float = 0.0, z_loss: float = 0.0,
                  every_position: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum(weights · CE), sum(weights))`` for a batch of model features (docs/internals.md).

        Same value as cross-entropy over ``forward``'s logits, but the output layer and the softmax run only
        on positions whose loss weight is non-zero (padding costs nothing). The trainer divides by its
        normaliser. ``lm_weight`` λ adds GPT's auxiliary language-modelling loss (Radford et al. 2018, §3.2:
        L = L_task + λ·L_LM) over the positions that predict an input token of a decoder-only row (a
        non-padding target without task weight), each loss a mean over its own tokens as in GPT's code:
        the input positions weigh λ·(task weight / input tokens) of the batch, so that the sum divided by the
        task weight (the second sum, unchanged) is mean task loss + λ·mean LM loss. ``z_loss`` adds T5's
        ``z_loss · log(Z)²`` to each position's loss (mesh-tf's and t5x's 1e-4), Z the softmax's normaliser:
        it keeps log Z near 0, so the logits stay log-probabilities and small enough for bf16.
        ``every_position`` runs the output layer on every position, padding weighed 0, for a compiled caller:
        the positions kept otherwise are as many as the batch has targets, a shape a graph cannot fix.
        """
        h = self.hidden_states(batch)
        weights = batch.get("decoder_loss_weights")
        targets = batch["decoder_target_tokens"]
        if weights is None:
            weights = (targets != self.config.pad_id)
        weights = weights.float()
        task_weight = weights.sum()
        if lm_weight:
            inputs = (targets != self.config.pad_id) & (weights == 0)
            weights = weights + inputs * (lm_weight * task_weight / inputs.sum().clamp(min=1))
        if every_position:
            losses = token_losses(self.project(h).flatten(0, 1), targets.flatten(), z_loss)
            return (losses * weights.flatten()).sum(), task_weight
        keep = weights != 0
        losses = token_losses(self.project(h[keep]), targets[keep], z_loss)  # logits [N, V] → [N]
        return (losses * weights[keep]).sum(), task_weight

    def generate(self, encoder_input_tokens: torch.Tensor, max_new_tokens: int | None = None, **kwargs) -> torch.Tensor:
        """Decoded ids [B, ≤max_new_tokens] (greedy by default); see :func:`t2t.models.decoding.generate`.
        Decoder-only models continue ``[start] + inputs`` (the inputs are their prefix)."""
        return decoding.generate(self, encoder_input_tokens, max_new_tokens=max_new_tokens, **kwargs)

    def score(self, encoder_input_tokens: torch.Tensor, target_tokens: torch.Tensor) -> torch.Tensor:
        """[B] sum of target-token log-probabilities (0 = padding, ignored); see :func:`t2t.models.decoding.score`."""
        return decoding.score(self, encoder_input_tokens, target_tokens)

    @contextlib.contextmanager
    def dense_attention(self):
        """The SDPA path inside the block, whatever ``config.attention`` says: t2t's evaluation and prediction
        run in it. FlexAttention compiles its kernel once per input shape (static shapes:
        ``flex.compiled_flex_attention``), and evaluation pads each batch to its own longest input, so a
        flex model evaluated on a dataset compiled again at nearly every batch and, past dynamo's limit of
        graphs, ran flex's unfused reference. SDPA computes the same attention (tests/models/
        test_flex_attention.py) without compiling, about as fast for inference (benchmarks/results/HISTORY.md)."""
        kind, self.config.attention = self.config.attention, "sdpa"
        try:
            yield self
        finally:
            self.config.attention = kind

    # -- incremental decoding (used by t2t.models.decoding) -------------------------------------------------------

    def begin_decoding(self, encoder_input_tokens: torch.Tensor, max_new_tokens: int,
                       num_beams: int = 1) -> tuple[DecoderCache, torch.Tensor]:
        """A cache for ``max_new_tokens`` decoded tokens of each input row repeated ``num_beams`` times (beams
        of one example adjacent), and the decoder output [B*K, d_model] that predicts the first of them.
        Encoder-decoders run the encoder once per example and feed the start token; decoder-only models run
        the prefix ``[start] + inputs`` in one pass (left-aligned, see :func:`left_aligned_prefixes`)."""
        cfg = self.config
        if cfg.has_encoder:
            cache = self._encoder_decoder_cache(encoder_input_tokens, max_new_tokens, num_beams)
            start = torch.full((encoder_input_tokens.shape[0] * num_beams, 1), cfg.decoder_start_id,
                               dtype=torch.long, device=encoder_input_tokens.device)
            return cache, self.extend(start, cache)[:, 0]
        prefix, valid = left_aligned_prefixes(encoder_input_tokens, cfg.pad_id, cfg.decoder_start_id)
        prefix, valid = prefix.repeat_interleave(num_beams, dim=0), valid.repeat_interleave(num_beams, dim=0)
        P = prefix.shape[1]
        key_valid = torch.cat([valid, valid.new_ones(valid.shape[0], max_new_tokens)], dim=1)
        cache = self._new_cache(prefix.shape[0], P + max_new_tokens, _compute_dtype(self.shared.weight),
                                prefix.device, visible_prefix=P if self.bidirectional_decoder else 0,
                                key_valid=key_valid)
        return cache, self.extend(prefix, cache)[:, -1]

    def _encoder_decoder_cache(self, encoder_tokens: torch.Tensor, max_len: int, num_beams: int) -> DecoderCache:
        """The encoder run once per example (``encode_rows``), every decoder layer's cross-attention keys and
        values of it computed on the packed rows and repeated for each of an example's beams, and empty
        self-attention buffers for ``max_len`` decoder tokens of each beam."""
        encoded, unpack = self.encode_rows(encoder_tokens)

        def per_beam(keys_or_values: torch.Tensor) -> torch.Tensor:  # [R, H, W, d_kv] → [B*K, H, S, d_kv]
            batch = unpack(keys_or_values.transpose(1, 2)).transpose(1, 2)
            return (batch.repeat_interleave(num_beams, dim=0) if num_beams > 1 else batch).contiguous()

        cross = self.decoder.cross_keys_values(encoded)
        cache = self._new_cache(encoder_tokens.shape[0] * num_beams, max_len, _compute_dtype(encoded), encoded.device)
        cache.cross_k, cache.cross_v = [per_beam(k) for k, _ in cross], [per_beam(v) for _, v in cross]
        allowed = (encoder_tokens != self.config.pad_id).repeat_interleave(num_beams, dim=0)
        cache.cross_bias = _cross_bias(allowed[:, None, :], cache.self_bias_table.dtype)
        return cache

    def _new_cache(self, B: int, max_len: int, dtype: torch.dtype, device, visible_prefix: int = 0,
                   key_valid: torch.Tensor | None = None) -> DecoderCache:
        """Empty self-attention buffers; the bias table holds the causal mask (and a prefix LM's fully visible
        first ``visible_prefix`` positions)."""
        cfg = self.config
        shape = (B, cfg.num_heads, max_len, cfg.d_kv)
        self_k = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.decoder.blocks]
        self_v = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.decoder.blocks]
        pos = torch.arange(max_len, device=device)[None]
        allowed = _decoder_allowed(max_len, device, None, (pos < visible_prefix) if visible_prefix else None)
        table = self.decoder.self_attention_bias(pos, pos, allowed, dtype, self.bidirectional_decoder)
        cache = DecoderCache(self_k, self_v, table, key_valid=key_valid)
        # q|k|v fused once, in the compute dtype: left fp32 under autocast, it would be cast again at every step
        cache.qkv_weights = [block.self_attn.qkv_weight().to(dtype) for block in self.decoder.blocks]
        return cache

    def extend(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """Feed ``tokens`` [B, T] at positions ``cache.length…``; decoder output [B, T, d_model]."""
        t, T = cache.length, tokens.shape[1]
        x = self.decoder.dropout(self.shared(tokens))  # [B, T, d]

        def store(i, k, v):  # the new keys/values in place; attend over positions 0..t+T-1
            cache.self_k[i][:, :, t:t + T] = k
            cache.self_v[i][:, :, t:t + T] = v
            return cache.self_k[i][:, :, :t + T], cache.self_v[i][:, :, :t + T]

        h = self._cached_blocks(x, cache.qkv_weights, store, cache.self_bias(t, T), cache.cross_k, cache.cross_v,
                                cache.cross_bias)
        cache.length = t + T
        return h

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """Feed one decoder token per row (``tokens`` [B]) at position ``cache.length``; logits [B, V]."""
        with self.decoding_scope(cache.weight_copies):
            return self.project(self.extend(tokens[:, None], cache)[:, 0])  # [B, V]

    def static_decode_step(self, tokens, position, self_k, self_v, qkv_weights, bias_table, key_valid, cross_k,
                           cross_v, cross_bias) -> torch.Tensor:
        """``decode_step`` at ``position`` ([1] long tensor) over ``DecoderCache.tensors()``, with shapes that do
        not change from one position to the next: every step attends over the whole preallocated cache, the
        keys not written yet masked by the causal bias table, so ``torch.compile`` makes one graph for all
        positions rather than one per position (and for all batches: ``t2t.models.decoding``, ``compile=True``).
        Does not advance ``cache.length``."""
        x = self.decoder.dropout(self.shared(tokens[:, None]))  # [B, 1, d]
        bias = bias_table.index_select(2, position)  # [1, H, 1, max_len]
        if key_valid is not None:
            bias = bias.masked_fill(~key_valid[:, None, None, :], torch.finfo(bias.dtype).min)

        def store(i, k, v):  # the new keys/values at ``position``; attend over the whole cache
            self_k[i].index_copy_(2, position, k)
            self_v[i].index_copy_(2, position, v)
            return self_k[i], self_v[i]

        h = self._cached_blocks(x, qkv_weights, store, bias, cross_k, cross_v, cross_bias)
        return self.project(h[:, 0])  # [B, V]

    def _cached_blocks(self, x, qkv_weights, store, self_bias, cross_k, cross_v, cross_bias) -> torch.Tensor:
        """The decoder blocks over new tokens ``x`` [B, T, d] with cached self-attention: ``store(i, k, v)``
        writes layer ``i``'s new keys/values into the cache and returns the keys/values to attend over; the
        final-normed decoder output [B, T, d]."""
        for i, block in enumerate(self.decoder.blocks):
            attn = block.self_attn
            q, k, v = attn.project_qkv(attn.layer_norm(x), qkv_weights[i])  # [B, H, T, d_kv] each
            keys, values = store(i, k, v)
            x = _clamp_fp16(x + attn.dropout(attn.attend(q, keys, values, block.own_bias(self_bias))))
            if cross_k:
                x = _clamp_fp16(block.cross_attn(x, cross_bias, kv=(cross_k[i], cross_v[i])))
            x = _clamp_fp16(block.ff(x))
        return self.decoder.dropout(self.decoder.final_layer_norm(x))
