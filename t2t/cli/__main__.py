"""``python -m t2t.cli ARGS`` is ``t2t-train ARGS`` (what torchrun runs)."""

import sys

from t2t.cli import train_main

sys.exit(train_main())
