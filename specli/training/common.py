"""The toolbox every training recipe shares (the embedded pair in tiny.py, EAGLE heads in eagle.py,
P-EAGLE in peagle.py, PARD in pard.py, `specli train` in jobs.py and loop.py): token streams and their
windows, the optimizer and its learning-rate schedule, bfloat16 mixed precision, one optimizer step and
the loop with a progress bar around it, the draft model's distillation loss, and saving a model in
float16.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specli.training.layerskip import distillation_loss


def encode_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """All texts tokenized and joined with EOS after each file -> [N] int64."""
    ids: list[int] = []
    for encoding in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(encoding.ids)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def random_windows(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """batch random windows of length+1 tokens -> [batch, length+1]."""
    starts = torch.randint(0, stream.numel() - length - 1, (batch,), generator=generator)
    return torch.stack([stream[s : s + length + 1] for s in starts.tolist()])


def fixed_windows(stream: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """Up to count consecutive non-overlapping windows of length+1 tokens -> [n, length+1]."""
    n = min(count, (stream.numel() - 1) // length)
    return torch.stack([stream[i * length : i * length + length + 1] for i in range(n)])


def make_optimizer(model, lr: float) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over 5% of the steps, then cosine decay to 10% of peak."""
    warmup = max(1, total // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def mixed_precision(device_type: str = "cpu") -> torch.autocast:
    """bfloat16 autocast on `device_type` (float32 master weights); SPECLI_TRAIN_FP32=1 trains in float32."""
    return torch.autocast(
        device_type, dtype=torch.bfloat16, enabled=os.environ.get("SPECLI_TRAIN_FP32") != "1"
    )


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    step: int,
    total: int,
    peak_lr: float,
    step_loss: Callable[[], tuple[torch.Tensor, dict[str, Any]]],
) -> dict[str, Any]:
    """One optimizer step of every recipe: the learning rate of `step` (lr_at), backward, gradient
    clipping at 1, AdamW. step_loss() -> (loss, record); returns the record."""
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, total, peak_lr)
    loss, record = step_loss()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return record


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TimeRemainingColumn(elapsed_when_finished=True),
    )


def _log_plain(progress, name: str, step: int, total: int, loss: float) -> None:
    """Without a terminal the bar cannot redraw: print a line every 5% of the steps instead."""
    if not progress.console.is_terminal and (step + 1) % max(1, total // 20) == 0:
        progress.console.print(f"{name} step {step + 1}/{total} loss {loss:.3f}")


def fit(
    model,
    name: str,
    steps: int,
    peak_lr: float,
    log_every: int,
    step_loss: Callable[[], tuple[torch.Tensor, dict[str, Any]]],
) -> list[dict]:
    """The loop of the embedded recipes (tiny, eagle, peagle, pard; `specli train` runs loop.py): AdamW
    with warm-up + cosine decay, gradient clipping at 1, a progress bar. step_loss() -> (loss, record);
    record's first value is the loss shown and logged. Returns the records of every log_every-th step
    (and the last)."""
    optimizer = make_optimizer(model, peak_lr)
    history: list[dict] = []
    model.train()
    with _progress() as progress:
        task = progress.add_task(name, total=steps, loss=float("nan"))
        for step in range(steps):
            record = train_step(model, optimizer, step, steps, peak_lr, step_loss)
            shown = next(iter(record.values()))
            if step % log_every == 0 or step == steps - 1:
                history.append({"step": step, **record})
            progress.update(task, advance=1, loss=shown)
            _log_plain(progress, name, step, steps, shown)
    model.eval()
    return history


def draft_loss(
    draft, target, window: torch.Tensor, kind: str = "kl", target_autocast: bool = True
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The drafter's loss on window [B, T+1]: KL(p_target || q_draft) at every position ("kl"), or the
    cross-entropy of the data's next tokens ("ce", the ablation), over the token range both models share
    (their embedding rows may differ). The record: the loss, then `agree` [depth 1]: how often the
    drafter's argmax is the target's. target_autocast: the target under bfloat16 autocast (else in its
    own dtype)."""
    batch, labels = window[:, :-1], window[:, 1:]
    device = batch.device.type
    with (
        torch.no_grad(),
        mixed_precision(device) if target_autocast else torch.autocast(device, enabled=False),
    ):
        teacher = target(input_ids=batch, use_cache=False).logits  # [B, T, V_target]
    with mixed_precision(device):
        student = draft(input_ids=batch, use_cache=False).logits  # [B, T, V_draft]
    shared = min(teacher.shape[-1], student.shape[-1])
    teacher, student = teacher[..., :shared], student[..., :shared]
    if kind == "kl":
        loss = distillation_loss(student.flatten(0, 1), teacher.flatten(0, 1))
    else:  # the ablation: the data's next tokens only
        loss = F.cross_entropy(student.flatten(0, 1).float(), labels.flatten())
    agree = (student.argmax(-1) == teacher.argmax(-1)).float().mean().item()
    return loss, {kind: round(loss.item(), 4), "agree": [round(agree, 4)]}


DRAFTER_DTYPE = torch.bfloat16  # how drafters are stored: half the bytes, float32's range


def save_model(model, tokenizer, folder: Path, dtype: torch.dtype = DRAFTER_DTYPE) -> None:
    """Safetensors in `dtype` (drafters: bfloat16; the embedded target keeps float16) + config +
    generation config + the shared tokenizer. The model in memory goes back to float32."""
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    half = model.to(dtype)
    half.save_pretrained(folder)
    model.to(torch.float32)
    tokenizer.save_pretrained(folder)


def round_trip_half(model, dtype: torch.dtype = DRAFTER_DTYPE) -> None:
    """Make the in-memory weights equal to what is saved in `dtype` (the end-of-run measurement then
    drafts with the weights the folder holds)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
