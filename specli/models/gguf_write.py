"""A transformers model (llama, qwen2, qwen3, gemma3_text) written as a GGUF file the way llama.cpp's
convert_hf_to_gguf.py lays one out: tensor names from the gguf package's name map, llama's q/k rows
permuted, a byte-level BPE tokenizer and chat template in the metadata. The llama.cpp engine converts
specli's own drafters with it once into specli's cache (`llama_cpp.load`); the tests write their tiny
models with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# transformers' model_type -> (llama.cpp's architecture, its tensor name map)
ARCHS = {
    "llama": ("llama", gguf.MODEL_ARCH.LLAMA),
    "qwen2": ("qwen2", gguf.MODEL_ARCH.QWEN2),
    "qwen3": ("qwen3", gguf.MODEL_ARCH.QWEN3),
    "gemma3_text": ("gemma3", gguf.MODEL_ARCH.GEMMA3),
}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: the rotary halves of each head interleaved (transformers undoes it)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _tokenizer_metadata(writer: gguf.GGUFWriter, tokenizer) -> None:
    """A byte-level BPE tokenizer as llama.cpp stores one: tokens by id, their types, merges."""
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = {added["content"] for added in data["added_tokens"] if added["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 0)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    writer.add_chat_template(CHAT_TEMPLATE)


def write_gguf(path: Path, model, tokenizer, *, quantize: str | None = None, name: str = "tiny") -> Path:
    """`model` (llama, qwen2, qwen3 or gemma3_text) and `tokenizer` as a GGUF file at `path`: F32
    tensors, or the decoder layers' matrices quantized to `quantize` (e.g. "Q8_0")."""
    config = model.config
    arch, tensor_arch = ARCHS[config.model_type]
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    rope = config.rope_parameters
    writer.add_rope_freq_base(float(rope.get("rope_theta") or rope["full_attention"]["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)
    else:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if getattr(config, "sliding_window", None):
        writer.add_sliding_window(config.sliding_window)
    _tokenizer_metadata(writer, tokenizer)
    names = gguf.get_tensor_name_map(tensor_arch, config.num_hidden_layers)
    qtype = getattr(gguf.GGMLQuantizationType, quantize) if quantize else None
    state = model.state_dict()
    for hf_name, tensor in state.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{names.get_name(base)}.{suffix}"
        data = tensor.detach().to(torch.float32).numpy()
        if arch == "llama" and base.endswith("q_proj"):
            data = _permute(data, heads)
        elif arch == "llama" and base.endswith("k_proj"):
            data = _permute(data, kv_heads)
        elif arch == "gemma3" and base.endswith("norm"):
            data = data + 1  # llama.cpp stores Gemma's (1 + weight) norms whole; transformers subtracts 1
        if qtype is not None and data.ndim == 2 and ".layers." in hf_name:
            writer.add_tensor(gguf_name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
