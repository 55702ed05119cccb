"""``t2t-serve``: a trained run answers requests over HTTP (docs/serve.md).

settings (ServeConfig) → requests (what a client may send) → batcher (one worker thread, dynamic batches)
→ service (requests to token rows and back, as t2t-predict) → app (Starlette routes, uvicorn, the drain);
metrics (Prometheus). Importing this package imports none of the serving libraries.
"""
