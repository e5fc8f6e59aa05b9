"""specli: local speculative generation that is exact, fast, and visible."""

__version__ = "0.1.0"
