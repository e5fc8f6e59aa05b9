"""The live token view, the explain panels and --save: styles per token kind, numbers equal to the round
events, no escape codes when piped, multi-byte text, and a real terminal (tmux)."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style
from typer.testing import CliRunner

from specli.cli import app
from specli.events import Round, TokenKind, expected_acceptance_length
from specli.render.explain import ExplainView, prob
from specli.render.live import TokenView
from specli.render.styles import KIND_STYLES, visible
from specli.sampling import SamplingConfig, process_logits
from specli.verify import residual_distribution, token_distribution, verify_sampling

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


def sgr(style: Style) -> str:
    """The escape sequence Rich opens `style` with in a truecolor terminal ('\\x1b[1;4;38;2;230;159;0m')."""
    return style.render("x", color_system=ColorSystem.TRUECOLOR).split("x")[0]


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
            assert sgr(KIND_STYLES[TokenKind.REJECTED]) in ansi  # '\x1b[2;9;38;2;213;94;0m'
            assert view.body().plain.startswith(view.text.plain[: view._split])
        else:
            assert view.body().plain == view.text.plain
    assert struck > 0


def test_styles_differ_without_colour():
    """Colour-blind safe: kinds differ by text style as well, so NO_COLOR output still separates them."""
    decorations = {kind: (s.bold, s.italic, s.underline, s.strike) for kind, s in KIND_STYLES.items()}
    assert len(set(decorations.values())) == len(KIND_STYLES)
    assert KIND_STYLES[TokenKind.REJECTED].strike and not KIND_STYLES[TokenKind.ACCEPTED].strike


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
    s = explained.stats
    assert f"accepted / drafted = {s.accepted}/{s.drafted} = {s.acceptance_rate:.3f}" in summary
    judged = s.accepted + s.rejections
    assert f"α = accepted / (accepted + rejections) = {s.accepted}/{judged} = {s.accept_prob:.3f}" in summary
    assert f"(1 − α) = {expected_acceptance_length(s.accept_prob, 3):.2f} tokens per round" in summary
    assert f"observed {explained.stats.mean_acceptance_length:.2f}" in summary


def test_token_distribution_is_the_residual_of_the_rejecting_position():
    """On constructed p, q (k = 2): a rejection at position i records normalize(max(0, p_i - q_i)) with
    no mass on the rejected draft; a fully accepted draft records p_(k+1)."""
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.0, 0.0, 0.5, 0.5]])
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.5, 0.1, 0.3]])
    residuals = {0: [0.0, 0.0, 0.25, 0.75], 1: [0.75, 0.0, 0.25, 0.0]}  # by hand
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(300):
        verdict = verify_sampling(torch.tensor([0, 1]), q, p, g)  # accept chances 0.25, then 0.6
        source = token_distribution(verdict, p, q)
        if verdict.is_bonus:
            assert source.tolist() == p[2].tolist()
        else:
            assert source.tolist() == pytest.approx(residuals[verdict.accepted])
            assert source[verdict.drafted[verdict.accepted]] == 0  # the rejected draft
            assert source[verdict.token] > 0
        seen.add(verdict.accepted)
    assert seen == {0, 1, 2}


def test_token_source_is_the_residual_at_a_rejection(pair):
    """Sampling on the embedded pair, the whole distribution recorded: at each correction it is the
    residual normalize(max(0, p - q)) of the rejecting position, recomputed here from both models, and
    puts no mass on the rejected draft; the correction is in its support."""
    cfg = SamplingConfig(1.0)
    context = pair.encode(PROMPT)
    corrections = 0
    rounds = pair.stream(
        prompt_ids=context, max_new_tokens=40, num_draft_tokens=3, temperature=1.0, top_k=0, top_p=1.0,
        seed=5, record_top=1 << 20,
    )  # fmt: skip
    for r in rounds:
        source = dict(r.token_source)
        assert sum(source.values()) == pytest.approx(1.0, abs=1e-4)
        assert r.token in source
        if r.kind is TokenKind.CORRECTION and r.drafted:
            corrections += 1
            assert r.drafted[r.accepted] not in source  # the rejected draft has no mass
            prefix = torch.tensor([context + r.drafted[: r.accepted]])
            with torch.no_grad():
                p = process_logits(pair.target_model(prefix).logits[0, -1], cfg)
                q = process_logits(pair.draft_model(prefix).logits[0, -1], cfg)
            dense = torch.zeros_like(p)
            dense[list(source)] = torch.tensor(list(source.values()))
            torch.testing.assert_close(dense, residual_distribution(p, q), atol=1e-4, rtol=1e-3)
        context += r.committed
    assert corrections >= 3


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
    env = {"FORCE_COLOR": "1", "COLORTERM": "truecolor", "COLUMNS": "120"}  # a truecolor terminal
    coloured = invoke("generate", PROMPT, *args, "--view", "live", env=env)
    assert coloured.exit_code == 0, coloured.output
    for kind, style in KIND_STYLES.items():  # each kind in its own colour and decoration
        assert sgr(style) in coloured.stdout, kind
    plain = invoke("generate", PROMPT, *args, "--view", "live", "--no-color", env=env)
    assert plain.exit_code == 0, plain.output
    params = {n for seq in re.findall(r"\x1b\[([0-9;]*)m", plain.stdout) for n in seq.split(";")}
    assert not params & {str(n) for n in [*range(30, 39), *range(90, 98)]}, params  # no colour at all
    for kind in (TokenKind.CORRECTION, TokenKind.BONUS, TokenKind.REJECTED):  # decorations survive
        assert sgr(KIND_STYLES[kind].without_color) in plain.stdout, kind  # e.g. '\x1b[1;4m'


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
    for kind in (TokenKind.ACCEPTED, TokenKind.CORRECTION, TokenKind.BONUS):  # all occur in this run
        assert KIND_STYLES[kind].color.triplet.hex in body.lower(), kind  # e.g. '#56b4e9'


def test_save_with_an_unknown_extension_is_a_usage_error(tmp_path):
    result = invoke("generate", PROMPT, "--save", str(tmp_path / "x.png"))
    assert result.exit_code == 2 and ".svg or .html" in result.stderr


def test_explain_rounds_limit_and_summary():
    result = invoke("explain", PROMPT, "--rounds", "2", "--pace", "0")
    assert result.exit_code == 0, result.output
    assert "round 2 ·" in result.stdout and "round 3 ·" not in result.stdout
    assert "analytic E" in result.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_explain_in_a_real_terminal_shows_token_kinds():
    """tmux runs `specli explain` on the embedded pair in a truecolor terminal; the captured pane carries
    every kind's style. No sleeping: the pane signals a tmux channel when specli exits, and the test
    waits on that channel with a deadline."""
    server, channel = f"specli-test-{os.getpid()}", f"specli-done-{os.getpid()}"
    command = (
        f"{sys.executable} -m specli.cli explain 'def fibonacci(n):' --max-new-tokens 48 --pace 0 "
        f'--temperature 0.8 --seed 1 --device cpu; echo "specli exited $?"; '
        f"tmux wait-for -S {channel}; tmux wait-for {channel}-never"  # signal, then keep the pane open
    )
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor", "COLUMNS": "150", "LINES": "400"}
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)
    tmux = ["tmux", "-L", server, "-f", os.devnull]  # a server of its own, no user configuration
    subprocess.run([*tmux, "new-session", "-d", "-x", "150", "-y", "400", command], env=env, check=True)
    try:
        try:
            subprocess.run([*tmux, "wait-for", channel], env=env, check=True, timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("specli explain did not finish in the terminal within 180 s")
        pane = subprocess.run(
            [*tmux, "capture-pane", "-p", "-e", "-S", "-400"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert "specli exited 0" in pane, pane[-2000:]
    assert "summary" in pane and "round 1" in pane
    # tmux re-emits each cell's attributes and colour as separate sequences: replay them per character
    cells = styled_cells(pane)
    for kind, style in KIND_STYLES.items():
        rgb = tuple(style.color.triplet)
        decorations = {code for code, on in DECORATIONS.items() if getattr(style, on)}
        seen = {attrs for (attrs, fg) in cells if fg == rgb}
        assert seen, f"no text in the {kind.value} colour {rgb}"
        # every character in the kind's colour has the kind's decorations (explain may dim, code 2)
        assert {attrs - {"2"} for attrs in seen} == {frozenset(decorations - {"2"})}, (kind, seen)


DECORATIONS = {"1": "bold", "2": "dim", "3": "italic", "4": "underline", "9": "strike"}  # SGR code: Style


def styled_cells(ansi: str) -> set[tuple[frozenset[str], tuple[int, ...] | None]]:
    """(SGR decorations, foreground RGB or None) of every visible character of ANSI text."""
    off = {"22": {"1", "2"}, "23": {"3"}, "24": {"4"}, "29": {"9"}}
    attrs: set[str] = set()
    fg: tuple[int, ...] | None = None
    cells = set()
    for codes, text in re.findall(r"\x1b\[([0-9;]*)m|([^\x1b]+)", ansi):
        if text.strip():
            cells.add((frozenset(attrs), fg))
            continue
        params = (codes or "0").split(";")
        while params:
            code = params.pop(0)
            if code == "0":
                attrs, fg = set(), None
            elif code in DECORATIONS:
                attrs.add(code)
            elif code in off:
                attrs -= off[code]
            elif code in ("38", "48"):  # 38;2;r;g;b or 38;5;n (48: background, ignored)
                size = 3 if params[0] == "2" else 1
                value, params = tuple(int(x) for x in params[1 : 1 + size]), params[1 + size :]
                fg = value if code == "38" else fg
            elif code == "39":
                fg = None
    return cells
