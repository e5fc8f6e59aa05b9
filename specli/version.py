"""specli's version, in a leaf module every layer may read (the package's `__version__` too)."""

__version__ = "0.1.0"
