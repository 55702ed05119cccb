# Moved to t2t/durable.py (a foundation: data/ and checkpoints/ both write durably); removed once no caller is left.
from t2t.durable import *  # noqa: F401,F403
