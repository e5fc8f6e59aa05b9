"""The drafting strategies: one module per strategy (draft model, EAGLE head, self-speculation, prompt
lookup), each implementing the protocol the engine owns (`specli.engine.drafter`) and defining
`build(pair, settings, length)`, and one table from strategy to that module and its capabilities
(`table.py`: `Strategy`, `STRATEGY_TABLE`). Importing this package imports no strategy, and the table
imports no torch (each strategy's module is imported by path when a pair first builds its drafter).
"""
