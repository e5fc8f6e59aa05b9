"""Whether a preset can run on this machine now, and what it needs otherwise: `specli presets list`.

A preset runs here when every model it loads is here (an embedded model; a registry package that is
installed; a local folder or file that exists; a hub model whose config and weights are in the hub
cache) and its memory estimate fits the memory free on the device `--device auto` would pick (the
GPUs, as `nvidia-smi` counts them, when there are any; else the system's available memory). A hub
model that is not cached is a download, not a failure: it is listed as what the preset needs.

Torch-free (`presets list` never imports torch).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from specli.errors import SpecliError
from specli.models import memory, packaged, sources
from specli.strategies import Strategy

NVIDIA_SMI_TIMEOUT = 5.0


@dataclass(frozen=True)
class Memory:
    """Free memory where a preset would load: `device` "gpu" (all GPUs together) or "cpu"."""

    device: str
    free_bytes: int | None

    def label(self) -> str:
        where = "the GPUs have" if self.device == "gpu" else "this machine has"
        return f"{where} {memory.human(self.free_bytes)} free"


@dataclass(frozen=True)
class Need:
    """One thing a preset lacks here: kind "download" (a hub model not cached), "install" (a registry
    package: `text` is the pip command), "missing" (a local model that is not there) or "memory"."""

    kind: str
    text: str


@dataclass(frozen=True)
class Readiness:
    """`runs`: every model is here and the estimate fits (an unknown estimate does not block); `needs`:
    what is missing; `fits`: None when the estimate or the free memory is unknown."""

    runs: bool
    needs: tuple[Need, ...]
    memory: Memory
    fits: bool | None

    def label(self) -> str:
        """A table cell: "yes", or the missing things in a few words ("download 2 models; 47.8 GB, this
        machine has 23.5 GB free"); a pip command in full."""
        if self.runs:
            return "yes"
        downloads = sum(need.kind == "download" for need in self.needs)
        parts = [f"download {downloads} model{'s' if downloads > 1 else ''}"] if downloads else []
        parts += [need.text for need in self.needs if need.kind != "download"]
        return "; ".join(parts)


def free_memory() -> Memory:
    """The GPUs' free memory summed (nvidia-smi, when it lists any), else the system's available memory."""
    gpus = _nvidia_smi_free()
    if gpus:
        return Memory("gpu", sum(gpus))
    return Memory("cpu", memory.free_bytes(SimpleNamespace(type="cpu")))


def _nvidia_smi_free() -> list[int]:
    """Free bytes of each GPU nvidia-smi reports; [] without nvidia-smi or when it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT,
            check=True,
        ).stdout
        return [int(line.strip()) * 1024 * 1024 for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def model_need(name: str) -> Need | None:
    """What model `name` lacks to load here without a download, or None when it is here."""
    if name.startswith(packaged.PACKAGE_PREFIX):  # before classify, which would assemble a chunked file
        try:
            command = packaged.install_command(packaged.packaged_model(name))
        except SpecliError as err:
            return Need("missing", err.message)
        return Need("install", command) if command is not None else None
    try:
        source = sources.classify(name)
    except SpecliError as err:
        return Need("missing", err.message)
    if source.kind == "hub" and not _hub_cached(source.name):
        return Need("download", f"download {source.name}")
    if source.kind == "hub_gguf" and sources.local_gguf(source) is None:
        return Need("download", f"download {source.name}")
    return None


def _hub_cached(repo: str) -> bool:
    """Whether the hub cache holds `repo`'s config.json and weights (every shard its index names)."""
    config = sources.cached_hub_file(repo, "config.json")
    if config is None:
        return False
    folder = config.parent
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return all((folder / shard).is_file() for shard in shards)
    return any(folder.glob("*.safetensors"))


def preset_models(preset: Any) -> list[str]:
    """The models a preset loads for its own strategy: the target, a drafter, an EAGLE head or blockwise
    heads."""
    names = [preset.target.model]
    head = {"eagle": preset.eagle_head, "heads": preset.blockwise_heads}.get(preset.strategy)
    if head is not None:
        names.append(head.model)
    elif preset.draft is not None and preset.strategy == "draft":
        names.append(preset.draft.model)
    return list(dict.fromkeys(names))


def absent_drafters(preset: Any) -> list[tuple[str, Need]]:
    """The preset's draft model and EAGLE head that are not on this machine, whatever its own strategy,
    each with the strategy that drafts with it: `presets show` says what --strategy draft or eagle
    would stop at (a `trained:NAME` not trained yet names its `specli train` command)."""
    draft = preset.draft if not preset.drafts_with_head else None  # else it is the head
    found = []
    heads = (Strategy.EAGLE, preset.eagle_head), (Strategy.HEADS, preset.blockwise_heads)
    for strategy, spec in ((Strategy.DRAFT, draft), *heads):
        need = model_need(spec.model) if spec is not None else None
        if need is not None:
            found.append((strategy.value, need))
    return found


def readiness(preset: Any, estimate: int | None, free: Memory) -> Readiness:
    """Whether `preset` (needing `estimate` bytes, None when unknown) runs here with `free` memory."""
    needs = [need for name in preset_models(preset) if (need := model_need(name)) is not None]
    fits = None if estimate is None or free.free_bytes is None else estimate <= free.free_bytes
    if fits is False:
        needs.append(
            Need("memory", f"{memory.human(estimate)} of memory ({memory.human(free.free_bytes)} free)")
        )
    return Readiness(not needs, tuple(needs), free, fits)
