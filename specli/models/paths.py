"""Where model files live, as plain functions of names and the environment: path expansion, the hub's
and specli's cache folders, llama.cpp's split-file names. A leaf: the source kinds (gguf_file, ollama,
packaged) and the dispatcher over them (sources) all read it, and it imports none of them."""

from __future__ import annotations

import os
import re
from pathlib import Path

# llama.cpp's gguf-split names its parts NAME-00001-of-00003.gguf.
SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def expand_path(text: str) -> str:
    """`$VARS` and `~` expanded (a variable that is not set stays as written)."""
    return os.path.expanduser(os.path.expandvars(text))


def looks_like_path(name: str) -> bool:
    """A name that can only be a path: absolute, starting with . or ~, with two or more '/', or with a
    backslash (a hub id is 'org/name', one slash)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def hub_cache_dir() -> str | None:
    """The hub cache folder from the environment as it is now, with huggingface_hub's precedence
    (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, then HF_HOME/hub). None: no variable set, huggingface_hub
    uses its default."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return expand_path(os.environ[name])
    if os.environ.get("HF_HOME"):
        return os.path.join(expand_path(os.environ["HF_HOME"]), "hub")
    return None


def specli_cache_dir() -> Path:
    """$SPECLI_CACHE_DIR, else $XDG_CACHE_HOME/specli, else ~/.cache/specli."""
    explicit = os.environ.get("SPECLI_CACHE_DIR", "").strip()
    if explicit:
        return Path(expand_path(explicit))
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(expand_path(xdg)) if xdg else Path.home() / ".cache") / "specli"
