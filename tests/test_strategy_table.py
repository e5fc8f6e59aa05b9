"""The strategies as one enum and one table (issue 29): `Strategy` members are plain strings wherever
they travel (f-strings, JSON, YAML, settings, presets)."""

from __future__ import annotations

import json

import yaml

from specli.drafters.table import Strategy
from specli.presets import ModelSpec, Preset, preset_to_dict
from specli.settings import STRATEGIES, resolve_settings


def test_a_strategy_prints_and_serializes_as_its_plain_name():
    """Catches the enum printing as 'Strategy.DRAFT' (a str enum's default format on Python 3.11+) in
    messages and views, and a member reaching JSON or YAML output as anything but its name."""
    assert f"{Strategy.DRAFT}" == "draft" and str(Strategy.LOOKUP) == "lookup"
    assert f"'{Strategy.EAGLE}'" == "'eagle'" and f"{Strategy.SELF:>5}" == " self"
    assert json.dumps({"strategy": Strategy.NONE}) == '{"strategy": "none"}'
    assert STRATEGIES == ("draft", "none", "lookup", "self", "eagle")
    assert all(type(name) is str for name in STRATEGIES)


def test_settings_and_presets_hold_plain_names_given_a_member():
    """Catches a Strategy member kept inside Settings or a Preset: yaml.safe_dump (presets show) cannot
    represent it, and its repr would leak into messages."""
    settings = resolve_settings(strategy=Strategy.LOOKUP)
    assert type(settings.strategy) is str and settings.strategy == "lookup"
    assert yaml.safe_dump(settings.to_dict())  # raises on an enum member
    assert type(settings.replace(strategy=Strategy.SELF).strategy) is str
    preset = Preset(name="p", strategy=Strategy.SELF, target=ModelSpec(model="a/b"))
    assert type(preset.strategy) is str and repr(preset.strategy) == "'self'"
    assert "strategy: self" in yaml.safe_dump(preset_to_dict(preset))
