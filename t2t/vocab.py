"""Kept for vocabularies pickled before t2t had subpackages: their pickles name ``t2t.vocab._restore``."""

from t2t.data.vocab import SentencePieceVocabulary, load_vocabulary  # noqa: F401
from t2t.data.vocab import restore_vocabulary as _restore  # noqa: F401
