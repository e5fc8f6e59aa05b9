"""The live token view, the explain panels and --save: styles per token kind, numbers equal to the round
events, no escape codes when piped, multi-byte text, and a real terminal (tmux)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time

import pytest
from rich.console import Console
from typer.testing import CliRunner

from specli.cli import app
from specli.events import Round, TokenKind
from specli.render.explain import ExplainView, expected_acceptance_length, prob
from specli.render.live import TokenView
from specli.render.styles import KIND_STYLES, visible

PROMPT = "def fibonacci(n):"
ANSI = "\x1b"


@pytest.fixture(scope="module")
def pair():
    """The embedded tiny pair: a trained target and distilled drafter, so every token kind occurs."""
    import specli

    return specli.load(device="cpu")


def recorded(renderable, width=120) -> Console:
    console = Console(
        record=True, file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor"
    )
    console.print(renderable)
    return console


def kinds_in(rounds: list[Round]) -> set[TokenKind]:
    kinds = {k for r in rounds for k in r.committed_kinds}
    return kinds | ({TokenKind.REJECTED} if any(r.rejected for r in rounds) else set())


# --------------------------------------------------------------------------- the live token view


def test_every_committed_token_is_styled_by_its_kind(pair):
    result = pair.generate(PROMPT, max_new_tokens=60, num_draft_tokens=3)
    assert kinds_in(result.rounds) >= {TokenKind.ACCEPTED, TokenKind.CORRECTION, TokenKind.BONUS}
    view = TokenView(pair.tokenizer, "draft", 3)
    for r in result.rounds:
        view.add(r)
    view.finish()
    assert view.text.plain == visible(result.text)
    # each span's style is the style of a kind that was committed there, in order
    expected = [KIND_STYLES[k] for r in result.rounds for k in r.committed_kinds]
    styles = [span.style for span in view.text.spans]
    assert set(styles) <= set(expected)
    for kind in (TokenKind.ACCEPTED, TokenKind.CORRECTION, TokenKind.BONUS):
        assert KIND_STYLES[kind] in styles


def test_rejected_drafts_are_struck_through_until_the_next_round(pair):
    result = pair.generate(PROMPT, max_new_tokens=60, num_draft_tokens=3)
    view = TokenView(pair.tokenizer, "draft", 3)
    struck = 0
    for r in result.rounds:
        view.add(r)
        ansi = recorded(view.body()).export_text(styles=True)
        if r.rejected and r.kind is TokenKind.CORRECTION and view._rejected:
            struck += 1
            assert "\x1b[2;9;" in ansi or "9;38;2" in ansi or "\x1b[9" in ansi or ";9;" in ansi
            assert view.body().plain.startswith(view.text.plain[: view._split])
        else:
            assert view.body().plain == view.text.plain
    assert struck > 0


def test_styles_differ_without_colour():
    """Colour-blind safe: kinds differ by text style as well, so NO_COLOR output still separates them."""
    decorations = {kind: (s.bold, s.italic, s.underline, s.strike) for kind, s in KIND_STYLES.items()}
    assert len(set(decorations.values())) == len(KIND_STYLES)


def test_status_line_and_legend(pair):
    result = pair.generate(PROMPT, max_new_tokens=20, num_draft_tokens=3)
    view = TokenView(pair.tokenizer, "draft", 3)
    for r in result.rounds:
        view.add(r)
    text = recorded(view.renderable()).export_text()
    s = result.stats
    assert f"round {s.rounds}" in text
    assert f"acceptance {s.acceptance_rate:.1%}" in text
    assert f"mean acceptance length {s.mean_acceptance_length:.2f}" in text
    for label in ("accepted", "rejected", "correction", "bonus"):
        assert label in text


def test_plain_decoding_view_has_one_kind(pair):
    result = pair.generate(PROMPT, max_new_tokens=12, strategy="none")
    view = TokenView(pair.tokenizer, "none", None)
    for r in result.rounds:
        view.add(r)
    assert {span.style for span in view.text.spans} == {KIND_STYLES[TokenKind.BONUS]}


@pytest.mark.parametrize("text", ["Hôm nay trời rất đẹp", "ok 🙂🚀 東京"])
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_multibyte_text_is_never_shown_half_decoded(tokenizer, text, chunk):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    view = TokenView(tokenizer, "draft", 3)
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        view.add(
            Round(
                index=i, drafted=part[:-1], draft_probs=[], target_probs=[], target_argmax=[],
                accept_probs=[1.0] * (len(part) - 1), uniforms=[], accepted=len(part) - 1, token=part[-1],
                kind=TokenKind.BONUS, committed=part, draft_time=0, verify_time=0, elapsed=0.1,
            )
        )  # fmt: skip
        assert "\ufffd" not in view.text.plain
    view.finish()
    assert view.text.plain == text


# --------------------------------------------------------------------------- explain


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_explain_panels_show_the_round_numbers(pair, temperature):
    rounds = list(
        pair.stream(
            PROMPT, max_new_tokens=30, num_draft_tokens=3, temperature=temperature, seed=3, record_top=4
        )
    )
    explained = ExplainView(pair.tokenizer, "draft", 3, greedy=temperature == 0, top=4)
    for r in rounds:
        text = recorded(explained.panel(r), width=200).export_text()
        assert f"drafted {len(r.drafted)} · accepted {r.accepted}" in text
        for i, token in enumerate(r.drafted):
            assert repr(pair.tokenizer.decode([token])) in text
            if temperature:
                assert prob(r.draft_probs[i]) in text and prob(r.target_probs[i]) in text
                assert prob(r.accept_probs[i]) in text
                if i <= r.accepted:
                    assert prob(r.uniforms[i]) in text
        assert r.token_source and r.token_source[0][1] >= r.token_source[-1][1]
        assert prob(r.token_source[0][1]) in text
        word = "Correction" if r.kind is TokenKind.CORRECTION else "Bonus"
        if temperature == 0 and r.kind is TokenKind.CORRECTION:
            word = "Correction (the argmax)"
            assert f"{pair.tokenizer.decode([r.target_argmax[r.accepted]])!r}" in text
        if r.drafted:
            assert f"{word}: {pair.tokenizer.decode([r.token])!r}" in text
        else:
            assert "No draft this round" in text and repr(pair.tokenizer.decode([r.token])) in text
    summary = recorded(explained.summary(), width=200).export_text()
    alpha = explained.stats.acceptance_rate
    assert f"{expected_acceptance_length(alpha, 3):.2f}" in summary
    assert f"observed {explained.stats.mean_acceptance_length:.2f}" in summary


def test_expected_acceptance_length():
    assert expected_acceptance_length(0.0, 4) == 1.0
    assert expected_acceptance_length(1.0, 4) == 5.0
    assert expected_acceptance_length(0.5, 2) == pytest.approx(1.75)


def test_token_source_is_the_residual_at_a_rejection(pair):
    """Sampling: the correction's distribution puts no mass on the rejected draft where p <= q there."""
    for r in pair.stream(
        PROMPT, max_new_tokens=40, num_draft_tokens=3, temperature=1.0, seed=5, record_top=50
    ):
        assert abs(sum(p for _, p in r.token_source)) <= 1 + 1e-5
        assert r.token in {t for t, _ in r.token_source} or len(r.token_source) == 50


# --------------------------------------------------------------------------- the CLI


def invoke(*args, env=None):
    return CliRunner().invoke(app, list(args), env=env)


def test_piped_output_has_no_escape_codes():
    result = invoke("generate", PROMPT, "--max-new-tokens", "20")
    assert result.exit_code == 0, result.output
    assert ANSI not in result.stdout and ANSI not in result.stderr


def test_view_none_prints_the_text_at_the_end():
    args = ["--max-new-tokens", "20"]
    plain = invoke("generate", PROMPT, *args)
    none = invoke("generate", PROMPT, *args, "--view", "none")
    assert none.exit_code == 0 and none.stdout == plain.stdout


def test_forced_live_view_with_no_color_keeps_styles_but_drops_colours():
    args = ["--max-new-tokens", "30", "-k", "3"]
    coloured = invoke("generate", PROMPT, *args, "--view", "live", env={"FORCE_COLOR": "1", "COLUMNS": "120"})
    assert coloured.exit_code == 0, coloured.output
    assert "38;2;" in coloured.stdout or "38;5;" in coloured.stdout
    plain = invoke("generate", PROMPT, *args, "--view", "live", "--no-color", env={"FORCE_COLOR": "1"})
    assert plain.exit_code == 0, plain.output
    assert "38;2;" not in plain.stdout and "38;5;" not in plain.stdout
    assert "\x1b[1" in plain.stdout  # bold (bonus / correction) survives


def test_unknown_view_is_a_usage_error():
    result = invoke("generate", PROMPT, "--view", "fancy")
    assert result.exit_code == 2 and "fancy" in result.stderr


@pytest.mark.parametrize("command", ["generate", "explain"])
@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_save_writes_svg_and_html(tmp_path, command, suffix):
    out = tmp_path / f"view{suffix}"
    extra = ["--pace", "0"] if command == "explain" else []
    result = invoke(
        command, PROMPT, "--max-new-tokens", "12", *extra, "--save", str(out)
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    body = out.read_text()
    assert ("<svg" in body) if suffix == ".svg" else ("<html" in body.lower())
    assert "#e69f00" in body.lower() or "#56b4e9" in body.lower() or "#009e73" in body.lower()


def test_save_with_an_unknown_extension_is_a_usage_error(tmp_path):
    result = invoke("generate", PROMPT, "--save", str(tmp_path / "x.png"))
    assert result.exit_code == 2 and ".svg or .html" in result.stderr


def test_explain_rounds_limit_and_summary():
    result = invoke("explain", PROMPT, "--rounds", "2", "--pace", "0")
    assert result.exit_code == 0, result.output
    assert "round 2 ·" in result.stdout and "round 3 ·" not in result.stdout
    assert "analytic E" in result.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_explain_in_a_real_terminal_shows_token_kinds(tmp_path):
    """tmux runs `specli explain` on the embedded pair; the captured pane carries the kinds' styles."""
    session = f"specli-test-{os.getpid()}"
    done = tmp_path / "done"
    command = (
        f"{sys.executable} -m specli.cli explain 'def fibonacci(n):' --max-new-tokens 48 --pace 0 "
        f"--temperature 0.8 --seed 1 --device cpu; touch {done}; sleep 30"
    )
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150", "LINES": "400"}
    env.pop("NO_COLOR", None)
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "400", command], env=env, check=True
    )
    try:
        deadline = time.time() + 120
        while not done.exists() and time.time() < deadline:
            time.sleep(0.5)
        assert done.exists(), "specli explain did not finish in the terminal"
        pane = subprocess.run(
            ["tmux", "capture-pane", "-p", "-e", "-S", "-400", "-t", session], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "summary" in pane and "round 1" in pane
    found = {
        "strike (rejected)": "\x1b[9m" in pane or ";9m" in pane or ";9;" in pane,
        "underline (correction)": "\x1b[4m" in pane or ";4m" in pane or ";4;" in pane,
        "italic (bonus)": "\x1b[3m" in pane or ";3m" in pane or ";3;" in pane,
        "accepted colour": "38;2;86;180;233" in pane or "38;5;" in pane or "\x1b[38" in pane,
    }
    assert sum(found.values()) >= 3, found
