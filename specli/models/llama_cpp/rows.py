"""How a batch keeps each row bit-identical to a one-token step, on this file and this build
(docs/design.md §15). Imports only the bindings and numpy: the probe's child process runs `measure`.

llama.cpp picks its matrix kernels by the number of rows in a forward: llamafile's sgemm takes 2 rows or
more upstream (one token goes through ggml's own dot products; scripts/install_llama.sh gives sgemm every
row count), and a kernel may change its tiling past some row count. A `RowRule` is what keeps the engine
exact anyway: every forward that returns logits has at least `least` rows (a lone token is decoded
beside throwaway tokens in a sequence of their own) and at most `most` (longer runs are split); where a
prefill-sized batch rounds unlike steps (`prefill_exact` False), a prompt prefills as one batch as the
one-token reference's does, and a new prompt reuses an earlier one's cells only where prefill-sized
batches at least round alike among themselves whatever their size (`prefill_rows`: the documented
build's tiled K-quant matmul takes batches of 32 rows or more; the engine then pads a prompt's chunks
to that many rows). `measure`
finds the rule on the file itself: one-token steps (bare, or padded) after a 48-token prefix against
batches of every tested size and of the PROMPTS sizes, and those against each other and a short padded
chunk, compared bit for bit.

Flash attention is a second way to run the same file. Its batch rows each run whole on one thread, as a
step does, except where upstream splits a lone query's keys over the threads (512 KV cells on: 257 live
ones) and tiles batches of 64 queries or more (scripts/install_llama.sh removes both). So `measure`
finds a rule for each attention, the flash one past 256 live cells, times one-token steps under both,
and `choose` takes flash attention only where its rule is as cheap and its steps are faster (Gemma 3
270M: 3-8 % a token; SmolLM2: slower).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

PREFIX = 48  # tokens before the measured ones (so attention spans more than a handful of cells)
TESTED = (2, 3, 4, 5, 8, 9, 16, 17)  # batch sizes compared with one-token steps
PADS = (1, 2)  # the `least` rows tried, in order of cost
USEFUL_ROWS = 5  # a rule is taken once batches of this many rows are exact under it (a draft of 4)
MEASURE_VERSION = 4  # what `measure` checks (2: prefill-sized batches, 3: flash attention, 4: prefill rows
# alike among themselves): the probe's key
PROMPTS = (33, 47, 64)  # prefill-sized batches (past 32 rows, where an earlier documented build's sgemm took
# over; a tiling rounds by the batch's size, so several)
SHORT_CHUNK = 16  # a prompt's tail shorter than PROMPTS, padded to min(PROMPTS) rows (`prefill_rows`)
FLASH_PREFIX = 260  # flash attention's rule is measured past 256 live cells (a KV view of 512 cells)
TIMED_STEPS = 8  # one-token steps timed per attention and round (3 rounds, interleaved; the best counts)
FLASH_BUDGET_S = 60.0  # a file whose plain rule took longer to measure is not measured again with flash
# attention (a big model on a slow CPU: the probe's child must finish within probe.TIMEOUT_S)


@dataclass(frozen=True)
class RowRule:
    """Forwards that return logits run with `least` <= rows <= `most`; `prefill_exact`: prefill-sized
    batches (PROMPTS) score their rows as steps too; else `prefill_rows` > 0: batches of that many rows
    or more score each row alike whatever their size (not as steps), 0: not even that."""

    least: int = 1
    most: int = max(TESTED)
    prefill_exact: bool = True
    flash: bool = False  # flash attention on (`choose`): the context opens with it
    prefill_rows: int = 0

    def as_cheap_as(self, other: RowRule) -> bool:
        """Whether this rule costs no more than `other` anywhere: no more throwaway rows, no earlier
        splits, prompts reused wherever `other` reuses them."""
        rows = self.least <= other.least and self.most >= other.most
        return rows and self._reuse >= other._reuse

    @property
    def _reuse(self) -> int:
        """How much of an earlier generation a new prompt may reuse: 2 every cell (`shared`), 1 the cells
        an earlier prompt's prefill wrote (`prefill_rows`), 0 none."""
        return 2 if self.prefill_exact else 1 if self.prefill_rows else 0

    @property
    def shared(self) -> bool:
        """Whether rows of every tested batch size, prefill-sized included, round alike: only then may a
        prompt prefill with its last token in the batch, and a new prompt reuse KV cells an earlier,
        differently split prefill wrote."""
        return self.most >= max(TESTED) and self.prefill_exact

    @property
    def exact_everywhere(self) -> bool:
        return self.least == 1 and self.shared

    @property
    def costs_nothing(self) -> bool:
        """Whether verifies run as they come: no throwaway rows, no splits (a prompt's last token run as a
        step of its own costs one step a generation, not a round)."""
        return self.least == 1 and self.most >= max(TESTED)

    def describe(self) -> str:
        """What exactness costs on this file, for the engine's header line."""
        if self.costs_nothing:
            return "batches score as one-token steps"
        parts = [f"single tokens padded to {self.least} rows"] if self.least > 1 else []
        if self.most < max(TESTED):
            parts.append(f"batches split at {self.most} rows")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RowRule:
        least, most, rows = int(data["least"]), int(data["most"]), int(data.get("prefill_rows", 0))
        return cls(least, most, bool(data["prefill_exact"]), bool(data["flash"]), rows)


def context_params(
    llama: Any, n_ctx: int, threads: int, batch: int, sequences: int, flash: bool = False
) -> Any:
    """The engine's context settings (LlamaLM and the probe's child share them); `flash`: the rule's."""
    params = llama.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = batch
    params.n_seq_max = sequences
    params.n_threads = params.n_threads_batch = threads  # one split for batches and single tokens
    params.kv_unified = True  # trees and throwaway rows: one KV buffer the sequences share
    params.swa_full = True  # sliding-window layers keep every position: rewinds stay exact
    # flash attention only where the probe chose it: upstream's one-query path splits the keys over the
    # threads past 512 cells (the documented build does not) and its batch path tiles 64 queries or more
    params.flash_attn_type = (
        llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.pooling_type = llama.LLAMA_POOLING_TYPE_NONE  # embeddings (when on) per token: heads read them
    params.no_perf = True
    return params


def fill(batch: Any, tokens: list[int], start: int, seq: int, pad: int, pad_seq: int, logits: bool) -> None:
    """Write tokens at positions start.. of `seq` into `batch`, then `pad` throwaway rows (`pad_rows`).
    Logits rows come first: [len(tokens), V]."""
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits
    pad_rows(batch, len(tokens), pad, pad_seq, tokens[-1] if tokens else 0)
    batch.n_tokens = len(tokens) + pad


def pad_rows(batch: Any, first: int, pad: int, pad_seq: int, token: int) -> None:
    """`pad` throwaway rows from batch entry `first` on: `token` at positions 0.. of `pad_seq` (a
    sequence of their own, which the caller removes after the forward), no logits."""
    for j in range(pad):
        i = first + j
        batch.token[i] = token
        batch.pos[i] = j
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = pad_seq
        batch.logits[i] = False


def measure(llama: Any, model: Any, threads: int, batch_size: int, sequences: int) -> RowRule:
    """The file's rule: the cheapest rule for each attention (`measure_rows`), then `choose` on their
    one-token steps' times (`step_seconds`)."""
    start = time.perf_counter()
    plain = measure_rows(llama, model, threads, batch_size, sequences, flash=False)
    if time.perf_counter() - start > FLASH_BUDGET_S:
        return plain
    try:
        flash = measure_rows(llama, model, threads, batch_size, sequences, flash=True)
    except RuntimeError:  # llama.cpp runs no flash attention for this file (its context or decode fails)
        return plain
    if not flash.as_cheap_as(plain):
        return plain  # not worth timing
    return choose(plain, flash, step_seconds(llama, model, threads, batch_size, sequences))


def choose(plain: RowRule, flash: RowRule, seconds: dict[bool, float]) -> RowRule:
    """Flash attention's rule where it costs no more than the plain one's and its one-token steps are
    faster (`seconds`: a step's time by attention), else the plain rule."""
    if flash.as_cheap_as(plain) and seconds[True] < seconds[False]:
        return replace(flash, flash=True)
    return replace(plain, flash=False)


def step_seconds(llama: Any, model: Any, threads: int, batch_size: int, sequences: int) -> dict[bool, float]:
    """A one-token step's time under each attention after a FLASH_PREFIX-token prompt: TIMED_STEPS steps
    a round, three rounds alternating between the two contexts, the best round's mean."""
    contexts, batches = {}, {}
    tokens = _tokens(llama, model, FLASH_PREFIX + TIMED_STEPS)
    best = {False: float("inf"), True: float("inf")}
    try:
        for flash in best:
            params = context_params(llama, 512, threads, batch_size, sequences, flash)
            contexts[flash] = llama.llama_init_from_model(model, params)
            if not contexts[flash]:
                raise RuntimeError("llama.cpp cannot open a context")
            batches[flash] = llama.llama_batch_init(batch_size, 0, 1)
            _decode(llama, contexts[flash], batches[flash], tokens[:FLASH_PREFIX], 0, logits=False)
        for _ in range(3):
            for flash, ctx in contexts.items():
                start = time.perf_counter()
                for i in range(FLASH_PREFIX, FLASH_PREFIX + TIMED_STEPS):
                    _decode(llama, ctx, batches[flash], tokens[i : i + 1], i, logits=True)
                best[flash] = min(best[flash], (time.perf_counter() - start) / TIMED_STEPS)
                llama.llama_memory_seq_rm(llama.llama_get_memory(ctx), 0, FLASH_PREFIX, -1)
        return best
    finally:
        for batch in batches.values():
            llama.llama_batch_free(batch)
        for ctx in contexts.values():
            if ctx:
                llama.llama_free(ctx)


def _tokens(llama: Any, model: Any, count: int) -> list[int]:
    vocab = int(llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model)))
    return [(7 * i + 3) % max(2, vocab - 1) + 1 for i in range(count)]


def _decode(llama: Any, ctx: Any, batch: Any, tokens: list[int], start: int, logits: bool) -> None:
    fill(batch, tokens, start, 0, 0, 0, logits)
    if llama.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")


def measure_rows(
    llama: Any, model: Any, threads: int, batch_size: int, sequences: int, flash: bool = False
) -> RowRule:
    """The cheapest rule under which every tested batch scores its rows as steps of one token do, and
    whether batches of every size of PROMPTS do too, with flash attention on or off (on: after
    FLASH_PREFIX tokens, where upstream's steps split their keys over the threads)."""
    vocab = int(llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(model)))
    prefix = FLASH_PREFIX if flash else PREFIX
    size = -(-(prefix + max(PROMPTS) + max(PADS)) // 256) * 256
    params = context_params(llama, size, threads, batch_size, sequences, flash)
    ctx = llama.llama_init_from_model(model, params)
    if not ctx:
        raise RuntimeError("llama.cpp cannot open a context")
    batch = llama.llama_batch_init(batch_size, 0, 1)
    memory = llama.llama_get_memory(ctx)
    scratch = sequences - 1
    top = max(TESTED)
    tokens = _tokens(llama, model, prefix + max(PROMPTS))

    def run(
        part: list[int], start: int, pad: int, keep: bool = False, pad_logits: bool = False
    ) -> np.ndarray:
        fill(batch, part, start, 0, pad, scratch, True)
        for i in range(len(part), len(part) + pad):
            batch.logits[i] = pad_logits
        if llama.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        if pad:
            llama.llama_memory_seq_rm(memory, scratch, -1, -1)
        out = np.ctypeslib.as_array(llama.llama_get_logits(ctx), shape=(len(part), vocab)).copy()
        if not keep:
            llama.llama_memory_seq_rm(memory, 0, start, -1)
        return out

    def steps(count: int, least: int) -> np.ndarray:
        """`count` tokens after the prefix one at a time (padded to `least` rows), each kept before the
        next -> their logits [count, V]; the cells are removed afterwards."""
        out = [
            run(tokens[prefix + i : prefix + i + 1], prefix + i, least - 1, keep=True)[0]
            for i in range(count)
        ]
        llama.llama_memory_seq_rm(memory, 0, prefix, -1)
        return np.stack(out)

    try:
        _decode(llama, ctx, batch, tokens[:prefix], 0, logits=False)
        best: RowRule | None = None
        for least in PADS:
            reference = steps(top, least)
            most = 1
            for n in TESTED:  # the largest size with every tested size up to it exact
                if not np.array_equal(
                    run(tokens[prefix : prefix + n], prefix, max(0, least - n)), reference[:n]
                ):
                    break
                most = n
            rule = RowRule(least, max(most, least))
            if best is None or rule.most > best.most:
                best = rule
            if most >= USEFUL_ROWS:
                break
        assert best is not None
        # prefill-sized batches: a build's sgemm threshold or a tiling may take them
        reference = steps(max(PROMPTS), best.least)
        prompts = {n: run(tokens[prefix : prefix + n], prefix, 0) for n in PROMPTS}
        prefill_exact = all(np.array_equal(rows, reference[:n]) for n, rows in prompts.items())
        least = min(PROMPTS)  # else: do prompt-sized batches, and a short chunk padded to as many, agree?
        # (the throwaway rows' logits too: the LM head then multiplies as many rows as the unpadded batch,
        # as a prompt's chunk, which has no logits at all, never runs it)
        short = run(tokens[prefix : prefix + SHORT_CHUNK], prefix, least - SHORT_CHUNK, pad_logits=True)
        alike = all(np.array_equal(rows[:least], prompts[least]) for rows in prompts.values())
        alike = alike and np.array_equal(short, prompts[least][:SHORT_CHUNK])
        rows = 0 if prefill_exact or not alike else least
        return RowRule(best.least, best.most, prefill_exact, flash, rows)
    finally:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)
