"""The tiny pair's corpus: the running interpreter's own standard library sources (PSF license).

Files are split into train and validation by a hash of their path relative to the stdlib root, so the
split is the same on every machine with the same Python version. Test folders are excluded on purpose:
they are mostly fixtures and odd data rather than the library code a user completes.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
VALIDATION_PERCENT = 5


@dataclass(frozen=True)
class Corpus:
    """Texts of the train and validation files, in a fixed (sorted path) order."""

    root: Path
    train: list[str]
    validation: list[str]
    train_names: list[str]
    validation_names: list[str]

    @property
    def train_chars(self) -> int:
        return sum(len(t) for t in self.train)


def stdlib_root() -> Path:
    """The folder that holds the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation(relative: str) -> bool:
    """True for the ~5% of files whose path hash falls in the validation bucket."""
    digest = hashlib.sha256(relative.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 100 < VALIDATION_PERCENT


def stdlib_files(root: Path) -> list[Path]:
    """Every `.py` file under root outside the excluded folders, sorted by relative path."""
    files = [
        p
        for p in root.rglob("*.py")
        if p.is_file() and not EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_corpus(root: Path | None = None, max_files: int | None = None) -> Corpus:
    """Read and split the corpus; files that are not UTF-8 are skipped. max_files keeps the first N."""
    root = root or stdlib_root()
    train: list[str] = []
    validation: list[str] = []
    train_names: list[str] = []
    validation_names: list[str] = []
    files = stdlib_files(root)
    if max_files is not None:
        files = files[:max_files]
    for path in files:
        relative = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        if is_validation(relative):
            validation.append(text)
            validation_names.append(relative)
        else:
            train.append(text)
            train_names.append(relative)
    if not train or not validation:
        raise RuntimeError(f"the corpus under {root} has no train or no validation files")
    return Corpus(root, train, validation, train_names, validation_names)
