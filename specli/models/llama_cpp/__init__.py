"""The llama.cpp engine: GGUF models evaluated by llama.cpp (through llama-cpp-python's low-level
bindings) under specli's own loop, drafters, verification and cost model (docs/design.md §15).

`library` imports the bindings (one line naming the install when they are missing), `probe` checks once
in a child process that the build runs on this CPU, `lm` is the model object the loop drives
(`LlamaModel`, `LlamaLM`), `engines` decides which engine a load uses.
"""
