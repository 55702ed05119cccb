"""UL2's mixture of denoisers (Tay et al., 2022, "UL2: Unifying Language Learning Paradigms", §3.1.2-3.1.4),
registered as the objective ``ul2`` (alias ``mixture_of_denoisers``).

Every example draws one denoiser from the mixture (with the pipeline's per-draw ``rng``, so a resumed run
draws the same ones) and prepends that denoiser's *mode token* to its inputs:

- R-denoisers, ``[NLU]``: T5's span corruption, (μ=3, r=0.15) and (μ=8, r=0.15);
- X-denoisers, ``[NLG]``: extreme corruption, (μ=3, r=0.5), (μ=8, r=0.5), (μ=64, r=0.15), (μ=64, r=0.5);
- S-denoiser, ``[S2S]``: sequential denoising (prefix LM), one corrupted span that ends the text, r=0.25
  (the paper's (μ=L/4, r=0.25, n=1): its length is uniform with mean a quarter of the chunk).

The seven denoisers have equal shares, as the released ``ul2_objective`` samples its members when given no
``rates`` and as §3.1.2 describes the final mixture (each task about an equal part); ``denoisers=`` with other
``share`` values changes them. The R- and X-denoisers
use t5's ``random_spans_noise_mask`` (the paper's appendix code calls t5's ``denoise`` with it): the
numbers of noise tokens and spans are fixed by the chunk length, ``round(L·r)`` and ``round(L·r/μ)``, only
their placement is random. The paper's text speaks of span lengths drawn around μ; its code fixes the
counts, and this follows the code.

Mode tokens are *text*, tokenized by the run's vocabulary (the appendix's ``prepend_prompt`` encodes the
prefix string with the task's vocabulary; the released UL2 checkpoint is prompted with ``"[NLG] ..."`` in
its T5 SentencePiece vocabulary, where ``[NLU]`` is 4 pieces). So the objective takes the vocabulary
(``denoise`` passes it), not only its size.

One difference from the appendix code: its S-denoiser is t5's ``prefix_lm`` (split point uniform over the
whole chunk, half of it as targets on average); this follows the paper's stated S-denoiser, r=0.25.

Lengths: the appendix code cuts the text for each denoiser into pieces whose corruption fills the inputs
(``random_spans_helper``), so every denoiser's inputs are full and only the targets lengths vary. Here the text
is cut once, before a denoiser is drawn, into chunks as long as the longest text any denoiser takes at the
run's lengths (``ul2_chunk_length``; 999 tokens at 512/512 with T5's vocabulary, the X-denoiser μ=64, r=0.5's);
each draw's denoiser then corrupts a window of its own length (``denoiser_length``: 564 tokens for μ=3, r=0.15,
T5's 568 less the 4 pieces of ``[NLU]``) at an offset drawn from the same rng. No draw is trimmed, the encoder rows are as full as in the appendix code, and the
rest of a chunk waits for another epoch's draw (a draw reads 51-100% of its chunk; UL2 pre-trains on C4,
where text is not what runs out). The paper trains 512/512.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from t2t.data.objectives import (
    CHUNK_LENGTHS,
    Tokens,
    as_ids,
    random_spans,
    random_spans_lengths,
    register_objective,
)
from t2t.errors import T2TError

R_MODE, X_MODE, S_MODE = "[NLU]", "[NLG]", "[S2S]"


@dataclass(frozen=True)
class Denoiser:
    """One member of the mixture: its mode token, corruption rate r, mean span length μ (None for the
    S-denoiser, whose one span ends the text) and its share (relative weight)."""

    mode: str
    noise_density: float
    mean_noise_span_length: float | None = None
    share: float = 1.0

    def __post_init__(self):
        if not 0.0 < self.noise_density < 1.0 or (self.mean_noise_span_length is not None
                                                    and not self.mean_noise_span_length >= 1.0):
            raise T2TError(f"a denoiser needs a corruption rate between 0 and 1 and a mean span length of at least 1 "
                           f"(None for the S-denoiser), got r={self.noise_density}, μ={self.mean_noise_span_length}.")

    @property
    def kind(self) -> str:
        """"S" for sequential denoising; "X" when extreme (§3.1.2: span ≥ 12 tokens or rate ≥ 30%); else "R"."""
        if self.mean_noise_span_length is None:
            return "S"
        return "X" if self.mean_noise_span_length >= 12 or self.noise_density >= 0.3 else "R"

    def apply(self, ids: np.ndarray, *, vocab_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The corrupted ``{"inputs", "targets"}`` of ``ids``, without the mode token."""
        if self.mean_noise_span_length is None:
            return sequential_denoising(ids, self.noise_density, rng)
        return random_spans(ids, vocab_size=vocab_size, rng=rng, noise_density=self.noise_density,
                            mean_noise_span_length=self.mean_noise_span_length)

    def longest_outputs(self, length: int) -> tuple[int, int]:
        """The most (inputs, targets) tokens it can make of ``length`` tokens, mode token and EOS left out."""
        if self.mean_noise_span_length is None:
            return max(length - 1, 0), min(_longest_suffix(length, self.noise_density), max(length - 1, 1))
        return random_spans_lengths(length, self.noise_density, self.mean_noise_span_length)


#: The paper's final mixture (§3.1.2), in its order: R, R, S, X, X, X, X; equal shares.
UL2_DENOISERS: tuple[Denoiser, ...] = (
    Denoiser(R_MODE, 0.15, 3.0), Denoiser(R_MODE, 0.15, 8.0),
    Denoiser(S_MODE, 0.25),
    Denoiser(X_MODE, 0.5, 3.0), Denoiser(X_MODE, 0.5, 8.0), Denoiser(X_MODE, 0.15, 64.0), Denoiser(X_MODE, 0.5, 64.0),
)


def _longest_suffix(length: int, noise_density: float) -> int:
    """The S-denoiser's longest targets: ``2m - 1`` for a mean of ``m = round(L·r)`` (at least 1)."""
    return 2 * max(1, round(length * noise_density)) - 1


def sequential_denoising(tokens: Tokens, noise_density: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The S-denoiser: the last ``t`` tokens are the targets, the rest the inputs, with ``t`` uniform in
    ``[1, 2m-1]`` (mean ``m = round(L·r)``), kept below the length so the inputs are never empty."""
    ids = as_ids(tokens)
    if ids.size < 2:
        return {"inputs": ids[:0], "targets": ids.copy()}
    num_targets = min(int(rng.integers(1, _longest_suffix(ids.size, noise_density) + 1)), ids.size - 1)
    return {"inputs": ids[:-num_targets], "targets": ids[-num_targets:]}


@functools.lru_cache(maxsize=64)
def shares_of(denoisers: tuple[Denoiser, ...]) -> np.ndarray:
    """``check_denoisers`` once per mixture (a draw's hot path)."""
    return check_denoisers(denoisers)


def check_denoisers(denoisers: Sequence[Denoiser]) -> np.ndarray:
    """The denoisers' shares as probabilities, once checked."""
    if not denoisers or not all(isinstance(d, Denoiser) for d in denoisers):
        raise T2TError("the UL2 objective needs a non-empty list of t2t.data.ul2.Denoiser; pass denoisers="
                       "UL2_DENOISERS or your own.")
    shares = np.array([d.share for d in denoisers], dtype=np.float64)
    if not (np.all(np.isfinite(shares)) and np.all(shares >= 0) and shares.sum() > 0):
        raise T2TError(f"denoiser shares must be non-negative with a positive sum, got {shares.tolist()}.")
    return shares / shares.sum()


def mode_ids(vocab, mode: str) -> np.ndarray:
    """The mode token's ids in ``vocab`` (text, as UL2 tokenized it)."""
    if vocab is None:
        raise T2TError("the UL2 objective prepends its mode tokens ([NLU], [NLG], [S2S]) as text; pass the "
                       "run's vocabulary (vocab=...).")
    return np.asarray(vocab.encode(mode), dtype=np.int64)


def check_spelled(vocab, mode: str) -> None:
    """Refuse a vocabulary that cannot spell a mode token: its modes would blur into unknown ids (a vocabulary
    without ``[`` makes ``[NLU]`` a prefix of ``[NLG]``)."""
    spelled = vocab.decode(mode_ids(vocab, mode).tolist())
    if spelled.strip() != mode:
        raise T2TError(f"the vocabulary cannot spell UL2's mode token {mode!r} (it comes back as {spelled!r}); "
                       f"use a vocabulary that covers it, such as T5's, or give the denoisers modes it can spell.")


@register_objective("ul2", aliases=("mixture_of_denoisers",))
def ul2(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator, vocab=None,
        sequence_length: Mapping[str, int] | None = None,
        denoisers: Sequence[Denoiser] = UL2_DENOISERS) -> dict[str, np.ndarray]:
    """UL2's mixture of denoisers: one denoiser drawn by its share, its mode token first in the inputs. With the
    run's ``sequence_length`` (``denoise`` passes it), the denoiser corrupts a window of the chunk at a random
    offset, as long as fills its inputs (``denoiser_length``); without, the whole chunk."""
    ids = as_ids(tokens)
    denoisers = tuple(denoisers)
    denoiser = denoisers[int(rng.choice(len(denoisers), p=shares_of(denoisers)))]
    mode = mode_ids(vocab, denoiser.mode)
    if sequence_length is not None:
        length = denoiser_length(denoiser, int(sequence_length["inputs"]) - 1 - mode.size,
                                 int(sequence_length["targets"]) - 1)
        if ids.size > length:
            start = int(rng.integers(0, ids.size - length + 1))
            ids = ids[start:start + length]
    out = denoiser.apply(ids, vocab_size=vocab_size, rng=rng)
    return {"inputs": np.concatenate([mode, out["inputs"]]), "targets": out["targets"]}


@functools.lru_cache(maxsize=256)
def denoiser_length(denoiser: Denoiser, inputs: int, targets: int) -> int:
    """The longest text ``denoiser`` corrupts into at most ``inputs`` and ``targets`` ids, every shorter text too
    (what the appendix's ``ul2_objective`` cuts for each denoiser with ``random_spans_helper``: T5's 568 tokens
    for (μ=3, r=.15) at 512; the S-denoiser's inputs may take all but one token of its text). 0 when none fits."""
    length = 0
    while all(np.array(denoiser.longest_outputs(length + 1)) <= (inputs, targets)):
        length += 1
    return length


def ul2_chunk_length(sequence_length: Mapping[str, int], *, vocab, denoisers: Sequence[Denoiser] = UL2_DENOISERS,
                     **unused_options) -> int:
    """The chunk the text is cut into: as long as the longest text any denoiser takes at ``sequence_length``
    (its mode token and EOS counted), so each draw's denoiser finds a window of its own length in it."""
    check_denoisers(denoisers)
    for mode in sorted({d.mode for d in denoisers}):
        check_spelled(vocab, mode)
    lengths = [denoiser_length(d, int(sequence_length["inputs"]) - 1 - mode_ids(vocab, d.mode).size,
                               int(sequence_length["targets"]) - 1) for d in denoisers]
    if min(lengths) < 2:
        raise T2TError(f"input_length {sequence_length['inputs']} / target_length {sequence_length['targets']} "
                       f"leave no room for one of UL2's denoisers (the X-denoisers' targets are half their text); "
                       f"train with longer lengths such as the paper's 512/512.")
    return max(lengths)


CHUNK_LENGTHS[ul2] = ul2_chunk_length
