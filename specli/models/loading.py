"""Where models come from and how they are put on a device.

`resolve_source` turns every form of model name (`sources.classify`: a local folder, a hub id,
embedded:NAME, a .gguf file or a folder holding one, org/name:FILE.gguf, ollama:NAME[:TAG]) into the
one thing the rest of loading reads: a transformers model folder. A GGUF becomes the folder it is
dequantized into, once (`gguf_cache`). Hub ids go through `huggingface_hub.snapshot_download` (a hub
GGUF through `hf_hub_download`), which honours HF_TOKEN, HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE.
Only safetensors weights are fetched and loaded unless the user passes `--allow-pickle`, and remote code
runs only with `--trust-remote-code`.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import huggingface_hub
import torch
from huggingface_hub import constants
from huggingface_hub.errors import (
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

from specli.errors import ModelLoadError, ModelNotFoundError, SpecliError, UsageError
from specli.models import gguf_cache, sources
from specli.models.model_dirs import EMBEDDED_PREFIX as EMBEDDED_PREFIX  # model_dirs: torch-free, re-exported
from specli.models.model_dirs import config_max_positions
from specli.models.model_dirs import embedded_dir as embedded_dir
from specli.models.model_dirs import embedded_model as embedded_model
from specli.models.model_dirs import embedded_names as embedded_names
from specli.models.model_dirs import read_config as read_config
from specli.models.paths import hub_cache_dir as hub_cache_dir  # torch-free, re-exported

DEVICE_FORMS = "auto, cpu, cuda, cuda:N"
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
QUANT_MODES = ("none", "8bit", "4bit")

# What a causal LM needs from a hub repo: configs, tokenizer, chat templates, safetensors weights.
HUB_PATTERNS = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "*.tiktoken",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*",
    "*.safetensors",
    "*.safetensors.index.json",
]
PICKLE_PATTERNS = ["pytorch_model*.bin", "*.bin.index.json"]
CODE_PATTERNS = ["*.py"]
# Copies of the weights that transformers never reads (Meta/Mistral native checkpoints).
HUB_IGNORE = ["original/*", "consolidated*"]

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


# --------------------------------------------------------------------------- device and dtype


def resolve_device(spec: str) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a usable torch.device."""
    s = spec.strip().lower()
    if s == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if s == "cpu":
        return torch.device("cpu")
    m = re.fullmatch(r"cuda(?::(\d+))?", s)
    if m is None:
        raise UsageError(f"unknown device '{spec}'", f"use one of: {DEVICE_FORMS}")
    if not torch.cuda.is_available():
        raise SpecliError(
            f"device '{spec}' requested but CUDA is not available here",
            "only 'cpu' is available: pass --device cpu (or auto)",
        )
    if m.group(1) is None:
        return torch.device("cuda")
    index, count = int(m.group(1)), torch.cuda.device_count()
    if index >= count:
        raise SpecliError(
            f"device '{spec}' does not exist: this machine has {count} CUDA device(s)",
            f"use cuda:0 .. cuda:{count - 1}",
        )
    return torch.device("cuda", index)


def _config_dtype(config: Any) -> torch.dtype | None:
    """The dtype a config declares (`dtype`, or the older `torch_dtype`), if any."""
    if config is None:
        return None
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(value, str):
        value = getattr(torch, value.removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


def resolve_dtype(spec: str, device: torch.device, config: Any = None) -> torch.dtype:
    """'auto' | float32 | float16 | bfloat16 (and short forms) -> torch.dtype.

    auto: float32 on CPU; on CUDA the config's own half dtype, else bfloat16 (float16 if bf16 unsupported).
    """
    s = spec.strip().lower()
    if s in DTYPES:
        return DTYPES[s]
    if s != "auto":
        raise UsageError(f"unknown dtype '{spec}'", "use one of: auto, float32, float16, bfloat16")
    if device.type != "cuda":
        return torch.float32
    bf16_ok = torch.cuda.is_bf16_supported()
    own = _config_dtype(config)
    if own == torch.float16 or (own == torch.bfloat16 and bf16_ok):
        return own
    return torch.bfloat16 if bf16_ok else torch.float16


# --------------------------------------------------------------------------- model source


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """Whether hub access is switched off, read now (so a variable set after import still counts)."""
    return constants.is_offline_mode() or _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def _offline_variable() -> str:
    """The variable that switched the hub off, for messages: HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE alone."""
    if _env_true("TRANSFORMERS_OFFLINE") and not (_env_true("HF_HUB_OFFLINE") or constants.is_offline_mode()):
        return "TRANSFORMERS_OFFLINE"
    return "HF_HUB_OFFLINE"


def _shown_cache_dir() -> str:
    return hub_cache_dir() or constants.HF_HUB_CACHE


def _has_token() -> bool:
    """Whether a Hugging Face token is configured (HF_TOKEN or `hf auth login`); never shown."""
    try:
        return bool(huggingface_hub.get_token())
    except Exception:  # an unreadable token file: as good as none
        return False


def _network_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the Hub could not be reached", across the HTTP libraries huggingface_hub used."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]  # OfflineModeIsEnabled is one too
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",))):
        try:
            lib = __import__(module)
        except ImportError:
            continue
        found += [getattr(lib, name) for name in names if isinstance(getattr(lib, name, None), type)]
    try:
        import requests

        found += [requests.ConnectionError, requests.Timeout]
    except ImportError:
        pass
    return tuple(found)


def _status(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None) if response is not None else None


LOCAL_FOLDER = "or pass a local folder"


def _hub_error(model: str, err: Exception, offline: bool, repo: str | None = None) -> ModelLoadError:
    """Translate a huggingface_hub failure into what happened and one thing to do about it (`repo`: the
    repo of a hub file named `model`).

    Every hint ends with the other way out: a local folder. Hints never contradict the message: a model
    that is not in the cache is never told to use the cache.
    """
    url = f"https://huggingface.co/{repo or model}"
    if isinstance(err, GatedRepoError):
        if _has_token():
            return ModelLoadError(
                f"'{model}' is a gated repo and your Hugging Face token has no access to it",
                f"request access at {url} (with the account of HF_TOKEN), {LOCAL_FOLDER}",
            )
        return ModelLoadError(
            f"'{model}' is a gated repo: it needs a Hugging Face token with access",
            f"request access at {url}, then set HF_TOKEN (or run `hf auth login`); {LOCAL_FOLDER}",
        )
    if isinstance(err, RepositoryNotFoundError):
        return ModelLoadError(
            f"'{model}' was not found on the Hugging Face Hub (and is not a local folder)",
            f"check the spelling (a private repo also needs HF_TOKEN), {LOCAL_FOLDER}",
        )
    if isinstance(err, RevisionNotFoundError):
        return ModelLoadError(
            f"'{model}': the requested revision does not exist", f"see the revisions at {url}, {LOCAL_FOLDER}"
        )
    if isinstance(err, DisabledRepoError):
        return ModelLoadError(
            f"'{model}' has been disabled on the Hugging Face Hub", f"pick another model, {LOCAL_FOLDER}"
        )
    cause = err.__cause__ if isinstance(err, LocalEntryNotFoundError) and err.__cause__ else err
    if offline or isinstance(cause, OfflineModeIsEnabled):
        variable = _offline_variable()
        if isinstance(err, IncompleteSnapshotError):
            return ModelLoadError(
                f"the cached copy of '{model}' is incomplete ({variable} is set)",
                f"unset {variable} so the download can finish, {LOCAL_FOLDER}",
            )
        return ModelLoadError(
            f"'{model}' is not in the local hub cache ({variable} is set)",
            f"unset {variable} to download it into {_shown_cache_dir()}, {LOCAL_FOLDER}",
        )
    status = _status(cause) if isinstance(cause, HfHubHTTPError) else None
    if isinstance(err, IncompleteSnapshotError):
        reason = f"HTTP {status}" if status else type(cause).__name__
        return ModelLoadError(
            f"the cached copy of '{model}' is incomplete and the Hugging Face Hub could not be reached "
            f"({reason})",
            f"check your connection and run again to finish the download, {LOCAL_FOLDER}",
        )
    # LocalEntryNotFoundError: huggingface_hub looked in the cache after the Hub failed, and found nothing.
    uncached = " and it is not in the local cache" if isinstance(err, LocalEntryNotFoundError) else ""
    if status == 401:
        return ModelLoadError(
            f"the Hugging Face Hub refused access to '{model}' (401: bad or missing token)",
            f"set HF_TOKEN to a valid token (or run `hf auth login`), {LOCAL_FOLDER}",
        )
    if status == 429:
        return ModelLoadError(
            f"the Hugging Face Hub is rate-limiting requests (429) for '{model}'{uncached}",
            f"wait a minute and run again (a HF_TOKEN raises the limit), {LOCAL_FOLDER}",
        )
    if status is not None:
        return ModelLoadError(
            f"the Hugging Face Hub answered HTTP {status} for '{model}'{uncached}",
            f"try again later, {LOCAL_FOLDER}",
        )
    if isinstance(cause, _network_errors()):
        return ModelLoadError(
            f"could not reach the Hugging Face Hub to fetch '{model}' ({type(cause).__name__}){uncached}",
            f"check your connection (or proxy) and run again, {LOCAL_FOLDER}",
        )
    if isinstance(cause, OSError) and not isinstance(cause, (LocalEntryNotFoundError, HfHubHTTPError)):
        detail = cause.strerror or _first_line(cause)
        return ModelLoadError(
            f"could not store '{model}' in the hub cache {_shown_cache_dir()}: {detail}",
            f"free some space or set HF_HUB_CACHE to a writable folder, {LOCAL_FOLDER}",
        )
    return ModelLoadError(
        f"could not fetch '{model}' from the Hugging Face Hub: {type(cause).__name__}: {_first_line(cause)}",
        f"run again, {LOCAL_FOLDER}",
    )


WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", *PICKLE_PATTERNS)


def resolve_source(
    model: str,
    *,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    weights: bool = True,
    tqdm_class: Any = None,
    dtype: str = "auto",
) -> Path:
    """Any model name (`sources.classify`) -> the transformers model folder to load from.

    A local folder or embedded:NAME is itself. A hub id is fetched into (or found in) the hub cache:
    only configs, tokenizer files, chat templates and safetensors weights; `allow_pickle` adds `*.bin`
    weights and `trust_remote_code` the repo's `*.py` files. A GGUF (a file, a folder holding one,
    org/name:FILE.gguf, ollama:NAME[:TAG]) is its dequantized folder in specli's cache, converted on the
    first weights=True call into safetensors of `dtype` (auto: float32; `gguf_cache`).

    weights=False stops before the weights: a hub snapshot without them, a GGUF's config and tokenizer
    (the dequantized folder if cached; a hub GGUF is downloaded whole first, its header being inside
    it); checks run before weights are dequantized or downloaded, and a second call with
    weights=True completes the same source. tqdm_class draws the download and dequantizing bars
    (default: huggingface_hub's and transformers' own).
    """
    source = sources.classify(model)
    if source.kind == "embedded":
        return source.path  # type: ignore[return-value]
    if source.kind == "folder":
        assert source.path is not None
        check_model_folder(source.path, model)
        return source.path
    if source.kind == "hub_gguf":
        source = replace(source, path=_hub_file(source, tqdm_class))
    if source.is_gguf:
        assert source.path is not None
        return gguf_cache.folder_for(source.path, model, weights=weights, dtype=dtype, tqdm_class=tqdm_class)
    patterns = (
        HUB_PATTERNS
        + (PICKLE_PATTERNS if allow_pickle else [])
        + (CODE_PATTERNS if trust_remote_code else [])
    )
    if not weights:
        patterns = [p for p in patterns if p not in WEIGHT_PATTERNS]
    offline = hub_offline()
    bars = {"tqdm_class": tqdm_class} if tqdm_class is not None else {}
    try:
        folder = huggingface_hub.snapshot_download(  # looked up now: tests replace it
            model,
            allow_patterns=patterns,
            ignore_patterns=HUB_IGNORE,
            cache_dir=hub_cache_dir(),
            local_files_only=offline,
            **bars,
        )
    except HFValidationError as err:
        raise UsageError(
            f"'{model}' is not a valid hub id ({err})", "pass an existing folder or a hub id like 'org/name'"
        ) from err
    except Exception as err:  # HTTP, cache and connection errors; mapped to one message each
        raise _hub_error(model, err, offline) from err
    if not weights:  # the configs-first fetch: a repo without config.json stops before any weights move
        check_model_folder(Path(folder), model, hub=True)
    return Path(folder)


def _hub_file(source: sources.Source, tqdm_class: Any = None) -> Path:
    """A hub repo's GGUF file (org/name:FILE.gguf), downloaded into or found in the hub cache."""
    assert source.repo is not None and source.filename is not None
    offline = hub_offline()
    bars = {"tqdm_class": tqdm_class} if tqdm_class is not None else {}
    try:
        path = huggingface_hub.hf_hub_download(  # looked up now: tests replace it
            source.repo, source.filename, cache_dir=hub_cache_dir(), local_files_only=offline, **bars
        )
    except HFValidationError as err:
        raise UsageError(
            f"'{source.name}' is not a valid hub file ({err})", "name it as org/name:FILE.gguf"
        ) from err
    except RemoteEntryNotFoundError as err:
        raise ModelNotFoundError(
            f"the hub repo '{source.repo}' has no file '{source.filename}'",
            f"see its files at https://huggingface.co/{source.repo}/tree/main",
        ) from err
    except Exception as err:
        raise _hub_error(source.name, err, offline, repo=source.repo) from err
    return Path(path)


# --------------------------------------------------------------------------- checks and loading


def check_model_folder(folder: Path, name: str | None = None, *, hub: bool = False) -> None:
    """Refuse a folder without config.json before anything reads it (the tokenizer loader's own message
    for such a folder is cut mid-sentence). Names model folders one level down, if any; hub: the folder is
    a hub repo's snapshot and `name` its id."""
    if (folder / "config.json").is_file():
        return
    label = name or str(folder)
    try:
        inside = sorted(p.name for p in folder.iterdir() if (p / "config.json").is_file())
    except OSError:
        inside = []
    if hub:
        hint = (
            "the repo holds no transformers model: name a GGUF file in it as org/name:FILE.gguf, or pass "
            "a model's hub id or a folder"
        )
    elif inside:
        shown = ", ".join(str(Path(label) / n) for n in inside[:3]) + (" ..." if len(inside) > 3 else "")
        hint = f"model folders inside it: {shown}"
    else:
        hint = "pass a folder with config.json and the weights, a .gguf file, or a hub id like 'org/name'"
    raise ModelNotFoundError(f"no model found in {label} (no config.json)", hint)


def check_weights(folder: Path, *, allow_pickle: bool) -> None:
    """Refuse folders without config.json or without loadable weights (pickle only with allow_pickle)."""
    check_model_folder(folder)
    files = [p.name for p in folder.iterdir() if p.is_file()]
    if any(name.endswith(".safetensors") for name in files):
        return
    pickles = [name for name in files if name.endswith(_PICKLE_SUFFIXES) and name != "training_args.bin"]
    if pickles and not allow_pickle:
        raise ModelLoadError(
            f"'{folder}' has only pickle weights ({pickles[0]}); pickle files can run code "
            "when loaded, so they are refused",
            "pass --allow-pickle if you trust this model",
        )
    if not pickles:
        raise ModelLoadError(
            f"'{folder}' has no *.safetensors weights",
            "if the model only ships pickle (*.bin) weights and you trust it, pass --allow-pickle",
        )


def load_tokenizer(folder: Path, *, trust_remote_code: bool = False, name: str | None = None):
    """AutoTokenizer from a model folder (a converted GGUF's: the file's own tokenizer,
    `gguf_cache.load_tokenizer`); failures become ModelLoadError."""
    label = name or str(folder)
    try:
        if gguf_cache.is_converted(folder):  # the file's own tokenizer, not the model type's class
            return gguf_cache.load_tokenizer(folder)
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=bool(trust_remote_code))
    except Exception as err:
        check_model_folder(Path(folder), label)  # no config.json: say that, not the tokenizer's half sentence
        raise ModelLoadError(
            f"could not load the tokenizer of '{label}': {_first_line(err)}", _loader_hint(err)
        ) from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _loader_hint(err: BaseException) -> str | None:
    text = str(err)
    if "trust_remote_code" in text:
        return "this model ships its own code; pass --trust-remote-code if you trust it"
    if "does not recognize this architecture" in text:
        return "this transformers is too old for the model: pip install --upgrade transformers"
    return None


class _DropMessage(logging.Filter):
    """Drops one noisy log record by its format string (or by the start of it, with prefix=True)."""

    def __init__(self, fmt: str, *, prefix: bool = False) -> None:
        super().__init__()
        self.fmt = fmt
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg
        if self.prefix:
            return not (isinstance(msg, str) and msg.startswith(self.fmt))
        return msg != self.fmt


def _quiet_bnb_8bit_cast() -> None:
    """bitsandbytes logs 'inputs will be cast ... to float16' on every 8-bit matmul of a non-fp16 input."""
    logger = logging.getLogger("bitsandbytes.autograd._functions")
    fmt = "MatMul8bitLt: inputs will be cast from %s to float16 during quantization"
    if not any(isinstance(f, _DropMessage) and f.fmt == fmt for f in logger.filters):
        logger.addFilter(_DropMessage(fmt))


def _quiet_bnb_cpu_kernels() -> None:
    """bitsandbytes logs "Failed to load CPU gemm_4bit_forward ... pip install kernels" when it is imported on
    a CPU with AVX512-BF16 but without the optional `kernels` package; it then falls back to its own code.
    The CLI says what matters (CPU quantization is slow) in one line, so drop exactly that record. The filter
    must be on the logger before transformers first imports bitsandbytes (inside from_pretrained); it is
    matched by the message's start so a reworded tail still counts."""
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    fmt = "Failed to load CPU gemm_4bit_forward from kernels-community"  # then ": %s. Please ... kernels"
    if not any(isinstance(f, _DropMessage) and f.fmt == fmt for f in logger.filters):
        logger.addFilter(_DropMessage(fmt, prefix=True))


def _quant_config(quant: str, dtype: torch.dtype):
    _quiet_bnb_cpu_kernels()
    if quant == "8bit":
        _quiet_bnb_8bit_cast()
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)


def load_model(
    folder: Path,
    *,
    device: torch.device,
    dtype: torch.dtype,
    quant: str = "none",
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    name: str | None = None,
    max_memory: dict[int, int] | None = None,
):
    """A causal LM from a model folder, in eval mode on `device`.

    quant: 'none' | '8bit' | '4bit' (bitsandbytes; 4-bit is nf4 computing in `dtype`). Works on CPU too.
    max_memory (several GPUs): accelerate's device_map="auto" splits the model over the GPUs it names,
    {index: bytes}; an empty map lets accelerate use every GPU.
    """
    if quant not in QUANT_MODES:
        raise UsageError(f"unknown quantization '{quant}'", f"use one of: {', '.join(QUANT_MODES)}")
    check_weights(folder, allow_pickle=allow_pickle)
    label = name or str(folder)
    # trust_remote_code must be a bool: None makes transformers prompt on stdin for repos with code.
    kwargs: dict[str, Any] = dict(
        dtype=dtype, device_map={"": device}, trust_remote_code=bool(trust_remote_code)
    )
    if max_memory is not None:
        kwargs["device_map"] = "auto"
        if max_memory:
            kwargs["max_memory"] = dict(max_memory)
    if not allow_pickle:
        kwargs["use_safetensors"] = True
    if quant != "none":
        kwargs["quantization_config"] = _quant_config(quant, dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except ImportError as err:
        raise ModelLoadError(
            f"could not load '{label}': {_first_line(err)}", "install the missing package, or drop --quant"
        ) from err
    except torch.cuda.OutOfMemoryError as err:
        raise ModelLoadError(
            f"'{label}' does not fit in {device if max_memory is None else 'GPU'} memory",
            "try --quant 4bit or 8bit, a smaller model, or --device cpu",
        ) from err
    except Exception as err:
        raise ModelLoadError(f"could not load '{label}': {_first_line(err)}", _loader_hint(err)) from err
    return model.eval()


# --------------------------------------------------------------------------- tokenizer agreement


def _tokenizer_difference(a, b) -> str | None:
    """A short description of the first way two tokenizers map tokens differently, or None if they agree."""
    va, vb = a.get_vocab(), b.get_vocab()
    if len(va) != len(vb):
        return f"{len(va)} vs {len(vb)} tokens"
    if va != vb:
        for token, idx in va.items():
            if vb.get(token) != idx:
                other = "missing" if token not in vb else f"id {vb[token]}"
                return f"token {token!r} is id {idx} vs {other}"
    added_a = {i: (t.content, t.special) for i, t in a.added_tokens_decoder.items()}
    added_b = {i: (t.content, t.special) for i, t in b.added_tokens_decoder.items()}
    if added_a != added_b:
        for i in sorted(set(added_a) | set(added_b)):
            if added_a.get(i) != added_b.get(i):
                return f"added token {i}: {added_a.get(i)} vs {added_b.get(i)}"
    return None


def same_tokenizer(a, b) -> bool:
    """True when both tokenizers map every token string to the same id and agree on added/special tokens.

    Embedding rows (`vocab_size`) may differ: models of one family often pad them differently.
    """
    return _tokenizer_difference(a, b) is None


def check_tokenizers(target_tok, draft_tok, target_name: str, draft_name: str) -> None:
    """UsageError unless the target and the drafter share one tokenizer."""
    diff = _tokenizer_difference(target_tok, draft_tok)
    if diff is None:
        return
    raise UsageError(
        f"target '{target_name}' and drafter '{draft_name}' use different tokenizers ({diff}); speculative "
        "decoding with a separate drafter needs one shared tokenizer.",
        "Use a drafter with the target's tokenizer (one from its family), or --strategy lookup or "
        "--strategy self, which need no drafter.",
    )


# --------------------------------------------------------------------------- model facts


def model_max_positions(model) -> int | None:
    """The longest context the model's config declares, or None when it declares none."""
    return config_max_positions(getattr(model, "config", model))


def _as_ids(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value if v is not None}


def eos_token_ids(model, tokenizer) -> set[int]:
    """Every id that ends generation: generation_config, config and tokenizer EOS together."""
    ids = _as_ids(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    ids |= _as_ids(getattr(getattr(model, "config", None), "eos_token_id", None))
    ids |= _as_ids(getattr(tokenizer, "eos_token_id", None))
    return ids
