"""EAGLE head folders on disk: read them (three layouts, one path), check them against a target, write them.

Layouts read (told apart by config.json):

- **speculators** (`speculators_model_type: eagle3`, or `peagle` for a P-EAGLE head: the same plus
  `mask_token_id`, a `mask_hidden` [1, 1, F] weight and trained `embed_tokens`; the drafts it was trained
  for in `speculators_config.proposal_methods[0].speculative_tokens`): the layer config under
  `transformer_layer_config`,
  `draft_vocab_size`, `eagle_aux_hidden_state_layer_ids` (may be null: the target's defaults),
  `norm_before_residual`, `target_hidden_size` (may be null: the head's own); safetensors weights named
  fc.*, layers.0.*, norm.*, lm_head.*, d2t, t2d (and often embed_tokens.*, a copy of the target's). The
  EAGLE-3 heads specli trains are written so, which vLLM loads too.
  `transformer_layer_config.num_hidden_layers` = N > 1 (real P-EAGLE heads have 4) adds plain Llama
  decoder layers layers.1.* .. layers.{N-1}.* after the fusing layer 0 (see specli/models/eagle_head.py);
  every layer's weights must be there.
- **specli eagle1** (`specli_head_type: eagle1`): the same layout for an EAGLE-1 head (fc over
  cat(embedding, feature) with bias, one layer; no norm or LM head of its own).
- **blockwise heads** (`specli_heads`: K residual blocks into the target's LM head, strategy heads): read
  by specli/models/blockwise_heads.py; `read_head_config` and `load_head` hand such a folder to it.
- **SafeAILab** (hub heads such as `yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`, SpecForge/AngelSlim heads):
  config.json is a LlamaForCausalLM config plus `draft_vocab_size` (and maybe `target_hidden_size`,
  `eagle_config.eagle_aux_hidden_state_layer_ids`); weights fc.weight [H, 3·H_target], midlayer.* (read
  as layers.0.*; layers.1.* .. when its `num_hidden_layers` says N > 1), norm.weight, lm_head.weight, d2t,
  t2d; no embeddings; often `pytorch_model.bin`. A P-EAGLE head in this layout (vLLM's parallel drafting,
  e.g. AWS's 4-layer heads) names its mask token `ptd_token_id` (or `pard_token`) and adds mask_hidden and
  its own embed_tokens.

One loading path: `read_head_config` (config.json only) -> `check_head` (against the target's config; a
head that does not fit is refused before any weights file is opened) -> `load_head` (weight names and
shapes checked from the safetensors header before a tensor is read; pickle weights only with
allow_pickle, and then through `torch.load(weights_only=True)`). `open_head` does the same for a hub id
and fetches the weights only after the config has passed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from specli.errors import ModelLoadError, UsageError
from specli.models import blockwise_heads
from specli.models.blockwise_heads import BlockwiseHeads, HeadsConfig
from specli.models.eagle_head import EagleHead, HeadConfig, default_aux_layers
from specli.models.model_dirs import read_config, user_model_name

WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
PICKLE_WEIGHTS = "pytorch_model.bin"
PICKLE_INDEX = "pytorch_model.bin.index.json"

LAYOUTS = ("speculators", "specli", "safeailab")
# Tensors some layouts carry that specli's head does not own: the target's embeddings (the head uses the
# target's own), and speculators' frozen copies of the verifier's final norm and LM head.
IGNORED_WEIGHTS = ("embed_tokens.weight", "verifier_norm.weight", "verifier_lm_head.weight")
# speculators options that change the head's computation and that EagleHead does not implement.
_UNSUPPORTED_FLAGS = ("norm_before_fc", "fc_norm", "norm_output")
# A SafeAILab-layout head made for vLLM's parallel drafting names its mask token so (AWS's P-EAGLE heads).
_PARALLEL_TOKEN_KEYS = ("ptd_token_id", "pard_token")
_LAYER_TYPES = ("llama", None)  # a decoder layer specli's EagleHead reproduces exactly
_NAMES_SHOWN = 5


# --------------------------------------------------------------------------- reading configs


def _rope_scaling(layer: Mapping[str, Any]) -> dict[str, Any] | None:
    """A scaled rotary embedding (rope_scaling, or transformers 5's rope_parameters with a type other than
    default), without its theta; None for plain RoPE."""
    params = dict(layer.get("rope_scaling") or layer.get("rope_parameters") or {})
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return None
    params.pop("rope_theta", None)
    return params


def _rope_theta(layer: Mapping[str, Any]) -> float:
    params = layer.get("rope_parameters") or layer.get("rope_scaling") or {}
    return float(layer.get("rope_theta") or params.get("rope_theta") or 10000.0)


def _target_get(target_config: Any, *keys: str) -> Any:
    """The first of `keys` a target config (a dict from config.json or a transformers config) sets;
    multimodal configs are looked into through their text_config."""
    if target_config is None:
        return None
    layers = [target_config]
    text = (
        target_config.get("text_config")
        if isinstance(target_config, Mapping)
        else getattr(target_config, "text_config", None)
    )
    if text is not None:
        layers.append(text)
    for cfg in layers:
        for key in keys:
            value = cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def target_facts(target_config: Any) -> tuple[int | None, int | None, int | None]:
    """(hidden size, number of layers, vocabulary rows) of a target config; None where it does not say."""
    return (
        _target_get(target_config, "hidden_size", "n_embd", "d_model"),
        _target_get(target_config, "num_hidden_layers", "n_layer", "num_layers"),
        _target_get(target_config, "vocab_size"),
    )


def _target_label(target_config: Any) -> str:
    name = (
        target_config.get("_name_or_path")
        if isinstance(target_config, Mapping)
        else getattr(target_config, "_name_or_path", None)
    )
    return f"'{name}'" if name else "the target"


def detect_layout(data: Mapping[str, Any]) -> str | None:
    """'speculators' | 'specli' | 'safeailab' for a head's config.json ('heads' for a folder of blockwise
    heads), or None when it is none of them."""
    if blockwise_heads.is_heads(data):
        return "heads"
    if data.get("speculators_model_type") is not None:
        return "speculators"
    if data.get("specli_head_type") is not None:
        return "specli"
    archs = " ".join(str(a) for a in data.get("architectures") or [])
    if "draft_vocab_size" in data and ("hidden_size" in data) and ("Llama" in archs or "model_type" in data):
        return "safeailab"
    return None


def refuse_head_as_model(folder: Path | str, name: str, role: str = "drafter") -> None:
    """UsageError when the model given as `role` ('drafter' or 'target') is an EAGLE head (its config.json
    is in a layout `detect_layout` knows): a head has no tokenizer and no LM of its own to run."""
    data = read_config(folder)
    if data is not None and blockwise_heads.is_heads(data):
        raise UsageError(
            f"'{name}' holds blockwise heads, not a {role} model: use --strategy heads with --draft {name}."
        )
    if data is None or detect_layout(data) is None:
        return
    if role == "target":
        raise UsageError(
            f"'{name}' is an EAGLE head, not a target model: use --strategy eagle with --draft {name}",
            "Pass the model the head was trained for as --target.",
        )
    raise UsageError(
        f"'{name}' is an EAGLE head: use --strategy eagle (with --draft {name})",
        "Strategy draft needs a drafter model with the target's tokenizer; an EAGLE head drafts from the "
        "target's hidden states.",
    )


def _int(data: Mapping[str, Any], key: str, label: str, default: Any = ...) -> int:
    value = data.get(key, default)
    if value is ... or value is None:
        if default is ...:
            raise ModelLoadError(
                f"the EAGLE head {label}: its config.json has no '{key}'",
                "the head's folder is incomplete or not an EAGLE head",
            )
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ModelLoadError(
            f"the EAGLE head {label}: '{key}' in its config.json is not a number ({value!r})"
        ) from None


def _aux_layers(ids: Any, kind: str, target_layers: int | None, label: str) -> tuple[tuple[int, ...], bool]:
    """The head's feature layers: its own list, or the defaults of the target's depth (flag: defaulted)."""
    if ids:
        try:
            return tuple(int(i) for i in ids), False
        except (TypeError, ValueError):
            raise ModelLoadError(
                f"the EAGLE head {label}: its target layer ids are not numbers ({ids!r})"
            ) from None
    if target_layers is None:
        raise ModelLoadError(
            f"the EAGLE head {label} does not name the target layers it reads, and the target's depth is "
            "unknown",
            "load it with the target's config so the default layers (2, L//2, L-3) can be used",
        )
    return (default_aux_layers(target_layers) if kind == "eagle3" else (target_layers,)), True


def _check_architecture(layer: Mapping[str, Any], data: Mapping[str, Any], label: str) -> None:
    """Refuse layer configs and options whose computation EagleHead would not reproduce."""
    model_type = layer.get("model_type")
    if model_type not in _LAYER_TYPES:
        raise ModelLoadError(
            f"the EAGLE head {label} is built on a '{model_type}' decoder layer; specli runs heads built on "
            "the Llama decoder layer only",
            "pick a head whose layer config has model_type 'llama' (most EAGLE-3 heads, for any target)",
        )
    flags = [flag for flag in _UNSUPPORTED_FLAGS if data.get(flag)]
    if flags:
        raise ModelLoadError(
            f"the EAGLE head {label} uses {', '.join(flags)}, which specli's EAGLE head does not implement",
            "pick a head trained without these options",
        )
    act = layer.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ModelLoadError(f"the EAGLE head {label} uses activation '{act}'; specli's head uses silu")


def config_from_dict(
    data: Mapping[str, Any], target_layers: int | None = None, *, name: str | None = None
) -> HeadConfig:
    """A head's config.json (any of the three layouts) -> HeadConfig. target_layers: the target's depth,
    for heads that do not name their feature layers. Problems raise ModelLoadError."""
    label = f"'{name}'" if name else "(config.json)"
    layout = detect_layout(data)
    if layout == "heads":
        raise ModelLoadError(f"{label} holds blockwise heads, not an EAGLE head: use --strategy heads")
    if layout is None:
        raise ModelLoadError(
            f"{label} is not an EAGLE head: its config.json has neither 'speculators_model_type' "
            "(speculators), 'specli_head_type' (specli) nor 'draft_vocab_size' on a Llama config (SafeAILab)",
            "pass an EAGLE-3 head (speculators or SafeAILab layout) or one trained by specli",
        )
    mask_key = None
    if layout == "safeailab":
        kind, layer = "eagle3", data
        mask_key = next((key for key in _PARALLEL_TOKEN_KEYS if data.get(key) is not None), None)
        eagle = data.get("eagle_config") or {}
        aux_ids = data.get("eagle_aux_hidden_state_layer_ids") or eagle.get(
            "eagle_aux_hidden_state_layer_ids"
        )
    else:
        kind = str(data.get("specli_head_type") or data.get("speculators_model_type"))
        if kind not in ("eagle3", "eagle1", "peagle"):
            raise ModelLoadError(
                f"the head {label} is a '{kind}' speculator; specli runs EAGLE-1, EAGLE-3 and P-EAGLE heads",
                "pick an EAGLE-3 head (speculators_model_type: eagle3)",
            )
        layer = data.get("transformer_layer_config")
        if not isinstance(layer, Mapping):
            raise ModelLoadError(f"the EAGLE head {label}: its config.json has no 'transformer_layer_config'")
        aux_ids = data.get("eagle_aux_hidden_state_layer_ids")
    _check_architecture(layer, data, label)
    hidden = _int(layer, "hidden_size", label)
    heads = _int(layer, "num_attention_heads", label)
    target_vocab = _int(layer, "vocab_size", label)
    if kind == "peagle":
        kind, mask_key = "eagle3", "mask_token_id"
    parallel = mask_key is not None
    mask_token = _int(data, mask_key, label) if mask_key is not None else None
    aux, defaulted = _aux_layers(aux_ids, kind, target_layers, label)
    extra: dict[str, Any] = {"layout": layout, "aux_defaulted": defaulted}
    tokens = _speculative_tokens(data)
    if tokens is not None:
        extra["speculative_tokens"] = tokens
    rope_scaling = _rope_scaling(layer)
    verifier = (data.get("speculators_config") or {}).get("verifier") or {}
    verifier_name = verifier.get("name_or_path") if isinstance(verifier, Mapping) else None
    verifier_name = verifier_name or (data.get("verifier") if isinstance(data.get("verifier"), str) else None)
    if verifier_name:
        extra["verifier"] = verifier_name
    try:
        return HeadConfig(
            kind=kind,
            hidden_size=hidden,
            intermediate_size=_int(layer, "intermediate_size", label),
            num_heads=heads,
            num_kv_heads=_int(layer, "num_key_value_heads", label, heads),
            head_dim=_int(layer, "head_dim", label, hidden // heads),
            target_hidden_size=_int(data, "target_hidden_size", label, hidden),
            target_vocab_size=target_vocab,
            draft_vocab_size=_int(data, "draft_vocab_size", label, target_vocab),
            aux_layers=aux,
            num_layers=_int(layer, "num_hidden_layers", label, 1),
            rms_norm_eps=float(layer.get("rms_norm_eps") or 1e-6),
            rope_theta=_rope_theta(layer),
            rope_scaling=rope_scaling,
            max_position_embeddings=_int(layer, "max_position_embeddings", label, 2048),
            norm_before_residual=bool(data.get("norm_before_residual", False)),
            fc_bias=bool(data.get("fc_bias", kind == "eagle1")),
            mask_token_id=mask_token,
            own_embeddings=parallel,
            extra=extra,
        )
    except ValueError as err:  # HeadConfig's own consistency checks
        raise ModelLoadError(f"the EAGLE head {label} has an inconsistent config: {err}") from err


def _speculative_tokens(data: Mapping[str, Any]) -> int | None:
    """The drafts per round a speculators head was made for (its first proposal method's), if named."""
    methods = (data.get("speculators_config") or {}).get("proposal_methods") or []
    value = methods[0].get("speculative_tokens") if methods and isinstance(methods[0], Mapping) else None
    return value if isinstance(value, int) and value >= 1 else None


def read_head_config(
    folder: Path | str,
    target_config: Any = None,
    *,
    target_layers: int | None = None,
    name: str | None = None,
) -> HeadConfig | HeadsConfig:
    """config.json of a head folder -> HeadConfig, detecting the layout (a folder of blockwise heads ->
    HeadsConfig, specli/models/blockwise_heads.py). The target's config (a dict or a transformers config)
    supplies the depth for heads that do not name their feature layers."""
    folder = Path(folder)
    label = name or str(folder)
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(
            f"the EAGLE head '{label}' has no config.json",
            "pass the folder that holds config.json and the weights",
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"could not read the config.json of the EAGLE head '{label}': {err}") from err
    if not isinstance(data, dict):
        raise ModelLoadError(f"the config.json of the EAGLE head '{label}' is not a JSON object")
    if blockwise_heads.is_heads(data):
        return blockwise_heads.config_from_dict(data, label)
    if target_layers is None:
        target_layers = target_facts(target_config)[1]
    return config_from_dict(data, target_layers, name=label)


# --------------------------------------------------------------------------- fitting the target


def check_head(
    config: HeadConfig | HeadsConfig, target_config: Any, name: str, target_name: str | None = None
) -> None:
    """ModelLoadError unless the head fits the target: hidden size, vocabulary and feature layers
    (blockwise heads: UsageError unless their hidden size is the target's).

    Runs on configs only, so a head that does not fit is refused before any weights move.
    """
    target = f"'{target_name}'" if target_name else _target_label(target_config)
    hidden, layers, vocab = target_facts(target_config)
    if isinstance(config, HeadsConfig):
        blockwise_heads.check_fits(config, hidden, name, target)
        return
    trained_for = config.extra.get("verifier")
    trained_for = user_model_name(trained_for) if trained_for else None
    hint = (
        f"this head was trained for '{trained_for}'; use it with that target, "
        f"or pick a head trained for {target}"
        if trained_for
        else f"pick an EAGLE head trained for {target}"
    )
    if hidden is not None:
        if config.target_hidden_size != hidden:
            raise ModelLoadError(
                f"the EAGLE head '{name}' expects target hidden size {config.target_hidden_size} "
                f"but {target} has {hidden}.",
                hint,
            )
        if config.kind == "eagle1" and config.hidden_size != hidden:
            raise ModelLoadError(
                f"the EAGLE-1 head '{name}' has hidden size {config.hidden_size} but {target} has {hidden}; "
                "an EAGLE-1 head drafts through the target's LM head, so they must be equal.",
                hint,
            )
    if vocab is not None and config.target_vocab_size != vocab:
        raise ModelLoadError(
            f"the EAGLE head '{name}' expects a target vocabulary of {config.target_vocab_size} tokens "
            f"but {target} has {vocab}.",
            hint,
        )
    if config.draft_vocab_size > config.target_vocab_size:
        raise ModelLoadError(
            f"the EAGLE head '{name}' drafts over {config.draft_vocab_size} tokens, more than its target "
            f"vocabulary of {config.target_vocab_size}.",
            "the head's config.json is inconsistent",
        )
    if layers is not None:
        bad = [i for i in config.aux_layers if not 0 <= i <= layers]
        if bad:
            raise ModelLoadError(
                f"the EAGLE head '{name}' reads target layers {list(config.aux_layers)} but {target} has "
                f"{layers} layers (valid: 0..{layers}).",
                hint,
            )


# --------------------------------------------------------------------------- weights


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def _rename(key: str) -> str:
    """A weight name in any layout -> specli's (speculators') name."""
    if key.startswith("midlayer."):
        return "layers.0." + key[len("midlayer.") :]
    return key


def _index_files(folder: Path, index: str, label: str) -> list[Path]:
    try:
        weight_map = json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelLoadError(f"could not read {index} of the EAGLE head '{label}': {err}") from err
    return [folder / f for f in sorted(set(weight_map.values()))]


def head_weight_files(
    folder: Path | str, *, allow_pickle: bool = False, name: str | None = None
) -> list[Path]:
    """The weights files to read: safetensors (model.safetensors, a sharded index, or the one
    *.safetensors file); pickle (pytorch_model.bin or its index) only with allow_pickle."""
    folder = Path(folder)
    label = name or str(folder)
    if (folder / WEIGHTS).is_file():
        return [folder / WEIGHTS]
    if (folder / SAFE_INDEX).is_file():
        return _index_files(folder, SAFE_INDEX, label)
    safes = sorted(folder.glob("*.safetensors"))
    if len(safes) == 1:
        return safes
    pickles = [p for p in (folder / PICKLE_WEIGHTS, folder / PICKLE_INDEX) if p.is_file()]
    if pickles:
        if not allow_pickle:
            raise ModelLoadError(
                f"the EAGLE head '{label}' ships pickle weights ({pickles[0].name}); pickle files can run "
                "code when loaded, so they are refused",
                "pass --allow-pickle if you trust this source (specli then loads it with "
                "torch.load(weights_only=True))",
            )
        if pickles[0].name == PICKLE_INDEX:
            return _index_files(folder, PICKLE_INDEX, label)
        return pickles
    raise ModelLoadError(
        f"the EAGLE head '{label}' has no weights (no model.safetensors)",
        "if the head only ships pickle (pytorch_model.bin) weights and you trust it, pass --allow-pickle",
    )


def _expected_shapes(config: HeadConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        head = EagleHead(config)
    return {k: tuple(v.shape) for k, v in head.state_dict().items()}


def _match(found: dict[str, tuple[int, ...]], config: HeadConfig, label: str) -> dict[str, str]:
    """Check names and shapes of the file's tensors against the config -> {file name: specli name}."""
    expected = _expected_shapes(config)
    names: dict[str, str] = {}
    for key in found:
        new = _rename(key)
        if new in IGNORED_WEIGHTS and new not in expected:  # a P-EAGLE head's embeddings are its own
            continue
        names[key] = new
    renamed = {new: found[key] for key, new in names.items()}
    unexpected = sorted(k for k in renamed if k not in expected)
    # A head over the full vocabulary may omit its (trivial) vocabulary maps.
    optional = {"d2t", "t2d"} if not config.reduced_vocab else set()
    missing = sorted(k for k in expected if k not in renamed and k not in optional)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {_names(missing)}")
        if unexpected:
            parts.append(f"unexpected {_names(unexpected)}")
        raise ModelLoadError(
            f"the weights of the EAGLE head '{label}' do not match its config ({'; '.join(parts)})",
            "the folder mixes files of different heads, or its layout is not one specli reads",
        )
    for new, shape in renamed.items():
        if new == "mask_hidden" and tuple(shape) in (expected[new][1:], expected[new][2:]):
            continue  # [1, F] or [F] (vLLM's parallel drafting reads any): read as [1, 1, F]
        if tuple(shape) != expected[new]:
            raise ModelLoadError(
                f"the EAGLE head '{label}': weight {new} has shape {list(shape)} but its config.json implies "
                f"{list(expected[new])}",
                "the config.json and the weights belong to different heads",
            )
    return names


def _read_safetensors(files: list[Path], config: HeadConfig, label: str) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    where: dict[str, Path] = {}
    try:
        for path in files:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                    shapes[key] = tuple(f.get_slice(key).get_shape())
                    where[key] = path
    except FileNotFoundError as err:
        raise ModelLoadError(f"the EAGLE head '{label}' is missing a weights file: {err.filename}") from err
    except Exception as err:  # a truncated or corrupt header
        raise ModelLoadError(f"could not read the weights of the EAGLE head '{label}': {err}") from err
    names = _match(shapes, config, label)
    state: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for key, new in names.items():
                if where[key] == path:
                    state[new] = f.get_tensor(key)
    return state


def _read_pickle(files: list[Path], config: HeadConfig, label: str) -> dict[str, torch.Tensor]:
    raw: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            part = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as err:
            raise ModelLoadError(f"could not read the weights of the EAGLE head '{label}': {err}") from err
        if isinstance(part, dict) and "state_dict" in part and isinstance(part["state_dict"], dict):
            part = part["state_dict"]
        if not isinstance(part, dict):
            raise ModelLoadError(f"{path.name} of the EAGLE head '{label}' does not hold a state dict")
        raw.update({k: v for k, v in part.items() if isinstance(v, torch.Tensor)})
    names = _match({k: tuple(v.shape) for k, v in raw.items()}, config, label)
    return {new: raw[key] for key, new in names.items()}


def _check_vocab_map(state: dict[str, torch.Tensor], config: HeadConfig, label: str) -> None:
    d2t = state.get("d2t")
    if d2t is None or not config.reduced_vocab:
        return
    targets = torch.arange(d2t.shape[0]) + d2t.long()
    low, high = int(targets.min()), int(targets.max())
    if low < 0 or high >= config.target_vocab_size:
        raise ModelLoadError(
            f"the EAGLE head '{label}' maps draft tokens to target ids {low}..{high}, outside the target "
            f"vocabulary of {config.target_vocab_size} tokens",
            "its d2t map is corrupt or belongs to another target",
        )


def load_head(
    folder: Path | str,
    target_config: Any = None,
    *,
    allow_pickle: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    name: str | None = None,
    target_layers: int | None = None,
) -> EagleHead | BlockwiseHeads:
    """A head folder (any layout) -> EagleHead in eval mode, float weights in dtype, on device (a folder
    of blockwise heads -> BlockwiseHeads).

    With target_config (a dict or a transformers config) the head is checked against the target before
    any weights file is opened. target_layers: the target's depth when no target_config is given (for
    heads that do not name their feature layers).
    """
    folder = Path(folder)
    label = name or str(folder)
    config = read_head_config(folder, target_config, target_layers=target_layers, name=label)
    if target_config is not None:
        check_head(config, target_config, label)
    if isinstance(config, HeadsConfig):
        return blockwise_heads.load_heads(folder, config, dtype=dtype, device=device, name=label)
    files = head_weight_files(folder, allow_pickle=allow_pickle, name=label)
    if files[0].suffix == ".safetensors":
        state = _read_safetensors(files, config, label)
    else:
        state = _read_pickle(files, config, label)
    _check_vocab_map(state, config, label)
    head = EagleHead(config)
    state = {k: (v.to(torch.bool) if k == "t2d" else v.long() if k == "d2t" else v) for k, v in state.items()}
    if "mask_hidden" in state:
        state["mask_hidden"] = state["mask_hidden"].reshape(1, 1, -1)
    head.load_state_dict(state, strict=False)  # names were checked above; d2t/t2d may keep their defaults
    return head.to(device=device, dtype=dtype).eval()


def open_head(
    source: str,
    target_config: Any,
    *,
    allow_pickle: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    target_name: str | None = None,
    tqdm_class: Any = None,
) -> EagleHead:
    """A head by folder, hub id or embedded:NAME -> EagleHead checked against the target.

    Hub heads: config.json comes first (weights=False) and is checked; the weights are fetched only when
    the head fits.
    """
    from specli.models.loading import resolve_source

    folder = resolve_source(source, allow_pickle=allow_pickle, weights=False, tqdm_class=tqdm_class)
    config = read_head_config(folder, target_config, name=source)
    check_head(config, target_config, source, target_name)
    folder = resolve_source(source, allow_pickle=allow_pickle, weights=True, tqdm_class=tqdm_class)
    return load_head(
        folder, target_config, allow_pickle=allow_pickle, dtype=dtype, device=device, name=source
    )


def head_parameter_bytes(config: HeadConfig | HeadsConfig, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes the head's weights take in dtype (d2t/t2d at their own sizes): for the memory planner."""
    if isinstance(config, HeadsConfig):
        return blockwise_heads.parameter_bytes(config, dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    total = 0
    for key, shape in _expected_shapes(config).items():
        count = 1
        for n in shape:
            count *= n
        total += count * (8 if key == "d2t" else 1 if key == "t2d" else size)
    return total


# --------------------------------------------------------------------------- writing (speculators layout)


def config_to_dict(config: HeadConfig, verifier: str = "", speculative_tokens: int = 4) -> dict[str, Any]:
    """HeadConfig -> config.json (speculators layout; eagle1 under specli's own type name)."""
    layer = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.num_layers,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        **({"rope_scaling": config.rope_scaling} if config.rope_scaling else {}),
        "max_position_embeddings": config.max_position_embeddings,
        "vocab_size": config.target_vocab_size,
        "tie_word_embeddings": False,
    }
    data: dict[str, Any] = {
        "transformer_layer_config": layer,
        "draft_vocab_size": config.draft_vocab_size,
        "target_hidden_size": config.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(config.aux_layers),
        "norm_before_residual": config.norm_before_residual,
        "fc_bias": config.fc_bias,
    }
    if config.kind == "eagle3":
        kind = config.label  # eagle3 | peagle
        if config.parallel:
            data["mask_token_id"] = config.mask_token_id
        data = {
            "architectures": ["PEagleSpeculator" if config.parallel else "Eagle3Speculator"],
            "speculators_model_type": kind,
            **data,
            "speculators_config": {
                "algorithm": kind,
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
                "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
            },
        }
    else:
        data = {"specli_head_type": "eagle1", **data, "verifier": verifier}
    return data


STORED_DTYPE = torch.bfloat16  # how specli writes a head's weights (load_head casts to the run's dtype)


def save_head(head: EagleHead, folder: Path, verifier: str = "", speculative_tokens: int = 4) -> None:
    """config.json (naming the weights' dtype) + model.safetensors (bfloat16 weights; d2t/t2d as they
    are)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        name: (t.to(STORED_DTYPE) if t.is_floating_point() else t).contiguous()
        for name, t in head.state_dict().items()
    }
    save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})
    data = {**config_to_dict(head.config, verifier, speculative_tokens), "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(data, indent=2) + "\n")
