#!/usr/bin/env python3
"""The peer of `mindfleet bench llm`: llama.cpp (the llama-cpp-python package) on the same GGUF.

Reads one JSON object on stdin:
    {"model": PATH, "threads": N, "prompt_ids": [...], "gen_tokens": N, "runs": N}
and prints one JSON object of figures on stdout (medians over `runs`, after one untimed run
that brings the memory-mapped weights in):
    {"load_s", "prompt_tokens", "prompt_tok_s", "ttft_ms", "gen_tokens", "gen_tok_s", "llama_cpp"}

The prompt is given as token ids (ours, checked equal to llama.cpp's by the tokenizer fixture),
so both sides evaluate exactly the same tokens. Generation is greedy and runs for exactly
`gen_tokens` tokens (end-of-text does not stop it), so both sides time the same work.
"""

import json
import sys
import time


def greedy(llm):
    """The most likely next token, from the last logits (`scores` holds them only with
    `logits_all`, which would compute logits for every prompt token)."""
    import numpy as np

    return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))


def main():
    req = json.load(sys.stdin)
    import llama_cpp

    t = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=req["model"],
        n_threads=req["threads"],
        n_threads_batch=req["threads"],
        n_ctx=2048,
        n_batch=512,
        verbose=False,
        logits_all=False,
    )
    load_s = time.perf_counter() - t
    prompt = req["prompt_ids"]
    runs = []
    for _ in range(req["runs"] + 1):
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        tok = greedy(llm)
        prompt_s = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(req["gen_tokens"]):
            llm.eval([tok])
            tok = greedy(llm)
        gen_s = time.perf_counter() - t
        runs.append((len(prompt) / prompt_s, prompt_s * 1e3, req["gen_tokens"] / gen_s))
    runs = runs[1:]
    median = lambda xs: sorted(xs)[len(xs) // 2]
    out = {
        "load_s": load_s,
        "prompt_tokens": len(prompt),
        "gen_tokens": req["gen_tokens"],
        "prompt_tok_s": median([r[0] for r in runs]),
        "ttft_ms": median([r[1] for r in runs]),
        "gen_tok_s": median([r[2] for r in runs]),
        "llama_cpp": llama_cpp.__version__,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
