"""The drafting strategies: one module per strategy (draft model, EAGLE head, self-speculation, prompt
lookup), each implementing the protocol the engine owns (`specli.engine.drafter`). Importing this
package imports no strategy (each module is imported by path).
"""
