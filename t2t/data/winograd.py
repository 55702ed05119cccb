"""T5's "simple" Winograd formulation (paper §2.4, "WNLI, WSC, and DPR"): the pronoun marked ``*…*`` in the
text, the model names its referent, and the ``wsc_simple`` postprocessor checks the name against the candidate.

- ``wsc_simple``: SuperGLUE WSC rows (``text``, ``span1_text`` = the candidate, ``span2_index``/``span2_text``
  = the pronoun) → ``"wsc: … *he* …"`` → the candidate. With ``correct_referent_only`` (training) it is a
  filter: rows whose candidate is not the referent give no example.
- ``dpr_simple``: Definite Pronoun Resolution rows (``sentence``, ``pronoun``, ``candidates``, ``label``).
- ``wnli_simple``: GLUE WNLI pairs, turned into the same form by finding the premise's pronoun that the
  hypothesis replaces (T5's heuristic, evaluation only).
- ``referent_match``: T5's ``postprocessors.wsc_simple``: 1 when the prediction names the candidate, -1 when
  it is empty.

Each function follows the ``t5`` library's (``t5/data/preprocessors.py``, ``postprocessors.py``) step by step,
quirks included, so that the strings and scores are T5's.
"""

from __future__ import annotations

import re
from typing import Mapping, NamedTuple

from t2t.errors import T2TError

# Two WSC texts whose pronoun index points at the wrong word; T5 writes their blanked form out.
_BLANKED_BY_HAND = {
    'The boy continued to whip the pony , and eventually the pony threw him over. John laughed out quite loud. '
    '"Good for him," he said. ':
        'The boy continued to whip the pony , and eventually the pony threw him over. John laughed out quite '
        'loud. "Good for X ," he said.',
    "When they had eventually calmed down a bit , and had gotten home, Mr. Farley put the magic pebble in an "
    "iron safe . Some day they might want to use it , but really for now, what more could they wish for?":
        "When they had eventually calmed down a bit , and had gotten home, Mr. Farley put the magic pebble in an "
        "iron safe . Some day they might want to use X , but really for now, what more could they wish for?",
}


def _blank_pronoun(example: Mapping) -> str:
    """The text with its pronoun (word ``span2_index`` of the space-split text) replaced by ``X``."""
    text = example["text"]
    if text in _BLANKED_BY_HAND:
        return _BLANKED_BY_HAND[text]
    words = text.split(" ")
    index = int(example["span2_index"])
    if not 0 < index < len(words) or words[index] != example["span2_text"]:
        found = words[index] if 0 <= index < len(words) else "nothing"
        raise T2TError(f"WSC example idx={example.get('idx', '?')} has {found!r} at word {index}, not its pronoun "
                       f"{example['span2_text']!r} (T5 needs it there, and not first); fix the data.")
    # T5 joins three parts, so a pronoun at the end leaves a trailing space behind the X.
    return " ".join([" ".join(words[:index]), "X", " ".join(words[index + 1:])])


def wsc_simple(example: Mapping, *, correct_referent_only: bool = False) -> list[dict]:
    """A WSC row as ``"wsc: <text with *pronoun*>"`` → the candidate (``span1_text``), keeping ``label`` and
    ``idx`` for the postprocessor; ``correct_referent_only`` drops rows whose label is false (training)."""
    label = int(example.get("label", 0))
    if correct_referent_only and not label:
        return []
    marked = _blank_pronoun(example).replace(" X ", f" *{example['span2_text']}* ")
    return [{"inputs": f"wsc: {marked}", "targets": example["span1_text"], "label": label, "idx": example["idx"]}]


def dpr_simple(example: Mapping) -> dict:
    """A Definite Pronoun Resolution row as ``"wsc: <sentence with the first *pronoun*>"`` → the right candidate."""
    sentence = re.sub(rf" ({re.escape(example['pronoun'])})( |\.|,)", r" *\1*\2", example["sentence"], count=1)
    return {"inputs": f"wsc: {sentence}", "targets": example["candidates"][int(example["label"])]}


# ------------------------------------------------------------------------------------------ WNLI

_PRONOUNS = ("he", "she", "they", "it", "her", "his", "their", "them", "him")


class _PronounMatch(NamedTuple):
    score: int
    index: int
    candidate: str


def _clean_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without one trailing ``. , ? !``; empty words dropped."""
    words = [re.sub(r"(\.|,|\?|\!)$", "", w) for w in text.strip().lower().split(" ")]
    return [w for w in words if w]


def _prefix_found(hypothesis: list[str], words: list[str]) -> int:
    """How many leading ``words`` appear, joined, as a substring of the joined hypothesis."""
    joined = " ".join(hypothesis)
    for i in range(len(words)):
        if " ".join(words[:i + 1]) not in joined:
            return i
    return len(words)


def _pronoun_match(premise: list[str], hypothesis: list[str], index: int) -> _PronounMatch:
    """How much of the premise around the pronoun at ``index`` the hypothesis repeats, and what it says
    in the pronoun's place."""
    before, after = premise[:index], premise[index + 1:]
    before_size = _prefix_found(hypothesis[::-1], before[::-1])
    after_size = _prefix_found(hypothesis, after)
    score = before_size + after_size
    candidate = ""
    if score:
        before_words = before[len(before) - before_size:]
        after_words = after[:after_size]
        joined = " ".join(hypothesis)
        # the words are used as regular expressions unescaped, as T5 does
        match = (re.search(" ".join(before_words + ["(.+)"] + after_words), joined)
                 or re.search(" ".join(["^(.+)"] + after_words), joined)
                 or re.search(" ".join(before_words + ["(.+)$"]), joined))
        if match:
            candidate = match.group(1)
    return _PronounMatch(score, index, candidate)


def _mark_word(sentence: str, index: int) -> str:
    words = sentence.split(" ")
    word = words[index]
    marked = f"*{word[:-1]}* {word[-1]}" if word[-1] in ".,!?" else f"*{word}*"
    return " ".join(words[:index] + [marked] + words[index + 1:])


def _strip_possessive(word: str) -> str:
    if word.endswith("'"):
        return word[:-1]
    if word.endswith("'s"):
        return word[:-2]
    return word


def _candidate_in_hypothesis(candidate: str, hypothesis: str, idx) -> str:
    """The candidate as the hypothesis writes it: from its last article on, case and punctuation as there,
    never possessive."""
    words = candidate.split(" ")
    start = max([words.index(article) for article in ("a", "an", "the") if article in words] or [0])
    words = words[start:]
    pattern = "({})".format(" ".join(rf"{re.escape(w)}(?:\.|,|\?|\!)?" for w in words))
    found = re.search(pattern, hypothesis, re.IGNORECASE)
    if not found:
        raise T2TError(f"WNLI example idx={idx}: the candidate {' '.join(words)!r} is not in the hypothesis "
                       f"{hypothesis!r}; this pair does not fit the simple WSC form.")
    text = found.group(1)
    if text and text[-1] in ".,!?":
        text = text[:-1]
    return _strip_possessive(text)


def wnli_simple(example: Mapping) -> dict:
    """A WNLI pair as ``"wsc: <premise with *pronoun*>"`` → the candidate the hypothesis puts in its place.

    The pronoun is the premise's pronoun with the most premise words around it repeated in the hypothesis
    (the first such on ties); ``label`` (1 = entailment: the candidate is the referent) and ``idx`` stay.
    """
    premise, hypothesis = example["sentence1"], example["sentence2"]
    premise_words, hypothesis_words = _clean_words(premise), _clean_words(hypothesis)
    matches = [_pronoun_match(premise_words, hypothesis_words, i)
               for i, word in enumerate(premise_words) if word in _PRONOUNS]
    if not matches:
        raise T2TError(f"WNLI example idx={example.get('idx', '?')} has no pronoun in its premise {premise!r}; "
                       f"this pair does not fit the simple WSC form.")
    best = max(matches, key=lambda m: m.score)
    return {"inputs": f"wsc: {_mark_word(premise, best.index)}",
            "targets": _candidate_in_hypothesis(best.candidate, hypothesis, example.get("idx", "?")),
            "premise": premise, "hypothesis": hypothesis, "label": int(example.get("label", 0)),
            "idx": example.get("idx")}


# ------------------------------------------------------------------------------------------ postprocessor

_DETERMINERS = frozenset({"a", "an", "few", "her", "his", "each", "every", "many", "much", "my", "our", "some",
                          "that", "the", "their", "these", "this", "those", "which", "whose", "your"})


def _without_determiners(text: str) -> str:
    return " ".join(w for w in text.strip().lower().split(" ") if w not in _DETERMINERS)


def referent_match(text: str, *, example: Mapping | None = None, is_target: bool = False) -> int:
    """T5's ``wsc_simple`` postprocessor: a target is the example's label; a prediction is 1 when it names the
    example's candidate (its target text): ignoring case and determiners, one's words contain the other's,
    and both or neither are possessive.

    A prediction that is empty once determiners are gone is -1, never a label: today's ``t5`` (its
    "we don't want an empty prediction to accidentally return 0 and spuriously match the label"), not the
    paper-era code, which scored it 0 and so counted it right on every row whose label is 0 (66 of WSC's 104
    validation rows): a bug fix."""
    if is_target:
        return int(example["label"])
    prediction = _without_determiners(text)
    if not prediction:
        return -1
    referent = _without_determiners(example["targets_pretokenized"])
    if ("'" in prediction) != ("'" in referent):
        return 0  # "Bob" does not name "Bob's hat"
    predicted, expected = set(prediction.split(" ")), set(referent.split(" "))
    return int(predicted <= expected or expected <= predicted)
