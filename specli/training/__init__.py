"""Training recipes. `python -m specli.training.tiny` rebuilds the embedded `tiny` pair from scratch;
`specli train KIND` (command.py) trains a drafter for any target with the same math: the losses in
eagle.py, peagle.py, pard.py and common.py (the toolbox every recipe shares: token windows, the
optimizer and its schedule, mixed precision, one training step, the draft model's loss), put together
per kind in jobs.py, run by loop.py with checkpoints (checkpoint.py), on data from data.py (and
regenerate.py), planned by plan.py and measured through the engine by measure.py."""
