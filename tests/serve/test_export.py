"""`specli export ENGINE`: the exported commands parse with each engine's own argument names, carry the
pair's speculation (k, method, K+1 for SGLang, tp/pp), the vLLM JSON round-trips, what an engine cannot
run is refused in one line (exit 2), and options without a counterpart are named in notes.

Each engine's parser below is built from the option names its sources list (cited at each parser); an
exported option an engine does not have fails the parse. Offline: the hub cache is an empty folder the
test owns (or one it lays out), and sockets refuse to connect.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specli import export as ex
from specli.cli import app
from specli.errors import UsageError
from specli.models import model_dirs
from specli.models.model_dirs import embedded_dir
from specli.presets import available_presets, load_preset_file

SHIPPED = sorted(available_presets())
EMBEDDED = embedded_dir()


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No network, no user presets, an empty hub cache: the same world for every test."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "no-user-presets"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("SPECLI_DEBUG", raising=False)


def invoke(*args: str):
    return CliRunner().invoke(app, ["export", *args])


# --------------------------------------------------------------------------- the engines' own parsers


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so a bad command fails the test with its message."""

    def error(self, message: str):  # type: ignore[override]
        raise AssertionError(f"{self.prog}: {message}")


def strict(parser: Parser, argv: list[str] | tuple[str, ...]) -> argparse.Namespace:
    """Parse argv; an option the engine does not have (or a bad value) fails."""
    return parser.parse_args(list(argv))


def vllm_parser() -> Parser:
    """`vllm serve` as vLLM's engine arguments name them
    (https://docs.vllm.ai/en/latest/configuration/engine_args/, vllm/engine/arg_utils.py)."""
    p = Parser(prog="vllm serve")
    p.add_argument("model")
    p.add_argument("--speculative-config", type=json.loads)
    p.add_argument("--tensor-parallel-size", "-tp", type=int)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int)
    p.add_argument("--quantization", "-q", choices=["awq", "gptq", "fp8", "bitsandbytes", "gguf"])
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--attention-backend", choices=["FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "TREE_ATTN"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    return p


# SpeculativeConfig's user-facing fields and methods (vllm/config/speculative.py).
VLLM_SPEC_KEYS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "parallel_drafting",
    "quantization",
    "max_model_len",
    "revision",
}
VLLM_METHODS = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp"}


def sglang_parser() -> Parser:
    """`python -m sglang.launch_server` as SGLang 0.5.23 names its options (sglang/srt/arg_groups/fields/:
    model.py, spec.py, parallel.py, serving.py; the CLI names are the fields' with - for _)."""
    p = Parser(prog="sglang.launch_server")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-ngram-max-bfs-breadth", type=int)
    p.add_argument("--speculative-ngram-max-trie-depth", type=int)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int)
    p.add_argument("--pp-size", "--pipeline-parallel-size", type=int)
    p.add_argument("--nnodes", type=int)
    p.add_argument("--node-rank", type=int)
    p.add_argument("--dist-init-addr", "--nccl-init-addr")
    p.add_argument("--quantization", choices=["awq", "fp8", "gptq", "bitsandbytes", "gguf"])
    p.add_argument("--load-format", choices=["auto", "pt", "safetensors", "bitsandbytes", "gguf"])
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    return p


# --spec-type names (common/speculative.cpp, common_speculative_type_from_name_map).
LLAMA_SPEC_TYPES = {
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
}


def spec_types(value: str) -> list[str]:
    types = value.split(",")
    if not set(types) <= LLAMA_SPEC_TYPES:
        raise ValueError(value)
    return types


def llama_server_parser() -> Parser:
    """llama-server as common/arg.cpp names its options (llama.cpp vendored in llama-cpp-python 0.3.36).
    --draft / --draft-n / --draft-max are removed there ("use --spec-draft-n-max"): not accepted."""
    p = Parser(prog="llama-server")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--spec-draft-model", "-md", "--model-draft")
    p.add_argument("--spec-type", type=spec_types)
    p.add_argument("--spec-draft-n-max", type=int)
    p.add_argument("--spec-draft-n-min", type=int)
    p.add_argument("--spec-draft-p-min", "--draft-p-min", type=float)
    p.add_argument("--spec-ngram-simple-size-n", type=int)
    p.add_argument("--spec-ngram-simple-size-m", type=int)
    p.add_argument("--spec-ngram-mod-n-max", type=int)
    p.add_argument("--rpc")
    p.add_argument("-sm", "--split-mode", choices=["none", "layer", "row", "tensor"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    return p


def convert_parser() -> Parser:
    """convert_hf_to_gguf.py's parse_args (same llama.cpp source)."""
    p = Parser(prog="convert_hf_to_gguf.py")
    p.add_argument("model")
    p.add_argument("--outfile", type=Path)
    p.add_argument("--outtype", choices=["f32", "f16", "bf16", "q8_0", "tq1_0", "tq2_0", "auto"])
    p.add_argument("--target-model-dir")
    p.add_argument("--remote", action="store_true")
    return p


def hf_download_parser() -> Parser:
    """`hf download REPO_ID [FILENAMES] --local-dir DIR` (huggingface_hub's CLI, `hf download --help`)."""
    p = Parser(prog="hf download")
    p.add_argument("repo_id")
    p.add_argument("filenames", nargs="*")
    p.add_argument("--local-dir")
    p.add_argument("--revision")
    return p


def llama_quantize_parser() -> Parser:
    """llama-quantize IN.gguf OUT.gguf TYPE (tools/quantize)."""
    p = Parser(prog="llama-quantize")
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("type", choices=["Q4_0", "Q4_K_M", "Q5_K_M", "Q8_0"])
    return p


def parse_step(step: tuple[str, ...]) -> tuple[str, argparse.Namespace]:
    """One llama.cpp preparation step -> (which tool, its parsed arguments)."""
    if step[:2] == ("hf", "download"):
        return "hf", strict(hf_download_parser(), step[2:])
    if step[:2] == ("python", "convert_hf_to_gguf.py"):
        return "convert", strict(convert_parser(), step[2:])
    if step[0] == "llama-quantize":
        return "quantize", strict(llama_quantize_parser(), step[1:])
    raise AssertionError(f"unknown step {step}")


def parse_vllm(result: ex.Export) -> argparse.Namespace:
    assert result.argv[:2] == ("vllm", "serve")
    return strict(vllm_parser(), result.argv[2:])


def parse_sglang(result: ex.Export) -> argparse.Namespace:
    assert result.argv[:3] == ("python", "-m", "sglang.launch_server")
    return strict(sglang_parser(), result.argv[3:])


def parse_llama(result: ex.Export) -> tuple[argparse.Namespace, list[tuple[str, argparse.Namespace]]]:
    assert result.argv[0] == "llama-server"
    return strict(llama_server_parser(), result.argv[1:]), [parse_step(step) for step in result.steps]


def export(engine: str, preset: str | None = "tiny", tp=None, pp=None, **kw) -> ex.Export:
    return ex.export(engine, ex.resolve_pair(preset, **kw), ex.ServeOptions(tp=tp, pp=pp))


# --------------------------------------------------------------------------- vLLM


@pytest.mark.parametrize(
    ("preset", "method", "model", "k", "parallel"),
    [
        ("llama-8b-1b", "draft_model", "meta-llama/Llama-3.2-1B-Instruct", 4, False),
        ("qwen2.5-7b-0.5b", "draft_model", "Qwen/Qwen2.5-0.5B-Instruct", 4, False),
        ("llama-8b-pard", "draft_model", "amd/PARD-Llama-3.2-1B", 8, True),
        ("qwen2.5-7b-pard", "draft_model", "amd/PARD-Qwen2.5-0.5B", 8, True),
        ("gpt-oss-20b-peagle", "eagle3", "amazon/GPT-OSS-20B-P-EAGLE", 7, True),
        ("llama-8b-eagle3", "eagle3", "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3", 4, False),
        ("llama-70b-eagle3", "eagle3", "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3", 4, False),
        ("qwen3-8b-eagle3", "eagle3", "RedHatAI/Qwen3-8B-speculator.eagle3", 4, False),
        ("tiny", "draft_model", str(EMBEDDED / "tiny-draft"), 4, False),
    ],
)
def test_vllm_command_parses_and_carries_the_pair(preset, method, model, k, parallel):
    result = export("vllm", preset, tp=4, pp=2)
    args = parse_vllm(result)
    config = args.speculative_config
    assert set(config) <= VLLM_SPEC_KEYS and config["method"] in VLLM_METHODS
    assert (config["method"], config["model"], config["num_speculative_tokens"]) == (method, model, k)
    assert config.get("parallel_drafting", False) is parallel
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (4, 2)
    assert args.model == ex.resolve_pair(preset).target.location


def test_vllm_lookup_maps_the_ngram_window_and_k():
    args = parse_vllm(export("vllm", "qwen2.5-7b-lookup", ngram_min=2, ngram_max=4, num_draft_tokens=6))
    assert args.speculative_config == {
        "method": "ngram",
        "num_speculative_tokens": 6,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }


def test_vllm_quantized_preset_and_no_tp_flag_by_default():
    args = parse_vllm(export("vllm", "llama-70b-1b"))
    assert args.quantization == "bitsandbytes" and args.dtype == "bfloat16"
    assert args.tensor_parallel_size is None and args.pipeline_parallel_size is None
    assert parse_vllm(export("vllm", "llama-8b-1b")).quantization is None


def test_vllm_json_round_trips_through_the_cli():
    text = invoke("vllm", "--preset", "llama-8b-pard", "-k", "6", "--tp", "2")
    data = invoke("vllm", "--preset", "llama-8b-pard", "-k", "6", "--tp", "2", "--format", "json")
    assert text.exit_code == 0 and data.exit_code == 0, text.output + data.output
    argv = shlex.split(text.stdout)  # the printed command pastes: the shell gives back the argv
    printed = strict(vllm_parser(), argv[2:]).speculative_config
    assert json.loads(data.stdout) == printed
    assert printed == {
        "method": "draft_model",
        "model": "amd/PARD-Llama-3.2-1B",
        "num_speculative_tokens": 6,
        "parallel_drafting": True,
    }


def test_vllm_json_without_speculation_is_null():
    result = invoke("vllm", "--preset", "llama-8b-1b", "--strategy", "none", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout) is None
    plain = invoke("vllm", "--preset", "llama-8b-1b", "--strategy", "none")
    assert plain.exit_code == 0 and "--speculative-config" not in plain.stdout


# --------------------------------------------------------------------------- SGLang


@pytest.mark.parametrize(
    ("preset", "algorithm", "k"),
    [
        ("llama-8b-1b", "STANDALONE", 4),
        ("qwen2.5-7b-0.5b", "STANDALONE", 4),
        ("qwen2.5-coder-32b-0.5b", "STANDALONE", 5),
        ("llama-8b-eagle3", "EAGLE3", 4),
        ("qwen3-8b-eagle3", "EAGLE3", 4),
        ("tiny", "STANDALONE", 4),
    ],
)
def test_sglang_command_parses_with_k_steps_and_k_plus_1_tokens(preset, algorithm, k):
    args = parse_sglang(export("sglang", preset, tp=2, pp=3))
    pair = ex.resolve_pair(preset)
    assert args.model_path == pair.target.location
    assert args.speculative_algorithm == algorithm
    assert args.speculative_draft_model_path == pair.drafter.location
    assert (args.speculative_num_steps, args.speculative_eagle_topk) == (k, 1)
    assert args.speculative_num_draft_tokens == k + 1
    assert (args.tp_size, args.pp_size) == (2, 3)


def test_sglang_k_override_and_lookup():
    args = parse_sglang(export("sglang", "llama-8b-1b", num_draft_tokens=7))
    assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == (7, 8)
    lookup = export("sglang", "qwen2.5-7b-lookup")
    args = parse_sglang(lookup)
    assert args.speculative_algorithm == "NGRAM" and args.speculative_num_draft_tokens == 9
    assert args.speculative_draft_model_path is None
    assert any("--ngram-min" in note and "--ngram-max" in note for note in lookup.notes)


def test_sglang_quantized_preset_uses_the_bitsandbytes_loader():
    args = parse_sglang(export("sglang", "qwen2.5-32b-0.5b"))
    assert (args.quantization, args.load_format) == ("bitsandbytes", "bitsandbytes")


def test_sglang_notes_a_head_layout_it_does_not_read():
    result = export("sglang", "llama-8b-eagle3")
    assert any("speculators layout" in note for note in result.notes)
    assert not any("layout" in note for note in export("vllm", "llama-8b-eagle3").notes)


# --------------------------------------------------------------------------- llama.cpp


def test_llama_cpp_draft_pair_converts_both_models_then_serves_them():
    result = export("llama.cpp", "llama-8b-1b")
    args, steps = parse_llama(result)
    tools = [tool for tool, _ in steps]
    assert tools == ["hf", "convert", "hf", "convert"]
    converted = [ns for tool, ns in steps if tool == "convert"]
    downloads = [ns for tool, ns in steps if tool == "hf"]
    assert [d.repo_id for d in downloads] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
    ]
    assert [c.model for c in converted] == [d.local_dir for d in downloads]  # converts what it downloaded
    assert args.model == str(converted[0].outfile) and args.spec_draft_model == str(converted[1].outfile)
    assert args.spec_type == ["draft-simple"] and args.spec_draft_n_max == 4
    assert all(c.outtype == "bf16" for c in converted)


def test_llama_cpp_eagle3_head_is_converted_with_the_target_folder():
    args, steps = parse_llama(export("llama.cpp", "llama-8b-eagle3"))
    converted = [ns for tool, ns in steps if tool == "convert"]
    assert converted[1].target_model_dir == converted[0].model
    assert args.spec_type == ["draft-eagle3"] and args.spec_draft_model == str(converted[1].outfile)


def test_llama_cpp_lookup_sets_the_ngram_and_draft_lengths():
    result = export("llama.cpp", "qwen2.5-7b-lookup", ngram_min=2, ngram_max=4, num_draft_tokens=6)
    args, _ = parse_llama(result)
    assert args.spec_type == ["ngram-simple"] and args.spec_draft_model is None
    assert (args.spec_ngram_simple_size_n, args.spec_ngram_simple_size_m) == (4, 6)
    assert any("--ngram-min 2" in note for note in result.notes)


def test_llama_cpp_draft_p_min_maps_and_old_spelling_is_noted():
    result = export("llama.cpp", "tiny", draft_p_min=0.25)
    args, _ = parse_llama(result)
    assert args.spec_draft_p_min == 0.25
    assert not any("--draft-p-min 0.25 has no counterpart" in note for note in result.notes)
    assert any("--draft-max" in note for note in result.notes)


def test_llama_cpp_4bit_target_is_quantized_after_conversion():
    args, steps = parse_llama(export("llama.cpp", "llama-70b-1b"))
    quantized = [ns for tool, ns in steps if tool == "quantize"]
    assert len(quantized) == 1 and quantized[0].type == "Q4_K_M"
    assert args.model == quantized[0].output


def test_llama_cpp_embedded_pair_converts_the_package_folders():
    result = export("llama.cpp", "tiny")
    args, steps = parse_llama(result)
    converted = [ns for tool, ns in steps if tool == "convert"]
    assert [Path(c.model) for c in converted] == [EMBEDDED / "tiny-target", EMBEDDED / "tiny-draft"]
    assert not [tool for tool, _ in steps if tool == "hf"]  # nothing to download
    assert any("gguf_convert.py" in note for note in result.notes)


# --------------------------------------------------------------------------- refusals and notes

REFUSED = {
    ("layerskip-llama3-8b", "vllm"),
    ("layerskip-llama3-8b", "sglang"),
    ("layerskip-llama3-8b", "llama.cpp"),
    ("layerskip-llama3.2-1b", "vllm"),
    ("layerskip-llama3.2-1b", "sglang"),
    ("layerskip-llama3.2-1b", "llama.cpp"),
    ("llama-8b-pard", "sglang"),
    ("llama-8b-pard", "llama.cpp"),
    ("qwen2.5-7b-pard", "sglang"),
    ("qwen2.5-7b-pard", "llama.cpp"),
    ("gpt-oss-20b-peagle", "sglang"),
    ("gpt-oss-20b-peagle", "llama.cpp"),
}
# Presets whose own strategy drafts with a `trained:NAME` drafter (not shipped: docs/training.md#recipes):
# on a machine that has not trained it, every export stops in one line naming the `specli train` command.
UNTRAINED = {"smollm2-135m-eagle3": "specli train eagle3 --target package:smollm2-135m"}


@pytest.mark.parametrize("preset", SHIPPED)
@pytest.mark.parametrize("engine", ex.ENGINES)
def test_every_shipped_preset_exports_or_is_refused_in_one_line(preset, engine, monkeypatch, tmp_path):
    monkeypatch.setattr(model_dirs, "trained_dir", lambda: tmp_path / "trained")  # nothing trained here
    result = invoke(engine, "--preset", preset)
    if preset in UNTRAINED:
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
        assert UNTRAINED[preset] in lines[0] and "scripts/smollm2_train.sh" in lines[0]
    elif (preset, engine) in REFUSED:
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
        assert f"{engine} cannot run" in lines[0] and "it runs" in lines[0]
        assert result.stdout == ""
    else:
        assert result.exit_code == 0, result.output
        commands = result.stdout.strip().splitlines()
        assert commands and all(shlex.split(line) for line in commands)
        launched = shlex.split(commands[-1])
        if engine == "vllm":
            strict(vllm_parser(), launched[2:])
        elif engine == "sglang":
            strict(sglang_parser(), launched[3:])
        else:
            strict(llama_server_parser(), launched[1:])
            for line in commands[:-1]:
                parse_step(tuple(shlex.split(line)))


@pytest.mark.parametrize(
    ("args", "refused_by"),
    [
        (["--strategy", "self"], set(ex.ENGINES)),
        (["--draft", "embedded:tiny-pard"], {"sglang", "llama.cpp"}),
        (["--strategy", "eagle", "--draft", "embedded:tiny-peagle"], {"sglang", "llama.cpp"}),
        (["--strategy", "eagle", "--draft", "embedded:tiny-eagle1"], {"llama.cpp"}),
    ],
)
def test_refusals_follow_what_each_engine_runs(args, refused_by):
    for engine in ex.ENGINES:
        result = invoke(engine, *args)
        if engine in refused_by:
            assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
            assert ex.CAN_RUN[engine] in result.stderr
        else:
            assert result.exit_code == 0, result.output


def test_unknown_engine_exits_2_naming_the_three():
    result = invoke("tgi")
    assert result.exit_code == 2
    assert all(name in result.stderr for name in ex.ENGINES) and len(result.stderr.strip().splitlines()) == 1
    assert invoke("LLAMA-CPP").exit_code == 0  # spelled loosely, still llama.cpp


def test_notes_name_the_options_an_engine_drops():
    result = invoke("vllm", "--draft-p-min", "0.3", "--fixed-k")
    assert result.exit_code == 0
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert any("--draft-p-min 0.3" in note for note in notes)
    assert any("--fixed-k" in note for note in notes)
    default = invoke("sglang").stderr
    assert "per-round k" in default and "--draft-p-min" not in default
    assert "--tp/--pp" in invoke("llama.cpp", "--tp", "2").stderr
    assert "pipeline parallelism" in invoke("vllm", "--pp", "2").stderr
    assert "8-bit target" in invoke("vllm", "--quant", "8bit").stderr


def test_strategy_needs_the_right_kind_of_drafter():
    as_draft = invoke("vllm", "--preset", "llama-8b-eagle3", "--strategy", "draft")
    assert as_draft.exit_code == 2 and "is an EAGLE head" in as_draft.stderr
    as_head = invoke("vllm", "--strategy", "eagle", "--draft", "embedded:tiny-draft")
    assert as_head.exit_code == 2 and "not an EAGLE head" in as_head.stderr
    bad = invoke("vllm", "-k", "0")
    assert bad.exit_code == 2 and "num-draft-tokens" in bad.stderr


# --------------------------------------------------------------------------- the embedded models


def test_embedded_pair_exports_its_folders_and_says_so():
    result = invoke("vllm")  # no preset, no target: the embedded tiny pair
    assert result.exit_code == 0
    config = strict(vllm_parser(), shlex.split(result.stdout)[2:]).speculative_config
    assert Path(config["model"]) == EMBEDDED / "tiny-draft"
    assert (Path(shlex.split(result.stdout)[2]) / "config.json").is_file()
    assert "embedded:tiny-target has no hub id" in result.stderr


@pytest.mark.parametrize(
    ("args", "method", "folder", "parallel"),
    [
        (["--strategy", "eagle"], "eagle3", "tiny-eagle3", False),
        (["--strategy", "eagle", "--draft", "embedded:tiny-peagle"], "eagle3", "tiny-peagle", True),
        (["--strategy", "eagle", "--draft", "embedded:tiny-eagle1"], "eagle", "tiny-eagle1", False),
        (["--draft", "embedded:tiny-pard"], "draft_model", "tiny-pard", True),
    ],
)
def test_embedded_heads_and_pard_map_to_vllm_methods(args, method, folder, parallel):
    result = invoke("vllm", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)
    assert (config["method"], Path(config["model"])) == (method, EMBEDDED / folder)
    assert config.get("parallel_drafting", False) is parallel


def test_pard_named_on_the_command_line_brings_its_own_k():
    pard = json.loads((EMBEDDED / "tiny-pard" / "config.json").read_text())
    expected = pard.get("para_num") or 8
    assert ex.resolve_pair(draft="embedded:tiny-pard").k == expected
    assert ex.resolve_pair(draft="embedded:tiny-pard", num_draft_tokens=3).k == 3


def _own_k(data: dict) -> int:
    """The k specli drafts with a P-EAGLE head named by --draft (api.Pair.parallel_draft_tokens)."""
    from specli.models.head_formats import config_from_dict
    from specli.models.sources import PARALLEL_K_DEFAULT

    return config_from_dict(data, target_layers=8).extra.get("speculative_tokens") or PARALLEL_K_DEFAULT


@pytest.mark.parametrize("tokens", [None, 5])
def test_peagle_head_named_on_the_command_line_brings_its_own_k(tmp_path, tokens):
    """The embedded P-EAGLE head (speculative_tokens 8), a copy of it made for 5, and a SafeAILab
    P-EAGLE head (no speculators config: 8): vLLM drafts the head's own k, as specli does; -k still
    wins. Bug caught: the preset's k (4) exported for a P-EAGLE head named with --draft."""
    data = json.loads((EMBEDDED / "tiny-peagle" / "config.json").read_text())
    head = "embedded:tiny-peagle"
    if tokens is not None:
        data["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = tokens
        (tmp_path / "head").mkdir()
        (tmp_path / "head" / "config.json").write_text(json.dumps(data))
        head = str(tmp_path / "head")
    expected = _own_k(data)
    assert expected == (tokens or 8)
    result = invoke("vllm", "--strategy", "eagle", "--draft", head, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["num_speculative_tokens"] == expected
    assert f"K={expected} " in result.stderr  # the per-round note names the same k
    assert ex.resolve_pair(strategy="eagle", draft=head, num_draft_tokens=3).k == 3
    for engine in ("sglang", "llama.cpp"):  # they run no parallel drafting: refused, never another k
        assert invoke(engine, "--strategy", "eagle", "--draft", head).exit_code == 2
    safeailab = dict(SAFEAILAB_HEAD, ptd_token_id=383)
    (tmp_path / "safeailab").mkdir()
    (tmp_path / "safeailab" / "config.json").write_text(json.dumps(safeailab))
    assert ex.resolve_pair(strategy="eagle", draft=str(tmp_path / "safeailab")).k == _own_k(safeailab) == 8
    # an EAGLE-3 head drafts one token per forward: it brings no k, the preset's stays
    assert ex.resolve_pair(strategy="eagle", draft="embedded:tiny-eagle3").k == 4


def test_local_paths_stay_paths_and_a_missing_one_is_refused(tmp_path, monkeypatch):
    """Bugs caught: './x' exported as the hub id 'x' (Path('./x') drops './'), an `hf download ./x`
    step or note for a folder, a missing folder passed on instead of refused (exit 2, one line)."""
    monkeypatch.chdir(tmp_path)
    for args in (["--target", "./nothere"], ["--strategy", "eagle", "--draft", "./llama8b-eagle3"]):
        for engine in ex.ENGINES:
            result = invoke(engine, *args)
            assert result.exit_code == 2, result.output
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "does not exist" in lines[0] and args[-1] in lines[0], result.stderr
            assert result.stdout == ""
    (tmp_path / "a-file").write_text("")
    assert invoke("vllm", "--target", "./a-file").exit_code == 2
    (tmp_path / "llama8b-eagle3").mkdir()  # a folder with no config.json yet
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    args = ["--target", "./target", "--strategy", "eagle", "--draft", "./llama8b-eagle3"]
    result = invoke("vllm", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == str(tmp_path / "llama8b-eagle3")
    assert "hf download" not in result.stderr and "no readable config.json" in result.stderr
    steps = invoke("llama.cpp", *args)
    assert steps.exit_code == 0, steps.output
    commands = [shlex.split(line) for line in steps.stdout.strip().splitlines()]
    assert not any(c[0] == "hf" for c in commands)  # nothing to download
    assert commands[0][2] == str(tmp_path / "target") and commands[1][2] == str(tmp_path / "llama8b-eagle3")
    assert commands[1][commands[1].index("--target-model-dir") + 1] == str(tmp_path / "target")


def test_kinds_agree_with_the_loaders():
    """export reads drafter kinds without torch; the loaders (head_formats, draft_model) are the
    reference: both must call every embedded model the same."""
    from transformers import AutoConfig

    from specli.drafters.draft_model import MASK_TOKEN_KEYS, parallel_mask_token
    from specli.models.blockwise_heads import read_config as read_heads_config
    from specli.models.head_formats import config_from_dict, detect_layout
    from specli.models.sources import MASK_TOKEN_KEYS as SOURCE_KEYS

    assert set(MASK_TOKEN_KEYS) == set(SOURCE_KEYS)
    seen = set()
    for folder in sorted(p for p in EMBEDDED.iterdir() if (p / "config.json").is_file()):
        data = json.loads((folder / "config.json").read_text())
        kind, layout = ex.drafter_kind(data)
        seen.add(kind)
        assert layout == detect_layout(data), folder.name
        if layout is None:
            parallel = parallel_mask_token(AutoConfig.from_pretrained(folder)) is not None
            assert kind == ("pard" if parallel else "model"), folder.name
        elif layout == "heads":
            assert kind == "heads" and read_heads_config(folder).num_heads > 0, folder.name
        else:
            head = config_from_dict(data, target_layers=8)
            assert kind == ("peagle" if head.parallel else head.kind), folder.name
    assert seen == {"model", "pard", "eagle1", "eagle3", "peagle", "heads"}  # every kind was checked


SAFEAILAB_HEAD = {  # a SafeAILab-layout EAGLE-3 head (a Llama config plus draft_vocab_size)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 384,
    "draft_vocab_size": 128,
}


@pytest.mark.parametrize("mask", [None, "ptd_token_id", "pard_token"])
def test_safeailab_heads_parallel_or_not_as_the_loader_reads_them(tmp_path, mask):
    from specli.models.head_formats import config_from_dict

    data = dict(SAFEAILAB_HEAD, **({mask: 383} if mask else {}))
    head = config_from_dict(data, target_layers=8)
    assert ex.drafter_kind(data) == ("peagle" if head.parallel else "eagle3", "safeailab")
    assert head.parallel is (mask is not None)
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "config.json").write_text(json.dumps(data))
    result = invoke("vllm", "--strategy", "eagle", "--draft", str(tmp_path / "head"), "--format", "json")
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)
    assert config["method"] == "eagle3" and config.get("parallel_drafting", False) is (mask is not None)
    assert Path(config["model"]) == tmp_path / "head"
    assert invoke("sglang", "--strategy", "eagle", "--draft", str(tmp_path / "head")).exit_code == (
        2 if mask else 0
    )


# --------------------------------------------------------------------------- the hub cache


def lay_out_hub_cache(root: Path, repo: str, config: dict) -> None:
    """huggingface_hub's cache layout: models--org--name/{refs/main, snapshots/REV/config.json}."""
    rev = "0" * 40
    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(rev)
    (base / "snapshots" / rev).mkdir(parents=True)
    (base / "snapshots" / rev / "config.json").write_text(json.dumps(config))


def test_a_cached_config_decides_the_kind_and_an_unknown_one_is_assumed_aloud(tmp_path):
    unknown = ex.resolve_pair(target="acme/big", draft="acme/small-pard")
    assert unknown.kind == "model" and any(
        "assumed an autoregressive draft model" in n for n in unknown.notes
    )
    lay_out_hub_cache(tmp_path / "hub-cache", "acme/small-pard", {"model_type": "llama", "pard_token": 7})
    config = ex.vllm_speculative_config(ex.resolve_pair(target="acme/big", draft="acme/small-pard"))
    assert config == {
        "method": "draft_model",
        "model": "acme/small-pard",
        "num_speculative_tokens": 8,
        "parallel_drafting": True,
    }


def test_resolution_follows_the_api_rules():
    from specli.api import DEFAULT_PRESET

    assert ex.DEFAULT_PRESET == DEFAULT_PRESET
    plain = ex.resolve_pair(target="acme/big")  # a target alone: no preset, plain decoding
    assert plain.strategy == "none" and plain.drafter is None
    assert ex.resolve_pair(target="acme/big", draft="acme/small").strategy == "draft"
    other = ex.resolve_pair("llama-8b-1b", target="acme/big")  # the preset's dtype is its target's only
    assert other.target.dtype == "auto" and other.drafter.name == "meta-llama/Llama-3.2-1B-Instruct"
    with pytest.raises(UsageError, match="needs an EAGLE head"):
        ex.resolve_pair(target="acme/big", strategy="eagle")
    assert load_preset_file(available_presets()["tiny"]).target.model == "embedded:tiny-target"


def test_export_imports_no_torch():
    code = (
        "import sys\nfrom specli.cli import main\n"
        "try:\n    main(['export', 'vllm', '--preset', 'llama-8b-eagle3'])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")


# --------------------------------------------------------------------------- GGUF models


@pytest.fixture(scope="module")
def gguf_target(tmp_path_factory, tokenizer) -> Path:
    from conftest import make_model
    from gguf_files import write_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf"
    return write_gguf(path, make_model("llama", len(tokenizer), seed=1), tokenizer, quantize="Q8_0")


def test_a_gguf_target_is_served_as_the_file_by_every_engine(gguf_target, tmp_path, monkeypatch):
    """llama.cpp reads the file itself (no conversion steps, no convert note); vLLM and SGLang get its
    path (SGLang with --load-format gguf, neither an in-flight bitsandbytes flag); an Ollama name is its
    blob; a draft GGUF is a draft model. Caught: a GGUF run through convert_hf_to_gguf.py, --quant 4bit
    turned into --quantization bitsandbytes for a file already quantized, the blob's missing .gguf
    suffix leaving SGLang to guess its format."""
    from gguf_files import ollama_store

    where = str(gguf_target.absolute())
    args, steps = parse_llama(ex.export("llama.cpp", ex.resolve_pair(target=str(gguf_target), quant="4bit")))
    llama = ex.export("llama.cpp", ex.resolve_pair(target=str(gguf_target), quant="4bit"))
    assert args.model == where and steps == [] and not any("convert_hf_to_gguf" in n for n in llama.notes)
    assert any("already a GGUF file" in n for n in llama.notes)
    vllm = ex.export("vllm", ex.resolve_pair(target=str(gguf_target), quant="4bit"))
    parsed = strict(vllm_parser(), vllm.argv[2:])
    assert parsed.model == where and parsed.quantization is None
    assert any("vllm-gguf-plugin" in n for n in vllm.notes) and any(
        "own quantization" in n for n in vllm.notes
    )
    store = ollama_store(tmp_path / "ollama", gguf_target, name="tiny")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    sglang = ex.export("sglang", ex.resolve_pair(target="ollama:tiny"))
    parsed = strict(sglang_parser(), sglang.argv[3:])
    assert parsed.model_path.startswith(str(store / "blobs" / "sha256-")) and parsed.load_format == "gguf"
    pair = ex.resolve_pair(target=str(gguf_target), draft="ollama:tiny", strategy="draft")
    assert pair.kind == "model" and pair.drafter.location == parsed.model_path


def test_a_hub_gguf_not_cached_yet_is_downloaded_first(gguf_target, tmp_path):
    """org/name:FILE.gguf: the command downloads the file (hf download REPO FILE --local-dir DIR) and
    serves the local copy; once cached, the cached file itself. Caught: the repo:file name handed to an
    engine that reads no such form, the download step left out."""
    from gguf_files import hub_cache

    result = ex.export("llama.cpp", ex.resolve_pair(target="acme/tiny-GGUF:tiny.Q8_0.gguf"))
    args, steps = parse_llama(result)
    ((tool, download),) = steps
    assert tool == "hf" and (download.repo_id, download.filenames) == ("acme/tiny-GGUF", ["tiny.Q8_0.gguf"])
    assert args.model == f"{download.local_dir}/tiny.Q8_0.gguf"
    vllm = ex.export("vllm", ex.resolve_pair(target="acme/tiny-GGUF:tiny.Q8_0.gguf"))
    assert vllm.steps == result.steps and vllm.argv[2] == args.model
    hub_cache(tmp_path / "hub-cache", "acme/tiny-GGUF", {"tiny.Q8_0.gguf": gguf_target})
    cached = ex.export("llama.cpp", ex.resolve_pair(target="acme/tiny-GGUF:tiny.Q8_0.gguf"))
    assert cached.steps == () and "snapshots" in cached.argv[2]


# --------------------------------------------------------------------------- token trees


def test_sglang_gets_the_eagle2_tree_with_the_root_counted():
    """--tree N --tree-width W: SGLang's EAGLE-2 tree (topk W for K steps, N best nodes kept), its
    num_draft_tokens counting the root (N + 1) and never more than its candidates hold (SGLang picks
    num_draft_tokens - 1 of topk + (steps - 1) * topk^2). Without --tree: topk 1, K + 1. Caught: the
    tree flags missing, the root left out of num_draft_tokens, a chain's flags kept for a tree."""
    for preset, algorithm in [("llama-8b-eagle3", "EAGLE3"), ("llama-8b-1b", "STANDALONE")]:
        args = parse_sglang(export("sglang", preset, tree=16, tree_width=4))
        assert args.speculative_algorithm == algorithm
        assert (args.speculative_num_steps, args.speculative_eagle_topk) == (4, 4)
        assert args.speculative_num_draft_tokens == 17
        topk, steps = args.speculative_eagle_topk, args.speculative_num_steps
        assert args.speculative_num_draft_tokens - 1 <= topk + (steps - 1) * topk * topk
        chain = parse_sglang(export("sglang", preset))
        assert (chain.speculative_eagle_topk, chain.speculative_num_draft_tokens) == (1, 5)
    capped = export("sglang", "llama-8b-1b", tree=64, tree_width=2, num_draft_tokens=3)
    args = parse_sglang(capped)
    assert args.speculative_num_draft_tokens == 2 + 2 * 4 + 1  # a depth-3, width-2 tree holds 10 nodes
    assert any("holds at most 10 nodes" in note for note in capped.notes)
    assert ex.tree_capacity(4, 4) == 4 + 3 * 16 and ex.tree_capacity(2, 1) == 2


def test_vllm_token_tree_shape():
    """vllm_token_tree(N, W, depth): breadth-first paths of child indices, every node of a level with the
    same number of children (vLLM's proposer drafts child_drafts_per_level[level] = level size // size of
    the level above under every node), at most N nodes and `depth` levels, sorted by (len, path) as vLLM
    sorts it. N=4, W=2: [(0,), (1,), (0, 0), (1, 0)] -- not [.., (0, 0), (0, 1)], where (1,) would have
    none beside (0,)'s two. Caught: a partial last level handed out left to right, more than N nodes,
    paths not closed under prefixes."""
    assert ex.vllm_token_tree(4, 2, 4) == [(0,), (1,), (0, 0), (1, 0)]
    assert ex.vllm_token_tree(16, 2, 4) == [
        (0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1),
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1),
    ]  # fmt: skip
    assert ex.vllm_token_tree(5, 4, 1) == [(0,), (1,), (2,), (3,)]
    assert ex.vllm_token_tree(3, 1, 8) == [(0,), (0, 0), (0, 0, 0)]
    for nodes in range(1, 40):
        for width in (1, 2, 3, 4):
            for depth in (1, 2, 3, 5):
                tree = ex.vllm_token_tree(nodes, width, depth)
                assert 0 < len(tree) <= nodes and max(len(path) for path in tree) <= depth
                assert tree == sorted(tree, key=lambda t: (len(t), t)) and len(set(tree)) == len(tree)
                assert all(path[:-1] in tree for path in tree if len(path) > 1)  # parents are nodes
                assert all(i < width for path in tree for i in path)
                for level in range(1, max(len(path) for path in tree)):
                    parents = [path for path in tree if len(path) == level]
                    kids = [sum(1 for c in tree if c[:-1] == path) for path in parents]
                    assert len(set(kids)) == 1, (nodes, width, depth, tree)  # uniform per level
                    assert sorted(c[-1] for c in tree if c[:-1] == parents[0]) == list(range(kids[0]))


def test_vllm_gets_a_static_token_tree_and_the_tree_backend():
    """A tree pair's --speculative-config carries speculative_token_tree (a string vLLM parses with
    ast.literal_eval) and num_speculative_tokens = its node count, and the command picks the tree
    attention backend; without --tree neither is there; width 1 is a chain of the tree's nodes.
    Caught: the tree as JSON lists (vLLM reads a Python literal), num_speculative_tokens left at K,
    TREE_ATTN missing (vLLM would draft a chain)."""
    import ast

    result = export("vllm", "llama-8b-eagle3", tree=4, tree_width=2)
    args = parse_vllm(result)
    config = args.speculative_config
    assert set(config) <= VLLM_SPEC_KEYS | {"speculative_token_tree"}
    assert isinstance(config["speculative_token_tree"], str)
    assert ast.literal_eval(config["speculative_token_tree"]) == [(0,), (1,), (0, 0), (1, 0)]
    assert config["num_speculative_tokens"] == 4 and config["method"] == "eagle3"
    assert args.attention_backend == "TREE_ATTN"
    assert any("static tree" in note and "VLLM_ATTENTION_BACKEND=TREE_ATTN" in note for note in result.notes)
    plain = parse_vllm(export("vllm", "llama-8b-eagle3"))
    assert "speculative_token_tree" not in plain.speculative_config and plain.attention_backend is None
    chain = parse_vllm(export("vllm", "llama-8b-1b", tree=3, tree_width=1))
    assert chain.speculative_config["num_speculative_tokens"] == 3 and chain.attention_backend is None
    assert "speculative_token_tree" not in chain.speculative_config


def test_tree_options_through_the_cli():
    """--tree / --tree-width on the export command reach every engine: vLLM's JSON has the tree,
    llama.cpp drops it in one note line (its command unchanged), a PARD drafter is refused in one line
    (it drafts chains only); a lookup tree is SGLang's NGRAM of that size and breadth, and vLLM's ngram
    keeps its chain, saying so."""
    import ast

    data = invoke("vllm", "--preset", "llama-8b-1b", "--tree", "6", "--tree-width", "2", "--format", "json")
    assert data.exit_code == 0, data.output
    config = json.loads(data.stdout)
    assert ast.literal_eval(config["speculative_token_tree"]) == [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    sglang = invoke("sglang", "--preset", "llama-8b-1b", "--tree", "6", "--tree-width", "2")
    assert sglang.exit_code == 0, sglang.output
    args = strict(sglang_parser(), shlex.split(sglang.stdout.strip().splitlines()[-1])[3:])
    assert (args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (2, 7)
    llama = invoke("llama.cpp", "--preset", "llama-8b-1b", "--tree", "6")
    assert llama.exit_code == 0, llama.output
    assert llama.stdout == invoke("llama.cpp", "--preset", "llama-8b-1b").stdout
    tree_lines = [line for line in llama.stderr.splitlines() if "--tree" in line]
    assert len(tree_lines) == 1 and "chains only" in tree_lines[0], llama.stderr
    refused = invoke("vllm", "--preset", "llama-8b-pard", "--tree", "8")
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.output
    assert "chains only" in refused.stderr and refused.stdout == ""
    lookup = export("vllm", "qwen2.5-7b-lookup", tree=8)
    assert "speculative_token_tree" not in lookup.speculative_config
    assert lookup.speculative_config["num_speculative_tokens"] == ex.resolve_pair("qwen2.5-7b-lookup").k
    assert any("ngram drafts a chain" in note for note in lookup.notes)
    ngram = parse_sglang(export("sglang", "qwen2.5-7b-lookup", tree=12, tree_width=3))
    assert ngram.speculative_algorithm == "NGRAM" and ngram.speculative_num_draft_tokens == 13
    assert ngram.speculative_ngram_max_bfs_breadth == 3
    assert parse_sglang(export("sglang", "qwen2.5-7b-lookup")).speculative_ngram_max_bfs_breadth == 1
    assert invoke("vllm", "--tree", "-1").exit_code == 2


def test_llama_cpp_lookup_maps_the_default_longest_match_to_a_3_gram():
    """specli's default --ngram-max 32 bounds a longest match; ngram-simple matches exactly N tokens, so
    it gets 3 (a 32-token exact match would hardly ever draft), and a note says so."""
    result = export("llama.cpp", "qwen2.5-7b-lookup", num_draft_tokens=6)
    args, _ = parse_llama(result)
    assert args.spec_ngram_simple_size_n == 3
    assert any("--ngram-max 32" in note for note in result.notes)
