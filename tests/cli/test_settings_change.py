"""Settings cross layers as one typed `SettingsChange` and are held against models by one pure check,
`check_fits`, which the CLI runs on local configs before torch loads and `Pair.settings` on the loaded
models (issue 40 #3)."""

from __future__ import annotations

import dataclasses

import pytest

from specli.errors import UsageError
from specli.settings import ModelContext, Settings, SettingsChange, check_fits, resolve_settings


def test_a_change_names_every_setting_and_only_those():
    """Catches a field added to Settings that a caller cannot change (or a change field Settings lacks)."""
    assert [f.name for f in dataclasses.fields(SettingsChange)] == [
        f.name for f in dataclasses.fields(Settings)
    ]
    with pytest.raises(TypeError, match="unknown setting"):
        SettingsChange().merged(temprature=0.5)


def test_a_change_leaves_what_it_does_not_name():
    change = SettingsChange(temperature=0.7).merged(top_k=5, seed=None)
    assert change.given() == {"temperature": 0.7, "top_k": 5}  # a None merged in leaves the field unset
    assert SettingsChange(seed=3).merged(seed=None).seed == 3
    preset_k = resolve_settings().num_draft_tokens
    settings = resolve_settings(None, change)
    assert (settings.temperature, settings.top_k, settings.num_draft_tokens) == (0.7, 5, preset_k)
    assert resolve_settings(None, change, temperature=0.2).temperature == 0.2  # fields on top of the change


def _message(settings: Settings, target: ModelContext | None, draft: ModelContext | None = None) -> str:
    with pytest.raises(UsageError) as error:
        check_fits(settings, target, draft)
    return str(error.value)


def test_k_must_fit_every_context_the_strategy_uses():
    """k <= context - 2 (a prompt token, the last token and k drafts); the drafter's context counts only
    for a strategy drafting with a draft model. Catches an off-by-one or the drafter checked under lookup."""
    target, short = ModelContext("t", 24), ModelContext("d", 10)
    check_fits(resolve_settings(num_draft_tokens=22), target)
    assert "-k 22 or less" in _message(resolve_settings(num_draft_tokens=23), target)
    assert "'d' (10 tokens)" in _message(
        resolve_settings(strategy="draft", num_draft_tokens=9), target, short
    )
    check_fits(resolve_settings(strategy="lookup", num_draft_tokens=9), target, short)
    check_fits(resolve_settings(strategy="none", num_draft_tokens=60), target, short)  # plain drafts nothing
    check_fits(resolve_settings(num_draft_tokens=60), ModelContext("hub/id", None))  # unknown: loading checks


def test_the_exit_layer_must_sit_inside_the_target():
    """Only for a strategy drafting with the target's own layers, and only when the depth is known."""
    deep = ModelContext("t", 512, layers=8)
    check_fits(resolve_settings(strategy="self", exit_layer=7), deep)
    assert "between 1 and 7" in _message(resolve_settings(strategy="self", exit_layer=8), deep)
    check_fits(resolve_settings(strategy="draft", exit_layer=8), deep)  # draft ignores the exit layer
    check_fits(resolve_settings(strategy="self", exit_layer=8), ModelContext("t", 512))  # depth unknown
