"""specli's own forward passes for drafter steps: a draft model's decoder and an EAGLE head run without
transformers' per-step objects, on a preallocated KV cache rewound by position (docs/design.md §13;
the `--lean/--no-lean` option and the `lean=` keyword choose them, "lean" being their codename).
"""
