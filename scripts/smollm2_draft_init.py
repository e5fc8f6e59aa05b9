"""The starting point of SmolLM2-135M's distilled draft model (`specli train draft --init DIR`): a small
Llama with SmolLM2's tokenizer, its tied embedding SmolLM2's own projected onto their top principal
directions, its layers fresh.

    python scripts/smollm2_draft_init.py DIR [--hidden 256] [--layers 6]

Why the projection: SmolLM2's logits are h · Eᵀ with E its 49,152 × 576 tied embedding. E ≈ E·V·Vᵀ with V
its top `hidden` right singular vectors keeps most of what tells tokens apart, so the draft starts with
an embedding (and LM head) in which similar tokens are already near, and distillation spends its steps
on the layers. The layers are initialised as transformers initialises a new Llama.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from specli.models.loading import resolve_source

TARGET = "package:smollm2-135m"


def build(hidden: int, layers: int, seed: int = 0) -> tuple[LlamaForCausalLM, object]:
    folder = resolve_source(TARGET, dtype="float32")
    target = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    t = target.config
    heads = max(1, hidden // 64)
    config = LlamaConfig(
        vocab_size=t.vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
        max_position_embeddings=t.max_position_embeddings,
        rope_theta=getattr(t, "rope_theta", None) or t.rope_parameters["rope_theta"],
        rms_norm_eps=t.rms_norm_eps,
        tie_word_embeddings=True,
        bos_token_id=t.bos_token_id,
        eos_token_id=t.eos_token_id,
        pad_token_id=t.pad_token_id,
    )
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(config)
    embedding = target.get_input_embeddings().weight.detach()  # (V, 576)
    # (V, 576) -> (V, hidden): the coordinates on the top right singular vectors, rescaled to the
    # target's per-coordinate spread so the fresh layers see inputs of the usual size
    _, _, vh = torch.linalg.svd(embedding - embedding.mean(0), full_matrices=False)
    projected = embedding @ vh[:hidden].T
    projected *= embedding.std() / projected.std()
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(projected)
    draft.tie_weights()
    draft.generation_config = target.generation_config
    return draft, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    draft, tokenizer = build(a.hidden, a.layers, a.seed)
    draft.save_pretrained(a.out)
    tokenizer.save_pretrained(a.out)
    parameters = sum(p.numel() for p in draft.parameters())
    print(f"{a.out}: {parameters / 1e6:.1f} M parameters ({a.layers} layers, hidden {a.hidden}, tied)")


if __name__ == "__main__":
    main()
