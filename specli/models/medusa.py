"""specli's blockwise heads as a vLLM Medusa folder (`specli export vllm --strategy heads` names this as a
step to run before `vllm serve`):

    python -m specli.models.medusa HEADS --target TARGET --out FOLDER

vLLM's method `medusa` (vllm/model_executor/models/medusa.py, vllm/transformers_utils/configs/medusa.py)
reads config.json with model_type "medusa", hidden_size, vocab_size, num_heads, num_hidden_layers (the
residual layers of a head), medusa_fc_bias and original_lm_head, and weights `blocks.{i}.layers.{j}.weight`
/ `.bias` and, with original_lm_head, ONE LM head `lm_heads.0.weight` that every head shares. Its head is
x + SiLU(W x + b) into that LM head: exactly a specli head (`ResBlock`) over the target's own LM head,
which is why the target's LM head is copied in (its tied input embedding when the target ties them).

The LM head is read from the target's safetensors alone (the shard that holds it, from a local folder,
embedded:NAME or a hub id through huggingface_hub's cache), never the whole model. A GGUF target has no
such tensor to copy: refused in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from specli.errors import ModelLoadError, SpecliError, UsageError
from specli.models import sources
from specli.models.blockwise_heads import WEIGHTS, check_fits, load_heads, read_config

LM_HEAD = "lm_head.weight"
EMBEDDINGS = ("model.embed_tokens.weight", "embed_tokens.weight", "transformer.wte.weight")
INDEX = "model.safetensors.index.json"


def medusa_config(num_heads: int, hidden_size: int, vocab_size: int) -> dict:
    """vLLM's MedusaConfig for K specli heads: one residual layer each, with bias, the LM head shared."""
    return {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "hidden_size": hidden_size,
        "vocab_size": vocab_size,
        "truncated_vocab_size": vocab_size,
        "num_heads": num_heads,
        "num_hidden_layers": 1,
        "medusa_fc_bias": True,
        "original_lm_head": True,
    }


def write_medusa(heads_folder: Path | str, target: str, out: Path | str) -> Path:
    """HEADS (a specli heads folder) + the target's LM head -> `out`, vLLM's Medusa folder; returns it.
    UsageError when the heads do not fit the target or the target has no safetensors LM head."""
    config = read_config(heads_folder)
    if config.sequential or config.intermediate:
        why = "are sequential (each reads the token before its own)" if config.sequential else "are MLPs"
        raise UsageError(
            f"the heads '{heads_folder}' {why} and vLLM's Medusa heads are one residual Linear each on "
            "the hidden state: train heads without --sequential and --intermediate to serve them."
        )
    folder, target_config = _target_files(target)
    check_fits(config, target_config.get("hidden_size"), str(heads_folder), target)
    lm_head = _lm_head(folder, target, bool(target_config.get("tie_word_embeddings", False)))  # [V, H]
    if lm_head.shape[1] != config.hidden_size:
        raise UsageError(f"the LM head of {target} is {tuple(lm_head.shape)}, not [V, {config.hidden_size}]")
    heads = load_heads(heads_folder, config, dtype=lm_head.dtype)
    state = {"lm_heads.0.weight": lm_head.contiguous()}
    for i, block in enumerate(heads.heads):
        state[f"blocks.{i}.layers.0.weight"] = block.linear.weight.detach().contiguous()
        state[f"blocks.{i}.layers.0.bias"] = block.linear.bias.detach().contiguous()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
    data = medusa_config(config.num_heads, config.hidden_size, int(lm_head.shape[0]))
    data["torch_dtype"] = str(lm_head.dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out


def _target_files(target: str) -> tuple[Path, dict]:
    """The folder holding the target's config.json and safetensors (a hub id: its cached snapshot, the
    config fetched when missing) and that config."""
    source = sources.classify(target)
    if source.is_gguf:
        raise UsageError(
            f"{target} is a GGUF file, whose LM head is quantized for llama.cpp: vLLM's Medusa heads need "
            "the target's safetensors (a folder or hub id)"
        )
    if source.kind in ("embedded", "folder"):
        assert source.path is not None
        folder = source.path
    else:
        from huggingface_hub import hf_hub_download

        folder = Path(hf_hub_download(source.name, "config.json", cache_dir=sources.hub_cache_dir())).parent
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"could not read the config.json of {target}: {err}") from err
    return folder, config.get("text_config", config) if isinstance(config, dict) else {}


def _lm_head(folder: Path, target: str, tied: bool) -> torch.Tensor:
    """The target's LM head [V, H] from the one safetensors file that holds it (the input embedding
    when the target ties them)."""
    names = (LM_HEAD, *EMBEDDINGS) if not tied else EMBEDDINGS
    shards = _shards(folder, target)
    for name in names:
        for shard in shards.get(name, []):
            with safe_open(str(_fetched(folder, shard, target)), framework="pt", device="cpu") as f:
                return f.get_tensor(name)
    raise UsageError(f"{target} has no {' or '.join(names)} in its safetensors to copy as the LM head")


def _shards(folder: Path, target: str) -> dict[str, list[str]]:
    """tensor name -> the safetensors file(s) that may hold it (the index's weight map, else the one file)."""
    index = _fetched(folder, INDEX, target, required=False)
    if index is not None:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        return {name: [file] for name, file in weight_map.items()}
    single = _fetched(folder, WEIGHTS, target)
    with safe_open(str(single), framework="pt", device="cpu") as f:
        return {name: [WEIGHTS] for name in f.keys()}  # noqa: SIM118


def _fetched(folder: Path, filename: str, target: str, required: bool = True) -> Path | None:
    """folder/filename; for a hub snapshot fetched into the hub cache when missing."""
    path = folder / filename
    if path.is_file():
        return path
    source = sources.classify(target)
    if source.kind == "hub":
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        try:
            return Path(hf_hub_download(source.name, filename, cache_dir=sources.hub_cache_dir()))
        except EntryNotFoundError:
            pass
    if required:
        raise UsageError(f"{target} has no {filename}: vLLM's Medusa heads need the target's safetensors")
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specli.models.medusa",
        description="Write specli's blockwise heads as a vLLM Medusa folder (with the target's LM head).",
        epilog="example: python -m specli.models.medusa ./heads --target HuggingFaceTB/SmolLM2-135M-Instruct "
        "--out ./heads-medusa",
    )
    parser.add_argument("heads", help="a folder written by `specli train heads`")
    parser.add_argument(
        "--target", required=True, help="the model the heads were trained on (folder or hub id)"
    )
    parser.add_argument("--out", required=True, help="the Medusa folder to write")
    args = parser.parse_args(argv)
    try:
        out = write_medusa(args.heads, args.target, args.out)
    except SpecliError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2 if isinstance(err, UsageError) else 1) from None
    print(f'wrote {out} (vLLM: --speculative-config \'{{"method": "medusa", "model": "{out}"}}\')')


if __name__ == "__main__":
    main()
