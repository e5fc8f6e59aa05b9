"""Training recipes. `python -m specli.training.tiny` rebuilds the embedded `tiny` pair from scratch."""
