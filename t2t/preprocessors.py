"""Text preprocessors and the paper's objectives under one name: the public contract's
``t2t.preprocessors.span_corruption`` / ``random_spans_helper``, and the path that run folders written
before t2t had subpackages import in their copied --module files."""

from t2t.data.objectives import *  # noqa: F401,F403
from t2t.data.preprocessors import *  # noqa: F401,F403
