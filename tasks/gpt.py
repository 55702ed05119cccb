"""GPT's input transformations (Radford et al. 2018, §3.3, Figure 1) as text-to-text tasks.

GPT reads a structured input as one token sequence: a start token, the fields joined by a delimiter token
``$``, and an extract token whose representation a linear layer classifies. In text-to-text form the start
token is the start id a decoder-only row begins with, the extract token is the EOS that ends the inputs,
and the label is generated after it, as the same words T5 uses (so t5's postprocessing and metrics apply):

- entailment (``gpt_rte``, ``gpt_qnli``): ``"<premise> $ <hypothesis>"`` → the GLUE label word;
- similarity (``gpt_stsb``, ``gpt_mrpc``, ``gpt_qqp``): the two sentences have no inherent order, so GPT
  processes both orderings; here each ordering is a task (``gpt_<name>_ab``: ``"<s1> $ <s2>"``,
  ``gpt_<name>_ba``: ``"<s2> $ <s1>"``) and ``gpt_<name>`` mixes the two at equal rates (GPT adds the two
  sequences' representations instead, which a text-to-text model cannot do).

Multiple choice (GPT's third transformation: the context with each answer, one score per candidate) is rank
classification: a task whose ``rank_choices`` is a function of the example giving its candidate answers,
evaluated with ``t2t-eval --rank-classification`` (no multiple-choice benchmark of GPT's -- RACE, Story Cloze
-- is registered here). The GLUE tasks above keep their label words as rank choices too. Fine-tune with
``configs/recipes/gpt-finetune.yaml``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

from t2t import Mixture, Task, register_mixture, register_task
from t2t.tasks.glue import glue_text_preprocessor, make_glue_task

DELIMITER = "$"
ENTAILMENT = {"rte": ("sentence1", "sentence2"), "qnli": ("question", "sentence")}
SIMILARITY = {"stsb": ("sentence1", "sentence2"), "mrpc": ("sentence1", "sentence2"),
              "qqp": ("question1", "question2")}


def delimited(example: Mapping, *, config: str, fields: Sequence[str]) -> dict:
    """``"<field 1> $ <field 2>"`` → the target T5 writes for this GLUE example."""
    out = dict(glue_text_preprocessor(config)(example))
    out["inputs"] = f" {DELIMITER} ".join(str(example[field]) for field in fields)
    return out


def gpt_task(name: str, config: str, fields: Sequence[str]) -> Task:
    """GLUE ``config``'s task (source, label words, postprocessing, metrics, rank choices) with GPT's inputs."""
    return register_task(dataclasses.replace(
        make_glue_task(config), name=name,
        preprocessors=(functools.partial(delimited, config=config, fields=tuple(fields)),),
        description=f"GLUE {config} in GPT's input form: {f' {DELIMITER} '.join(fields)}"))


for _config, _fields in ENTAILMENT.items():
    gpt_task(f"gpt_{_config}", _config, _fields)
for _config, (_first, _second) in SIMILARITY.items():
    gpt_task(f"gpt_{_config}_ab", _config, (_first, _second))
    gpt_task(f"gpt_{_config}_ba", _config, (_second, _first))
    register_mixture(Mixture(f"gpt_{_config}", [f"gpt_{_config}_ab", f"gpt_{_config}_ba"]))
