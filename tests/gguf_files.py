"""Tiny GGUF files written by the tests from their own tiny models, as llama.cpp's convert_hf_to_gguf.py
lays them out (tensor names from the gguf package's name map, llama's q/k rows permuted, the tokenizer
and chat template in the metadata), and the stores GGUF files are found in: an Ollama model store and a
hub cache. Nothing here reaches a network.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specli.models.gguf_write import CHAT_TEMPLATE, write_gguf  # noqa: F401 (the tests import them here)


def ollama_store(root: Path, gguf_path: Path, name: str = "tiny", tag: str = "latest") -> Path:
    """An Ollama model store at `root` holding `gguf_path` as library/NAME:TAG (blob named by its sha256,
    a manifest with a model layer and a template layer, as `ollama pull` leaves them)."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    data = gguf_path.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.replace(":", "-")).write_bytes(data)
    template = b"{{ .Prompt }}"
    template_digest = "sha256:" + hashlib.sha256(template).hexdigest()
    (blobs / template_digest.replace(":", "-")).write_bytes(template)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": template_digest},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.template", "digest": template_digest, "size": 13},
            {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": len(data)},
        ],
    }
    folder = root / "manifests" / "registry.ollama.ai" / "library" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / tag).write_text(json.dumps(manifest))
    return root


def hub_cache(root: Path, repo: str, files: dict[str, Path], revision: str = "0123abcd" * 5) -> Path:
    """A hub cache at `root` holding `files` (name in the repo -> a file here) of `repo` at main, in
    huggingface_hub's layout: blobs/, snapshots/REV/NAME -> ../../blobs/..., refs/main."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(revision)
    for name, source in files.items():
        data = source.read_bytes()
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = base / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    return root
