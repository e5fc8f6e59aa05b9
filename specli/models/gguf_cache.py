"""A GGUF file -> a transformers model folder, dequantized once into a cache and read from there after.

The cache is $SPECLI_CACHE_DIR/gguf (else $XDG_CACHE_HOME/specli/gguf, else ~/.cache/specli/gguf).
Each file gets folders named by its model name and content identity (`gguf_file.identity`):

- `NAME-KEY-meta/`: config.json and the tokenizer (tokenizer.json, tokenizer_config.json,
  chat_template.jinja) that transformers builds from the file's metadata, without weights: what the
  configs-first stage of loading reads (tokenizer checks, the memory planner) before any dequantizing;
- `NAME-KEY-DTYPE/`: the same plus model.safetensors in DTYPE (float32, float16 or bfloat16) and
  generation_config.json: an ordinary model folder, so --quant, --device, the planner and --compile
  treat it as any other. `auto` stores float32, the dtype transformers itself dequantizes GGUF
  weights to, so nothing is rounded before the load picks its dtype.

Every folder is written into a temporary sibling and renamed into place, so an interrupted conversion
never leaves a half folder (its leftovers are removed by the next conversion). `source.json` in each
says which file it came from. The weights come from transformers' own GGUF loader
(`from_pretrained(..., gguf_file=)`), copied into a model built from the config (a GGUF-loaded model
refuses `save_pretrained`), so the folder holds exactly what transformers reads from the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specli.errors import ModelLoadError, UsageError
from specli.models import gguf_file
from specli.models.paths import specli_cache_dir

STORED_DTYPES = {
    "auto": "float32",
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)
SOURCE_FILE = "source.json"
# transformers' GGUF names that differ from the architecture a file declares (modeling_gguf_pytorch_utils).
_RENAMED = {
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
    "minimax-m2": "minimax_m2",
}
_NOT_MODELS = ("general", "tokenizer")


def cache_root() -> Path:
    """Where dequantized GGUF folders go."""
    return specli_cache_dir() / "gguf"


def stored_dtype(dtype: str) -> str:
    """The dtype a conversion stores for a --dtype value (auto: float32)."""
    try:
        return STORED_DTYPES[dtype.strip().lower()]
    except KeyError:
        raise UsageError(f"unknown dtype '{dtype}'", "use one of: auto, float32, float16, bfloat16") from None


def supported_architectures() -> list[str]:
    """The GGUF architectures the installed transformers maps to a model (read from it, not listed here)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:  # another layout of transformers: its config mapping names the same
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING as GGUF_SUPPORTED_ARCHITECTURES
    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in _NOT_MODELS)


def check_architecture(header: gguf_file.Header, name: str) -> None:
    """UsageError when transformers does not map the file's architecture, listing those it maps."""
    arch = header.architecture
    known = supported_architectures()
    if arch in known or _RENAMED.get(arch) in known or (arch == "llama" and "mistral" in known):
        return
    raise UsageError(
        f"'{name}' is a GGUF of architecture '{arch or '?'}', which transformers cannot load "
        f"(it maps: {', '.join(known)})",
        "use a GGUF of one of those architectures, or the model's transformers folder or hub id",
    )


def folder_for(
    path: Path,
    name: str,
    *,
    weights: bool = True,
    dtype: str = "auto",
    tqdm_class: Any = None,
) -> Path:
    """The cached model folder of the GGUF file at `path` (`name`: as the user named it). weights=False:
    a folder with config and tokenizer (the dequantized one if it exists, else the meta folder, made
    now: seconds); weights=True: the folder in `dtype`, converted now if it is not cached (a progress
    bar through `tqdm_class`, default transformers' own). UsageError (exit 2) for a file that is not a
    readable single GGUF of an architecture transformers maps."""
    header = gguf_file.read_header(path, name)
    check_architecture(header, name)
    key = gguf_file.identity(header)
    base = f"{_slug(str(header.metadata.get('general.name') or path.stem))}-{key}"
    root = cache_root()
    stored = stored_dtype(dtype)
    full = root / f"{base}-{stored}"
    if _complete(full):
        return full
    if not weights:
        others = (root / f"{base}-{d}" for d in sorted(set(STORED_DTYPES.values())))
        done = next((f for f in others if _complete(f)), None)
        return done or _meta(header, name, root / f"{base}-meta", tqdm_class)
    meta = _meta(header, name, root / f"{base}-meta", tqdm_class)
    return convert(header, name, meta, full, stored, tqdm_class)


def _complete(folder: Path) -> bool:
    """A folder a finished conversion renamed into place (and nobody emptied since)."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def _meta_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:48] or "model"


def _meta(header: gguf_file.Header, name: str, folder: Path, tqdm_class: Any = None) -> Path:
    """The config and tokenizer transformers builds from the file, saved once into `folder`."""
    if _meta_complete(folder):
        return folder
    from transformers import AutoConfig, AutoTokenizer

    with (
        _written(folder, _meta_complete) as tmp,
        _steps(tqdm_class, "GGUF config and tokenizer, once", 2) as bar,
    ):
        where = {"pretrained_model_name_or_path": header.path.parent, "gguf_file": header.path.name}
        try:
            config = AutoConfig.from_pretrained(**where)
            bar.update()
            tokenizer = AutoTokenizer.from_pretrained(**where)
            bar.update()
        except Exception as err:
            raise _unreadable(name, err) from err
        config.architectures = config.architectures or _causal_lm_class(config.model_type)
        config.save_pretrained(tmp)
        _save_tokenizer(tokenizer, tmp, name)
        _write_source(tmp, header, name, None)
    return folder


PROBES = ("Hello world", "def f(x):\n    return x  # two  spaces\n\n", "ünïcödé 東京 🙂", " leading space")


def is_converted(folder: Path | str) -> bool:
    """Whether a model folder is one this module wrote (its source.json names a GGUF file)."""
    return (Path(folder) / SOURCE_FILE).is_file()


def load_tokenizer(folder: Path | str) -> Any:
    """The tokenizer of a converted folder, exactly as the file described it: its tokenizer.json read as
    it is by transformers' generic fast tokenizer. AutoTokenizer would pick the model type's own class
    from config.json, and some rebuild the pipeline their way (Qwen2Tokenizer puts its split pattern
    over the file's own pre-tokenizer)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(folder)


def _save_tokenizer(tokenizer: Any, folder: Path, name: str) -> None:
    """The tokenizer built from the file, saved (tokenizer_class: transformers' generic fast tokenizer)
    and loaded back with `load_tokenizer`, checked on a few texts, the special tokens, the vocabulary
    size and the chat template."""
    from transformers import PreTrainedTokenizerFast

    tokenizer.save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text())
    settings["tokenizer_class"] = PreTrainedTokenizerFast.__name__
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    _write_source(folder, None, name, None)  # marks the folder for load_tokenizer; rewritten after
    again = load_tokenizer(folder)
    texts = [*PROBES, *(t for t in tokenizer.all_special_tokens[:8])]
    same = all(tokenizer(t).input_ids == again(t).input_ids for t in texts)
    if not same or len(again) != len(tokenizer) or again.chat_template != tokenizer.chat_template:
        raise ModelLoadError(
            f"the tokenizer transformers builds from the GGUF '{name}' does not load back the same",
            "pip install --upgrade transformers, or use the model's transformers folder or hub id",
        )


def convert(
    header: gguf_file.Header, name: str, meta: Path, folder: Path, dtype: str, tqdm_class: Any = None
) -> Path:
    """Dequantize the file's weights with transformers' GGUF loader into `folder` (safetensors in
    `dtype`, the config and tokenizer of `meta`); returns `folder`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    with _written(folder, _complete) as tmp, _steps(tqdm_class, f"dequantizing to {dtype}, once", 2) as bar:
        config = AutoConfig.from_pretrained(meta)
        try:
            with _bars(tqdm_class, "dequantizing tensors"):
                loaded = AutoModelForCausalLM.from_pretrained(
                    header.path.parent,
                    gguf_file=header.path.name,
                    config=config,
                    dtype=torch_dtype,
                    **_dequantized(),
                )
        except (torch.OutOfMemoryError, MemoryError) as err:
            raise ModelLoadError(
                f"'{name}' does not fit in memory while it is dequantized ({dtype})",
                "pass --dtype bfloat16 (half the memory of float32), or use a smaller model",
            ) from err
        except Exception as err:
            raise _unreadable(name, err) from err
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        bar.update()
        model.load_state_dict(loaded.state_dict(), assign=True, strict=True)
        model.generation_config = loaded.generation_config
        model.save_pretrained(tmp)
        bar.update()
        del model, loaded
        for file in TOKENIZER_FILES:
            if (meta / file).is_file():
                shutil.copy2(meta / file, tmp / file)
        _write_source(tmp, header, name, dtype)
    return folder


def _causal_lm_class(model_type: str) -> list[str] | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    return [found] if isinstance(found, str) else None


def _dequantized() -> dict[str, Any]:
    """from_pretrained's keyword that keeps transformers from leaving weights packed in GGUF blocks (its
    packed path needs the `kernels` package): dequantized weights are what a folder stores."""
    try:
        from transformers.utils.quantization_config import GgufConfig

        return {"quantization_config": GgufConfig(dequantize=True)}
    except (ImportError, TypeError):  # a transformers without packed GGUF weights: it always dequantizes
        return {}


def _bar_class(tqdm_class: Any) -> Any:
    """`tqdm_class`, else transformers' own tqdm (which follows its progress-bar switch)."""
    if tqdm_class is not None:
        return tqdm_class
    from transformers.utils import logging as hf_logging

    return hf_logging.tqdm


@contextlib.contextmanager
def _steps(tqdm_class: Any, desc: str, total: int) -> Iterator[Any]:
    """A bar of `total` steps for a stage of the conversion, closed when the stage ends."""
    bar = _bar_class(tqdm_class)(total=total, desc=desc, unit="step")
    try:
        yield bar
    finally:
        bar.close()


@contextlib.contextmanager
def _bars(tqdm_class: Any, desc: str) -> Iterator[None]:
    """transformers' per-tensor dequantizing bar drawn by `tqdm_class` (specli's Rich bars), else by
    transformers' own tqdm, and named `desc`: the loader imports tqdm.auto directly, so its module
    attribute is swapped for the block and put back."""
    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:
        yield
        return
    if not hasattr(reader, "tqdm"):
        yield
        return
    bar = _bar_class(tqdm_class)
    before = reader.tqdm
    reader.tqdm = lambda *args, **kwargs: bar(*args, **{**kwargs, "desc": desc})
    try:
        yield
    finally:
        reader.tqdm = before


@contextlib.contextmanager
def _written(folder: Path, done: Callable[[Path], bool]) -> Iterator[Path]:
    """A temporary sibling of `folder` to write into, renamed to `folder` when the block succeeds and
    removed when it fails. A folder that is `done` (another process finished first) wins; one that is
    not (emptied since) is replaced."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(folder)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        yield tmp
        if not done(folder):
            shutil.rmtree(folder, ignore_errors=True)
            os.rename(tmp, folder)
    except OSError as err:
        raise ModelLoadError(
            f"could not write the dequantized model into {folder.parent}: {err.strerror or err}",
            "free some disk space, or set SPECLI_CACHE_DIR to a writable folder",
        ) from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_leftovers(folder: Path) -> None:
    """Temporary folders of conversions of `folder` whose process is gone (interrupted runs)."""
    for tmp in folder.parent.glob(f".{folder.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process is starting the conversion again
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, under another user
        return True
    return True


def _write_source(folder: Path, header: gguf_file.Header | None, name: str, dtype: str | None) -> None:
    """source.json: the file a folder came from, its identity, and what converted it."""
    import transformers

    if header is None:
        (folder / SOURCE_FILE).write_text(json.dumps({"name": name}) + "\n")
        return
    record = {
        "name": name,
        "file": str(header.path),
        "size": header.size,
        "identity": gguf_file.identity(header),
        "architecture": header.architecture,
        "tensor_types": sorted(header.tensor_types()),
        "dtype": dtype,
        "transformers": transformers.__version__,
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (folder / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _unreadable(name: str, err: BaseException) -> ModelLoadError:
    """transformers failed on a file whose header was fine: one line of what it said."""
    text = str(err).strip().splitlines()
    first = text[0][:200] if text else type(err).__name__
    return ModelLoadError(
        f"transformers could not read the GGUF '{name}': {first}",
        "pip install --upgrade transformers gguf, or use the model's transformers folder or hub id",
    )
