"""The training objectives line up with the target: the shipped heads and drafters (specli/embedded/),
run through each kind's own loss function on held-out standard-library code, agree with the embedded
target as their training.json recorded on the validation split, as `evaluate()` measures on the same
windows, and the loss's cross-entropy sits near the target's own entropy.

Any drafter stays lossless, however badly it was trained, so the losslessness tests cannot see a loss
that distils the target's distribution one position off: the drafter then learns the wrong place. A
well-trained drafter through a misaligned loss agrees with the target rarely (depth 1: ~0.1 instead of
~0.7) and its cross-entropy jumps by nats; these tests catch that in every kind's loss.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specli.models.head_formats import load_head
from specli.models.model_dirs import embedded_model
from specli.training import common, data, eagle, pard, peagle
from specli.training.corpus import is_validation, stdlib_files, stdlib_root

WINDOWS, CONTEXT = 3, 256  # the first windows of the validation stream the shipped runs measured on
NEAR_RECORD = 0.08  # a few windows against the recorded 16: sampling noise only
NEAR_EVALUATE = 0.03  # the same windows: the loss runs the student under bfloat16 autocast, evaluate not
ENTROPY_MARGIN = 1.0  # nats above the teacher's entropy (trained: 0.1-0.4; one position off: > 2.5)


@cache
def _target() -> tuple[torch.nn.Module, object]:
    folder = embedded_model("tiny-target")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(folder)


@cache
def _windows() -> torch.Tensor:
    """[WINDOWS, CONTEXT+1]: the start of the stdlib validation stream, as `specli train --data stdlib`
    builds it (documents in path order, EOS after each), read only as far as needed."""
    _, tokenizer = _target()
    root = stdlib_root()
    docs, count = [], 0
    for path in stdlib_files(root):
        if not is_validation(path.relative_to(root).as_posix()):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if not text.strip():
            continue
        docs.append(tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)
        count += len(docs[-1]) + 1
        if count > WINDOWS * CONTEXT + 1:
            break
    return common.fixed_windows(data.token_stream(docs, tokenizer.eos_token_id), WINDOWS, CONTEXT)


@cache
def _teacher_entropy() -> float:
    """The target's mean entropy (nats) over the windows' positions: the least a cross-entropy against
    its aligned distributions can be (up to the draft vocabulary's missing mass)."""
    target, _ = _target()
    with torch.no_grad():
        logp = target(input_ids=_windows()[:, :-1]).logits.float().log_softmax(-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


def _recorded(name: str) -> list[float]:
    report = json.loads((Path(embedded_model(name)) / "training.json").read_text())
    return report["validation"]["agreement_by_depth"]


def _head(name: str):
    target, _ = _target()
    head = load_head(embedded_model(name), target.config, dtype=torch.float32).eval()
    if not head.config.own_embeddings:  # the target's parts, frozen (as specli.training.jobs sets them)
        object.__setattr__(head, "target_embed", target.get_input_embeddings())
        object.__setattr__(head, "target_head", target.get_output_embeddings())
    return head


def _eagle(name: str) -> tuple[dict, list[float]]:
    target, _ = _target()
    head, windows = _head(name), _windows()
    kind = head.config.kind
    recipe = eagle.HeadRecipe(
        kind=kind, ttt_steps=3 if kind == "eagle3" else 1, feature_noise=0.0, target_autocast=False
    )
    with torch.no_grad():
        _, record = eagle.head_loss(head, target, windows[:, :-1], recipe, torch.Generator())
        evaluated = eagle.evaluate(head, target, windows, recipe.ttt_steps, autocast=False)
    return record, evaluated["agreement_by_step"]


def _peagle(name: str) -> tuple[dict, list[float]]:
    target, _ = _target()
    head, windows = _head(name), _windows()
    recipe = peagle.PEagleRecipe(parallel=8, retain=1.0, target_autocast=False)  # every anchor kept
    with torch.no_grad():
        _, record = peagle.peagle_loss(head, target, windows[:, :-1], recipe, torch.Generator())
        evaluated = peagle.evaluate(head, target, windows, recipe.parallel, autocast=False)
    return record, evaluated["agreement_by_depth"]


def _pard(name: str) -> tuple[dict, list[float]]:
    target, _ = _target()
    windows = _windows()
    drafter = AutoModelForCausalLM.from_pretrained(embedded_model(name), dtype=torch.float32).eval()
    mask_id = drafter.config.pard_token
    recipe = pard.PardRecipe(parallel=8, retain=1.0, target_autocast=False)
    with torch.no_grad():
        _, record = pard.pard_loss(drafter, target, windows[:, :-1], recipe, mask_id, torch.Generator())
        evaluated = pard.evaluate(drafter, target, windows, recipe.parallel, mask_id)
    return record, evaluated["agreement_by_offset"]


LOSSES = {"tiny-eagle3": _eagle, "tiny-eagle1": _eagle, "tiny-peagle": _peagle, "tiny-pard": _pard}


@pytest.mark.parametrize("name", list(LOSSES))
def test_a_shipped_drafter_through_its_own_loss_agrees_as_recorded(name):
    """Per depth, the agreement the loss reports equals evaluate()'s on the same windows and the
    training.json record; its depth-1 cross-entropy is within ENTROPY_MARGIN of the target's entropy
    (catches a teacher one position off in eagle.head_loss, peagle.peagle_loss or pard.pard_loss, and
    an evaluate() shifted with it)."""
    record, evaluated = LOSSES[name](name)
    agree, recorded = record["agree"], _recorded(name)
    assert len(agree) == len(evaluated) <= len(recorded)
    for depth, (a, e, r) in enumerate(zip(agree, evaluated, recorded, strict=False), 1):
        assert a == pytest.approx(e, abs=NEAR_EVALUATE), f"depth {depth}: loss {a}, evaluate {e}"
        assert a == pytest.approx(r, abs=NEAR_RECORD), f"depth {depth}: loss {a}, training.json {r}"
    assert agree[0] > 0.55  # a trained drafter (one position off: ~0.1)
    first = record.get("kl0", record.get("ce0"))
    assert first < _teacher_entropy() + ENTROPY_MARGIN, (first, _teacher_entropy())


def test_the_distilled_drafter_through_its_loss_agrees_as_recorded():
    """common.draft_loss on the embedded drafter: its agreement is the recorded one (specli/embedded/
    training.json) and its KL to the target is small (catches a teacher one position off)."""
    target, _ = _target()
    drafter = AutoModelForCausalLM.from_pretrained(embedded_model("tiny-draft"), dtype=torch.float32).eval()
    with torch.no_grad():
        loss, record = common.draft_loss(drafter, target, _windows(), target_autocast=False)
    recorded = json.loads((Path(embedded_model("tiny-draft")).parent / "training.json").read_text())
    assert record["agree"][0] == pytest.approx(recorded["validation"]["draft_agreement"], abs=NEAR_RECORD)
    assert float(loss) < ENTROPY_MARGIN / 2
