"""Helpers for users to test their own tasks: a tiny vocabulary that needs no downloads or data directory.

``tiny_vocabulary()`` trains a small SentencePiece model once per process (cached, in a temporary
directory) from the short English text below, with T5's conventions (pad 0, eos 1, unk 2, 100 sentinel
ids by default). Training is single-threaded, so the same call gives the same ids in every process.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

from t2t.data.sources import InMemorySource
from t2t.data.task import MIXTURES, TASKS, Mixture, Task, load_builtin_modules, register_mixture, register_task
from t2t.data.vocab import DEFAULT_EXTRA_IDS, SentencePieceVocabulary, train_vocabulary

__all__ = ["TINY_TEXT", "tiny_vocabulary"]

TINY_VOCAB_PIECES = 384

# Original prose, written for these tests: everyday words, numbers and punctuation, so that task texts
# (questions, labels such as "entailment" or "positive", sentence pairs) tokenize into sensible pieces.
TINY_TEXT = """\
The harbour town woke slowly on the first cold morning of autumn. Fishermen pulled their boats onto the
sand, and the baker opened her shop at six o'clock, as she had done for twenty-three years. A small dog
followed the postman from door to door, hoping for a biscuit. Nobody was in a hurry; the tide would not
turn until noon, and the market would not open before nine.
Is the sentence acceptable? The answer is yes. Does the second sentence follow from the first? Not
entirely: the premise says the train left early, while the hypothesis claims it arrived late. That is a
contradiction, not an entailment, and a careful reader would label it neutral only if the facts were
unclear. The review was positive, the film was long, and the music was wonderful, but the ending felt
rushed and slightly negative.
Question: where did the scientists measure the temperature? Context: In 1998, two scientists from a
northern university measured the temperature of a frozen lake every hour for 14 days. They recorded
values between -12.5 and 3.75 degrees, wrote their results in a notebook, and later published a short
paper explaining why the ice cracked so loudly at night.
Translate English to German: the house is small. Summarize: a storm closed three roads, damaged several
roofs and left thousands of homes without electricity for almost two days, according to local officials.
My grandmother kept a garden behind the kitchen, full of beans, tomatoes, onions, lettuce and bright
yellow flowers. Every evening she walked between the rows with a watering can, talking quietly to the
plants as if they were old friends. When I asked why, she laughed and said that everything grows better
when someone is listening. I did not believe her then; I am not so sure now.
Computers learn to translate, summarize and answer questions by reading enormous amounts of text. A
model sees an input string and produces a target string, one token at a time, until it writes the end
of the sequence. Training adjusts millions of numbers so that the right answer becomes more likely.
Quick brown foxes jump over lazy dogs, while zebras, owls and jackals sleep quietly in the valley.
On Saturday the village held its annual festival. Children painted their faces, musicians played old
songs on violins and accordions, and a juggler threw seven oranges into the air without dropping one.
The mayor gave a speech about the new bridge, which had cost 4.2 million dollars and taken three years
to build. Some people cheered; others complained that the old ferry had been cheaper, slower and far
more charming. By midnight the square was empty except for paper lanterns, forgotten umbrellas and a
very patient cat waiting for somebody to drop a piece of grilled fish.
Why do leaves change colour? During summer, green chlorophyll hides the other pigments. As days become
shorter, trees stop producing it, and the hidden yellows and oranges appear. Red colours are different:
they are made fresh in autumn, when sugar is trapped inside the leaf. Scientists still debate exactly
why trees spend energy on this, but one theory suggests the red pigment protects the leaf from strong
light while the tree recovers valuable nutrients before winter.
Please book a table for four people at eight o'clock on Friday. The restaurant replied politely that it
was fully booked, but offered Thursday instead, or a smaller table near the window after half past nine.
"""

_state = {"dir": None, "pid": None}


def _workdir() -> Path:
    if _state["dir"] is None:
        _state["dir"] = Path(tempfile.mkdtemp(prefix="t2t-tiny-vocab-"))
        _state["pid"] = os.getpid()
        atexit.register(_cleanup)
    return _state["dir"]


def _cleanup() -> None:
    if _state["dir"] is not None and _state["pid"] == os.getpid():  # never from a forked child
        shutil.rmtree(_state["dir"], ignore_errors=True)


@functools.lru_cache(maxsize=None)
def tiny_vocabulary(vocab_size: int = TINY_VOCAB_PIECES, extra_ids: int = DEFAULT_EXTRA_IDS) -> SentencePieceVocabulary:
    """A small SentencePiece vocabulary with T5's id conventions, trained once per process and cached.

    ``vocab_size`` is the number of SentencePiece pieces (pad, eos and unk included); the returned
    vocabulary's ``vocab_size`` is that plus ``extra_ids`` (484 by default), with ``<extra_id_0>`` last.
    Values above 424 pieces are more than the built-in text supports and raise T2TError.
    """
    prefix = _workdir() / f"tiny_{vocab_size}"
    model = train_vocabulary(iter([TINY_TEXT]), prefix, vocab_size=vocab_size, num_threads=1, character_coverage=1.0)
    return SentencePieceVocabulary(model, extra_ids)


# ------------------------------------------------------------------------------------------ tasks in memory
# Helpers for testing your own tasks without files: a task over Python lists, registered only for a test.

def in_memory_task(name: str, examples: "dict[str, list[dict]]", **task_fields):
    """A ``t2t.data.task.Task`` named ``name`` over ``{"train": [example, ...], ...}`` held in memory.

    ``task_fields`` are the other Task fields (``preprocessors``, ``postprocess_fn``, ``metric_fns``, ...).
    Without ``preprocessors`` the examples must already carry ``inputs`` and ``targets`` strings.
    """
    return Task(name=name, source=InMemorySource(examples), **task_fields)


class temporarily_registered:
    """Register tasks/mixtures for the duration of a ``with`` block (or a test), then remove them again::

        with temporarily_registered(in_memory_task("my_task", {"train": rows})):
            batches = build_train_batches("my_task", vocab=tiny_vocabulary(), ...)
    """

    def __init__(self, *items, aliases: "dict[str, list[str]] | None" = None):
        self.items = items
        self.aliases = aliases or {}

    def __enter__(self):
        load_builtin_modules()  # built-ins first, so a later lookup does not collide with these
        self._done = []
        try:
            for item in self.items:
                register = register_mixture if isinstance(item, Mixture) else register_task
                register(item, aliases=self.aliases.get(item.name, ()))
                self._done.append((MIXTURES if isinstance(item, Mixture) else TASKS, item.name))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.items[0] if len(self.items) == 1 else self.items

    def __exit__(self, *exc):
        for registry, name in reversed(self._done):
            registry.unregister(name)
        self._done = []
        return False


registered = temporarily_registered  # its name before 0.2: users' task tests import it

__all__ += ["in_memory_task", "temporarily_registered", "registered"]
