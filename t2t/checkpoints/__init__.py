"""Weights on disk: t2t's own checkpoint format (native.py), durable writes, Hugging Face in and out (hf.py),
t5x import (t5x.py, with tensorstore_arrays.py for its zarr and OCDBT arrays), t5 library (Mesh TensorFlow)
import (mesh_tf.py), loading any of them (loading.py) and the run directory (run.py)."""
