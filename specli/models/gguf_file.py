"""A GGUF file's header, read without torch: its metadata, its tensors, an identity, a config-like view.

`read_header` walks the header (magic, version, metadata, tensor infos) straight from a memory map,
keeping short arrays and only the length of long ones (a vocabulary of 150k strings is skipped, not
decoded: ~0.1 s where the `gguf` package's reader takes seconds), and checks what transformers would
otherwise fail on halfway: a file that is no GGUF, a damaged header, tensor data cut short, one part of
a split model. Each is a UsageError (exit 2) naming the file and the fix.

`identity` names the file's content for the dequantized cache (`gguf_cache`): a sha256 over the
header bytes (metadata, tokenizer, tensor names, shapes, types and offsets), the file size and
SAMPLES slices of SAMPLE_BYTES spread over the tensor data. Not a hash of the whole file: that costs
seconds a gigabyte on every load. A copy or a move keeps the identity (no mtime in it); a re-quantized
or re-converted file changes its header and sizes; an edit to tensor bytes alone that misses every
sampled slice would not be seen (delete the cache folder to convert again).

`header_config` maps the metadata to config.json's keys, enough for the memory planner (`memory.Shape`)
and `export` to size the dequantized model before anything loads.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specli.errors import UsageError
from specli.models.paths import SPLIT_NAME

MAGIC = b"GGUF"
LONG_ARRAY = 1024  # arrays longer than this keep only their length
SAMPLES = 32
SAMPLE_BYTES = 1 << 16
IDENTITY_VERSION = b"specli-gguf-identity-1"
DEFAULT_ALIGNMENT = 32

# GGUF value types: struct format of the scalars (8 is a string, 9 an array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class LongArray:
    """An array of the metadata kept as its length only (a vocabulary, its merges, its scores)."""

    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: shape in numpy (row-major) order, ggml type, offset in the data."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Header:
    """What a GGUF file says about itself. data_offset: where the tensor data starts (the header is the
    bytes before it); size: the file's size."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    size: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor_types(self) -> set[str]:
        """The ggml type names of the tensors (F32, F16, Q4_K, ...)."""
        from gguf.constants import GGMLQuantizationType

        return {GGMLQuantizationType(t.ggml_type).name for t in self.tensors}


class _Cursor:
    """Reads little-endian GGUF values from a buffer; IndexError-free: running off the end raises
    _CutShort."""

    def __init__(self, buf: Any) -> None:
        self.buf, self.pos, self.end = buf, 0, len(buf)

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise _CutShort
        self.pos = start + n
        return start

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        return struct.unpack_from("<" + fmt, self.buf, self.take(size))[0]

    def string(self) -> str:
        n = self.scalar("Q")
        start = self.take(n)
        return bytes(self.buf[start : start + n]).decode("utf-8", errors="replace")

    def _skip_strings(self, count: int) -> None:
        """`count` strings passed over (a tight loop: vocabularies hold 100k+)."""
        buf, pos, end, length = self.buf, self.pos, self.end, _LENGTH.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise _CutShort
            pos += 8 + length(buf, pos)[0]
        if pos > end:
            raise _CutShort
        self.pos = pos

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.scalar("I"), self.scalar("Q")
            if count > LONG_ARRAY:
                self._skip_items(item, count)
                return LongArray(count)
            return [self.value(item) for _ in range(count)]
        raise _Damaged(f"unknown metadata value type {kind}")

    def _skip_items(self, item: int, count: int) -> None:
        if item in _SCALARS:
            self.take(struct.calcsize("<" + _SCALARS[item]) * count)
        elif item == _STRING:
            self._skip_strings(count)
        elif item == _ARRAY:
            for _ in range(count):
                self.value(_ARRAY)
        else:
            raise _Damaged(f"unknown metadata value type {item}")


class _CutShort(Exception):
    pass


class _Damaged(Exception):
    pass


def _again(label: str) -> str:
    return f"download or copy {label} again (a partial download or a damaged file)"


def read_header(path: Path | str, name: str | None = None) -> Header:
    """The header of the GGUF file at `path` (`name`: the model name to show). UsageError (exit 2) for
    a file that is not GGUF, a damaged header, tensor data cut short, or a split model's part."""
    path = Path(path)
    label = name or str(path)
    if SPLIT_NAME.search(path.name):
        raise split_error(label, path)
    try:
        with open(path, "rb") as f:
            size = path.stat().st_size
            if size < 24:
                raise UsageError(f"'{label}' is not a GGUF file ({size} bytes)", _again(label))
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                header = _parse(mm, path, size, label)
    except OSError as err:
        raise UsageError(
            f"cannot read '{label}': {err.strerror or err}", "check the file's permissions"
        ) from err
    if int(header.metadata.get("split.count", 1) or 1) > 1:
        raise split_error(label, path)
    return header


def _parse(mm: Any, path: Path, size: int, label: str) -> Header:
    if mm[:4] != MAGIC:
        raise UsageError(f"'{label}' is not a GGUF file (it does not start with 'GGUF')", _again(label))
    cursor = _Cursor(mm)
    cursor.take(4)
    try:
        version = cursor.scalar("I")
        if version not in (2, 3):
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            what = "a big-endian GGUF file" if swapped in (2, 3) else f"GGUF version {version}"
            raise UsageError(
                f"'{label}' is {what}, which specli does not read",
                "convert it again with a current llama.cpp (little-endian GGUF version 2 or 3)",
            )
        tensor_count, kv_count = cursor.scalar("Q"), cursor.scalar("Q")
        metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = cursor.string()
            metadata[key] = cursor.value(cursor.scalar("I"))
        infos = []
        for _ in range(tensor_count):
            tname = cursor.string()
            dims = [cursor.scalar("Q") for _ in range(cursor.scalar("I"))]
            infos.append((tname, dims, cursor.scalar("I"), cursor.scalar("Q")))
    except _CutShort:
        raise UsageError(f"'{label}' is cut short inside its header", _again(label)) from None
    except _Damaged as err:
        raise UsageError(f"'{label}' has a damaged header ({err})", _again(label)) from None
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT)
    data_offset = -(-cursor.pos // alignment) * alignment
    tensors = tuple(_tensor(label, *info) for info in infos)
    needed = data_offset + max((t.offset + t.nbytes for t in tensors), default=0)
    if needed > size:
        raise UsageError(
            f"'{label}' is cut short: its tensors need {needed} bytes and the file has {size}",
            _again(label),
        )
    return Header(path, version, metadata, tensors, data_offset, size)


def _tensor(label: str, name: str, dims: list[int], ggml_type: int, offset: int) -> TensorInfo:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise UsageError(
            f"'{label}': tensor {name} has ggml type {ggml_type}, which the installed gguf package "
            "does not know",
            "pip install --upgrade gguf, or use a file quantized to a common type (Q4_K_M, Q8_0)",
        ) from None
    elements = 1
    for d in dims:
        elements *= d
    if dims and dims[0] % block:
        raise UsageError(f"'{label}' has a damaged header (tensor {name}'s rows)", _again(label))
    return TensorInfo(name, tuple(reversed(dims)), ggml_type, offset, elements // block * type_size)


def split_error(label: str, path: Path) -> UsageError:
    """One part of a split model: transformers reads single files; llama.cpp's tool merges the parts."""
    first = SPLIT_NAME.sub("-00001-of-\\2.gguf", path.name) if SPLIT_NAME.search(path.name) else path.name
    merged = SPLIT_NAME.sub(".gguf", path.name) if SPLIT_NAME.search(path.name) else "merged.gguf"
    return UsageError(
        f"'{label}' is one part of a split GGUF model, which transformers cannot read",
        f"merge the parts into one file first: llama-gguf-split --merge {first} {merged}",
    )


def identity(header: Header) -> str:
    """A short hex name of the file's content (module docstring): header bytes, size, sampled data."""
    digest = hashlib.sha256(IDENTITY_VERSION)
    digest.update(header.size.to_bytes(8, "little"))
    with open(header.path, "rb") as f:
        digest.update(f.read(header.data_offset))
        span = header.size - header.data_offset
        for i in range(SAMPLES):
            f.seek(header.data_offset + span * i // SAMPLES)
            digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()[:20]


def _first(value: Any) -> Any:
    """A per-layer array's largest value (head counts and widths may vary by layer), else the value."""
    if isinstance(value, list):
        numbers = [v for v in value if isinstance(v, (int, float))]
        return max(numbers) if numbers else None
    return value


def header_config(header: Header) -> dict[str, Any]:
    """config.json's keys for the memory planner and export, from llama.cpp's metadata keys (the
    dequantized model's exact config comes from transformers when it converts the file)."""
    meta, arch = header.metadata, header.architecture
    names = {t.name for t in header.tensors}

    def get(key: str) -> Any:
        return _first(meta.get(f"{arch}.{key}"))

    tokens = meta.get("tokenizer.ggml.tokens")
    embedding = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    vocab = get("vocab_size") or (len(tokens) if tokens is not None else None)
    if vocab is None and embedding is not None:
        vocab = embedding.shape[0]
    config: dict[str, Any] = {
        "model_type": arch,
        "vocab_size": vocab,
        "hidden_size": get("embedding_length"),
        "num_hidden_layers": get("block_count"),
        "num_attention_heads": get("attention.head_count"),
        "num_key_value_heads": get("attention.head_count_kv") or get("attention.head_count"),
        "intermediate_size": get("feed_forward_length"),
        "max_position_embeddings": get("context_length"),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
    }
    if get("attention.key_length"):
        config["head_dim"] = get("attention.key_length")
    if get("expert_count"):
        config["num_local_experts"] = get("expert_count")
        config["moe_intermediate_size"] = get("expert_feed_forward_length")
    for key in ("bos_token_id", "eos_token_id"):
        if f"tokenizer.ggml.{key}" in meta:
            config[key] = meta[f"tokenizer.ggml.{key}"]
    return {k: v for k, v in config.items() if v is not None}


def parameter_count(header: Header) -> int:
    """Elements of every tensor in the file: the dequantized model's parameters (a tied LM head once)."""
    return sum(t.elements for t in header.tensors)


def read_tensor(header: Header, name: str) -> Any:
    """Tensor `name` of the file as float32, numpy order (a [V, H] embedding is V rows of H), dequantized
    by the gguf package from a memory map (the rest of the file is not read). KeyError: no such tensor."""
    import numpy as np
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    info = next((t for t in header.tensors if t.name == name), None)
    if info is None:
        raise KeyError(name)
    raw = np.memmap(header.path, dtype=np.uint8, mode="r", offset=header.data_offset + info.offset)
    rows = info.elements // info.shape[-1]
    data = np.asarray(raw[: info.nbytes]).reshape(rows, info.nbytes // rows)  # [rows, bytes of a row]
    return dequantize(data, GGMLQuantizationType(info.ggml_type)).reshape(info.shape).astype(np.float32)
