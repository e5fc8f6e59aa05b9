"""Models for the llama.cpp engine: a GGUF source's file (the target, a GGUF drafter), or one of
specli's own transformers drafters written once as a GGUF into specli's cache (`gguf_write`)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from specli.errors import ModelLoadError, UsageError
from specli.models import sources
from specli.models.llama_cpp.lm import LlamaModel


def is_gguf(name: str) -> bool:
    """Whether a model name is a GGUF source (a .gguf path, ollama:NAME, package:NAME, org/name:F.gguf)."""
    try:
        return sources.classify(name).is_gguf
    except Exception:  # an unknown name: the load that follows says what is wrong with it
        return False


def gguf_file(name: str, tqdm_class: Any = None) -> Path | None:
    """The GGUF file of a GGUF source (a hub file fetched into the hub cache), None for other sources."""
    source = sources.classify(name)
    if not source.is_gguf:
        return None
    if source.kind == "hub_gguf":
        from specli.models.loading import _hub_file

        return _hub_file(source, tqdm_class)
    return source.path


def load_model(name: str, folder: Path) -> LlamaModel:
    """A llama.cpp model for `name` (its config and tokenizer already read into `folder`): its own GGUF
    file, or, for a transformers folder, the GGUF specli writes of it once (`converted`). The file is
    checked once in a child process first (`probe`), which also measures its row rule (`rows`)."""
    import torch
    from transformers import AutoConfig

    from specli.models.llama_cpp.probe import check_runs

    path = gguf_file(name) or converted(folder, name)
    try:
        rule = check_runs(path, name, torch.get_num_threads())
        return LlamaModel(path, name, AutoConfig.from_pretrained(folder), rule)
    except ModelLoadError:
        _forget(folder)
        raise


def _forget(folder: Path) -> None:
    """After llama.cpp refused a file: the config-and-tokenizer folder specli wrote of it goes too, so a
    refused file leaves nothing in the cache (a dequantized folder, which transformers could read, stays)."""
    import shutil

    from specli.models.gguf_cache import cache_root

    if folder.parent == cache_root() and folder.name.endswith("-meta"):
        shutil.rmtree(folder, ignore_errors=True)


CONVERTIBLE = ("llama", "qwen2", "qwen3", "gemma3_text")


def converted(folder: Path, name: str) -> Path:
    """The GGUF of the transformers model folder `folder` in specli's cache (written on first use, F32 as
    stored in the folder, atomically), keyed by the folder's weights and config."""
    from specli.models.loading import read_config

    config = read_config(folder) or {}
    model_type = config.get("model_type")
    if model_type not in CONVERTIBLE:
        raise UsageError(
            f"'{name}' ({model_type or 'unknown architecture'}) cannot be converted for the llama.cpp engine "
            f"(specli writes {', '.join(CONVERTIBLE)}).",
            "Pass its GGUF file as --draft, or use --engine torch.",
        )
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".json"))
    key = hashlib.sha256(
        json.dumps([(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]).encode()
    ).hexdigest()[:16]
    root = sources.specli_cache_dir() / "llama-gguf"
    path = root / f"{folder.name}-{key}.gguf"
    if path.is_file():
        return path
    import torch
    from transformers import AutoModelForCausalLM

    from specli.models.gguf_cache import load_tokenizer
    from specli.models.gguf_write import write_gguf
    from specli.models.loading import load_tokenizer as load_folder_tokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = (
        load_tokenizer(folder) if (folder / "source.json").is_file() else load_folder_tokenizer(folder)
    )
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_gguf(tmp, model, tokenizer, name=folder.name)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
