"""A byte-level BPE tokenizer trained with `tokenizers`, wrapped as a transformers tokenizer."""

from __future__ import annotations

from collections.abc import Iterable

EOS_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train byte-level BPE on texts -> PreTrainedTokenizerFast with EOS (id 0) also used as pad.

    Byte-level BPE starts from all 256 bytes, so any text (any script, emoji) round-trips.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
