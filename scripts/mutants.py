"""Mutation testing: inject one realistic bug at a time into a copy of specli and see whether the tests
catch it (issue 40, item 8: the safety net, measured).

Run it with the project's environment, from the repository root:

    .venv/bin/python scripts/mutants.py              # every mutant (about 30-40 minutes on 2 cores)
    .venv/bin/python scripts/mutants.py --list       # the mutants, whether each still applies, its tests
    .venv/bin/python scripts/mutants.py --only verify-residual-abs,stops-trim-extra --json /tmp/m.json

Each mutant names no file: its `old` snippet is searched for in every specli/**/*.py and must occur
exactly once in the whole package (else the mutant is reported "stale": the code it targets moved or
changed; edit the snippet), and its tests are test-file basenames found anywhere under tests/ (so they
survive tests moving into subfolders). A test entry is "test_x.py", "test_x.py::test_name" (a node id,
parametrization included) or "test_x.py -k EXPR".

The tree (everything at the top of the repository but .git, .venv, caches and build output) is copied
once into a temporary folder; each mutant is applied there, its tests run with `python -m pytest -q -x
-p no:cacheprovider`, and the file is restored. The source tree is never written. The tests of all the
selected mutants first run once unmutated: that baseline must pass. A mutant is "killed" when its tests
fail, "timeout" when they run past --timeout (counted as killed, reported apart), "survived" when they
pass, "stale" when its snippet is not found exactly once. `lossy` marks a bug that changes the generated
text or the sampled distribution (the bugs the losslessness promise is about).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_TOP = {".git", ".venv", "venv", ".cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist"}
SKIP_ANY = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
PYTEST = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]

# fmt: off
MUTANTS = [
    # ------------------------------------------------------------------ engine/
    dict(
        id="verify-residual-abs", area="engine/verify", lossy=True,
        why="the correction drawn from normalize(|p - q|) instead of normalize(max(p - q, 0))",
        old="residual = (p - q).clamp_min(0)",
        new="residual = (p - q).abs()",
        tests=["test_verify.py"],
    ),
    dict(
        id="verify-bonus-row", area="engine/verify", lossy=True,
        why="the bonus token drawn from p_k (the last drafted position) instead of p_{k+1}",
        old="outcome = p[k] if accepted == k else",
        new="outcome = p[k - 1] if accepted == k else",
        tests=["test_verify.py"],
    ),
    dict(
        id="verify-one-hot-residual-keeps-draft", area="engine/verify", lossy=True,
        why="a deterministic draft's correction drawn from p itself, the refused token left in",
        old="return residual_distribution(p, q) if q is not None else without(p, [drafted])",
        new="return residual_distribution(p, q) if q is not None else p",
        tests=["test_verify.py"],
    ),
    dict(
        id="verify-tree-correction-keeps-children", area="engine/verify", lossy=True,
        why="a deterministic tree's correction drawn from p itself, the refused children left in",
        old="token = int(sample(without(p[row], sorted(tried)), generator))",
        new="token = int(sample(p[row], generator))",
        tests=["test_tree_lossless.py -k 'first_two_tokens'"],
    ),
    dict(
        id="verify-tree-sampled-correction-from-p", area="engine/verify", lossy=True,
        why="a drawn tree's correction drawn from the row's p instead of its last residual p'",
        old="            token = int(sample(p_row[row], generator))",
        new="            token = int(sample(p[row], generator))",
        tests=["test_tree_lossless.py -k 'first_two_tokens'"],
    ),
    dict(
        id="verify-temperature-twice", area="engine/verify", lossy=True,
        why="the target's logits divided by the temperature before process_logits divides them again",
        old="p = process_logits(logits, sampling)  # [k+1, V]",
        new="p = process_logits(logits / sampling.temperature, sampling)  # [k+1, V]",
        tests=["test_verify_temperature.py", "test_engine_sampling.py", "test_lossless_sampling.py"],
    ),
    dict(
        id="sampling-topk-ties", area="engine/sampling", lossy=True,
        why="top-k drops the k-th token itself (keeps k - 1)",
        old='scores = scores.masked_fill(scores < kth, -float("inf"))',
        new='scores = scores.masked_fill(scores <= kth, -float("inf"))',
        tests=["test_sampling.py"],
    ),
    dict(
        id="sample-id-after", area="engine/sampling", lossy=True,
        why="the inverse transform takes the id after the one whose cumulative sum first exceeds the draw",
        old="ids = torch.searchsorted(cumulative, point, right=True)  # [N, 1]",
        new="ids = torch.searchsorted(cumulative, point, right=True) + 1  # [N, 1]",
        tests=["test_sampling.py"],
    ),
    dict(
        id="sample-unnormalised", area="engine/sampling", lossy=True,
        why="a row's draw is not scaled to its total: a row summing to more than 1 never reaches its end",
        old="point = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64) * total",
        new="point = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64)",
        tests=["test_sampling.py"],
    ),
    dict(
        id="loop-rewind-length", area="engine/loop", lossy=True,
        why="the target cache rewinds one position too few after a rejection",
        old="target.rewind(cache, len(verdict.drafted) - verdict.accepted)",
        new="target.rewind(cache, len(verdict.drafted) - verdict.accepted - 1)",
        tests=["test_engine.py"],
    ),
    dict(
        id="draft-length-outcomes-not-chances", area="engine/draft_length", lossy=False,
        why="a sampled round's judged drafts learn their 0-or-1 outcome, not their chance min(1, p/q)",
        old="kept[i] += accept_probs[i] if accept_probs is not None else float(i < accepted)",
        new="kept[i] += float(i < accepted)",
        tests=["test_draft_length.py -k chance"],
    ),
    dict(
        id="loop-chances-not-handed", area="engine/loop", lossy=False,
        why="the loop never hands the cost model a round's accept_probs",
        old="accept_probs=verdict.accept_probs if verdict.tree is None else None,",
        new="accept_probs=None,",
        tests=["test_draft_length.py -k chance"],
    ),
    dict(
        id="bench-ignore-eos-dropped", area="cli/bench", lossy=False,
        why="bench --ignore-eos never reaches the runs' settings",
        old="ignore_eos=ignore_eos or None)",
        new="ignore_eos=None)",
        tests=["test_bench.py -k ignore_eos"],
    ),
    dict(
        id="draft-length-budget", area="engine/draft_length", lossy=True,
        why="k capped at the tokens left instead of one less: a full round overshoots max_new_tokens",
        old="cap = min(self.max_k, budget - 1)\n        if cap < 1:\n            return 0, \"budget\"",
        new="cap = min(self.max_k, budget)\n        if cap < 1:\n            return 0, \"budget\"",
        tests=["test_engine.py"],
    ),
    dict(
        id="draft-length-judged", area="engine/draft_length", lossy=False,
        why="the rejected position is not counted as judged: acceptance estimates only ever rise",
        old="for i in range(min(drafted, accepted + 1, self.max_k)):",
        new="for i in range(min(drafted, accepted, self.max_k)):",
        tests=["test_draft_length.py -k 'not keep_greedy_output_identical'"],
    ),
    dict(
        id="tree-ancestor-mask", area="engine/tree", lossy=True,
        why="a tree node inherits its grandparent's row of the mask (row/node index confusion)",
        old="mask[row] = mask[parent + 1]",
        new="mask[row] = mask[parent]",
        tests=["test_tree.py"],
    ),
    dict(
        id="tree-greedy-row", area="engine/verify", lossy=True,
        why="greedy tree verification descends into the row before the accepted node's",
        old="path.append(matched)\n        row = matched + 1\n    accept = [",
        new="path.append(matched)\n        row = matched\n    accept = [",
        tests=["test_tree.py"],
    ),
    dict(
        id="tree-drawn-q-frozen", area="engine/verify", lossy=True,
        why="drawn children divided by the row's original q, never renormalised after a refused child",
        old="q_row[at] = q_rest / total.clamp_min(torch.finfo(p.dtype).tiny)",
        new="pass",
        tests=["test_tree_sampled.py", "test_tree_lossless.py -k 'drawn and follow'"],
    ),
    dict(
        id="tree-drawn-no-residual", area="engine/verify", lossy=True,
        why="after a refused drawn child the next is judged against p itself, not the residual",
        old="p_row[at] = residual_distribution(p_row[at], q_row[at])  # what a refusal leaves",
        new="pass",
        tests=["test_tree_sampled.py", "test_tree_lossless.py -k 'drawn and follow'"],
    ),
    dict(
        id="tree-drawn-wrong-scale", area="engine/sampling", lossy=True,
        why="children drawn by Gumbel keys on probabilities, not log-probabilities (not draws from q)",
        old="keys = torch.where(probs > 0, probs.float().log() + gumbel, -torch.inf)",
        new="keys = torch.where(probs > 0, probs.float() + gumbel, -torch.inf)",
        tests=["test_tree_sampled.py", "test_tree_lossless.py -k 'drawn and follow'"],
    ),
    dict(
        id="tree-shape-late-draws", area="engine/tree", lossy=True,
        why="a node of a chosen shape that draws fewer children than its depth's widest keeps its LAST "
            "draws (draws 2.. of q are not draws from q)",
        old="draws = zip(*(part[row][: counts[row]] for part in host), strict=True)",
        new="draws = zip(*(part[row][len(part[row]) - counts[row] :] for part in host), strict=True)",
        tests=["test_tree_shape.py", "test_tree_lossless.py -k chosen_shape"],
    ),
    dict(
        id="lookup-drawn-q-unnormalised", area="drafters/prompt_lookup", lossy=True,
        why="lookup's drawn children judged against its followers' raw shares (escaped weights sum below "
            "1), not the normalised q they were drawn from",
        old="                row /= row.sum()",
        new="                pass",
        tests=["test_strategies.py -k 'drawn'"],
    ),
    dict(
        id="stopping-eos-dropped", area="engine/stopping", lossy=True,
        why="the EOS token is cut with what follows it (transformers keeps it)",
        old="end, reason = i + 1, StopReason.EOS",
        new="end, reason = i, StopReason.EOS",
        tests=["test_engine.py"],
    ),
    dict(
        id="stopping-lookback-chars", area="engine/stopping", lossy=True,
        why="the stop-string look-back counts characters as tokens: a string split over byte tokens "
            "across rounds is missed",
        old="self._lookback = 4 * max((len(s) for s in self.stop_strings), default=0) + 1",
        new="self._lookback = max((len(s) for s in self.stop_strings), default=0) + 1",
        tests=["test_stop_strings_across_rounds.py", "test_engine.py"],
    ),
    # ------------------------------------------------------------------ drafters/
    dict(
        id="draft-model-commit-kept", area="drafters/draft_model", lossy=False,
        why="after a fully accepted draft the drafter keeps d_k as if it had run it (it never fed it)",
        old="kept = min(accepted, self._fed)",
        new="kept = accepted",
        tests=["test_drafter_contract.py", "test_engine.py"],
    ),
    dict(
        id="draft-model-tree-rewind", area="drafters/draft_model", lossy=False,
        why="a drafted tree leaves its last node in the drafter's cache",
        old="self.lm.rewind(self._cache, len(slots))",
        new="self.lm.rewind(self._cache, len(slots) - 1)",
        tests=["test_tree.py"],
    ),
    dict(
        id="draft-model-parallel-rows", area="drafters/draft_model", lossy=False,
        why="a parallel (PARD) draft reads its k distributions one position late",
        old="logits = self._align(self.lm.forward(inp, self._cache).float())  # [k, V]",
        new="logits = self._align(self.lm.forward(inp, self._cache)[1:].float())  # [k, V]",
        tests=["test_parallel_drafting.py -k pard"],
    ),
    dict(
        id="lookup-commit-extra", area="drafters/prompt_lookup", lossy=False,
        why="the rejected draft token enters the lookup index with the accepted ones",
        old="self._commit(self._drafted[:accepted], token)",
        new="self._commit(self._drafted[: accepted + 1], token)",
        tests=["test_suffix_lookup.py", "test_drafter_contract.py"],
    ),
    dict(
        id="suffix-index-tie", area="drafters/suffix_index", lossy=False,
        why="a tie between followers goes to the earliest instead of the most recent",
        old="if best is None or count >= best[1]:",
        new="if best is None or count > best[1]:",
        tests=["test_suffix_lookup.py"],
    ),
    dict(
        id="eagle-prompt-pairs", area="drafters/eagle", lossy=False,
        why="the prefill's features are paired with their own tokens instead of the next ones",
        old="self._queue(features, self._prompt[1:])",
        new="self._queue(features, self._prompt[:-1])",
        tests=["test_eagle.py -k 'true_features or commit_keeps'"],
    ),
    dict(
        id="self-spec-position", area="drafters/self_speculative", lossy=True,
        why="self-speculation drafts at positions one too far (its early-layer keys are reused by verify)",
        old="position = self._length - 1",
        new="position = self._length",
        tests=["test_strategies.py"],
    ),
    # ------------------------------------------------------------------ models/
    dict(
        id="gguf-data-offset", area="models/gguf_file", lossy=False,
        why="the tensor data offset rounded down to the alignment instead of up",
        old="data_offset = -(-cursor.pos // alignment) * alignment",
        new="data_offset = cursor.pos // alignment * alignment",
        tests=["test_sources.py", "test_gguf.py"],
    ),
    dict(
        id="gguf-auto-dtype", area="models/gguf_cache", lossy=True,
        why="--dtype auto stores the dequantized weights in bfloat16 (rounded) instead of float32",
        old='"auto": "float32",',
        new='"auto": "bfloat16",',
        tests=["test_gguf.py"],
    ),
    dict(
        id="lean-window-single", area="models/own_forward", lossy=False,
        why="a one-token lean step past a sliding window attends window + 1 keys",
        old="keys, values = keys[:, start + 1 - window :], values[:, start + 1 - window :]",
        new="keys, values = keys[:, start - window :], values[:, start - window :]",
        tests=["test_lean.py"],
    ),
    dict(
        id="cached-lm-sliding-recording", area="models/cached_lm", lossy=True,
        why="the dynamic cache's past recording never switched on (a misspelt attribute): sliding "
            "layers cannot roll back past their window",
        old='if hasattr(cache, "activate_past_recording"):',
        new='if hasattr(cache, "activate_past_recordings"):',
        tests=["test_engine.py", "test_strategies.py"],
    ),
    dict(
        id="cache-compact-offset", area="models/cache", lossy=True,
        why="a tree's accepted path copied from one position early (kept offsets taken as node numbers)",
        old="index = torch.tensor(kept, device=keys.device) + start",
        new="index = torch.tensor(kept, device=keys.device) + start - 1",
        tests=["test_tree.py"],
    ),
    dict(
        id="llama-rewind-keeps-one", area="models/llama_cpp", lossy=True,
        why="a llama.cpp rewind leaves the first rejected position in the sequence",
        old="self.llama.llama_memory_seq_rm(self._memory, cache.seq, cache.chain - n, -1)",
        new="self.llama.llama_memory_seq_rm(self._memory, cache.seq, cache.chain - n + 1, -1)",
        tests=["test_llama_engine.py"],
    ),
    dict(
        id="llama-features-first-row", area="models/llama_cpp", lossy=False,
        why="every row of a llama.cpp forward given the first row's hidden state",
        old="np.ctypeslib.as_array(pointer, shape=(rows, width)).copy())",
        new="np.ctypeslib.as_array(pointer, shape=(1, width)).copy()).expand(rows, -1).clone()",
        tests=["test_llama_engine.py -k 'features or heads'"],
    ),
    dict(
        id="llama-embeddings-stay-on", area="models/llama_cpp", lossy=True,
        why="embeddings left on after a heads forward: a later prefill returns its first row's logits",
        old="            self.llama.llama_set_embeddings(self._ctx, False)",
        new="            pass",
        tests=["test_llama_engine.py -k 'features or heads'"],
    ),
    dict(
        id="llama-prefill-rule-ignored", area="models/llama_cpp", lossy=True,
        why="a build whose prefill-sized batches round unlike steps still prefills a prompt's last token "
        "in the batch and reuses an earlier prompt's cells",
        old="return self.most >= max(TESTED) and self.prefill_exact",
        new="return self.most >= max(TESTED)",
        tests=["test_llama_rows.py -k 'prefill or reuses'"],
    ),
    dict(
        id="llama-probe-skips-prefill-sizes", area="models/llama_cpp", lossy=True,
        why="the probe never tries prefill-sized batches: a tiled build's prefills pass as exact",
        old="prefill_exact = all(np.array_equal(rows, reference[:n]) for n, rows in prompts.items())",
        new="prefill_exact = True",
        tests=["test_llama_rows.py -k 'probe or documented'"],
    ),
    dict(
        id="llama-flash-never-on", area="models/llama_cpp", lossy=True,
        why="a rule with flash attention opens the context without it: verifies and steps run the other "
        "attention than the probe measured (and the reference decodes)",
        old="llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED",
        new="llama.LLAMA_FLASH_ATTN_TYPE_DISABLED",
        tests=["test_llama_rows.py -k flash"],
    ),
    dict(
        id="llama-flash-chosen-when-slower", area="models/llama_cpp", lossy=False,
        why="flash attention is taken wherever its rule is as cheap, even where its steps are slower",
        old="if flash.as_cheap_as(plain) and seconds[True] < seconds[False]:",
        new="if flash.as_cheap_as(plain):",
        tests=["test_llama_rows.py -k chosen"],
    ),
    dict(
        id="llama-flash-rule-costlier", area="models/llama_cpp", lossy=False,
        why="flash attention's rule counts as cheap though its prefills round apart where plain ones don't",
        old="return rows and self._reuse >= other._reuse",
        new="return rows",
        tests=["test_llama_rows.py -k chosen"],
    ),
    dict(
        id="llama-prefill-steps-last-token", area="models/llama_cpp", lossy=True,
        why="where prompts round apart from steps, the loop's prefill (the prompt but its last token) runs "
        "its own last token as a step: that cell rounds unlike the reference's batch",
        old="        if last_only and not rule.prefill_exact:  # prompts round apart from steps anyway",
        new="        if False:",
        tests=["test_llama_rows.py -k reuses"],
    ),
    dict(
        id="llama-reuse-tail-unpadded", area="models/llama_cpp", lossy=True,
        why="after reused prompt cells the rest of a prompt runs as a short batch, which the tiled K-quant "
        "path skips: its rows round unlike a fresh prefill's",
        old="out = self._run(cache, tokens, BATCH, last_only=True, least=rows if start else None)",
        new="out = self._run(cache, tokens, BATCH, last_only=True)",
        tests=["test_llama_rows.py -k reuses"],
    ),
    dict(
        id="llama-reuse-any-prompt", area="models/llama_cpp", lossy=True,
        why="prompt cells reused where a fresh prefill of the new prompt runs a short (untiled) batch",
        old="return n >= rows and (n % BATCH == 0 or n % BATCH >= rows)",
        new="return True",
        tests=["test_llama_rows.py -k reuses"],
    ),
    dict(
        id="llama-prompt-cells-short-batch", area="models/llama_cpp", lossy=True,
        why="cells a short (untiled) prompt batch wrote counted as reusable by a later, tiled prompt",
        old="self._prompt_cells = cache.chain if canonical else whole",
        new="self._prompt_cells = cache.chain",
        tests=["test_llama_rows.py -k reuses"],
    ),
    dict(
        id="llama-costs-not-kept", area="models/llama_cpp", lossy=False,
        why="the verify timings are measured by every process again: a CLI run times ~40 forwards before "
        "its first token",
        old="                write_costs(self.model.path, threads, self.rule, *kept)",
        new="                pass",
        tests=["test_llama_engine.py -k kept"],
    ),
    dict(
        id="llama-q8-rows-not-set", area="models/llama_cpp", lossy=False,
        why="the Q8_0 kernel the engine timed faster is never set: every file runs the build's default",
        old="            library().set_q8_rows(self.q8_rows)",
        new="            pass",
        tests=["test_llama_engine.py -k q8_0"],
    ),
    dict(
        id="llama-q8-rows-slower-kernel", area="models/llama_cpp", lossy=False,
        why="the Q8_0 row count is chosen where sgemm was slower, not faster",
        old="        if sgemm[n] > dots[n]:",
        new="        if sgemm[n] < dots[n]:",
        tests=["test_llama_engine.py -k q8_0"],
    ),
    dict(
        id="llama-probe-pads-without-logits", area="models/llama_cpp", lossy=False,
        why="the probe's padded short chunk runs the LM head over fewer rows than the batch it is compared "
        "with: prompts that do round alike are found not to, and nothing is reused",
        old="prefix, least - SHORT_CHUNK, pad_logits=True)",
        new="prefix, least - SHORT_CHUNK, pad_logits=False)",
        tests=["test_llama_rows.py -k 'documented or probe'"],
    ),
    dict(
        id="heads-vocab-zero-outside", area="drafters/heads", lossy=False,
        why="tokens outside the heads' draft vocabulary get logit 0 instead of -inf (q > 0 off the rows)",
        old='logits = rows.new_full((*rows.shape[:-1], self._lm_head.weight.shape[0]), float("-inf"))',
        new="logits = rows.new_zeros((*rows.shape[:-1], self._lm_head.weight.shape[0]))",
        tests=["test_heads_vocab.py"],
    ),
    dict(
        id="plain-retry-never-backs-off", area="engine/draft_length", lossy=False,
        why="a refused retry does not double the wait: a drafter that never pays keeps costing 1 round in 17",
        old="self._retry_after, self._retrying = min(2 * self._retry_after, PLAIN_RETRY_MAX), False",
        new="self._retrying = False",
        tests=["test_draft_length.py -k model_free"],
    ),
    # ------------------------------------------------------------------ serve/
    dict(
        id="stops-trim-extra", area="serve/stops", lossy=True,
        why="the answer is cut one character before the stop string",
        old="return held if cut is None else held[:cut]",
        new="return held if cut is None else held[: cut - 1]",
        tests=["test_serve_units.py"],
    ),
    dict(
        id="schemas-stop-chars", area="serve/schemas", lossy=True,
        why='a single stop string becomes a tuple of its characters ("ab" stops at "a" or "b")',
        old="return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())",
        new="return tuple(self.stop or ())",
        tests=["test_serve.py", "test_serve_requests.py"],
    ),
    dict(
        id="body-limit-off-by-one", area="serve/body", lossy=False,
        why="a body of exactly the limit is refused (413)",
        old="if size > limit:",
        new="if size >= limit:",
        tests=["test_request_body.py", "test_serve.py"],
    ),
    # ------------------------------------------------------------------ training/
    dict(
        id="distill-kl-reversed", area="training/layerskip", lossy=False,
        why="the distillation loss is KL(student || teacher) instead of KL(teacher || student)",
        old='return F.kl_div(student, teacher, log_target=True, reduction="batchmean")',
        new='return F.kl_div(teacher, student, log_target=True, reduction="batchmean")',
        tests=["test_distillation_loss.py", "test_training_alignment.py"],
    ),
    dict(
        id="layerskip-dropout-first", area="training/layerskip", lossy=False,
        why="layer dropout rates start above zero: the first layer may be skipped",
        old="return [max_rate * i / (num_layers - 1) for i in range(num_layers)]",
        new="return [max_rate * (i + 1) / num_layers for i in range(num_layers)]",
        tests=["test_tiny.py -k 'layer_dropout or layerskip'"],
    ),
    dict(
        id="eagle-teacher-shift", area="training/eagle", lossy=False,
        why="the EAGLE head is distilled against the target one position early",
        old="target_logp = logp[:, 1 + j : 1 + j + valid]",
        new="target_logp = logp[:, j : j + valid]",
        tests=["test_training_alignment.py"],
    ),
    dict(
        id="peagle-teacher-shift", area="training/peagle", lossy=False,
        why="P-EAGLE slots are distilled against the target one position early",
        old="target_logp = logp[:, layout.positions.to(logp.device) + 1]",
        new="target_logp = logp[:, layout.positions.to(logp.device)]",
        tests=["test_training_alignment.py"],
    ),
    dict(
        id="pard-own-mask", area="training/pard", lossy=False,
        why="a PARD mask slot does not attend to itself during training (drafting it does)",
        old="own = (a_k == a_q) & (o_k > 0) & (o_k <= o_q)",
        new="own = (a_k == a_q) & (o_k > 0) & (o_k < o_q)",
        tests=["test_training_alignment.py", "test_parallel_drafting.py -k packed_training_layout"],
    ),
    dict(
        id="heads-sequential-stale-pending", area="drafters/heads", lossy=False,
        why="sequential head 1 keeps reading the pending token of an earlier round",
        old="self._pending = token\n        if self._verified is not None:  # the row",
        new="self._pending = self._pending\n        if self._verified is not None:  # the row",
        tests=["test_sequential_heads.py -k chain_reads"],
    ),
    dict(
        id="heads-sequential-tree-root-state", area="drafters/heads", lossy=False,
        why="a sequential tree expands every node from the root's state, not its parent's",
        old="states = torch.stack([below[growth.parents[node]] for node in nodes])",
        new="states = torch.stack([below[ROOT] for node in nodes])",
        tests=["test_sequential_heads.py -k tree_nodes"],
    ),
    dict(
        id="heads-teacher-shift", area="training/heads", lossy=False,
        why="sequential heads are trained reading the token one position early",
        old="part = embedded[:, i + 1 :]",
        new="part = embedded[:, i:]",
        tests=["test_sequential_heads.py -k training_feeds"],
    ),
    dict(
        id="train-loop-deadline", area="training/loop", lossy=False,
        why="the time limit ignores the next step's expected time (a run ends past its deadline)",
        old="if limits.deadline is not None and now + mean >= limits.deadline:",
        new="if limits.deadline is not None and now >= limits.deadline:",
        tests=["test_training_loop.py"],
    ),
]
# fmt: on

FIELDS = ("id", "area", "lossy", "why", "old", "new", "tests")


@dataclass
class Outcome:
    id: str
    area: str
    lossy: bool
    status: str  # killed | survived | timeout | stale
    seconds: float
    failing_test: str | None = None
    detail: str | None = None

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "area": self.area,
            "lossy": self.lossy,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "failing test": self.failing_test,
            "detail": self.detail,
        }


def check_list() -> None:
    """The mutant list is well formed: every field, unique ids, a real change."""
    ids = set()
    for m in MUTANTS:
        missing = [f for f in FIELDS if f not in m]
        if missing:
            raise SystemExit(f"mutant {m.get('id', '?')}: missing {', '.join(missing)}")
        if m["id"] in ids:
            raise SystemExit(f"mutant {m['id']}: duplicate id")
        if m["old"] == m["new"] or not m["tests"]:
            raise SystemExit(f"mutant {m['id']}: no change, or no tests")
        ids.add(m["id"])


# --------------------------------------------------------------------------- the copy


def make_copy(source: Path, target: Path) -> Path:
    """The tree at `source` copied to `target` (no .git, environments, caches or bytecode)."""
    import fnmatch

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in SKIP_ANY)}
        if Path(folder) == source:
            skipped |= {n for n in names if n in SKIP_TOP}
        return skipped

    shutil.copytree(source, target, ignore=ignore, symlinks=True)
    return target


def environment(copy: Path, python: str) -> dict[str, str]:
    """The environment the tests run in: no bytecode written (a mutant and its restore can share a
    size and an mtime second, and a stale .pyc would run the other one), and the copy's specli
    imported, not the editable install's (PYTHONPATH when needed)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    probe = [python, "-c", "import specli; print(specli.__file__)"]
    where = subprocess.run(probe, cwd=copy, env=env, capture_output=True, text=True, check=False)
    if not _inside(where.stdout.strip(), copy):
        env["PYTHONPATH"] = str(copy)
        where = subprocess.run(probe, cwd=copy, env=env, capture_output=True, text=True, check=False)
        if not _inside(where.stdout.strip(), copy):
            raise SystemExit(
                f"the copy's specli is not the one imported from {copy}: {where.stdout.strip()} "
                f"{where.stderr.strip()[-500:]}"
            )
    print(f"the copy's specli imports from {where.stdout.strip()}", flush=True)
    return env


def _inside(path: str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------- locating


def locate(copy: Path, old: str) -> tuple[Path | None, str]:
    """The one specli/**/*.py holding `old` exactly once, or (None, why not)."""
    hits: list[tuple[Path, int]] = []
    for path in sorted((copy / "specli").rglob("*.py")):
        count = path.read_text(encoding="utf-8").count(old)
        if count:
            hits.append((path, count))
    total = sum(c for _, c in hits)
    if total == 1:
        return hits[0][0], ""
    if not total:
        return None, "snippet not found in specli/"
    where = ", ".join(f"{p.relative_to(copy)} x{c}" for p, c in hits)
    return None, f"snippet found {total} times ({where})"


def resolve_tests(copy: Path, entries: list[str]) -> tuple[list[list[str]], str]:
    """Test entries -> pytest argument groups (one per -k expression, the rest together), or ([], why)."""
    plain: list[str] = []
    by_k: dict[str, list[str]] = {}
    for entry in entries:
        name, _, k = entry.partition(" -k ")
        k = k.strip().strip("'\"")
        base, sep, node = name.strip().partition("::")
        found = sorted((copy / "tests").rglob(base))
        found = [f for f in found if "__pycache__" not in f.parts]
        if len(found) != 1:
            return [], f"test file {base}: {len(found)} matches under tests/"
        arg = str(found[0].relative_to(copy)) + (sep + node if sep else "")
        if k:
            by_k.setdefault(k, []).append(arg)
        elif arg not in plain:
            plain.append(arg)
    groups = [plain] if plain else []
    groups += [args + ["-k", k] for k, args in by_k.items()]
    return groups, ""


# --------------------------------------------------------------------------- running


FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - |$)", re.MULTILINE)


def run_pytest(
    python: str, copy: Path, env: dict[str, str], args: list[str], timeout: float
) -> tuple[str, float, str | None, str]:
    """('passed' | 'failed' | 'timeout', seconds, the first failing test, the output's tail)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [python, *PYTEST, *args],
        cwd=copy,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends every child too
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", time.monotonic() - start, None, (out or "")[-2000:]
    seconds = time.monotonic() - start
    if proc.returncode == 0:
        return "passed", seconds, None, out[-2000:]
    if proc.returncode == 5:  # nothing collected: a selection that names no test is a broken mutant
        return "empty", seconds, None, out[-2000:]
    match = FAILED.search(out)
    return "failed", seconds, match.group(1) if match else f"exit {proc.returncode}", out[-2000:]


def run_groups(
    python: str, copy: Path, env: dict[str, str], groups: list[list[str]], timeout: float
) -> tuple[str, float, str | None, str]:
    """Every group in turn until one fails (the timeout covers them all)."""
    total, tail = 0.0, ""
    for args in groups:
        status, seconds, failing, tail = run_pytest(python, copy, env, args, max(1.0, timeout - total))
        total += seconds
        if status != "passed":
            return status, total, failing, tail
    return "passed", total, None, tail


def mutate_and_run(m: dict, python: str, copy: Path, env: dict[str, str], timeout: float) -> Outcome:
    path, why = locate(copy, m["old"])
    groups, test_why = resolve_tests(copy, m["tests"])
    if path is None or not groups:
        return Outcome(m["id"], m["area"], m["lossy"], "stale", 0.0, detail=why or test_why)
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original.replace(m["old"], m["new"], 1), encoding="utf-8")
        status, seconds, failing, tail = run_groups(python, copy, env, groups, timeout)
    finally:
        path.write_text(original, encoding="utf-8")
    where = str(path.relative_to(copy))
    if status == "passed":
        return Outcome(m["id"], m["area"], m["lossy"], "survived", seconds, detail=where)
    if status == "timeout":
        return Outcome(m["id"], m["area"], m["lossy"], "timeout", seconds, detail=where)
    if status == "empty":
        return Outcome(m["id"], m["area"], m["lossy"], "stale", seconds, detail="no test collected")
    return Outcome(m["id"], m["area"], m["lossy"], "killed", seconds, failing, where)


def baseline(python: str, copy: Path, env: dict[str, str], chosen: list[dict], timeout: float) -> float:
    """The chosen mutants' tests, unmutated, in one run; exits when they do not pass."""
    plain: list[str] = []
    groups: list[list[str]] = []
    for m in chosen:
        found, _ = resolve_tests(copy, m["tests"])
        for group in found:
            if "-k" in group:
                if group not in groups:
                    groups.append(group)
            else:
                plain += [a for a in group if a not in plain]
    everything = ([plain] if plain else []) + groups
    if not everything:
        return 0.0
    print(f"baseline: {sum(len(g) for g in everything)} test selections, unmutated ...", flush=True)
    status, seconds, failing, tail = run_groups(python, copy, env, everything, timeout * len(chosen))
    if status != "passed":
        print(tail, file=sys.stderr)
        raise SystemExit(f"the baseline does not pass ({status}, {failing}): fix the tests first")
    print(f"baseline passed in {seconds:.0f} s", flush=True)
    return seconds


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated mutant ids")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (a copy each; default 1)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant (default 300)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree to copy (default: this repository)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run (not advised)")
    return parser.parse_args(argv)


def chosen_mutants(only: str | None) -> list[dict]:
    if not only:
        return list(MUTANTS)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    known = {m["id"]: m for m in MUTANTS}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"unknown mutant ids: {', '.join(unknown)} (see --list)")
    return [known[w] for w in wanted]


def list_mutants(root: Path, chosen: list[dict]) -> None:
    for m in chosen:
        path, why = locate(root, m["old"])
        groups, test_why = resolve_tests(root, m["tests"])
        where = str(path.relative_to(root)) if path else f"STALE: {why}"
        tests = " | ".join(" ".join(g) for g in groups) if groups else f"STALE: {test_why}"
        print(f"{m['id']:30} {m['area']:26} {'lossy' if m['lossy'] else '     '}  {where}")
        print(f"{'':30} {m['why']}")
        print(f"{'':30} tests: {tests}")


def summary(outcomes: list[Outcome], elapsed: float) -> str:
    live = [o for o in outcomes if o.status != "stale"]
    killed = [o for o in live if o.status in ("killed", "timeout")]
    lossy = [o for o in live if o.lossy]
    lossy_killed = [o for o in lossy if o.status in ("killed", "timeout")]
    lines = [
        f"killed {len(killed)}/{len(live)} ({sum(o.status == 'timeout' for o in live)} by timeout); "
        f"lossy killed {len(lossy_killed)}/{len(lossy)}; stale {len(outcomes) - len(live)}; "
        f"{elapsed / 60:.1f} min"
    ]
    for o in outcomes:
        if o.status in ("survived", "stale", "timeout"):
            lines.append(f"  {o.status.upper():8} {o.id} ({o.area}){': ' + o.detail if o.detail else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_list()
    chosen = chosen_mutants(args.only)
    root = args.root.resolve()
    if args.list:
        list_mutants(root, chosen)
        return 0
    python = sys.executable
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="specli-mutants-") as tmp:
        jobs = max(1, min(args.jobs, len(chosen)))
        copies = [make_copy(root, Path(tmp) / f"copy{i}") for i in range(jobs)]
        envs = [environment(c, python) for c in copies]
        print(f"{len(chosen)} mutants, {jobs} job(s), python {python}, copy {copies[0]}", flush=True)
        if not args.no_baseline:
            baseline(python, copies[0], envs[0], chosen, args.timeout)
        pending: queue.Queue[dict] = queue.Queue()
        for m in chosen:
            pending.put(m)
        lock = threading.Lock()
        results: dict[str, Outcome] = {}

        def worker(slot: int) -> None:  # each worker owns one copy
            while True:
                try:
                    m = pending.get_nowait()
                except queue.Empty:
                    return
                outcome = mutate_and_run(m, python, copies[slot], envs[slot], args.timeout)
                with lock:
                    results[m["id"]] = outcome
                    said = outcome.failing_test or outcome.detail if outcome.status != "survived" else ""
                    print(
                        f"[{len(results):2}/{len(chosen)}] {outcome.status:8} {outcome.seconds:6.0f} s  "
                        f"{m['id']}{' (lossy)' if m['lossy'] else ''}{f'  ({said})' if said else ''}",
                        flush=True,
                    )

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        outcomes = [results[m["id"]] for m in chosen]
    elapsed = time.monotonic() - started
    print(summary(outcomes, elapsed))
    if args.json:
        args.json.write_text(json.dumps([o.as_dict() for o in outcomes], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
