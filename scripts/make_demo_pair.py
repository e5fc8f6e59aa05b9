"""Build a synthetic target/drafter pair for trying specli and measuring its overhead (no training).

The target is an 8-layer d256 Llama with random weights whose layers 2..8 write only small updates into
the residual stream (their output projections are scaled down); the drafter is a copy of the target's
first layer with the same embeddings, norm and LM head. So the drafter agrees with the target often
and costs about an eighth of a target step — a stand-in for a real distilled pair, labeled as such.

    python scripts/make_demo_pair.py /tmp/demo-pair [--scale 0.05]
    specli generate "def fibonacci(n):" --target /tmp/demo-pair/target --draft /tmp/demo-pair/draft --json
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXT = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "The quick brown fox jumps over the lazy dog.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=0.05, help="output scale of target layers 2..8")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT * 4, trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")

    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                         initializer_range=0.05, eos_token_id=0, bos_token_id=0, tie_word_embeddings=True)
    target = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(args.scale)
            layer.mlp.down_proj.weight.mul_(args.scale)
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:1]
    draft.config.num_hidden_layers = 1
    draft.config.layer_types = draft.config.layer_types[:1] if getattr(draft.config, "layer_types", None) else None
    for name, model in (("target", target), ("draft", draft)):
        folder = args.out / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print(f"wrote {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)")


if __name__ == "__main__":
    main()
