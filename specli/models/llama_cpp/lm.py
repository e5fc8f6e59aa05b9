"""A GGUF model evaluated by llama.cpp, driven one forward at a time like `CachedLM` (docs/design.md §15).

`LlamaModel` is the loaded file (mapped by llama.cpp, never dequantized); `LlamaLM` is what the loop
drives: `forward` of n tokens -> logits [n, V] (a torch view of llama.cpp's own output buffer, no copy:
valid until the next forward on the same model), `rewind`, `forward_masked` + `keep` for token trees.

KV state. One llama context per `LlamaLM` (one generation at a time), reused across generations and
grown when `reserve` asks for more positions. A generation's `LlamaCache` holds the *chain* (positions
0 .. chain-1, all in sequence `seq`) and, during a tree round, *tree cells*: every token of a masked
forward gets a sequence id of its own, copied from the chain and from each earlier tree cell it sees
(`llama_memory_seq_cp` over that cell's position), and carries in its batch entry the ids of the batch
tokens that see it, so llama.cpp's per-sequence mask is exactly the tree's ancestor mask. `keep` adds
the chain's sequence to the accepted path's cells (their positions are chain, chain + 1, ...: prefix
length + depth) and removes every tree sequence; a rewind of tree cells removes them all.

Exactness. Built as scripts/install_llama.sh builds it (llamafile's sgemm for every row count, no REPACK
kernels, flash attention without its key split and query tiles, ggml's tiled K-quant matmul for batches
of 32 rows or more only; or upstream's source without llamafile, library.CMAKE_ARGS, whose tiled matmul
stays off: library.TILED_MM), without REPACK's
buffers (`use_extra_bufts`), with flash attention where the probe finds it exact and faster, with
a full-size sliding-window cache (`swa_full`) and the same threads for batches as for single tokens, a
batch of up to 17 tokens scores each position bit for bit as one-token steps do
(tests/models/test_llama_engine.py; docs/design.md §15). What a build does is measured, not assumed:
the probe finds the file's `RowRule` (rows.py), and every forward that returns logits follows it (at
least `least` rows, throwaway tokens in sequence PAD_SEQ making up the rest; at most `most`, longer runs
split; where a prefill-sized batch rounds apart from steps, a prompt prefills as one batch as the
reference's does (its last token's logits go unread: the loop steps it), and a new prompt reuses only
cells an earlier prompt's prefill-sized batches wrote, where prefill-sized batches round alike among
themselves (`prefill_rows`: the documented build's tiled K-quant prompts)),
so a build whose batch kernels differ from its one-token ones (upstream llamafile's, the default) stays
exact at the rule's cost.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specli.errors import ModelLoadError, SpecliError
from specli.models.gguf_file import read_header, read_tensor
from specli.models.llama_cpp.library import library
from specli.models.llama_cpp.probe import read_costs, write_costs
from specli.models.llama_cpp.rows import RowRule, context_params, fill, pad_rows

BATCH = 512  # tokens per llama_decode (prefills run in chunks of it)
SEQUENCES = 69  # a tree round's tokens each get a sequence of their own (64 nodes + the root), + the chain
PAD_SEQ = SEQUENCES - 1  # throwaway rows (RowRule.least), removed after each forward
COSTS_SEQ = SEQUENCES - 2  # verify_costs' own sequence
MIN_CONTEXT = 512
CONTEXT_STEP = 256
VERIFY_LENGTHS = (1, 2, 3, 5, 9, 17)  # the forwards `verify_costs` times
# library.Q8_ROWS under which `verify_costs` times a file's Q8_0 products: every batch through llamafile's
# sgemm; every batch below prompt size through ggml's dot products (a lone row always takes them)
SGEMM_ROWS, DOT_ROWS = 2, 32


def q8_rows(sgemm: dict[int, float], dots: dict[int, float]) -> int:
    """From which row count Q8_0 products take sgemm, given forwards timed (seconds by rows) with every
    batch through sgemm and through the dot products: the fewest timed rows from which sgemm is as fast
    at every timed size; DOT_ROWS (prompts only) when the dot products win the largest."""
    chosen = DOT_ROWS
    for n in sorted((n for n in sgemm if n >= SGEMM_ROWS), reverse=True):
        if sgemm[n] > dots[n]:
            break
        chosen = n
    return chosen


def _no_features() -> SpecliError:
    return SpecliError("the llama.cpp engine gives no hidden states of inner layers.", "Use --engine torch.")


class LlamaModel:
    """A GGUF file loaded by llama.cpp (`name`: as the user named it; `config`: the transformers config
    specli reads from the same file's metadata, for the context length and EOS ids)."""

    generation_config = None
    is_quantized = False  # not bitsandbytes: the file's own quantization

    def __init__(self, path: Path, name: str, config: Any, rule: RowRule | None = None) -> None:
        self.llama = library().llama
        self.path = Path(path)
        self.name = name
        self.config = config
        self.rule = rule or RowRule()  # the probe's (load_model); a bare load assumes the exact build
        params = model_params(self.llama)
        self._ptr = self.llama.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._ptr:
            raise ModelLoadError(
                f"llama.cpp cannot load '{name}' ({self.path.name}): {last_log() or 'no reason given'}",
                "Use --engine torch (transformers reads it), or check the file with `specli presets show`.",
            )
        self.vocab_size = int(self.llama.llama_vocab_n_tokens(self.llama.llama_model_get_vocab(self._ptr)))
        self.context_length = int(self.llama.llama_model_n_ctx_train(self._ptr))
        self.file_size = self.path.stat().st_size
        self._embedding: torch.nn.Embedding | None = None
        self._lm_head: torch.nn.Linear | None = None

    @property
    def ptr(self) -> Any:
        return self._ptr

    def get_input_embeddings(self) -> torch.nn.Embedding:
        """The file's token embedding [V, H] in torch (float32, dequantized once, on first use): what
        sequential blockwise heads read of a token (`blockwise_heads.token_inputs`, scale-free)."""
        if self._embedding is None:
            weight = torch.from_numpy(read_tensor(read_header(self.path, self.name), "token_embd.weight"))
            self._embedding = torch.nn.Embedding.from_pretrained(weight, freeze=True)
        return self._embedding

    def get_output_embeddings(self) -> torch.nn.Linear:
        """The file's LM head [V, H] in torch (float32, dequantized once, on first use; the token
        embedding when the file ties them): blockwise heads draft through it. llama.cpp scores the target
        with the file's quantized blocks, so these logits differ from the target's by rounding, which
        drafting may: verification reads llama.cpp's own."""
        if self._lm_head is None:
            header = read_header(self.path, self.name)
            if any(t.name == "output.weight" for t in header.tensors):
                weight = torch.from_numpy(read_tensor(header, "output.weight"))
            else:
                weight = self.get_input_embeddings().weight
            self._lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            self._lm_head.weight = torch.nn.Parameter(weight, requires_grad=False)
        return self._lm_head

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.llama.llama_model_desc(self._ptr, buf, len(buf))
        return buf.value.decode(errors="replace")

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            self.llama.llama_model_free(ptr)


def model_params(llama: Any) -> Any:
    """The file mapped (resident memory is the pages a forward touches), weights kept in the file's own
    layout (no REPACK buffers, whose batch kernels round unlike their one-row ones)."""
    params = llama.llama_model_default_params()
    params.use_mmap = True
    params.use_extra_bufts = False
    return params


def last_log() -> str:
    """llama.cpp's last warning or error line (its log is kept quiet otherwise)."""
    log = library().log
    return log[-1].strip() if log else ""


@dataclass
class LlamaCache:
    """One generation's KV state in its `LlamaLM`'s context (module docstring): `chain` positions in
    sequence `seq`, then `tree` cells as (position, own sequence) in the order they were added."""

    generation: int
    seq: int = 0
    chain: int = 0
    tree: list[tuple[int, int, int]] = field(default_factory=list)  # (position, own sequence, token)
    primed: bool = False  # its first forward ran (the one that may reuse the previous prompt's cells)
    free: list[int] = field(default_factory=lambda: list(range(COSTS_SEQ - 1, 0, -1)))

    @property
    def length(self) -> int:
        return self.chain + len(self.tree)


class LlamaLM:
    """The `CachedLM` contract over a `LlamaModel` (what the loop, drafters and pair call)."""

    static = False
    compiled = False
    static_capacity = None
    sliding_window = None  # the cache is full-size (swa_full): trees and rewinds see the whole context
    engine = "llama.cpp"

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.llama = model.llama
        self.rule = model.rule
        self.compiled_tokens = 0
        self._ctx: Any = None
        self._batch: Any = None
        self._n_ctx = 0
        self._threads = 0
        self._flash = False  # the open context's attention (the rule's when it opened)
        self._wanted = MIN_CONTEXT
        self._generation = 0
        self._verify: dict[int, float] | None = None
        self._verify_key: tuple[int, RowRule] | None = None  # the thread count and rule they were timed under
        self.q8_rows: int | None = None  # library.Q8_ROWS for this file's forwards (verify_costs chooses it)
        self._held: list[int] = []  # the tokens at chain positions 0.. of the context's live cache
        self._prompt_cells = 0  # how many of them prefill-sized batches wrote (reusable: rule.prefill_rows)
        self._live: LlamaCache | None = None
        self.reused = 0  # positions the latest generation's prefill found in the context already

    # --- what the pair and loop read ------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    output_device = device

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def reserve(self, length: int) -> None:
        """Before a generation that can reach `length` positions: the next `new_cache` holds them."""
        self._wanted = max(self._wanted, min(length, self.model.context_length or length))

    def warm_up(self, lengths: range, **_: Any) -> int:
        return 0  # nothing is compiled

    def synchronize(self) -> None:
        """Nothing queued: llama_decode returns when the forward is done."""

    def verify_costs(self) -> dict[int, float]:
        """Seconds of a forward of n tokens after a 64-token prefix, for n in VERIFY_LENGTHS (the best of
        three): the cost model's prior (draft_length). Measured once per file, build, thread count and
        rule, and kept in specli's cache beside the probe's answer (`probe.read_costs`): a later process
        reads them instead of timing ~40 forwards before its first token. A file with Q8_0 matrices is
        timed with their batches through llamafile's sgemm and through ggml's dot products (both round
        as a step does: the probe checks), and its forwards take sgemm from the row count `q8_rows`
        chooses (library.Q8_ROWS), unless the user set that switch."""
        threads = torch.get_num_threads()
        if self._verify is None or self._verify_key != (threads, self.rule):
            kept = read_costs(self.model.path, threads, self.rule)
            if kept is None or set(kept[0]) != set(VERIFY_LENGTHS):
                kept = self._time_kernels(threads)
                write_costs(self.model.path, threads, self.rule, *kept)
            (self._verify, self.q8_rows), self._verify_key = kept, (threads, self.rule)
        return dict(self._verify)

    def _time_kernels(self, threads: int) -> tuple[dict[int, float], int | None]:
        """`_time_forwards` under each Q8_0 kernel (where the file has Q8_0 matrices and the user left the
        switch alone): the seconds of the `q8_rows` choice, and that choice."""
        types = read_header(self.model.path, self.model.name).tensor_types()
        if library().user_q8_rows is not None or "Q8_0" not in types:
            return self._time_forwards(threads), None
        timed = {}
        for rows in (SGEMM_ROWS, DOT_ROWS):
            self.q8_rows = rows
            timed[rows] = self._time_forwards(threads)
        chosen = q8_rows(timed[SGEMM_ROWS], timed[DOT_ROWS])
        return {n: timed[SGEMM_ROWS if n >= chosen else DOT_ROWS][n] for n in VERIFY_LENGTHS}, chosen

    def _time_forwards(self, threads: int) -> dict[int, float]:
        if self._ctx is None or threads != self._threads or self._flash != self.rule.flash:
            self.new_cache()
        if self._n_ctx - len(self._held) < 64 + max(VERIFY_LENGTHS) + 1:  # no room beside it
            self.llama.llama_memory_clear(self._memory, True)
            self._truncate(0)
        # a sequence of its own: the live cache's cells (a prompt to reuse) stay as they are
        cache = LlamaCache(self._generation, seq=COSTS_SEQ, primed=True)
        prefix = torch.arange(64) % max(1, self.vocab_size - 1)
        self.forward(prefix, cache, last_only=True)
        times = {}
        for n in VERIFY_LENGTHS:
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                self.forward(prefix[:n], cache)
                best = min(best, time.perf_counter() - start)
                self.rewind(cache, n)
            times[n] = best
        self.llama.llama_memory_seq_rm(self._memory, cache.seq, -1, -1)
        return times

    # --- caches ---------------------------------------------------------------------------------
    def new_cache(self) -> LlamaCache:
        """An empty cache for a new generation (opened or grown as needed). The previous generation's
        chain stays in the context until the first forward: a prefill (`last_only`) then reuses the
        positions its tokens share with the new ones, as llama-server's prompt cache does (KV entries
        of the same tokens at the same positions are the same numbers)."""
        threads = torch.get_num_threads()
        wanted = -(-max(self._wanted, MIN_CONTEXT) // CONTEXT_STEP) * CONTEXT_STEP
        if self._ctx is None or wanted > self._n_ctx or self._flash != self.rule.flash:
            self._open(wanted, threads)
            self._truncate(0)
        else:
            if threads != self._threads:
                self.llama.llama_set_n_threads(self._ctx, threads, threads)
                self._threads = threads
            if self._live is not None and self._live.tree:  # a generation left mid-tree (interrupted)
                self._drop_tree(self._live)
        self._generation += 1
        self._live = LlamaCache(self._generation)
        return self._live

    def _open(self, n_ctx: int, threads: int) -> None:
        self._close()
        params = context_params(self.llama, n_ctx, threads, BATCH, SEQUENCES, self.rule.flash)
        ctx = self.llama.llama_init_from_model(self.model.ptr, params)
        if not ctx:
            raise ModelLoadError(
                f"llama.cpp could not open a context of {n_ctx} positions for '{self.model.name}': "
                f"{last_log() or 'no reason given'}",
                "Lower --max-new-tokens or use --engine torch.",
            )
        self._ctx, self._n_ctx, self._threads, self._flash = ctx, n_ctx, threads, self.rule.flash
        self._memory = self.llama.llama_get_memory(ctx)
        self._batch = self.llama.llama_batch_init(BATCH, 0, SEQUENCES)

    def _close(self) -> None:
        if self._batch is not None:
            self.llama.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            self.llama.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the bindings may be gone already
            self._close()

    def forget(self) -> None:
        """The next generation reuses nothing of this one's cells (its first forward removes them)."""
        self._truncate(0)

    def cache_length(self, cache: LlamaCache) -> int:
        return cache.length

    # --- forwards -------------------------------------------------------------------------------
    def _check(self, cache: LlamaCache, n: int) -> None:
        if cache.generation != self._generation:
            raise RuntimeError("this cache belongs to an earlier generation (new_cache cleared it)")
        if cache.length + n + self.rule.least > self._n_ctx:
            raise SpecliError(
                f"the llama.cpp context of '{self.model.name}' holds {self._n_ctx} positions and this "
                f"generation needs more ({cache.length + n}).",
                "Lower --max-new-tokens, or shorten the prompt.",
            )

    def _decode(self, n: int, pad: int = 0) -> None:
        """Decode the batch's first n entries and `pad` throwaway rows (already written after them)."""
        if self.q8_rows is not None:
            library().set_q8_rows(self.q8_rows)
        self._batch.n_tokens = n + pad
        code = self.llama.llama_decode(self._ctx, self._batch)
        if pad:
            self.llama.llama_memory_seq_rm(self._memory, PAD_SEQ, -1, -1)
        if code != 0:
            self.llama.llama_memory_clear(self._memory, True)  # nothing half-written is reused later
            self._truncate(0)
            raise SpecliError(
                f"llama.cpp could not evaluate {n} tokens of '{self.model.name}' (llama_decode returned "
                f"{code}): {last_log() or 'no reason given'}",
                "Run with --engine torch, or report it with the command that failed.",
            )

    def _logits(self, rows: int) -> torch.Tensor:
        """The last decode's logits [rows, V]: a view of llama.cpp's buffer (no copy)."""
        pointer = self.llama.llama_get_logits(self._ctx)
        return torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(rows, self.vocab_size)))

    def forward(self, ids: torch.Tensor, cache: LlamaCache, *, last_only: bool = False) -> torch.Tensor:
        """Run ids [n] after the chain; returns logits [n, V] (or [1, V] when last_only). A prefill
        (last_only) runs in chunks of BATCH; logits rows follow the rule (at most `most` a forward, at
        least `least` rows each). The logits stay valid until the next forward."""
        return self._forward(ids, cache, last_only, features=False)[0]

    def forward_features(
        self, ids: torch.Tensor, cache: LlamaCache, layers: tuple[int, ...], *, last_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` that also returns the final (normed) hidden state of the rows it scores (llama.cpp's
        token embeddings with no pooling, from the same decode): (logits [n|1, V], features [n|1, H]).
        Only the last layer (`layers` = (depth,), what blockwise heads read): llama.cpp returns no inner
        layer's. A prefill (last_only) gives its last row only, which it runs as a step of its own after
        the rest of the prompt (each position scores as a step would on an exact build): llama.cpp
        outputs every row of a decode with embeddings on, and V-wide rows for the whole prompt would cost
        more than the prompt."""
        if tuple(layers) != (self.depth,):
            raise _no_features()
        logits, features = self._forward(ids, cache, last_only, features=True)
        assert features is not None
        return logits, features

    @property
    def depth(self) -> int:
        """The target's layer count (transformers' index of the final hidden state)."""
        return int(self.model.config.get_text_config().num_hidden_layers)

    def _forward(
        self, ids: torch.Tensor, cache: LlamaCache, last_only: bool, *, features: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        tokens = [int(t) for t in ids.tolist()]
        if cache.tree:
            raise RuntimeError("a chain forward while tree cells are in the cache (rewind or keep first)")
        self._check(cache, len(tokens))
        if not cache.primed:
            tokens = self._prime(cache, tokens, last_only)
        if cache is self._live:
            self._held[cache.chain :] = tokens
        rule = self.rule
        if last_only and rule.exact_everywhere and not features:  # the last row scores as any row: one batch
            return self._run(cache, tokens, BATCH, last_only=True)
        if last_only and not rule.prefill_exact:  # prompts round apart from steps anyway
            return self._prefill(cache, tokens, features)
        if last_only:  # the prompt but its last token as KV only, then that token as a step would be
            self._run(cache, tokens[:-1], BATCH, logits=False)
            tokens = tokens[-1:]
        if not features:
            return self._run(cache, tokens, rule.most)
        return self._with_features(cache, tokens, None)

    def _with_features(
        self, cache: LlamaCache, tokens: list[int], least: int | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.llama.llama_set_embeddings(self._ctx, True)  # every row of a decode is output (and embedded)
        try:
            return self._run(cache, tokens, self.rule.most, features=True, least=least)
        finally:
            self.llama.llama_set_embeddings(self._ctx, False)

    def _run(
        self,
        cache: LlamaCache,
        tokens: list[int],
        size: int,
        *,
        last_only: bool = False,
        logits: bool = True,
        features: bool = False,
        least: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens in chunks of `size` at the chain's end, each padded to `least` rows (default: the rule's)
        -> (logits of every token [n, V], of the last [1, V] (last_only), or none (logits=False: an empty
        tensor); with `features` (embeddings on, every row output; not with last_only) their hidden
        states [n, H], copied, else None)."""
        n, parts, states = len(tokens), [], []
        for start in range(0, n, size):
            chunk = tokens[start : start + size]
            last_chunk = start + size >= n
            pad = max(0, (least or self.rule.least) - len(chunk))
            fill(self._batch, chunk, cache.chain, cache.seq, pad, PAD_SEQ, logits and not last_only)
            if logits and last_only and last_chunk:
                self._batch.logits[len(chunk) - 1] = True
            self._decode(len(chunk), pad)
            cache.chain += len(chunk)
            if features:
                states.append(self._embeddings(len(chunk)))
            if logits and not last_only and not last_chunk:
                parts.append(self._logits(len(chunk)).clone())  # the next chunk overwrites the buffer
        if not logits:
            return torch.empty(0), None
        rows = self._logits(1 if last_only else n - sum(len(p) for p in parts))
        return torch.cat([*parts, rows]) if parts else rows, torch.cat(states) if features else None

    def _embeddings(self, rows: int) -> torch.Tensor:
        """The last decode's first `rows` token embeddings [rows, H] (the final normed hidden states),
        copied out of llama.cpp's buffer."""
        width = int(self.llama.llama_model_n_embd(self.model.ptr))
        pointer = self.llama.llama_get_embeddings(self._ctx)
        return torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(rows, width)).copy())

    def _prime(self, cache: LlamaCache, tokens: list[int], last_only: bool) -> list[int]:
        """A new cache's first forward: keep the previous chain's positions that hold the same tokens
        (a prefill only, and never its last token, whose logits are returned); the rest leaves."""
        cache.primed = True
        shared = limit = 0
        if last_only and self.rule.shared:  # reused cells must round as a fresh prefill's would
            limit = min(len(self._held), len(tokens) - 1)
        elif last_only and self.rule.prefill_rows and self._whole_chunks(len(tokens)):
            # cells an earlier prompt's prefill-sized batches wrote, where a fresh prefill of this prompt
            # runs prefill-sized batches only too (`_prefill` pads the rest's chunks)
            limit = min(self._prompt_cells, len(tokens) - 1)
        while shared < limit and self._held[shared] == tokens[shared]:
            shared += 1
        self.llama.llama_memory_seq_rm(self._memory, cache.seq, shared, -1)
        self._truncate(shared)
        cache.chain = self.reused = shared
        return tokens[shared:]

    def _whole_chunks(self, n: int) -> bool:
        """Whether a fresh prefill of n tokens (chunks of BATCH) runs only batches of prefill_rows or more."""
        rows = self.rule.prefill_rows
        return n >= rows and (n % BATCH == 0 or n % BATCH >= rows)

    def _prefill(
        self, cache: LlamaCache, tokens: list[int], features: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A prompt under a rule whose prefill-sized batches round apart from steps: one batch, as the
        one-token reference prefills (chunks of BATCH from position 0) -> its last row's (logits [1, V],
        features [1, H] or None). The loop never reads these logits: its first round steps the prompt's
        last token. After reused cells (`_prime`) each chunk is padded to rule.prefill_rows rows, and
        so is a last token run apart for its features (embeddings output every row), so that each row
        rounds as the reference's batch rounds it. Counts the cells such batches wrote."""
        rows, start = self.rule.prefill_rows, cache.chain
        canonical = rows > 0 and (start > 0 or self._whole_chunks(len(tokens)))  # as prefill-sized batches
        if features:
            least = rows if canonical else None
            self._run(cache, tokens[:-1], BATCH, logits=False, least=least)
            out = self._with_features(cache, tokens[-1:], least)
        else:
            out = self._run(cache, tokens, BATCH, last_only=True, least=rows if start else None)
        if cache is self._live and rows:
            whole = len(tokens) - len(tokens) % BATCH  # the full chunks; the rest counts if it is as long
            self._prompt_cells = cache.chain if canonical else whole
        return out

    def forward_masked(
        self,
        ids: torch.Tensor,
        cache: LlamaCache,
        positions: torch.Tensor,
        visible: torch.Tensor,
        layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, None]:
        """A tree forward (CachedLM.forward_masked): ids [n] at `positions` [n], each seeing the cache
        entries and batch tokens `visible` [n, length + n] allows (the whole chain, then its ancestors)."""
        if layers:
            raise _no_features()
        tokens = [int(t) for t in ids.tolist()]
        where = [int(p) for p in positions.tolist()]
        n, length, chain = len(tokens), cache.length, cache.chain
        sees = visible.to(torch.bool).cpu()
        if not bool(sees[:, :chain].all()):
            raise NotImplementedError("llama.cpp tree forwards need the whole chain visible to every node")
        if n > self.rule.most:
            raise NotImplementedError(
                f"a tree of {n} nodes is more rows than this file scores exactly at once"
            )
        if n > BATCH or n > len(cache.free):
            raise SpecliError(
                f"a token tree of {n} nodes is more than the llama.cpp engine's {BATCH} / "
                f"{len(cache.free)} free sequences.",
                "Lower --tree.",
            )
        self._check(cache, n)
        if not cache.primed:
            self._prime(cache, [], last_only=False)
        own = [cache.free.pop() for _ in range(n)]
        memory, copy = self._memory, self.llama.llama_memory_seq_cp
        seen_tree = sees[:, chain:length].tolist()  # [n, cells]
        for i, s in enumerate(own):
            copy(memory, cache.seq, s, -1, -1)
            for j, on in enumerate(seen_tree[i]):
                if on:
                    pos, cell, _ = cache.tree[j]
                    copy(memory, cell, s, pos, pos + 1)
        seen_batch = sees[:, length:].tolist()  # [n, n]: row m sees batch token i at [m][i]
        batch = self._batch
        for i, token in enumerate(tokens):
            seqs = [own[i]] + [own[m] for m in range(n) if m != i and seen_batch[m][i]]
            batch.token[i] = token
            batch.pos[i] = where[i]
            batch.n_seq_id[i] = len(seqs)
            for j, s in enumerate(seqs):  # its own first: llama.cpp masks a token by its first sequence
                batch.seq_id[i][j] = s
            batch.logits[i] = True
        pad = max(0, self.rule.least - n)
        pad_rows(batch, n, pad, PAD_SEQ, tokens[-1])
        try:
            self._decode(n, pad)
        except SpecliError:
            for s in own:
                self.llama.llama_memory_seq_rm(memory, s, -1, -1)
            cache.free += own
            raise
        cache.tree += list(zip(where, own, tokens, strict=True))
        return self._logits(n), None

    def keep(self, cache: LlamaCache, n: int, kept: list[int]) -> None:
        """Of the newest n entries (a tree round's cells) keep `kept` (offsets, ascending) as the chain's
        next positions; the rest are dropped."""
        if n != len(cache.tree):
            raise NotImplementedError("llama.cpp trees keep a path out of the whole tree block only")
        start = len(cache.tree) - n
        for offset, index in enumerate(kept):
            pos, cell, token = cache.tree[start + index]
            if pos != cache.chain + offset:
                raise NotImplementedError("the kept tree cells are not the chain's next positions")
            self.llama.llama_memory_seq_cp(self._memory, cell, cache.seq, pos, pos + 1)
            if cache is self._live:
                self._held[pos:] = [token]
        self._drop_tree(cache)
        cache.chain += len(kept)

    def _drop_tree(self, cache: LlamaCache) -> None:
        for _, cell, _ in cache.tree:
            self.llama.llama_memory_seq_rm(self._memory, cell, -1, -1)
            cache.free.append(cell)
        cache.tree = []

    def rewind(self, cache: LlamaCache, n: int) -> None:
        """Drop the newest n >= 0 entries: tree cells (all of them, when any) first, then chain positions."""
        if n <= 0:
            return
        if cache.tree:
            if n < len(cache.tree):
                raise NotImplementedError("llama.cpp trees rewind a whole tree block at a time")
            n -= len(cache.tree)
            self._drop_tree(cache)
        if n:
            self.llama.llama_memory_seq_rm(self._memory, cache.seq, cache.chain - n, -1)
            cache.chain -= n
            if cache is self._live:
                self._truncate(cache.chain)

    def _truncate(self, length: int) -> None:
        """The live cache's chain now ends at `length`."""
        del self._held[length:]
        self._prompt_cells = min(self._prompt_cells, length)

    def settle(self, cache: LlamaCache) -> None:
        """Nothing to trim: the sliding-window cache is full-size."""
