"""llama.cpp's own one-token-at-a-time decoding of a GGUF file, written against the raw bindings and
not through specli's `LlamaLM`: the reference the llama.cpp engine's outputs are held to. A context of
its own (one sequence, no unified KV buffer, flash attention as the engine's rule has it), the prompt
but its last token prefilled in one batch, then one `llama_decode` per token, greedy. Also: the exact
next-token distribution of a prefix (one fresh context per call) for the sampling tests.

`pad`: a one-token step decodes its token beside pad - 1 throwaway tokens of a second sequence, as the
engine does under a row rule with least = pad (specli/models/llama_cpp/rows.py; 1 on the exact build).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest


def llama_or_skip():
    """The bindings, or a skip naming the install (a failure when SPECLI_REQUIRE_LLAMA=1, as in CI)."""
    from specli.models.llama_cpp.library import INSTALL, available, library

    if not available():
        message = f"llama-cpp-python is not installed: {INSTALL}"
        if os.environ.get("SPECLI_REQUIRE_LLAMA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return library().llama


def requantized(source: Path, folder: Path, ftype: str) -> Path:
    """`source` requantized by llama.cpp's own `llama_model_quantize` to `ftype` (the LLAMA_FTYPE_MOSTLY_
    suffix: "Q4_K_M", "Q8_0", ...), written into `folder`."""
    llama = llama_or_skip()
    path = folder / f"{source.stem}-{ftype.lower()}.gguf"
    params = llama.llama_model_quantize_default_params()
    params.ftype = getattr(llama, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    assert llama.llama_model_quantize(str(source).encode(), str(path).encode(), params) == 0, ftype
    return path


class Reference:
    """One GGUF file under llama.cpp, decoded one token at a time with `threads` threads."""

    def __init__(self, path: Path, threads: int = 1, pad: int = 1, flash: bool = False) -> None:
        self.L = llama_or_skip()
        params = self.L.llama_model_default_params()
        params.use_extra_bufts = False  # weights in the file's layout, as the engine loads them
        self.model = self.L.llama_model_load_from_file(str(path).encode(), params)
        self.pad = pad
        self.flash = flash
        assert self.model, f"llama.cpp cannot load {path}"
        self.vocab = self.L.llama_vocab_n_tokens(self.L.llama_model_get_vocab(self.model))
        self.threads = threads

    def _context(self, n_ctx: int):
        params = self.L.llama_context_default_params()
        params.n_ctx = max(n_ctx, 512)  # as the engine's smallest context (a KV view of 512 cells past 256)
        params.n_batch = params.n_ubatch = 512
        params.n_threads = params.n_threads_batch = self.threads
        params.swa_full = True
        if self.pad > 1:  # the throwaway tokens' sequence beside the decoded one
            params.n_seq_max, params.kv_unified = 2, True
        # the engine's attention kernels: flash attention where its rule turned it on
        params.flash_attn_type = (
            self.L.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash else self.L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        ctx = self.L.llama_init_from_model(self.model, params)
        assert ctx
        return ctx

    def _decode(self, ctx, batch, tokens: list[int], start: int) -> np.ndarray:
        """Decode `tokens` at positions start.. in chunks; the last token's logits [V] (a copy)."""
        for offset in range(0, len(tokens), 512):
            chunk = tokens[offset : offset + 512]
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + offset + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i == len(chunk) - 1
            pad = max(0, self.pad - len(chunk))
            for j in range(pad):  # throwaway tokens at positions 0.. of sequence 1, no logits
                batch.token[len(chunk) + j] = chunk[-1]
                batch.pos[len(chunk) + j] = j
                batch.n_seq_id[len(chunk) + j] = 1
                batch.seq_id[len(chunk) + j][0] = 1
                batch.logits[len(chunk) + j] = False
            batch.n_tokens = len(chunk) + pad
            assert self.L.llama_decode(ctx, batch) == 0
            if pad:
                self.L.llama_memory_seq_rm(self.L.llama_get_memory(ctx), 1, -1, -1)
        pointer = self.L.llama_get_logits_ith(ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.vocab,)).copy()

    @contextmanager
    def _after(self, prompt: list[int], more: int):
        """A context holding `prompt` as generation prefills it (the prompt but its last token as one
        batch, then that token alone), room for `more` tokens -> (ctx, batch, the logits after it)."""
        ctx = self._context(len(prompt) + more + 8)
        batch = self.L.llama_batch_init(512, 0, 1)
        try:
            if len(prompt) > 1:
                self._decode(ctx, batch, prompt[:-1], 0)
            yield ctx, batch, self._decode(ctx, batch, prompt[-1:], len(prompt) - 1)
        finally:
            self.L.llama_batch_free(batch)
            self.L.llama_free(ctx)

    def greedy(self, prompt: list[int], n: int, eos: set[int] = frozenset()) -> tuple[list[int], list[float]]:
        """The first n greedy tokens after `prompt` (stopping after an EOS id), and each step's top-2
        logit gap."""
        with self._after(prompt, n) as (ctx, batch, logits):
            out, gaps = [], []
            for step in range(n):
                top2 = np.sort(logits)[-2:]
                gaps.append(float(top2[1] - top2[0]))
                token = int(logits.argmax())
                out.append(token)
                if token in eos or step == n - 1:
                    break
                logits = self._decode(ctx, batch, [token], len(prompt) + step)
            return out, gaps

    def step_logits(self, prompt: list[int], tokens: list[int]) -> np.ndarray:
        """After `prompt` (as `greedy` decodes it), `tokens` one step each -> their logits [n, V] (row i:
        the distribution after tokens[i]), what a verify of `tokens` at that point must return."""
        with self._after(prompt, len(tokens)) as (ctx, batch, _):
            start = len(prompt)
            return np.stack([self._decode(ctx, batch, [t], start + i) for i, t in enumerate(tokens)])

    def next_logits(self, prefix: list[int]) -> np.ndarray:
        """The logits [V] after `prefix`: the prefix but its last token in one batch, then that token
        alone (a one-token step, as generation scores it)."""
        with self._after(prefix, 0) as (_, _, logits):
            return logits

    def __del__(self) -> None:
        if getattr(self, "model", None):
            self.L.llama_model_free(self.model)
