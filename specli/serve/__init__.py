"""`specli serve`: one loaded pair behind an OpenAI-compatible HTTP API (FastAPI + uvicorn), with
Prometheus metrics named as vLLM's under `specli:`. Requests run one at a time in arrival order (batch
size 1: what a local speculative pair is for); the rest wait in a bounded line.

Modules: schemas (request bodies), body (reading them), errors (OpenAI's error shape), auth (bearer
key), prompts (request -> prompt ids), worker (the generation thread and its line), stops (stop strings
cut the OpenAI way), report (spec_decode, usage, the console line), metrics (Prometheus), responses
(bodies and stream chunks), app (the routes), server (socket, uvicorn, signals).

Importing this package imports fastapi, uvicorn and prometheus_client (the `serve` extra), not torch.
"""

from specli.serve.app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
