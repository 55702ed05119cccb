"""Decoding with a T5 model: greedy, beam search, sampling, and scoring (rank classification).

All functions take the model and a LongTensor of input tokens [B, S] (0 = padding, rows may be ragged).
Decoding starts with ``T5.begin_decoding`` (an encoder-decoder runs its encoder once and computes every
decoder layer's cross-attention keys/values once; a decoder-only model runs its input prefix once) and keeps
the decoder self-attention keys/values in preallocated buffers (``T5.decode_step``). Outputs are
[B, ≤max_new_tokens] ids without the start token, EOS included where produced and padding (0) after it;
decoding stops early once every row has produced EOS. On a CUDA device every method replays the step as a CUDA
graph (``cuda_graph``, on by default: a small batch's step is bound by kernel launches).

``generate`` picks the method: ``num_beams > 1`` → beam search; ``temperature > 0`` → sampling;
otherwise greedy (t5x's convention: temperature 0 is greedy). Both at once (beam sampling, which t2t does
not have), or ``top_k``/``top_p`` without sampling, is a ValueError rather than a setting left unused.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from t2t.models.kernels import many_graphs

NEG_INF = -1.0e9  # "impossible" score, as HF's beam search uses (finite, so sums stay ordered)
ALPHA = 0.6  # beam search's length penalty exponent, T5's (and t5x's, GNMT's) default

log = logging.getLogger(__name__)
_first_compiled_call: list[float] = []  # its seconds, once this process has made it: mostly compiling


def _static_step(model, tokens, position, *cache_tensors):
    return model.static_decode_step(tokens, position, *cache_tensors)


@functools.cache
def compiled_static_step() -> Callable:
    """``T5.static_decode_step`` through torch.compile, made on first use (creating it loads torch._dynamo,
    seconds that ``import t2t`` should not pay). Sizes are static except those ``_mark_varying_sizes`` names,
    so a model compiles one graph for every batch (and one more for single rows, which dynamo specializes)."""
    return torch.compile(_static_step, fullgraph=True, dynamic=False)


def decoding_step(model, compile: bool = False, cuda_graph: bool = False) -> Callable:
    """``step(tokens [B], cache) -> logits [B, V]``: ``model.decode_step``, or with ``compile`` the model's
    static-shape step (``T5.static_decode_step``) through ``torch.compile``. With ``cuda_graph``, on a CUDA
    device, the static step (compiled or not) is captured as one CUDA graph at the first call and replayed at
    every later position (``_captured``): a step of a small batch is bound by its few hundred kernel launches,
    which a replay issues as one. The graph reads the cache's buffers where they were at the capture, so
    beam search reorders them in place; a step whose cache holds other buffers than at the capture is an
    error. On the CPU it changes nothing."""
    graphed = uses_cuda_graph(model, cuda_graph)
    if not compile and not graphed:
        return model.decode_step

    def run(tokens: torch.Tensor, position: torch.Tensor, cache) -> torch.Tensor:
        # autocast's cache of cast weights off in every call: a CUDA graph must cast the weights itself, and
        # dynamo guards on the setting, so that one compiled graph serves graphed and plain calls alike
        with _autocast_without_cache(tokens.device.type):
            if not compile:
                return model.static_decode_step(tokens, position, *cache.tensors())
            return compiled(tokens, position, cache)

    def compiled(tokens: torch.Tensor, position: torch.Tensor, cache) -> torch.Tensor:
        _mark_varying_sizes(tokens, cache)
        started = time.perf_counter()
        with model.decoding_scope(cache.weight_copies), many_graphs():  # as in ``T5.decode_step``
            logits = compiled_static_step()(model, tokens, position, *cache.tensors())
        if not _first_compiled_call:
            _first_compiled_call.append(time.perf_counter() - started)
            log.info("compiled the decoding step: its first call took %.1f s", _first_compiled_call[0])
        return logits

    replay, captured_buffers = None, None

    def step(tokens: torch.Tensor, cache) -> torch.Tensor:
        nonlocal replay, captured_buffers
        tokens = tokens.contiguous()  # beam search's are a strided view: another layout, another graph
        if graphed:
            if replay is None:
                replay = _captured(lambda t, p: run(t, p, cache), tokens, cache.length)
                captured_buffers = _buffers(cache)
            elif _buffers(cache) != captured_buffers:
                raise RuntimeError("the decoding cache's buffers were replaced after its CUDA graph was captured; "
                                   "reorder them in place (DecoderCache.reorder(..., in_place=True)) or pass "
                                   "cuda_graph=False")
            logits = replay(tokens, cache.length)
        else:
            logits = run(tokens, torch.tensor([cache.length], device=tokens.device), cache)
        cache.length += 1
        return logits

    return step


def uses_cuda_graph(model, cuda_graph: bool) -> bool:
    """Whether decoding replays its step as a CUDA graph: asked for, and the model on a CUDA device."""
    return cuda_graph and next(model.parameters()).device.type == "cuda"


def _buffers(cache) -> tuple[int, ...]:
    """The identities of the tensors a decoding step reads and writes (``DecoderCache.tensors()``), the ones a
    graph captured over them replays over."""
    return tuple(id(t) for item in cache.tensors() for t in (item if isinstance(item, list) else [item]))


def _captured(run: Callable, tokens: torch.Tensor, length: int) -> Callable:
    """``run(tokens, position)`` captured as a CUDA graph over its own copies of ``tokens`` and the position;
    returns ``replay(tokens, length) -> logits``, the graph's output tensor, rewritten by every replay. One
    warm-up call on a side stream comes first (it compiles, and lets cuBLAS and the allocator set up outside
    the capture); it writes the keys/values of ``tokens`` at ``length``, which the first replay writes again."""
    static_tokens, position = tokens.clone(), torch.full((1,), length, device=tokens.device)
    side = torch.cuda.Stream(tokens.device)
    side.wait_stream(torch.cuda.current_stream(tokens.device))
    with torch.cuda.stream(side):
        run(static_tokens, position)
    torch.cuda.current_stream(tokens.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = run(static_tokens, position)

    def replay(tokens: torch.Tensor, length: int) -> torch.Tensor:
        static_tokens.copy_(tokens)
        position.fill_(length)
        graph.replay()
        return logits

    return replay


def _autocast_without_cache(device_type: str):
    """The autocast in force on ``device_type`` (on or off, its dtype), with its cache of cast weights off."""
    return torch.autocast(device_type, dtype=torch.get_autocast_dtype(device_type),
                          enabled=torch.is_autocast_enabled(device_type), cache_enabled=False)


def compiling_seconds() -> float:
    """The seconds of this process's first call of the compiled decoding step (0 until it is made), which
    compiles its graph: throughput figures leave them out (rows of one compile one more graph, not counted)."""
    return sum(_first_compiled_call)


def _mark_varying_sizes(tokens: torch.Tensor, cache) -> None:
    """Mark as symbolic the sizes that vary from one batch to the next — rows, the cache's length (set by
    ``max_new_tokens`` and a decoder-only model's prefix) and the encoder's input length — so that
    evaluation, which pads each batch to its longest input, does not compile a graph per batch (seconds
    each; with static sizes a task's ninth batch shape passed dynamo's limit of graphs, and with ``fullgraph``
    failed)."""
    mark = torch._dynamo.maybe_mark_dynamic
    mark(tokens, 0)
    for buffer in cache.self_k + cache.self_v:  # [B, H, max_len, d_kv]
        mark(buffer, [0, 2])
    mark(cache.self_bias_table, [2, 3])  # [1, H, max_len, max_len]
    if cache.key_valid is not None:  # [B, max_len]
        mark(cache.key_valid, [0, 1])
    for keys_or_values in cache.cross_k + cache.cross_v:  # [B, H, S, d_kv]
        mark(keys_or_values, [0, 2])
    if cache.cross_bias is not None:  # [B, 1, 1, S]
        mark(cache.cross_bias, [0, 3])


@torch.no_grad()
def generate(model, encoder_input_tokens: torch.Tensor, max_new_tokens: int | None = None, *,
             num_beams: int | None = None, alpha: float = ALPHA, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, generator: torch.Generator | None = None, min_new_tokens: int = 0,
             compile: bool = False, cuda_graph: bool = True, max_length: int | None = None,
             beam_size: int | None = None, seed: int | None = None) -> torch.Tensor:
    """Decode ``max_new_tokens`` (default 64) at most; see the module docstring for how the method is chosen.
    ``compile`` runs the decoding step through ``torch.compile``; ``cuda_graph`` replays it as a CUDA graph on
    a CUDA device (``decoding_step``).

    The decoding flags' names (t2t-eval's and t2t-predict's ``--max-length``, ``--beam-size``, ``--seed``) are
    accepted too: ``max_length`` and ``beam_size`` are aliases of ``max_new_tokens`` and ``num_beams``, and
    ``seed`` samples with a generator seeded with it on the inputs' device, as those commands do. Both names of
    one setting with different values is a ValueError."""
    max_new_tokens = one_of("max_new_tokens", max_new_tokens, "max_length", max_length, default=64)
    num_beams = one_of("num_beams", num_beams, "beam_size", beam_size, default=1)
    if seed is not None:
        if generator is not None:
            raise ValueError(f"seed={seed} and a generator both seed the draws; pass one of them")
        if temperature == 0:
            raise ValueError(f"seed={seed} seeds sampling, which temperature=0 turns off")
        generator = torch.Generator(encoder_input_tokens.device).manual_seed(seed)
    if num_beams > 1 and temperature > 0:
        raise ValueError(f"num_beams={num_beams} with temperature={temperature}: t2t has no beam sampling")
    if temperature == 0 and (top_k or top_p < 1.0):
        raise ValueError(f"top_k={top_k}, top_p={top_p} restrict sampling, which temperature=0 turns off")
    if num_beams > 1:
        return beam_search(model, encoder_input_tokens, max_new_tokens, num_beams=num_beams, alpha=alpha,
                           min_new_tokens=min_new_tokens, compile=compile, cuda_graph=cuda_graph)
    if temperature > 0:
        return sample(model, encoder_input_tokens, max_new_tokens, temperature=temperature, top_k=top_k,
                      top_p=top_p, generator=generator, min_new_tokens=min_new_tokens, compile=compile,
                      cuda_graph=cuda_graph)
    return greedy(model, encoder_input_tokens, max_new_tokens, min_new_tokens=min_new_tokens, compile=compile,
                  cuda_graph=cuda_graph)


def one_of(name: str, value: int | None, alias: str, alias_value: int | None, default: int) -> int:
    """A setting given by its name, or by ``alias`` (the decoding flags' name for it), or ``default``."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(f"{name}={value} and {alias}={alias_value} set one thing (--{alias.replace('_', '-')} "
                         f"of t2t-eval and t2t-predict is {name}); pass one of them")
    return next((v for v in (value, alias_value) if v is not None), default)


_BLOCK = 128  # logits in each block ``_greedy_choice`` searches


def _greedy_choice(logits: torch.Tensor) -> torch.Tensor:
    """The most likely token of each row of ``logits`` [B, V], the first on ties (as argmax). On the CPU, where
    a reduction with indices is a scalar loop (``max(-1)``: 1.1 ms for [32, 32128] on two threads), the block of
    128 logits holding the row's maximum is found first by the vectorized ``amax`` (the first such block), then
    the index within it: 0.27 ms, the same index (NaN counts as the maximum in both, as in ``max``)."""
    B, V = logits.shape
    if logits.device.type != "cpu" or V % _BLOCK:
        return logits.max(-1).indices
    blocks = logits.reshape(B, V // _BLOCK, _BLOCK)
    block = blocks.amax(-1).max(-1).indices
    return block * _BLOCK + blocks[torch.arange(B), block].max(-1).indices


@torch.no_grad()
def greedy(model, encoder_input_tokens: torch.Tensor, max_new_tokens: int = 64, *,
           min_new_tokens: int = 0, compile: bool = False, cuda_graph: bool = True) -> torch.Tensor:
    """Arg-max decoding."""
    step = decoding_step(model, compile, cuda_graph)
    return _decode_loop(model, encoder_input_tokens, max_new_tokens, _greedy_choice, min_new_tokens, step)


@torch.no_grad()
def sample(model, encoder_input_tokens: torch.Tensor, max_new_tokens: int = 64, *, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, generator: torch.Generator | None = None,
           min_new_tokens: int = 0, compile: bool = False, cuda_graph: bool = True) -> torch.Tensor:
    """Ancestral sampling from softmax(logits / temperature), optionally restricted to the ``top_k`` most
    likely tokens and/or the smallest set whose probability reaches ``top_p`` (nucleus). Pass a seeded
    ``torch.Generator`` (on the model's device) for reproducible samples."""

    def pick(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float() / temperature
        if top_k > 0:
            kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            # drop a token when the tokens ranked above it already reach top_p (the first is always kept)
            drop_sorted = probs.cumsum(-1) - probs >= top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]

    step = decoding_step(model, compile, cuda_graph)
    return _decode_loop(model, encoder_input_tokens, max_new_tokens, pick, min_new_tokens, step)


def _decode_loop(model, encoder_input_tokens, max_new_tokens, pick, min_new_tokens, step) -> torch.Tensor:
    cfg = model.config
    cache, hidden = model.begin_decoding(encoder_input_tokens, max_new_tokens)
    logits = model.project(hidden)  # [B, V]
    B, device = logits.shape[0], logits.device
    out = torch.full((B, max_new_tokens), cfg.pad_id, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        if t < min_new_tokens:
            logits[:, cfg.eos_id] = float("-inf")
        tokens = pick(logits).masked_fill(done, cfg.pad_id)  # [B]
        out[:, t] = tokens
        done |= tokens == cfg.eos_id
        if bool(done.all()):
            return out[:, :t + 1]
        if t + 1 < max_new_tokens:
            logits = step(tokens, cache)  # [B, V]
    return out


def t5_length_penalty(alpha: float) -> Callable[[int], float]:
    """T5 / t5x / GNMT brevity penalty: a finished hypothesis of ``length`` tokens (EOS included) scores
    ``sum(log p) / ((5 + length) / 6) ** alpha``.

    transformers' beam search divides by ``length ** length_penalty`` instead, and no value of it gives T5's
    choices: between lengths a and b, T5's penalties differ by ``((5 + b) / (5 + a)) ** alpha``, transformers'
    by ``(b / a) ** length_penalty``. With ``length_penalty = alpha`` (what t2t's Hugging Face export writes)
    the two agree as hypotheses grow longer than a few tokens; on short ones T5 favours length less (its
    exponent is in effect ``alpha * length / (5 + length)``), so the searches can pick different hypotheses."""
    return lambda length: ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model, encoder_input_tokens: torch.Tensor, max_new_tokens: int = 64, *, num_beams: int = 4,
                alpha: float = ALPHA, length_penalty: Callable[[int], float] | None = None,
                min_new_tokens: int = 0, compile: bool = False, cuda_graph: bool = True) -> torch.Tensor:
    """Beam search returning the best finished hypothesis per row.

    Each step scores all ``num_beams × vocab`` continuations, takes the best ``2·num_beams``; the best
    ``num_beams`` of those that did not just end become the live beams, and those among the best
    ``num_beams`` that end with EOS (or reach ``max_new_tokens``) compete for the ``num_beams`` finished slots
    with score ``sum(log p) / length_penalty(length)`` (default :func:`t5_length_penalty` with ``alpha``).
    A row stops once its finished slots are full and no live beam can still beat the worst of them; the
    search ends when every row has stopped. This is the canonical search (HF's ``early_stopping="never"``);
    with HF's penalty (``length ** alpha``) it returns what ``transformers`` returns.
    """
    cfg = model.config
    step = decoding_step(model, compile, cuda_graph)
    in_place = uses_cuda_graph(model, cuda_graph)  # the graph reads the buffers it was captured with
    lp = length_penalty or t5_length_penalty(alpha)
    B, K, N = encoder_input_tokens.shape[0], num_beams, max_new_tokens
    cache, hidden = model.begin_decoding(encoder_input_tokens, N, num_beams=K)
    logits = model.project(hidden)  # [B*K, V]
    beams = _Beams.start(B, K, N, cfg.pad_id, encoder_input_tokens.device)
    row_offset = (torch.arange(B, device=encoder_input_tokens.device) * K)[:, None]  # [B, 1]
    for t in range(N):
        logp = F.log_softmax(logits.float(), dim=-1)  # [B*K, V]
        if t < min_new_tokens:
            logp[:, cfg.eos_id] = NEG_INF
        top_scores, top_seqs, parent = beams.best_continuations(logp, t)
        ends = (top_seqs[:, :, t] == cfg.eos_id) | (t == N - 1)
        live_parent = beams.keep_live(top_scores, top_seqs, parent, ends)
        beams.finish(top_scores, top_seqs, ends, t + 1, lp)
        if t == N - 1 or not beams.any_row_open(lp(t + 1), lp(N)):
            break
        cache.reorder((row_offset + live_parent).view(-1), in_place=in_place)
        logits = step(beams.live_seqs[:, :, t].reshape(-1), cache)
    return beams.best()


@dataclass
class _Beams:
    """Beam search's hypotheses for B rows of K beams and N tokens: the live ones ([B, K, N] tokens, [B, K]
    total log-probabilities) and the finished ones (tokens, length-penalised scores, lengths, and whether a
    slot holds one), and which rows may still improve."""

    live_seqs: torch.Tensor
    live_scores: torch.Tensor
    fin_seqs: torch.Tensor
    fin_scores: torch.Tensor
    fin_lengths: torch.Tensor
    fin_valid: torch.Tensor
    row_open: torch.Tensor  # [B, 1]

    @classmethod
    def start(cls, B: int, K: int, N: int, pad_id: int, device) -> "_Beams":
        live_seqs = torch.full((B, K, N), pad_id, dtype=torch.long, device=device)
        live_scores = torch.full((B, K), NEG_INF, device=device)
        live_scores[:, 0] = 0.0  # all beams start identical: expand only the first at step 0
        return cls(live_seqs, live_scores, live_seqs.clone(), torch.full((B, K), NEG_INF, device=device),
                   torch.zeros((B, K), dtype=torch.long, device=device),
                   torch.zeros((B, K), dtype=torch.bool, device=device),
                   torch.ones((B, 1), dtype=torch.bool, device=device))

    def best_continuations(self, logp: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best 2K of the K × V continuations at position ``t``: their scores, sequences and parent beams."""
        (B, K, N), V = self.live_seqs.shape, logp.shape[-1]
        cand = (self.live_scores[:, :, None] + logp.view(B, K, V)).view(B, K * V)
        top_scores, top_index = cand.topk(2 * K, dim=-1)  # [B, 2K]
        parent = top_index // V
        top_seqs = self.live_seqs.gather(1, parent[:, :, None].expand(B, 2 * K, N)).clone()  # [B, 2K, N]
        top_seqs[:, :, t] = top_index % V
        return top_scores, top_seqs, parent

    def keep_live(self, top_scores, top_seqs, parent, ends) -> torch.Tensor:
        """The best K continuations that did not just end become the live beams; returns their parents."""
        (B, K, N) = self.live_seqs.shape
        still = top_scores + ends.float() * NEG_INF
        keep = still.topk(K, dim=-1).indices  # [B, K]
        self.live_scores = still.gather(1, keep)
        self.live_seqs = top_seqs.gather(1, keep[:, :, None].expand(B, K, N))
        return parent.gather(1, keep)

    def finish(self, top_scores, top_seqs, ends, length: int, lp: Callable[[int], float]) -> None:
        """Ending continuations among the best K compete for the finished slots while their row is open."""
        (B, K, N) = self.live_seqs.shape
        new_valid = ends & self.row_open
        new_valid[:, K:] = False
        new_scores = torch.where(new_valid, top_scores / lp(length), torch.full_like(top_scores, NEG_INF))
        all_scores = torch.cat([self.fin_scores, new_scores], dim=1)  # [B, 3K]
        best = all_scores.topk(K, dim=-1).indices
        self.fin_scores = all_scores.gather(1, best)
        self.fin_valid = torch.cat([self.fin_valid, new_valid], dim=1).gather(1, best)
        self.fin_seqs = torch.cat([self.fin_seqs, top_seqs], dim=1).gather(1, best[:, :, None].expand(B, K, N))
        new_lengths = torch.full_like(top_scores, length, dtype=torch.long)
        self.fin_lengths = torch.cat([self.fin_lengths, new_lengths], 1).gather(1, best)

    def any_row_open(self, penalty_now: float, penalty_at_most: float) -> bool:
        """Close the rows whose slots are full and whose best live beam, at its most favourable length,
        cannot beat the worst finished hypothesis (exact for penalties that grow with length)."""
        best_possible = self.live_scores[:, :1] / max(penalty_now, penalty_at_most)
        worst = self.fin_scores.min(dim=1, keepdim=True).values
        self.row_open &= ~(self.fin_valid.all(dim=1, keepdim=True) & (best_possible <= worst))
        return bool(self.row_open.any())

    def best(self) -> torch.Tensor:
        """Each row's best finished hypothesis, [B, longest of them]."""
        return self.fin_seqs[:, 0, :int(self.fin_lengths[:, 0].max())]


@torch.no_grad()
def score(model, encoder_input_tokens: torch.Tensor, target_tokens: torch.Tensor) -> torch.Tensor:
    """[B] sum over target tokens of log p(token | input, previous tokens); padding (0) is ignored.

    For rank classification: score each candidate target and take the best. Targets should end with EOS
    when the model was trained to produce it. The output layer runs only on non-padding positions.
    """
    cfg = model.config
    cache, first = model.begin_decoding(encoder_input_tokens, target_tokens.shape[1])
    h = torch.cat([first[:, None], model.extend(target_tokens[:, :-1], cache)], dim=1)  # [B, T, d]
    keep = target_tokens != cfg.pad_id
    logits = model.project(h[keep]).float()  # [N, V]
    token_logp = -F.cross_entropy(logits, target_tokens[keep], reduction="none")  # [N]
    rows = torch.arange(target_tokens.shape[0], device=h.device)[:, None].expand_as(target_tokens)[keep]
    return torch.zeros(target_tokens.shape[0], device=h.device).index_add_(0, rows, token_logp)
