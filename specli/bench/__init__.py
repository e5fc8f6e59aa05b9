"""`specli bench`'s measurements: the prompt sets and prompt files (prompts.py, with the packaged sets in
sets/), local runs of every strategy against plain decoding and the transformers baseline on the same
engine (run.py), and OpenAI-compatible servers measured in the same rotation (endpoint.py); what a bench
will run, checked from its options before anything loads (plan.py), and its stages from that plan to the
JSON report (session.py), so the command is a thin layer over them. Importing
this package imports nothing else (each module is imported by path); none of it imports torch at import.
"""
