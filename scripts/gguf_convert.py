"""Convert a specli model folder to GGUF with llama.cpp's own converter (scripts/llama_cpp.sh).

    python scripts/gguf_convert.py LLAMA_CPP_SRC MODEL_DIR OUT.gguf

The converter names a BPE tokenizer's pre-tokenizer from a hash of how it splits a test string and
refuses hashes it does not know. specli's embedded tokenizer is a byte-level BPE with GPT-2's split
pattern, which llama.cpp calls `gpt-2`: answer that, for that tokenizer only, and convert as usual.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path


def _is_gpt2_byte_level(model_dir: Path) -> bool:
    """Whether the folder's tokenizer.json pre-tokenizes as GPT-2 does (ByteLevel, GPT-2's regex)."""
    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    pre = data.get("pre_tokenizer") or {}
    kinds = [pre.get("type")] + [p.get("type") for p in pre.get("pretokenizers", [])]
    return "ByteLevel" in kinds and data.get("model", {}).get("type") == "BPE"


def main(src: str, model_dir: str, out: str) -> None:
    sys.path[:0] = [src, str(Path(src) / "gguf-py")]
    from conversion import base  # llama.cpp's converter package, from its source tree

    known = base.TextModel.get_vocab_base_pre
    gpt2 = _is_gpt2_byte_level(Path(model_dir))

    def vocab_base_pre(self, tokenizer) -> str:  # type: ignore[no-untyped-def]
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            if gpt2:
                return "gpt-2"
            raise

    base.TextModel.get_vocab_base_pre = vocab_base_pre
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", "f32"]
    runpy.run_path(str(Path(src) / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
