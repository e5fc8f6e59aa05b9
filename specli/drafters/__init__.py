"""The drafting strategies: one module per strategy (draft model, EAGLE head, self-speculation, prompt
lookup), each implementing the protocol the engine owns (`specli.engine.drafter`) and defining
`build(context, length)` from a `DraftContext` (context.py: the loaded models and resolved settings; a
drafter never sees the pair that composes it). Which file drafts for which strategy, and what each one
needs, is the table in `specli.strategies`. Importing this package imports no strategy (each strategy's
module is imported by path when a pair first builds its drafter).
"""
