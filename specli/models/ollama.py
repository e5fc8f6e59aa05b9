"""`ollama:NAME[:TAG]`: the GGUF file of a model in an Ollama model store, found without Ollama running.

The store is $OLLAMA_MODELS, else ~/.ollama/models. A model `[HOST/][NAMESPACE/]MODEL[:TAG]` (defaults
registry.ollama.ai, library, latest) has a manifest at manifests/HOST/NAMESPACE/MODEL/TAG, a JSON
object whose `layers` list one of media type application/vnd.ollama.image.model; its digest
`sha256:HEX` names the blob blobs/sha256-HEX, which is the GGUF file. Torch-free.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from specli.errors import ModelNotFoundError
from specli.models.paths import expand_path

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
_PART = re.compile(r"^[A-Za-z0-9][\w.-]*$")
_SHOWN = 8


def store_dir() -> Path:
    """The Ollama model store: $OLLAMA_MODELS, else ~/.ollama/models."""
    explicit = os.environ.get("OLLAMA_MODELS", "").strip()
    return Path(expand_path(explicit)) if explicit else Path.home() / ".ollama" / "models"


def parse_name(name: str) -> tuple[str, str, str, str]:
    """'[HOST/][NAMESPACE/]MODEL[:TAG]' -> (host, namespace, model, tag); ModelNotFoundError for a
    malformed name."""
    path, _, tag = name.partition(":")
    parts = path.split("/")
    tag = tag or DEFAULT_TAG
    if not 1 <= len(parts) <= 3 or not all(_PART.fullmatch(p) and ".." not in p for p in [*parts, tag]):
        raise ModelNotFoundError(
            f"'ollama:{name}' is not an Ollama model name", "write it as ollama:NAME or ollama:NAME:TAG"
        )
    host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return host, namespace, parts[-1], tag


def shown_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name as `ollama list` shows it: the default host and namespace left out."""
    path = model if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}"
    path = path if host == DEFAULT_HOST else f"{host}/{namespace}/{model}"
    return f"{path}:{tag}"


def store_names(store: Path) -> list[str]:
    """Every model:tag in the store, as `ollama list` names them."""
    root = store / "manifests"
    names = [
        shown_name(*p.relative_to(root).parts)
        for p in root.glob("*/*/*/*")
        if p.is_file() and len(p.relative_to(root).parts) == 4
    ]
    return sorted(names)


def find_model(name: str) -> Path:
    """The GGUF blob of `ollama:NAME[:TAG]`; ModelNotFoundError (one line and a fix) when the store,
    the model or its model layer is missing."""
    host, namespace, model, tag = parse_name(name)
    store = store_dir()
    label = f"ollama:{name}"
    if not (store / "manifests").is_dir():
        raise ModelNotFoundError(
            f"no Ollama model store at {store} (for {label})",
            "set OLLAMA_MODELS to the folder Ollama keeps its models in, or `ollama pull` the model first",
        )
    manifest = store / "manifests" / host / namespace / model / tag
    if not manifest.is_file():
        known = store_names(store)
        shown = ", ".join(known[:_SHOWN]) + (" ..." if len(known) > _SHOWN else "")
        raise ModelNotFoundError(
            f"'{shown_name(host, namespace, model, tag)}' is not in the Ollama store {store}",
            f"models there: {shown}" if known else f"the store is empty: `ollama pull {model}:{tag}` first",
        )
    return _model_blob(store, manifest, label, f"{model}:{tag}")


def _model_blob(store: Path, manifest: Path, label: str, pull: str) -> Path:
    """The blob the manifest's model layer names."""
    again = f"`ollama pull {pull}` again to repair it"
    try:
        layers = json.loads(manifest.read_text()).get("layers") or []
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER)
    except (OSError, ValueError, AttributeError, TypeError, KeyError, StopIteration):
        raise ModelNotFoundError(f"the Ollama manifest of {label} names no model layer", again) from None
    blob = store / "blobs" / str(digest).replace(":", "-")
    if not blob.is_file():
        raise ModelNotFoundError(f"the model layer of {label} ({digest}) is missing from {store}", again)
    return blob
