"""Unsupervised objectives of the T5 paper (§3.1.4, §3.3; Tables 3, 4, 5, 7) on token ids, in numpy.

Every objective is a function ``fn(tokens, *, vocab_size, rng, **options) -> {"inputs": ids, "targets": ids}``
where ``tokens`` is one chunk of unlabelled text as token ids (no EOS; the pipeline appends EOS to both
features afterwards) and ``rng`` is a ``numpy.random.Generator``. They are built, as in t5's ``denoise``,
from three kinds of parts that are public here so tests (and users) can apply a chosen mask:

- a noise mask (which tokens are corrupted): ``random_spans_noise_mask``, ``iid_noise_mask``,
  ``random_prefix_noise_mask``;
- an inputs function (how the corruption shows in the inputs): ``noise_span_to_unique_sentinel``,
  ``noise_token_to_sentinel``, ``noise_token_to_random_token_or_sentinel``, ``drop_noise_tokens``, ...;
- a targets function: ``nonnoise_span_to_unique_sentinel``, ``drop_nonnoise_tokens``, or the original text.

Tasks name their objective: ``OBJECTIVES`` maps names to the functions, ``register_objective`` (also a
decorator) adds one, and ``get_objective(name, **options)`` gives it with its options bound. An objective that
adds text of its own or sizes what it makes takes the run's ``vocab`` or ``sequence_length`` too (parameters of
those names, which ``denoise`` fills): UL2's mixture of denoisers (``ul2``, in ``t2t.data.ul2``) does both.

The arithmetic follows t5's ``t5/data/preprocessors.py``:

- Sentinels are numbered from the end of the vocabulary: the k-th span of a sequence gets
  ``vocab_size - 1 - k`` (``<extra_id_k>``), in inputs and targets alike.
- Targets are built by t5's ``nonnoise_span_to_unique_sentinel``: the original text with each *kept* span
  replaced by one sentinel. A random-spans mask starts with kept tokens and ends with noise, so span
  corruption's targets are ``<X> span_0 <Y> span_1 ...`` with no closing sentinel (that is what makes
  ``random_spans_helper(512, .15, 3) == (568, 114)`` exact). An i.i.d. mask may end on kept tokens; then
  the targets end with a sentinel, as in the paper's Table 3 (``<X> for inviting <Y> last <Z>``). If an
  i.i.d. mask starts with noise, the targets start with the noise tokens and their sentinels are shifted by
  one against the inputs' -- t5's own behaviour for its i.i.d. baseline, kept for faithfulness;
  ``restore_from_span_corruption`` still restores the text exactly.
- The "mask token" of the BERT- and MASS-style objectives is t5's ``sentinel_id(vocabulary)``, i.e.
  ``vocab_size - 1`` (the id of ``<extra_id_0>``); BERT-style's random replacement draws uniformly from
  ``[3, vocab_size)`` (t5's ``num_reserved_tokens=3`` skips pad/eos/unk; sentinel ids can be drawn, as in t5).
- Counts are rounded as t5 does: Python's ``round`` in ``random_spans_helper`` and float32 round-half-even
  in ``random_spans_noise_mask`` (TensorFlow's ``tf.round`` on float32).
- More than ``extra_ids`` spans in one sequence (e.g. 50% i.i.d. noise on 512 tokens) makes the sentinel ids
  run into ordinary pieces, exactly as in t5; the paper's settings stay below 100 spans for 15% noise.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from t2t.errors import T2TError
from t2t.registry import Registry

Tokens = Sequence[int] | np.ndarray
Objective = Callable[..., dict[str, np.ndarray]]

# t5's noise_token_to_random_token skips pad (0), eos (1) and unk (2) when drawing a random token.
NUM_RESERVED_TOKENS = 3


def as_ids(tokens: Tokens) -> np.ndarray:
    """``tokens`` as one 1-d int64 array (one example's ids), or a one-sentence error."""
    ids = np.asarray(tokens, dtype=np.int64)
    if ids.ndim != 1:
        raise T2TError(f"objectives take one 1-d sequence of token ids, got shape {ids.shape}; pass one "
                       f"example's ids at a time.")
    return ids


def _check_density(noise_density: float, mean_noise_span_length: float | None = None) -> None:
    if not 0.0 < noise_density < 1.0:
        raise T2TError(f"noise_density must lie strictly between 0 and 1, got {noise_density}; pass a "
                       f"corruption rate such as 0.15.")
    if mean_noise_span_length is not None and mean_noise_span_length < 1.0:
        raise T2TError(f"mean_noise_span_length must be at least 1, got {mean_noise_span_length}; pass a "
                       f"mean span length such as 3.0.")


# ---------------------------------------------------------------------------------------------------------
# Lengths


def random_spans_helper(inputs_length: int, noise_density: float, mean_noise_span_length: float,
                        extra_tokens_per_span_inputs: int = 1,
                        extra_tokens_per_span_targets: int = 1) -> tuple[int, int]:
    """(tokens_length, targets_length) so that span corruption of ``tokens_length`` raw tokens fills
    ``inputs_length`` exactly; both inputs and targets lengths count the EOS the pipeline appends.

    t5's arithmetic: the largest raw length whose inputs (kept tokens + one sentinel per noise span + EOS)
    still fit, and the matching targets length (noise tokens + one sentinel per span + EOS).
    ``random_spans_helper(512, 0.15, 3.0) == (568, 114)``.
    """
    if inputs_length < 2:
        raise T2TError(f"inputs_length must be at least 2 for span corruption, got {inputs_length}; pass "
                       f"the encoder length such as 512.")
    _check_density(noise_density, mean_noise_span_length)

    def lengths(tokens_length: int) -> tuple[int, int]:
        num_noise_tokens = int(round(tokens_length * noise_density))
        num_nonnoise_tokens = tokens_length - num_noise_tokens
        num_noise_spans = int(round(num_noise_tokens / mean_noise_span_length))
        return (num_nonnoise_tokens + num_noise_spans * extra_tokens_per_span_inputs + 1,
                num_noise_tokens + num_noise_spans * extra_tokens_per_span_targets + 1)

    tokens_length = inputs_length - 1
    while lengths(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    # t5 compares the targets with the inputs length of the chosen raw length, not the requested one: they
    # differ when a span costs the inputs more than one token (at (114, 0.5, 1.0, 2, 2) the starting raw
    # length 113 already needs 170 inputs, so t5 keeps (113, 169) rather than shaving to (112, 168)).
    fitted_inputs_length, targets_length = lengths(tokens_length)
    # t5: at density 0.5 shave one token so the targets length equals the (round) inputs length.
    if noise_density == 0.5 and targets_length > fitted_inputs_length:
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


# ---------------------------------------------------------------------------------------------------------
# Noise masks: length -> bool[length], True = corrupted


def _random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Split ``num_items`` into ``num_segments`` non-empty parts, every composition equally likely."""
    cuts = np.sort(rng.choice(num_items - 1, size=num_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate(([0], cuts, [num_items])))


def _span_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a random-spans mask over ``length >= 2`` tokens (see below)."""
    # float32 products and quotients as tf computes them; Python's round() on the (exactly widened) float32
    # value is round-half-to-even, like tf.round.
    num_noise_tokens = round(float(np.float32(length) * np.float32(noise_density)))
    num_noise_tokens = min(max(num_noise_tokens, 1), length - 1)
    num_noise_spans = round(float(np.float32(num_noise_tokens) / np.float32(mean_noise_span_length)))
    return num_noise_tokens, max(min(num_noise_spans, num_noise_tokens, length - num_noise_tokens), 1)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator) -> np.ndarray:
    """t5's span mask: ``round(length * density)`` noise tokens (clipped to [1, length-1]) in
    ``max(1, round(noise_tokens / mean_span))`` spans; kept and noise spans alternate, kept first, with the
    span lengths drawn as uniform random compositions. Deterministic counts, random placement.

    Where the counts allow fewer kept than noise spans (only very short sequences at high density; t5
    fails there), the number of spans is lowered to what fits.
    """
    _check_density(noise_density, mean_noise_span_length)
    orig_length = int(length)
    length = max(orig_length, 2)
    num_noise_tokens, num_noise_spans = _span_counts(length, noise_density, mean_noise_span_length)
    num_nonnoise_tokens = length - num_noise_tokens

    noise_lengths = _random_segmentation(num_noise_tokens, num_noise_spans, rng)
    nonnoise_lengths = _random_segmentation(num_nonnoise_tokens, num_noise_spans, rng)
    interleaved = np.empty(2 * num_noise_spans, dtype=np.int64)
    interleaved[0::2], interleaved[1::2] = nonnoise_lengths, noise_lengths
    is_noise = np.repeat(np.tile(np.array([False, True]), num_noise_spans), interleaved)
    return is_noise[:orig_length]


def iid_noise_mask(length: int, noise_density: float, rng: np.random.Generator) -> np.ndarray:
    """Each token is noise independently with probability ``noise_density`` (t5's ``iid_noise_mask``)."""
    _check_density(noise_density)
    return rng.random(int(length)) < noise_density


def random_prefix_noise_mask(length: int, rng: np.random.Generator) -> np.ndarray:
    """True on a prefix whose length is uniform in [1, length-1] (t5's ``random_prefix_noise_mask``)."""
    max_input_tokens = int(length) - 1
    min_input_tokens = min(max_input_tokens, 1)
    num_input_tokens = int(rng.integers(min_input_tokens, max_input_tokens + 1))
    return np.arange(length) < num_input_tokens


# ---------------------------------------------------------------------------------------------------------
# Inputs / targets functions: (tokens, noise_mask, ...) -> ids


def _span_starts(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    previous = np.concatenate(([False], mask[:-1]))
    return mask & ~previous, mask & previous


def noise_span_to_unique_sentinel(tokens: Tokens, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace the k-th run of noise tokens by the single sentinel ``vocab_size - 1 - k``."""
    ids = as_ids(tokens)
    first, subsequent = _span_starts(np.asarray(noise_mask, dtype=bool))
    sentinels = vocab_size - np.cumsum(first)
    return np.where(first, sentinels, ids)[~subsequent]


def nonnoise_span_to_unique_sentinel(tokens: Tokens, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace the k-th run of kept tokens by the sentinel ``vocab_size - 1 - k`` (t5's targets)."""
    return noise_span_to_unique_sentinel(tokens, ~np.asarray(noise_mask, dtype=bool), vocab_size)


def drop_noise_tokens(tokens: Tokens, noise_mask: np.ndarray) -> np.ndarray:
    """Keep only the non-noise tokens."""
    return as_ids(tokens)[~np.asarray(noise_mask, dtype=bool)]


def drop_nonnoise_tokens(tokens: Tokens, noise_mask: np.ndarray) -> np.ndarray:
    """Keep only the noise tokens."""
    return as_ids(tokens)[np.asarray(noise_mask, dtype=bool)]


def mask_token_id(vocab_size: int) -> int:
    """The BERT/MASS-style mask token: t5's ``sentinel_id(vocabulary)``, the id of ``<extra_id_0>``."""
    return vocab_size - 1


def noise_token_to_sentinel(tokens: Tokens, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace every noise token by the mask token (same length as ``tokens``)."""
    return np.where(np.asarray(noise_mask, dtype=bool), mask_token_id(vocab_size), as_ids(tokens))


def noise_token_to_random_token_or_sentinel(tokens: Tokens, noise_mask: np.ndarray, vocab_size: int,
                                            rng: np.random.Generator, random_prob: float = 0.1,
                                            num_reserved_tokens: int = NUM_RESERVED_TOKENS) -> np.ndarray:
    """Each noise token becomes a random id in ``[num_reserved_tokens, vocab_size)`` with probability
    ``random_prob``, else the mask token (t5's BERT-style corruption: 90% mask, 10% random)."""
    ids = as_ids(tokens)
    mask = np.asarray(noise_mask, dtype=bool)
    use_random = rng.random(ids.shape[0]) < random_prob
    random_ids = rng.integers(num_reserved_tokens, vocab_size, size=ids.shape[0])
    masked = np.where(mask, mask_token_id(vocab_size), ids)
    return np.where(mask & use_random, random_ids, masked)


def restore_from_span_corruption(inputs: Tokens, targets: Tokens, vocab_size: int,
                                 num_sentinels: int = 100, *, eos_id: int | None = None) -> np.ndarray:
    """The original tokens from sentinel-delimited inputs and targets (the two are complementary: each
    replaces the other's spans by sentinels). Ids ``>= vocab_size - num_sentinels`` count as sentinels; a
    trailing ``eos_id`` (the vocabulary's, for features the pipeline made) on either side is ignored."""
    def pieces(ids: np.ndarray) -> list[np.ndarray]:
        if ids.size and eos_id is not None and ids[-1] == eos_id:
            ids = ids[:-1]
        parts = np.split(ids, np.flatnonzero(ids >= vocab_size - num_sentinels))
        return [parts[0]] + [p[1:] for p in parts[1:]]  # drop the sentinel that opens each piece

    inputs, targets = as_ids(inputs), as_ids(targets)
    kept, noise = pieces(inputs), pieces(targets)
    # A text that starts with kept tokens reads kept[0] noise[1] kept[1] noise[2] ...; one that starts with
    # noise (its inputs open with a sentinel) reads noise[0] kept[1] noise[1] kept[2] ...
    first, second = (noise, kept) if inputs.size and inputs[0] >= vocab_size - num_sentinels else (kept, noise)
    order = []
    for k in range(max(len(first), len(second))):
        if k < len(first):
            order.append(first[k])
        if k + 1 < len(second):
            order.append(second[k + 1])
    return np.concatenate(order).astype(np.int64) if order else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------
# The registry: objectives by name

#: Every objective a task can name. An objective's keyword options (``noise_density``, ...) are its parameters,
#: bound with ``functools.partial`` (``get_objective``), so the function itself is the factory.
OBJECTIVES: Registry[Objective] = Registry("objective")


def register_objective(name: str, fn: Objective | None = None, *, aliases: Sequence[str] = ()):
    """Let tasks name ``fn`` (``unsupervised_task(..., objective=name)``); without ``fn``, a decorator.

    ``fn(tokens, *, vocab_size, rng, **options) -> {"inputs": ids, "targets": ids}`` (see the module docstring);
    a name or alias already taken is an error."""
    if fn is None:
        return lambda decorated: register_objective(name, decorated, aliases=aliases)
    if not callable(fn):
        raise T2TError(f"objective {name!r} must be a function fn(tokens, *, vocab_size, rng, **options), got "
                       f"{fn!r}; register the function itself.")
    OBJECTIVES.register(name, fn)
    for short in aliases:
        OBJECTIVES.alias(short, name)
    return fn


def get_objective(name: str, **options) -> Objective:
    """The objective registered as ``name`` with ``options`` bound: ``fn(tokens, *, vocab_size, rng)``."""
    fn, options = objective_and_options(name, **options)
    return functools.partial(fn, **options)


def objective_and_options(objective: str | Objective, **options) -> tuple[Objective, dict]:
    """The objective function and its options for a registered name, or for a function (whose bound
    ``functools.partial`` keywords join ``options``); an option the function does not take is an error."""
    if isinstance(objective, str):
        objective = OBJECTIVES.get(objective)
    if isinstance(objective, functools.partial) and not objective.args:
        objective, options = objective.func, {**objective.keywords, **options}
    if not callable(objective):
        raise T2TError(f"an objective is a registered name such as 'span_corruption' or a function, got "
                       f"{objective!r}.")
    check_options(objective, options)
    return objective, options


def check_options(fn: Objective, options: Mapping) -> None:
    """Refuse options ``fn`` does not take here, rather than on the first draw deep inside training."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first one takes the tokens
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and p.name not in ("vocab_size", "rng", "vocab", "sequence_length")]
    unknown = sorted(set(options) - set(known))
    if unknown:
        offer = f"its options are {', '.join(known)}" if known else "it takes no options"
        raise T2TError(f"objective {getattr(fn, '__name__', fn)!r} has no option {', '.join(unknown)}; {offer}.")


# ---------------------------------------------------------------------------------------------------------
# Objectives: tokens -> {"inputs", "targets"}


@register_objective("random_spans")
def random_spans(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator, noise_density: float = 0.15,
                 mean_noise_span_length: float = 3.0) -> dict[str, np.ndarray]:
    """Span corruption at any corruption rate and mean span length (Tables 6 and 7): random-span mask,
    each noise span → one unique sentinel in the inputs, targets = sentinel + span for every span."""
    ids = as_ids(tokens)
    if ids.size == 0:
        return {"inputs": ids, "targets": ids.copy()}
    mask = random_spans_noise_mask(ids.size, noise_density, mean_noise_span_length, rng)
    return {"inputs": noise_span_to_unique_sentinel(ids, mask, vocab_size),
            "targets": nonnoise_span_to_unique_sentinel(ids, mask, vocab_size)}


@register_objective("span_corruption")
def span_corruption(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator, noise_density: float = 0.15,
                    mean_noise_span_length: float = 3.0) -> dict[str, np.ndarray]:
    """T5's final pre-training objective (§3.3.4): 15% of the tokens in spans of mean length 3.

    With ``random_spans_helper(512, .15, 3.)[0] == 568`` raw tokens, the inputs have 511 ids and the targets
    113 (512 and 114 once the pipeline appends EOS)."""
    return random_spans(tokens, vocab_size=vocab_size, rng=rng, noise_density=noise_density,
                        mean_noise_span_length=mean_noise_span_length)


@register_objective("iid_noise_replace_spans", aliases=("iid_denoising",))
def iid_noise_replace_spans(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator,
                            noise_density: float = 0.15) -> dict[str, np.ndarray]:
    """Table 3 "i.i.d. noise, replace spans" (t5's ``iid_denoising`` baseline, §3.1.4): i.i.d. token noise,
    each run of noise tokens → one unique sentinel; targets = the runs delimited by the sentinels."""
    ids = as_ids(tokens)
    mask = iid_noise_mask(ids.size, noise_density, rng)
    return {"inputs": noise_span_to_unique_sentinel(ids, mask, vocab_size),
            "targets": nonnoise_span_to_unique_sentinel(ids, mask, vocab_size)}


@register_objective("iid_noise_drop")
def iid_noise_drop(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator,
                   noise_density: float = 0.15) -> dict[str, np.ndarray]:
    """Table 3 "i.i.d. noise, drop tokens" (§3.3.2): noise tokens are removed from the inputs and the
    targets are the removed tokens in order, without sentinels ("for inviting last")."""
    del vocab_size
    ids = as_ids(tokens)
    mask = iid_noise_mask(ids.size, noise_density, rng)
    return {"inputs": drop_noise_tokens(ids, mask), "targets": drop_nonnoise_tokens(ids, mask)}


@register_objective("bert_style")
def bert_style(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator, noise_density: float = 0.15,
               random_prob: float = 0.1) -> dict[str, np.ndarray]:
    """Table 3 "BERT-style" (§3.3.1): 15% i.i.d. noise; 90% of the noise tokens become the mask token
    (``vocab_size - 1``), 10% a random token; the targets are the original text."""
    ids = as_ids(tokens)
    mask = iid_noise_mask(ids.size, noise_density, rng)
    inputs = noise_token_to_random_token_or_sentinel(ids, mask, vocab_size, rng, random_prob=random_prob)
    return {"inputs": inputs, "targets": ids.copy()}


@register_objective("mass_style")
def mass_style(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator,
               noise_density: float = 0.15) -> dict[str, np.ndarray]:
    """Table 3/4 "MASS-style": BERT-style without random replacement (every noise token → mask token)."""
    ids = as_ids(tokens)
    mask = iid_noise_mask(ids.size, noise_density, rng)
    return {"inputs": noise_token_to_sentinel(ids, mask, vocab_size), "targets": ids.copy()}


@register_objective("deshuffling", aliases=("deshuffle",))
def deshuffling(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Table 3 "Deshuffling" (§3.3.1): the inputs are the tokens in random order, the targets the original."""
    del vocab_size
    ids = as_ids(tokens)
    return {"inputs": rng.permutation(ids), "targets": ids.copy()}


@register_objective("prefix_lm")
def prefix_lm(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Table 3 "Prefix language modeling" (§3.3.1): split the span at a uniformly random point in
    [1, len-1]; the prefix is the inputs, the continuation the targets."""
    del vocab_size
    ids = as_ids(tokens)
    mask = random_prefix_noise_mask(ids.size, rng)
    return {"inputs": drop_nonnoise_tokens(ids, mask), "targets": drop_noise_tokens(ids, mask)}


@register_objective("full_lm")
def full_lm(tokens: Tokens, *, vocab_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Table 2's "LM" objective (t5's ``full_lm``, task ``c4_v220_full_lm``): no inputs, the whole chunk
    is the target, for decoder-only models (§3.2.3). Its tasks end each document with EOS before the text is
    concatenated and cut (``t2t.data.preprocessors.append_eos``) and add none after, as t5 does."""
    del vocab_size, rng
    ids = as_ids(tokens)
    return {"inputs": ids[:0], "targets": ids.copy()}


def random_spans_lengths(length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0,
                         **unused_options) -> tuple[int, int]:
    """(inputs, targets) lengths of ``random_spans`` / ``span_corruption`` on ``length`` tokens: the mask's
    counts are fixed, only their placement is random (each noise span → one sentinel in the inputs, each kept
    span → one in the targets). One token is left as it is, with a lone sentinel as its targets."""
    _check_density(noise_density, mean_noise_span_length)
    if length == 0:
        return 0, 0
    if length == 1:
        return 1, 1
    num_noise_tokens, num_noise_spans = _span_counts(length, noise_density, mean_noise_span_length)
    return length - num_noise_tokens + num_noise_spans, num_noise_tokens + num_noise_spans


#: each objective whose output lengths follow from the chunk's length alone: ``fn(length, **options) ->
#: (inputs, targets)``, so that the pipeline can place a draw in a packed batch without drawing it
#: (``denoise.output_lengths``); the i.i.d. and prefix objectives draw their lengths and are not here.
OUTPUT_LENGTHS: dict[Objective, Callable[..., tuple[int, int]]] = {
    random_spans: random_spans_lengths,
    span_corruption: random_spans_lengths,
    bert_style: lambda length, **unused_options: (length, length),
    mass_style: lambda length, **unused_options: (length, length),
    deshuffling: lambda length, **unused_options: (length, length),
    full_lm: lambda length, **unused_options: (0, length),
}

#: The objectives registered above (the paper's), in name order; objectives registered later are not among them.
PAPER_OBJECTIVES: tuple[str, ...] = tuple(OBJECTIVES.names())

# Objectives t5 applies to each document on its own: its ``prefix_lm`` preprocessor and the paper's
# prefix_lm.gin / all_permute.gin run ``split_tokens`` without ``reduce_concat_tokens``, so no example
# spans two documents (span corruption and the other denoising objectives concatenate documents first).
PER_DOCUMENT_OBJECTIVES: tuple[Objective, ...] = (prefix_lm, deshuffling)


def tokens_length_for(objective: Objective, inputs_length: int, noise_density: float = 0.15,
                      mean_noise_span_length: float = 3.0, **unused_options) -> int:
    """How many raw tokens one example of ``objective`` should hold for an encoder of ``inputs_length``.

    Span corruption: ``random_spans_helper(...)[0]`` (inputs come out exactly full). Everything else:
    ``inputs_length - 1`` (t5's ``split_tokens_to_inputs_length``, one slot left for EOS). Extra keyword
    options of the objective (e.g. ``random_prob``) are accepted and ignored, so a task can pass all of them.
    """
    if objective in (span_corruption, random_spans):
        return random_spans_helper(inputs_length, noise_density, mean_noise_span_length)[0]
    if inputs_length < 2:
        raise T2TError(f"inputs_length must be at least 2, got {inputs_length}; pass the encoder length.")
    return inputs_length - 1


#: objectives that size their own chunks: ``fn(sequence_length, *, vocab, **options) -> int`` (UL2's mixture:
#: the longest text one of its denoisers takes at both lengths; registered by ``t2t.data.ul2``).
CHUNK_LENGTHS: dict[Objective, Callable[..., int]] = {}


def chunk_length(sequence_length: dict[str, int] | None, *, objective: Objective, vocab=None, **options) -> int:
    """``tokens_length_for`` as a function of the pipeline's ``sequence_length`` (for ``concat_and_split``);
    an objective of ``CHUNK_LENGTHS`` gives its own (with the run's ``vocab``)."""
    if objective in CHUNK_LENGTHS:
        if not sequence_length or not {"inputs", "targets"} <= set(sequence_length):
            raise T2TError("this unsupervised task sizes its text chunks from both lengths; pass input_length and "
                           "target_length.")
        return CHUNK_LENGTHS[objective](sequence_length, vocab=vocab, **options)
    if objective is full_lm:  # the chunk is the target: t5 splits it (EOS at document ends) to the targets length
        if not sequence_length or "targets" not in sequence_length:
            raise T2TError("the full LM task cuts its text to the target length; pass target_length (the "
                           "pipeline's sequence_length['targets']).")
        return int(sequence_length["targets"])
    if not sequence_length or "inputs" not in sequence_length:
        raise T2TError("this unsupervised task cuts its text to the encoder length; pass input_length (the "
                       "pipeline's sequence_length['inputs']).")
    return tokens_length_for(objective, int(sequence_length["inputs"]), **options)


def denoise(features: dict[str, np.ndarray], rng: np.random.Generator, *, vocab, sequence_length=None,
            objective: Objective = span_corruption, **options) -> dict[str, np.ndarray]:
    """An objective as a per-draw token preprocessor (``Task.token_preprocessors``), like t5's ``denoise``:
    the text chunk in ``features["targets"]`` becomes new ``inputs`` and ``targets``; other keys pass through.

    Use ``functools.partial(denoise, objective=prefix_lm)``; options go to the objective. Each draw gets
    its own ``rng`` from the pipeline, so every epoch sees fresh noise."""
    if vocab is None:
        raise T2TError("unsupervised objectives need the run's vocabulary for their sentinel ids; pass a vocab.")
    run = {"vocab": vocab, "sequence_length": sequence_length}
    options = {**options, **{name: run[name] for name in run_parameters(objective)}}
    out = objective(features["targets"], vocab_size=vocab.vocab_size, rng=rng, **options)
    return {**features, **out}


@functools.lru_cache(maxsize=None)
def run_parameters(objective: Objective) -> tuple[str, ...]:
    """Which of the run's ``vocab`` (to tokenize text it adds) and ``sequence_length`` (to size what it
    makes) ``objective`` takes: ``denoise`` passes those."""
    return tuple(name for name in ("vocab", "sequence_length") if name in inspect.signature(objective).parameters)


def denoise_output_lengths(lengths: dict[str, int], *, objective: Objective = span_corruption,
                           **options) -> dict[str, int] | None:
    """The feature lengths ``denoise`` gives for features of ``lengths``, without drawing, or None when the
    objective draws them (see ``OUTPUT_LENGTHS``)."""
    lengths_of = OUTPUT_LENGTHS.get(objective)
    if lengths_of is None or "targets" not in lengths:
        return None
    inputs, targets = lengths_of(lengths["targets"], **options)
    return {**lengths, "inputs": inputs, "targets": targets}


denoise.output_lengths = denoise_output_lengths  # the token-preprocessor protocol: t2t.data.pipeline
