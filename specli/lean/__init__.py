"""Lean drafter steps: specli's own forwards for draft models and EAGLE heads (docs/design.md §13)."""
