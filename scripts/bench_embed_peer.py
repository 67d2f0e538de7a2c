#!/usr/bin/env python3
"""The peer of `mindfleet bench embed`: sentence-transformers on PyTorch CPU.

Reads one JSON object on stdin:
    {"model_dir": DIR, "threads": N, "window": 256, "batches": [1, 8, 32],
     "short": [texts...], "code": [texts...], "short_n_batch1": K}
and prints one JSON object of figures on stdout:
    {"load_s", "per_s_batch1", "per_s_batch8", "per_s_batch32", "per_s_code_batch1", ...,
     "rss_mb", "torch", "sentence_transformers"}

The pipeline is the model's own (BERT, mean pooling, L2 normalisation) built explicitly, so
the directory needs only config.json, tokenizer.json and model.safetensors.
"""

import json
import resource
import sys
import time


def main():
    req = json.load(sys.stdin)
    import torch

    torch.set_num_threads(req["threads"])
    import sentence_transformers
    from sentence_transformers import SentenceTransformer, models

    t = time.perf_counter()
    word = models.Transformer(req["model_dir"], max_seq_length=req["window"])
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")
    load_s = time.perf_counter() - t
    model.encode(["warm up"] * 8, batch_size=8)

    out = {"load_s": load_s, "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    for name, texts in (("", req["short"]), ("code_", req["code"])):
        for b in req["batches"]:
            run = texts[: req["short_n_batch1"]] if b == 1 else texts
            t = time.perf_counter()
            for i in range(0, len(run), b):
                model.encode(run[i : i + b], batch_size=b, normalize_embeddings=True)
            out[f"per_s_{name}batch{b}"] = len(run) / (time.perf_counter() - t)
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
