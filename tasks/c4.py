"""C4 span corruption, T5's final pre-training task (``c4_v220_span_corruption``, alias ``c4``), and the
objectives of the architecture comparison (``c4_v220_full_lm``, ``c4_v220_prefix_lm``; T5 §3.2.3).

The source is ``allenai/c4`` (config ``en``) on the Hugging Face hub, *streamed* with
``datasets.load_dataset(..., streaming=True)`` -- the English C4 is ~300 GB, so nothing is downloaded up front.
TFDS's ``c4/en:2.2.0`` that T5 used and ``allenai/c4``'s ``en`` are the same 364,868,892 / 364,608 train/validation
documents. The preprocessing is t5's: ``rekey(inputs=None, targets="text")``, tokenize, concatenate the
documents in groups of 128 (``reduce_concat_tokens(batch_size=128)``; streaming cannot concatenate a whole
split) and cut them into ``random_spans_helper(input_length, 0.15, 3.0)[0]`` tokens (568 for 512), then span
corruption per draw: inputs 512 and targets 114 tokens including EOS. Training reads the chunks through a
seeded shuffle buffer of 1,000 (seqio's default for every task), so a batch does not hold the consecutive chunks
of one group of documents (``t2t.data.pipeline.STREAM_SHUFFLE_BUFFER``). The prefix LM task cuts each document
on its own instead (t5's ``prefix_lm``: ``split_tokens_to_inputs_length`` with no concatenation), so no example
spans two documents.

``c4_ul2`` is UL2's mixture of denoisers (``t2t.data.ul2``: R-, S- and X-denoisers, each example's inputs opened
by its mode token) over the same streamed C4, at UL2's 512/512.

``c4_v020_unsupervised`` is the unsupervised member of the paper's multi-task mixtures (``t2t.mixtures.multitask``):
the same streamed C4 under the paper's baseline objective (§3.1.4, i.i.d. noise with each run of corrupted
tokens replaced by one sentinel, t5's ``iid_denoising``); in the t5 library its objective is set by gin.

Not reproduced: t5's ``select_random_chunk(max_length=65536)`` in front, which only shortens the rare documents
longer than 65,536 tokens to a random window (a random step before the deterministic, cached chunking); and
seqio's shuffling of the source's files: every seed reads the hub's 1,024 train shards in their order, and only
the buffer above differs between seeds.
"""

from __future__ import annotations

from t2t import HFDataset, register_task
from t2t.tasks.text_files import UL2_SEQUENCE_LENGTH, unsupervised_task

C4_HUB_ID, C4_CONFIG = "allenai/c4", "en"
# allenai/c4 "en": document counts of the train and validation splits (c4/en:2.2.0 in TFDS).
C4_SIZES = {"train": 364_868_892, "validation": 364_608}


def c4_source() -> HFDataset:
    """English C4 streamed from the hub."""
    return HFDataset(C4_HUB_ID, C4_CONFIG, splits=("train", "validation"), streaming=True, sizes=C4_SIZES)


c4_v220_span_corruption = register_task(
    unsupervised_task("c4_v220_span_corruption", c4_source(), "span_corruption", docs_per_group=128,
                      description="T5's pre-training objective: span corruption (15%, mean span 3) over C4 en"),
    aliases=("c4",),
)

c4_v020_unsupervised = register_task(
    unsupervised_task("c4_v020_unsupervised", c4_source(), "iid_denoising", docs_per_group=128,
                      description="the paper's baseline objective (i.i.d. noise, replace spans) over C4 en, the "
                                  "unsupervised member of the multi-task mixtures"),
)

# T5 §3.2.3 / Table 2's objectives for the architecture comparison, under t5's names: the whole chunk as a
# language-modelling target (t5's ``full_lm``: chunks of the target length, for decoder-only models), and a
# prefix LM with a uniformly random split point (t5's ``prefix_lm``: chunks of the input length).
c4_v220_full_lm = register_task(
    unsupervised_task("c4_v220_full_lm", c4_source(), "full_lm", docs_per_group=128,
                      description="Table 2's LM objective: the whole C4 en chunk is the target, no inputs"))
c4_v220_prefix_lm = register_task(
    unsupervised_task("c4_v220_prefix_lm", c4_source(), "prefix_lm", docs_per_group=128,
                      description="Table 2's prefix LM objective: C4 en chunks split at a uniformly random point"))

# UL2's mixture of denoisers (Tay et al. 2022, §3.1.2; t2t.data.ul2) over the same streamed C4, as UL2 20B was
# pre-trained (C4, 512/512); documents concatenated in groups of 128 as its released ul2_objective does.
c4_ul2 = register_task(
    unsupervised_task("c4_ul2", c4_source(), "ul2", docs_per_group=128, sequence_length=UL2_SEQUENCE_LENGTH,
                      description="UL2's mixture of denoisers (R, S and X, with mode tokens) over C4 en"))
