"""What a new user hit at the edges of the command line and the API (issue 13): prompts that are not UTF-8,
`explain --step` with the prompt on stdin, `--save` into a missing folder, Ctrl-C while models load,
`--threads`, defaults in `--help`, the notes and JSON fields of small cases, and the API's quiet load,
`Round.text` and `Pair`'s repr.

Errors are checked before anything loads: `specli.api.load` is replaced by a trap where that matters.
Terminal and signal behaviour runs in real subprocesses (tmux for a terminal; a local HTTP server that
never answers to hold the start-up in a download) and waits on conditions with deadlines, never sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import specli
import specli.api
import specli.pair
from specli.cli import app
from specli.cli.prompt_input import STEP_HINT, check_text, decode_prompt
from specli.engine.events import Round, TokenKind
from specli.errors import UsageError
from specli.presets import resolve_preset
from specli.settings import resolve_settings
from specli.threads import BusyProbe, apply_threads, auto_threads, parse_threads

PROMPT = "def fibonacci(n):"
CLI = [sys.executable, "-m", "specli.cli"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "no-user-presets"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "SPECLI_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def invoke(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(app, list(args), input=input)


@pytest.fixture
def no_loading(monkeypatch):
    """Any model load fails the test: the error must come first."""

    def trap(*args, **kwargs):
        raise AssertionError("models were loaded before the input was checked")

    monkeypatch.setattr(specli.api, "load", trap)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}
    for name in ("SPECLI_DEBUG", "TMUX", "NO_COLOR"):
        env.pop(name, None)
    return env


# --------------------------------------------------------------------------- 1: input that is not UTF-8


def test_stdin_that_is_not_utf8_is_a_usage_error_before_loading(no_loading):
    result = invoke("generate", "-", input=b"caf\xe9\n")
    assert result.exit_code == 2, result.output
    assert "the prompt on stdin is not UTF-8: byte 0xe9 at offset 3" in result.stderr
    assert "Traceback" not in result.output and "TypeError" not in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["ab\udce9cd"], "the prompt is not UTF-8: byte 0xe9 at offset 2"),  # argv's surrogateescape
        (["é\udcff"], "the prompt is not UTF-8: byte 0xff at offset 2"),  # offsets count bytes, not chars
        (["ok", "--stop", "\udcff"], "--stop is not UTF-8: byte 0xff at offset 0"),
    ],
)
def test_arguments_that_are_not_utf8_are_usage_errors_before_loading(no_loading, args, needle):
    result = invoke("generate", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr


def test_real_argv_and_stdin_bytes_that_are_not_utf8():
    """The bytes as a shell passes them: argv decoded by Python itself, stdin read as bytes."""
    argv = subprocess.run(
        [*CLI, "generate", b"caf\xc3\xa9 \xe9"], capture_output=True, env=subprocess_env(), timeout=300
    )
    assert argv.returncode == 2, argv.stderr
    assert b"the prompt is not UTF-8: byte 0xe9 at offset 6" in argv.stderr
    stdin = subprocess.run(
        [*CLI, "generate", "-"], input=b"ok\n\xff", capture_output=True, env=subprocess_env(), timeout=300
    )
    assert stdin.returncode == 2, stdin.stderr
    assert b"byte 0xff at offset 3" in stdin.stderr and b"Traceback" not in stdin.stderr


def test_decoding_keeps_text_mode_newlines():
    assert decode_prompt("é\r\nb\rc\n".encode()) == "é\nb\nc\n"
    assert check_text("naïve 東京", "x") == "naïve 東京"
    with pytest.raises(UsageError, match="byte 0xe9 at offset 3"):
        check_text("東\udce9", "x")  # 東 is three bytes


# --------------------------------------------------------------------------- 2: explain --step


def test_step_without_a_terminal_is_refused_before_loading():
    """No controlling terminal (a new session) and the prompt on stdin: nothing to read Enter from."""
    result = subprocess.run(
        [*CLI, "explain", "-", "--step"],
        input=PROMPT.encode(),
        capture_output=True,
        env=subprocess_env(),
        timeout=300,
        start_new_session=True,
    )
    assert result.returncode == 2, result.stderr
    assert b"--step needs a terminal" in result.stderr and b"stdin holds the prompt" in result.stderr


def _tmux_pane(tmux: list[str], env: dict[str, str]) -> str:
    return subprocess.run(
        [*tmux, "capture-pane", "-p", "-S", "-400"], env=env, capture_output=True, text=True, check=True
    ).stdout


def _wait_for_pane(tmux, env, condition, what: str, deadline_s: float = 240) -> str:
    deadline = time.monotonic() + deadline_s
    while True:
        pane = _tmux_pane(tmux, env)
        if condition(pane):
            return pane
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {deadline_s} s; the pane:\n{pane[-3000:]}")
        time.sleep(0.1)  # polling the pane for the condition, with the deadline above


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_step_reads_keys_from_the_terminal_when_the_prompt_is_on_stdin():
    """In a real terminal, with the prompt piped in: the hint shows, Enter gives the next round, q stops
    (before the generation would have ended) and the summary follows; exit 0."""
    server = f"specli-step-{os.getpid()}"
    command = (
        f"printf %s '{PROMPT}' | {sys.executable} -m specli.cli explain - --step --device cpu "
        f'--max-new-tokens 60 --no-color; echo "specli exited $?"; sleep 600'
    )
    env = subprocess_env(TERM="xterm-256color", COLUMNS="120", LINES="400")
    tmux = ["tmux", "-L", server, "-f", os.devnull]
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "400", command], env=env, check=True)
    try:
        pane = _wait_for_pane(tmux, env, lambda p: STEP_HINT in p, "the first hint")
        assert "round 1 ·" in pane and "round 2 ·" not in pane
        subprocess.run([*tmux, "send-keys", "Enter"], env=env, check=True)
        pane = _wait_for_pane(tmux, env, lambda p: "round 2 ·" in p and STEP_HINT in p, "round 2")
        subprocess.run([*tmux, "send-keys", "q"], env=env, check=True)
        pane = _wait_for_pane(tmux, env, lambda p: "specli exited" in p, "the exit")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert "specli exited 0" in pane, pane[-3000:]
    assert "summary" in pane and "round 3 ·" not in pane
    assert STEP_HINT not in pane  # each hint is cleared once answered


# --------------------------------------------------------------------------- 9: --save into a missing folder


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_save_into_a_missing_folder_is_refused_before_loading(no_loading, tmp_path, command):
    target = tmp_path / "missing" / "run.svg"
    result = invoke(command, PROMPT, "--save", str(target))
    assert result.exit_code == 2, result.output
    assert f"the folder '{target.parent}' does not exist" in result.stderr


# --------------------------------------------------------------------------- 14: Ctrl-C while starting up


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT at its default and not blocked, as a process started from a
    terminal has it. Children inherit an ignored or blocked SIGINT (a test run started as a shell's
    background job, a worker whose earlier tests changed it), and Ctrl-C would then not arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _signal_state(pid: int) -> str:
    """The child's ignored and blocked signal masks (/proc), for a failure's message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no /proc"
    return " ".join(line for line in lines if line.startswith(("SigIgn", "SigBlk", "SigCgt")))


def test_ctrl_c_while_models_load_exits_130_quietly(tmp_path):
    """The target is a hub id and the hub a local server that accepts and never answers: the process is
    held inside loading once the model's request arrives. Then SIGINT: one line, exit 130."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(300)
    env = subprocess_env(
        HF_ENDPOINT=f"http://127.0.0.1:{server.getsockname()[1]}",
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_ETAG_TIMEOUT="600",
        HF_HUB_DOWNLOAD_TIMEOUT="600",
    )
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.Popen(
        [*CLI, "generate", PROMPT, "--target", "someorg/somemodel", "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    held = []
    try:
        while True:  # other requests get a 404; the model's own request is held open
            conn, _ = server.accept()
            request_line = conn.recv(65536).split(b"\r\n", 1)[0]
            if b"someorg/somemodel" in request_line:
                held.append(conn)
                break
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
        state = _signal_state(proc.pid)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit 120 s after Ctrl-C (the child's signals before it: {state})")
    finally:
        proc.kill()
        for conn in held:
            conn.close()
        server.close()
    assert proc.returncode == 130, (err.decode(), state)
    assert err.decode().strip() == "interrupted.", err.decode()
    assert out == b""


def test_ctrl_c_while_a_thread_pool_waits_on_a_stalled_download_exits_at_once():
    """Loading inside a thread pool whose worker is stuck (a download that never answers): the
    KeyboardInterrupt waits for the pool's shutdown, which waits for the worker. ctrl_c_ends_loading
    ends the process anyway: one line, exit 130, within seconds instead of the worker's 60 s."""
    script = textwrap.dedent(
        """
        import time
        from concurrent.futures import ThreadPoolExecutor
        from specli.cli.common import ctrl_c_ends_loading
        with ctrl_c_ends_loading():
            with ThreadPoolExecutor(2) as pool:
                pool.submit(time.sleep, 60)
                print("loading", flush=True)
                time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    try:
        assert proc.stdout.readline() == b"loading\n"
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()
    assert err.decode().strip().endswith("interrupted."), err.decode()
    assert time.monotonic() - start < 20


def test_a_process_started_with_ctrl_c_ignored_keeps_ignoring_it_while_loading():
    """A shell's background job starts with SIGINT ignored: loading must not make it interruptible."""
    from specli.cli.common import ctrl_c_ends_loading

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_ends_loading():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- 3: threads


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_threads_are_usage_errors(no_loading, value):
    result = invoke("generate", PROMPT, "--threads", value)
    assert result.exit_code == 2, result.output
    assert "threads must be a whole number >= 1 or 'auto'" in result.stderr


@pytest.mark.parametrize("command", ["generate", "explain", "bench"])
def test_threads_option_exists(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "--threads" in result.stdout


def test_importing_the_cli_does_not_load_torch_and_openmp_is_left_alone(monkeypatch):
    """The user's OMP_WAIT_POLICY stands (passive waits halve a quiet 2-core machine's speed)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, specli.cli; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert probe.stdout.strip() == "False", probe.stderr
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert invoke("generate", PROMPT, "--threads", "0").exit_code == 2
    assert "OMP_WAIT_POLICY" not in os.environ


def test_busy_probe_subtracts_this_process_from_the_machine(monkeypatch):
    """The probe's arithmetic on fixed counters: cores busy on the whole machine (jiffies busy / total,
    times the CPUs) minus this process's CPU seconds per wall second, never below 0 (catches this
    process counted as another's, a window or CPU count left out)."""
    from specli import threads

    probe = threads.BusyProbe(start_wall=time.monotonic() - 1.0, start_own=10.0, start_jiffies=(1000, 4000))
    monkeypatch.setattr(threads, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "_busy_jiffies", lambda: (1150, 4200))  # 75 % of 2 CPUs: 1.5 cores
    monkeypatch.setattr(threads, "_own_cpu_seconds", lambda: 11.0)  # this process: 1 core of them
    assert probe.other_cores() == pytest.approx(0.5, abs=0.02)
    monkeypatch.setattr(threads, "_busy_jiffies", lambda: (1100, 4200))  # only this process was busy
    assert probe.other_cores() == pytest.approx(0.0, abs=0.02)
    monkeypatch.setattr(threads, "_busy_jiffies", lambda: (1000, 4000))  # no time passed: cannot tell
    assert probe.other_cores() is None


def test_busy_probe_counts_other_processes_not_this_one():
    """On the real /proc: a busy loop here is this process's own time, so the probe counts no more than
    the other processes already used while this one slept (plus noise); a busy child process is
    another's. Work elsewhere on the machine (a training run) raises both windows alike."""
    probe = BusyProbe()
    time.sleep(0.3)
    baseline = probe.other_cores()
    probe = BusyProbe()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass
    own = probe.other_cores()
    assert baseline is not None and own is not None and own < baseline + 0.7
    spin = "import time\nprint(flush=True)\nend = time.time() + 1.0\nwhile time.time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    child.stdout.readline()  # it is spinning now
    probe = BusyProbe()
    child.wait(timeout=60)  # the probe's window: the child's second of spinning
    other = probe.other_cores()
    assert other is not None and other > 0.5


def test_auto_threads_leaves_the_busy_cores_to_others():
    assert auto_threads(8, cpus=8, busy=0.2) == 8
    assert auto_threads(2, cpus=2, busy=1.2) == 1  # one core busy elsewhere: one thread
    assert auto_threads(2, cpus=2, busy=3.0) == 1  # never below one
    assert auto_threads(4, cpus=16, busy=2.0) == 4  # never above torch's own count
    assert parse_threads("3") == 3 and parse_threads("auto") == "auto" and parse_threads(None) is None


def test_load_sets_torch_threads(monkeypatch):
    """threads=N sets torch's count; None leaves it; 'auto' never goes above torch's own count."""
    before = torch.get_num_threads()
    try:
        specli.load(threads=2, device="cpu")
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        specli.load(threads=None, device="cpu")
        assert torch.get_num_threads() == 1
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert apply_threads("auto") <= max(before, 1)
    finally:
        torch.set_num_threads(before)


def test_bench_records_threads(tmp_path):
    out, prompts = tmp_path / "run.json", tmp_path / "prompts.txt"
    prompts.write_text("def add(a, b):\n")
    before = torch.get_num_threads()
    try:
        result = invoke(
            "bench", "--prompts", str(prompts), "--max-new-tokens", "4", "--warmup", "0",
            "--threads", "1", "--device", "cpu", "--json", str(out),
        )  # fmt: skip
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    env = json.loads(out.read_text())["environment"]
    assert env["threads"] == 1 and env["threads_option"] == "1"
    assert "omp_wait_policy" in env


# --------------------------------------------------------------------------- 17: small things


def test_empty_stop_string_is_a_usage_error(no_loading):
    result = invoke("generate", PROMPT, "--stop", "")
    assert result.exit_code == 2, result.output
    assert "a stop string cannot be empty" in result.stderr
    with pytest.raises(UsageError, match="cannot be empty"):
        resolve_settings(stop=["x", ""])


def test_sampling_options_with_greedy_decoding_get_a_note():
    result = invoke(
        "generate", PROMPT, "--top-k", "5", "--seed", "1", "--max-new-tokens", "2", "--device", "cpu"
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: --top-k, --seed")]
    assert len(notes) == 1 and "greedy" in notes[0]
    sampled = invoke(
        "generate", PROMPT, "--top-k", "5", "--temperature", "0.7", "--max-new-tokens", "2", "--device", "cpu"
    )
    assert sampled.exit_code == 0 and "sampling only" not in sampled.stderr


def test_interrupted_json_says_why_it_stopped(monkeypatch):
    real = specli.pair.generate_rounds

    def interrupted_after_two_rounds(*args, **kwargs):
        for i, r in enumerate(real(*args, **kwargs)):
            if i == 2:
                raise KeyboardInterrupt
            yield r

    monkeypatch.setattr(specli.pair, "generate_rounds", interrupted_after_two_rounds)
    result = invoke("generate", PROMPT, "--device", "cpu", "--json")
    assert result.exit_code == 130, result.output
    stats = json.loads(result.stdout)["stats"]
    assert stats["stop_reason"] == "interrupted" and stats["interrupted"] is True


def test_self_summary_names_the_exit_layer():
    result = invoke(
        "generate", PROMPT, "--strategy", "self", "--exit-layer", "2", "--max-new-tokens", "6",
        "--view", "plain", "--device", "cpu",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert re.search(r"^self k=\d+ exit layer 2 · ", result.stderr, re.M), result.stderr


# --------------------------------------------------------------------------- 18: defaults in --help


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_help_shows_the_effective_defaults_and_their_source(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    text = re.sub(r"[\s│]+", " ", result.stdout)  # undo Rich's wrapping inside the options box
    tiny = resolve_settings(resolve_preset("tiny"))
    for value in (tiny.num_draft_tokens, tiny.max_new_tokens, tiny.temperature):
        assert f"Default: the preset's (tiny: {value})." in text


# --------------------------------------------------------------------------- 15: the Python API


@pytest.fixture(scope="module")
def embedded_pair():
    return specli.load(device="cpu", threads=None)


def test_load_prints_no_progress_bars_unless_asked(capfd):
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    specli.load(device="cpu", threads=None)
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled() == was_on  # restored
    specli.load(device="cpu", threads=None, progress=True)
    assert "Loading weights" in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled() == was_on


def test_pair_repr_is_readable(embedded_pair):
    assert repr(embedded_pair) == (
        "Pair(target='embedded:tiny-target', draft='embedded:tiny-draft', strategy='draft', device=cpu)"
    )


def test_round_text_joins_into_the_result_text(embedded_pair):
    result = embedded_pair.generate("# déjà vu: 東京\ndef parse(line):", max_new_tokens=40)
    assert result.rounds and "".join(r.text for r in result.rounds) == result.text
    streamed = list(embedded_pair.stream(PROMPT, max_new_tokens=12))
    assert "".join(r.text for r in streamed) == embedded_pair.decode(
        [t for r in streamed for t in r.committed]
    )
    assert all(r.to_dict()["text"] == r.text for r in streamed)


def test_round_text_defaults_to_empty_for_engine_rounds():
    r = Round(0, [], [], [], [], [], [], 0, 5, TokenKind.BONUS, [5], 0.0, 0.0, 0.0)
    assert r.text == ""


# --------------------------------------------------------------------------- issue 20: no model there


@pytest.mark.parametrize("option", ["--target", "--draft"])
@pytest.mark.parametrize("kind", ["missing", "no config.json", "unknown embedded"])
def test_no_model_where_pointed_exits_2(tmp_path, option, kind):
    """Catches issue 20 #7: a path that does not exist, a folder without config.json and an unknown
    embedded:NAME exited 1; they are usage errors."""
    (tmp_path / "notes").mkdir()
    name, message = {
        "missing": (str(tmp_path / "nope"), "does not exist"),
        "no config.json": (str(tmp_path / "notes"), "(no config.json)"),
        "unknown embedded": ("embedded:nope", "no embedded model named 'nope'"),
    }[kind]
    result = invoke("generate", PROMPT, option, name, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("head", ["embedded:tiny-eagle3", "embedded:tiny-peagle"])
def test_an_eagle_head_for_strategy_draft_exits_2_naming_strategy_eagle(head):
    """Catches issue 20 #5 at the command line: the tokenizer's cut-off message, exit 1."""
    result = invoke("generate", PROMPT, "--strategy", "draft", "--draft", head, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert f"'{head}' is an EAGLE head: use --strategy eagle" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
