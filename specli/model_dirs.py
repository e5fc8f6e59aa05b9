"""Model folders, read without torch: the models shipped inside the package, and a folder's config.json.

`specli presets list` estimates memory from these, so they must not import torch (see `loading` for the
rest of where models come from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specli.errors import ModelLoadError

EMBEDDED_PREFIX = "embedded:"


def embedded_dir() -> Path:
    """The folder of the models shipped inside the package (specli/embedded)."""
    return Path(__file__).resolve().parent / "embedded"


def embedded_names() -> list[str]:
    """Names usable as "embedded:NAME": the folders under embedded_dir() that hold a config.json."""
    root = embedded_dir()
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []


def embedded_model(name: str) -> Path:
    """ "embedded:NAME" -> its folder inside the package, or a clear error naming the ones that exist."""
    folder = embedded_dir() / name
    if name and "/" not in name and (folder / "config.json").is_file():
        return folder
    known = (
        ", ".join(f"embedded:{n}" for n in embedded_names()) or "none (this install has no embedded models)"
    )
    raise ModelLoadError(f"no embedded model named '{name}'", f"embedded models: {known}")


def read_config(folder: Path | str) -> dict[str, Any] | None:
    """A model folder's config.json as a dict, or None when it is missing or not JSON."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None
