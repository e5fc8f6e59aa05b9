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
from conftest import build_tokenizer
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style
from rich.text import Text
from typer.testing import CliRunner

from specli.cli import app
from specli.engine.events import Round, StopReason, TokenKind, expected_acceptance_length
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.verify import residual_distribution, token_distribution, verify_sampling
from specli.render.explain import ExplainView, prob, token_label
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


def test_status_line_shows_compile_time_apart(pair):
    """--compile: the status names the one-time compile beside the tokens/s, which never include it."""
    result = pair.generate(PROMPT, max_new_tokens=8, num_draft_tokens=3)
    view = TokenView(pair.tokenizer, "draft", 3)
    for r in result.rounds:
        view.add(r)
    assert "compiled" not in recorded(view.renderable()).export_text()
    view.compiled = "compiled in 41.0s (cached for next runs)"
    text = " ".join(recorded(view.renderable()).export_text().split())
    assert "compiled in 41.0s (cached for next runs)" in text
    assert f"{result.stats.tokens_per_second:.1f} tok/s" in text


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
            assert token_label(pair.tokenizer, token) in text
            if temperature:
                assert prob(r.draft_probs[i]) in text
                if i <= r.accepted:  # the target judged it (the cells after a rejection stay empty)
                    assert prob(r.target_probs[i]) in text and prob(r.accept_probs[i]) in text
                    assert prob(r.uniforms[i]) in text
        assert r.token_source and r.token_source[0][1] >= r.token_source[-1][1]
        assert prob(r.token_source[0][1]) in text
        word = "Correction" if r.kind is TokenKind.CORRECTION else "Bonus"
        if temperature == 0 and r.kind is TokenKind.CORRECTION:
            word = "Correction (the argmax)"
            assert token_label(pair.tokenizer, r.target_argmax[r.accepted]) in text
        if r.drafted:
            assert f"{word}: {token_label(pair.tokenizer, r.token)}" in text
        else:
            assert "No draft this round" in text and token_label(pair.tokenizer, r.token) in text
    summary = recorded(explained.summary(), width=200).export_text()
    s = explained.stats
    assert f"accepted / drafted = {s.accepted}/{s.drafted} = {s.acceptance_rate:.3f}" in summary
    judged = s.accepted + s.rejections
    assert f"α = accepted / (accepted + rejections) = {s.accepted}/{judged} = {s.accept_prob:.3f}" in summary
    ks = [len(r.drafted) for r in rounds]  # each round's own k
    expected = sum(expected_acceptance_length(s.accept_prob, k) for k in ks) / len(ks)
    assert f"= {expected:.2f} tokens per round" in summary
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


# --------------------------------------------------------------------------- issue 13: fit and finish

CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def live_run(pair, rounds, width=80, height=24, strategy="draft", k=3) -> tuple[str, str, TokenView]:
    """Drive the live view on a recorded terminal of `width` x `height`; returns the text of the live
    frames and of the final frame (escape codes removed) and the view."""
    from specli.render.live import LiveView

    console = Console(
        file=io.StringIO(), width=width, height=height, force_terminal=True, soft_wrap=True,
        highlight=False, color_system=None,
    )  # fmt: skip  # the CLI's stdout console: soft_wrap as in `specli generate`
    view = TokenView(pair.tokenizer, strategy, k)
    with LiveView(view, console) as live:
        for r in rounds:
            live.round(r)
    raw = console.file.getvalue()
    frames, final = raw.rsplit("\x1b[?25h", 1)  # the cursor comes back when the live display stops
    return CONTROL.sub("", frames), CONTROL.sub("", final), view


def test_live_final_frame_says_a_stop_string_stopped_it(pair):
    """Bug: the live view never said why it stopped (piped output did). A stop string reached after a
    few tokens is named in the final frame, with the token count."""
    first = pair.generate(PROMPT, max_new_tokens=12, num_draft_tokens=3)
    stop = pair.decode(first.token_ids[:3]).strip()[:4]
    assert stop
    result = pair.generate(PROMPT, max_new_tokens=60, num_draft_tokens=3, stop=[stop])
    assert result.stats.stop_reason is StopReason.STOP_STRING
    _, final, _ = live_run(pair, result.rounds)
    tokens = result.stats.tokens
    assert f"stopped after {tokens} token{'s' if tokens != 1 else ''}: a stop string was generated" in final


def test_live_final_frame_says_the_context_is_full(pair):
    """Bug: a generation that filled the model's context ended silently in the live view."""
    ids = pair.encode("x = 1\n" * 400)
    ids = ids[-(pair.max_positions - 12) :]  # room for 12 new tokens, then the context is full
    result = pair.generate(prompt_ids=ids, max_new_tokens=100, num_draft_tokens=3)
    assert result.stats.stop_reason is StopReason.CONTEXT and result.stats.tokens == 12
    _, final, _ = live_run(pair, result.rounds)
    assert "stopped after 12 tokens: the model's context is full" in final


def test_live_view_at_80_columns_shows_tok_s_and_elapsed_and_splits_no_word(pair):
    """Bug: the status line was cut at 80-100 columns (tok/s and elapsed never visible while running)
    and the final frame wrapped mid-word. Now the status line breaks between its parts, every frame
    line fits 80 columns, and each word of the text stays whole."""
    result = pair.generate(PROMPT, max_new_tokens=120, num_draft_tokens=3)
    frames, final, view = live_run(pair, result.rounds)
    s = view.stats
    assert "tok/s" in frames and re.search(r"\d+\.\ds\n", frames), "tok/s / elapsed never shown live"
    lines = final.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    for part in (
        f"round {s.rounds}", f"acceptance {s.acceptance_rate:.1%}",
        f"mean acceptance length {s.mean_acceptance_length:.2f}", f"{s.tokens} tokens",
        f"{s.tokens_per_second:.1f} tok/s", f"{s.elapsed:.1f}s", "correction (target's token at a rejection)",
    ):  # fmt: skip
        assert any(part in line for line in lines), part  # each on one line, never split
    body_words = {w for line in lines for w in line.split()}
    for word in result.text.split():
        if len(word) <= 80:
            assert word in body_words, word  # wrapped between words only


def test_status_line_packs_its_parts_into_the_width():
    """The status and the legend at 60 columns: several lines, each at most 60 wide, no part split."""
    from specli.render.live import Packed

    parts = [Text(p) for p in ("draft k=4", "round 22", "drafted 4 accepted 3", "acceptance 62.5%")]
    parts += [Text(p) for p in ("mean acceptance length 3.21", "120 tokens", "150.7 tok/s", "0.8s")]
    lines = recorded(Packed(parts), width=60).export_text().splitlines()
    assert lines == [
        "draft k=4 · round 22 · drafted 4 accepted 3",
        "acceptance 62.5% · mean acceptance length 3.21 · 120 tokens",
        "150.7 tok/s · 0.8s",
    ]
    assert recorded(Packed(parts), width=200).export_text().count("\n") == 1  # one line when it fits


def whitespace_round(tokenizer, index=0) -> Round:
    """A round that drafted and committed whitespace-only tokens: a newline plus indentation, a tab."""
    newline = tokenizer("\n        ", add_special_tokens=False)["input_ids"]
    tab = tokenizer("\t", add_special_tokens=False)["input_ids"]
    drafted = newline + tab
    return Round(
        index=index, drafted=drafted, draft_probs=[1.0] * len(drafted), target_probs=[],
        target_argmax=drafted + [drafted[0]], accept_probs=[1.0] * len(drafted), uniforms=[],
        accepted=len(drafted), token=newline[0], kind=TokenKind.BONUS, committed=drafted + newline[:1],
        draft_time=0, verify_time=0, elapsed=0.1, token_source=[(newline[0], 0.5)],
    )  # fmt: skip


def test_explain_shows_whitespace_tokens_visibly(tokenizer):
    """Bug: whitespace-only tokens showed as blank lines (the committed line, the context) or as wide
    blank cells. Now ↵, ⇥ and · stand for them and the panel has no blank line."""
    explained = ExplainView(tokenizer, "draft", 3, greedy=True, prompt_ids=tokenizer("def f():")["input_ids"])
    r = whitespace_round(tokenizer)
    panels = [recorded(explained.panel(r), width=80).export_text() for _ in range(2)]
    for text in panels:
        inner = [line.strip("│╭╮╰╯─ ") for line in text.splitlines()[1:-1]]
        assert all(inner), text  # no blank line inside the panel
        assert "committed: ↵" in text and "⇥" in text
        for token in r.drafted:
            label = token_label(tokenizer, token)
            assert label.strip("'") and not label.strip("'").isspace()  # never an empty-looking cell
            assert label in text
    assert "context: def f():↵" in panels[1]  # the context stays on one line


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_explain_shows_the_added_tokens_own_probability_outside_the_top(pair, temperature):
    """Bug: the correction/bonus token's probability was shown only when it was among the top N. With
    --top 1 it is shown for every round, and equals its probability in the whole distribution."""
    kw = dict(max_new_tokens=40, num_draft_tokens=3, temperature=temperature, seed=5, fixed_k=True)
    shown = list(pair.stream(PROMPT, **kw, record_top=1))
    whole = list(pair.stream(PROMPT, **kw, record_top=1 << 20))
    explained = ExplainView(pair.tokenizer, "draft", 3, greedy=temperature == 0, top=1)
    outside = 0
    for r, full in zip(shown, whole, strict=True):
        assert r.committed == full.committed
        text = recorded(explained.panel(r), width=200).export_text()
        p = dict(full.token_source)[r.token]
        if r.token != r.token_source[0][0]:
            outside += 1
            assert f"(probability {prob(p)}, not in the top 1)" in text, text
        else:
            assert f"(probability {prob(p)})" in text, text
    assert outside >= (3 if temperature else 0)


def test_explain_does_not_pause_when_stdout_is_not_a_terminal(monkeypatch):
    """Bug: `explain` slept --pace seconds between rounds even when piped. time.sleep is never called
    off a terminal; in a (forced) terminal it is, so the test can tell."""
    import time

    calls = []
    monkeypatch.setattr(time, "sleep", lambda seconds: calls.append(seconds))
    piped = invoke("explain", PROMPT, "--rounds", "3", "--pace", "7")
    assert piped.exit_code == 0, piped.output
    assert calls == []
    forced = invoke("explain", PROMPT, "--rounds", "3", "--pace", "7", env={"FORCE_COLOR": "1"})
    assert forced.exit_code == 0, forced.output
    assert calls == [7.0, 7.0]


def test_no_color_loading_bar_has_no_colour():
    """Bug: --no-color still coloured the loading spinner and bar on stderr. In a (forced) truecolor
    terminal the loading line is drawn, without a single colour code."""
    env = {"FORCE_COLOR": "1", "COLORTERM": "truecolor", "COLUMNS": "100"}
    args = ["generate", PROMPT, "--max-new-tokens", "4", "--view", "plain"]
    coloured = invoke(*args, env=env)
    assert "loading models" in coloured.stderr and re.search(r"\x1b\[(3[0-7]|38;)", coloured.stderr)
    plain = invoke(*args, "--no-color", env=env)
    assert plain.exit_code == 0, plain.output
    assert "loading models" in plain.stderr
    params = {n for seq in re.findall(r"\x1b\[([0-9;]*)m", plain.stderr) for n in seq.split(";")}
    assert not params & {"38", "48", *map(str, [*range(30, 38), *range(40, 48), *range(90, 98)])}, params


def test_counts_agree_in_number(tokenizer):
    """Bug: "1 rounds". Every count printed by the views agrees with its number."""
    from specli.engine.events import Stats
    from specli.wording import summary_line

    stats = Stats(rounds=1, tokens=1, elapsed=0.5)
    assert " 1 round · 1 token in " in summary_line(stats, "none")
    r = whitespace_round(tokenizer)
    one = Round(**{**r.__dict__, "drafted": r.drafted[:1], "accepted": 1, "committed": r.committed[:2]})
    explained = ExplainView(tokenizer, "draft", 3, greedy=True)
    panel = recorded(explained.panel(one), width=200).export_text()
    assert "proposed 1 token." in panel and "1 tokens" not in panel
    summary = recorded(explained.summary(), width=200).export_text()
    assert "1 round · 2 tokens" in summary


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_live_view_in_an_80_column_terminal():
    """tmux, 80 x 24: `specli generate` with a stop string. The pane shows the stop reason, tok/s and
    the elapsed time, each whole on one screen row (nothing cut at the right edge)."""
    command = (
        f"{sys.executable} -m specli.cli generate 'def fibonacci(n):' --max-new-tokens 200 -k 3 "
        "--stop 'return' --device cpu"
    )
    pane = run_in_tmux(command, width=80, height=24)
    assert "specli exited 0" in pane, pane[-2000:]
    rows = pane.splitlines()
    assert any(re.search(r"stopped after \d+ tokens?: a stop string was generated", row) for row in rows), (
        pane
    )
    assert any(re.search(r"\d+\.\d tok/s · \d+\.\ds\b", row) for row in rows), pane
    assert any("mean acceptance length" in row for row in rows), pane


def run_in_tmux(command: str, width: int, height: int) -> str:
    """Run `command` in a tmux pane of its own server (truecolor, no user configuration); wait on a tmux
    channel the pane signals when the command exits (a deadline, no sleeping); the pane's text."""
    server, channel = f"specli-test-{os.getpid()}-{width}", f"specli-done-{os.getpid()}-{width}"
    script = f'{command}; echo "specli exited $?"; tmux wait-for -S {channel}; tmux wait-for {channel}-never'
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
    env.update(COLUMNS=str(width), LINES=str(height))
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)
    tmux = ["tmux", "-L", server, "-f", os.devnull]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", str(height), script], env=env, check=True
    )
    try:
        try:
            subprocess.run([*tmux, "wait-for", channel], env=env, check=True, timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("the command did not finish in the terminal within 180 s")
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-S", "-400"], env=env, capture_output=True, text=True, check=True
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_live_view_and_its_save_show_the_prompt_dimmed_above_the_output(tmp_path):
    out = tmp_path / "view.html"
    result = invoke("generate", PROMPT, "--max-new-tokens", "8", "--view", "live", "--save", str(out))
    assert result.exit_code == 0, result.output
    body = out.read_text()
    assert PROMPT in body
    view = TokenView(build_tokenizer(), "draft", 4, prompt=PROMPT)
    frame = recorded(view.renderable()).export_text(styles=True)
    assert frame.startswith("\x1b[2mdef fibonacci(n):")  # dim, first


# ------------------------------------------------------------------ explain: what was checked, E, cuts


def made_round(drafted, accepted, token, *, greedy=True, index=0, info=None, **fields) -> Round:
    """A round as the engine would record it: committed = accepted drafts + token; greedy rounds carry
    the target argmax at k+1 positions, sampling rounds q, p, min(1, p/q) at k and u at the judged ones."""
    k = len(drafted)
    values = dict(
        index=index, drafted=drafted, draft_probs=[1.0] * k, target_probs=[] if greedy else [0.5] * k,
        target_argmax=list(drafted) + [token] if greedy else [], accept_probs=[1.0] * k,
        uniforms=[] if greedy else [0.5] * min(k, accepted + 1), accepted=accepted, token=token,
        kind=TokenKind.BONUS if accepted == k else TokenKind.CORRECTION,
        committed=list(drafted[:accepted]) + [token], draft_time=0, verify_time=0, elapsed=0.1,
        info=info or {},
    )  # fmt: skip
    return Round(**{**values, **fields})


def distinct_tokens(tokenizer, n: int) -> list[int]:
    """n token ids whose quoted labels all differ."""
    ids, labels = [], set()
    for token in range(260, len(tokenizer)):
        label = token_label(tokenizer, token)
        if label not in labels:
            ids.append(token)
            labels.add(label)
        if len(ids) == n:
            return ids
    raise AssertionError("too few distinct tokens")


def row_of(text: str, mark: str, n: int) -> list[str]:
    """The draft table's lines that carry `mark` ("not checked", "rejected"), expecting n of them."""
    lines = [line for line in text.splitlines() if mark in line]
    assert len(lines) == n, text
    return lines


def test_explain_leaves_the_targets_cells_empty_after_a_rejection(tokenizer):
    """Bug: rows after the rejection said "not checked" yet showed the target's argmax (greedy) or p(x)
    and min(1, p/q) (sampling), as if the target had judged them. Those cells are now empty; the
    rejected row keeps its numbers and the drafter's q stays (the drafter did compute it)."""
    a, b, c, x, y, z, w = distinct_tokens(tokenizer, 7)
    greedy = made_round([a, b, c], 0, x, target_argmax=[x, y, z, w])
    text = recorded(ExplainView(tokenizer, "draft", 3, greedy=True).panel(greedy), width=160).export_text()
    assert token_label(tokenizer, x) in row_of(text, "✗ rejected", 1)[0]
    for line, argmax in zip(row_of(text, "not checked", 2), (y, z), strict=True):
        assert token_label(tokenizer, argmax) not in line, line

    sampled = made_round(
        [a, b, c], 1, x, greedy=False, draft_probs=[0.111, 0.222, 0.333], target_probs=[0.444, 0.055, 0.777],
        accept_probs=[1.0, 0.248, 0.888], uniforms=[0.123, 0.321],
    )  # fmt: skip
    view = ExplainView(tokenizer, "draft", 3, greedy=False)
    text = recorded(view.panel(sampled), width=160).export_text()
    assert all(v in row_of(text, "✗ rejected", 1)[0] for v in ("0.222", "0.055", "0.248", "0.321"))
    unchecked = row_of(text, "not checked", 1)[0]
    assert "0.333" in unchecked  # q
    assert "0.777" not in unchecked and "0.888" not in unchecked, unchecked


def test_explain_summary_takes_E_at_each_rounds_own_k(tokenizer):
    """Bug: the summary compared E(α, 4), the maximum k, with τ although rounds drafted 4, 1, 1 and 0.
    E is now the mean over rounds of E(α, k) at each round's drafted k, and the text says so."""
    a, b, c, d, x = distinct_tokens(tokenizer, 5)
    rounds = [
        made_round([a, b, c, d], 4, x, index=0),  # bonus
        made_round([a], 0, x, index=1),  # correction
        made_round([a], 1, x, index=2),  # bonus
        made_round([], 0, x, index=3),  # a plain target step
    ]
    view = ExplainView(tokenizer, "draft", 4, greedy=True)
    for r in rounds:
        view.panel(r)
    summary = recorded(view.summary(), width=240).export_text()
    alpha = 5 / 6  # accepted 5, one rejection
    assert view.stats.accept_prob == pytest.approx(alpha)
    mean_e = sum(expected_acceptance_length(alpha, k) for k in (4, 1, 1, 0)) / 4
    assert f"= {mean_e:.2f} tokens per round" in summary, summary
    assert "each round's own k" in summary and "mean 1.50, 0–4" in summary
    assert f"{expected_acceptance_length(alpha, 4):.2f}" not in summary
    assert f"observed {9 / 4:.2f}" in summary

    fixed = ExplainView(tokenizer, "draft", 4, greedy=True)  # every round at one k: that k, said so
    fixed.panel(rounds[0])
    fixed.panel(made_round([a, b, c, d], 1, x, index=1))
    summary = recorded(fixed.summary(), width=240).export_text()
    alpha = 5 / 6
    assert f"{expected_acceptance_length(alpha, 4):.2f} tokens per round at k = 4 (every round)" in summary


def test_explain_names_the_token_a_threshold_cut_and_its_probability(pair):
    """Bug: with --draft-p-min, a round that drafted nothing said "(a bonus)" and not why. The round now
    records the drafter's likeliest token where the draft was cut and its probability (checked here
    against the drafter model itself), and the panel shows both against the threshold; a round that
    drafted nothing is called a plain target step. Cuts after some drafts say where the draft stopped."""
    p_min = 0.3
    context = pair.encode(PROMPT)
    rounds = list(
        pair.stream(
            prompt_ids=context, max_new_tokens=30, num_draft_tokens=3, draft_p_min=p_min, record_top=3
        )
    )
    view = ExplainView(pair.tokenizer, "draft", 3, greedy=True, top=3)
    seen = set()
    for r in rounds:
        text = recorded(view.panel(r), width=200).export_text()
        if r.draft_reason != "threshold":
            assert "cut_token" not in r.info and "draft-p-min" not in text
            context = context + r.committed
            continue
        prefix = torch.tensor([context + r.drafted])
        with torch.no_grad():
            top, token = pair.draft_model(prefix).logits[0, -1].float().softmax(-1).max(-1)
        assert r.info["cut_token"] == int(token) and r.info["cut_prob"] == pytest.approx(float(top), abs=1e-4)
        assert r.info["p_min"] == p_min and r.info["cut_prob"] < p_min
        label, q = token_label(pair.tokenizer, int(token)), prob(r.info["cut_prob"])
        below = f"{label} has probability {q} < --draft-p-min 0.300"
        assert below in text, text
        if r.drafted:
            assert f"The draft stopped before position {len(r.drafted) + 1}" in text
        else:
            assert "drafted nothing" in text and "plain target step" in text and "bonus" not in text, text
        seen.add(bool(r.drafted))
        context = context + r.committed
    assert seen == {True, False}


def test_a_lookup_round_without_a_match_says_so_in_the_title_and_the_status(pair):
    """Catches issue 28 #24: a lookup round whose n-gram matched nothing was titled "k 16 (match) ·
    drafted 0". Real lookup rounds on the embedded pair: each one that drafted nothing for want of a
    match says that no n-gram matched, in the explain panel's title and the live status line; a match
    that ran out before k says so (a made round: the embedded run has none)."""
    rounds = list(pair.stream(PROMPT, strategy="lookup", max_new_tokens=30))
    unmatched = [r for r in rounds if r.draft_reason == "match" and not r.drafted]
    assert unmatched and any(r.drafted for r in rounds)
    view = ExplainView(pair.tokenizer, "lookup", 16, greedy=True)
    live = TokenView(pair.tokenizer, "lookup", 16, prompt=PROMPT)
    for r in rounds:
        title = view.panel(r).title
        live.add(r)
        status = recorded(live.status(), width=400).export_text()
        if r in unmatched:
            assert title == f"round {r.index + 1} · k {r.draft_limit}: no n-gram matched, drafted nothing"
            assert f"k {r.draft_limit}: no n-gram matched, drafted nothing" in status, status
        else:
            assert title.endswith(f"drafted {len(r.drafted)} · accepted {r.accepted}"), title
        assert "(match)" not in title and "(match)" not in status
    ran_out = made_round([5, 6, 7], 2, 9, draft_limit=16, draft_reason="match")
    assert view.panel(ran_out).title == "round 1 · k 16 (the match ran out) · drafted 3 · accepted 2"
