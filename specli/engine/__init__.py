"""The speculative engine: the loop that prefills, drafts, verifies, commits, rewinds and stops
(loop.py), yielding one `Round` event per target forward (events.py, with the `Stats` they add up to,
built on the speculation counters of counters.py that a server's reports are read into as well), and
never printing. Verification is pure (verify.py); sampling processes the target's p and the
drafter's q the same way (sampling.py); draft_length.py picks each round's k and stopping.py cuts at EOS
and stop strings. drafter.py is the protocol the loop calls: the engine owns it, `specli.drafters`
implements it. Importing this package imports nothing else (each module is imported by path).
"""
