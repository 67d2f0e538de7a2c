#!/usr/bin/env python3
"""The peers of `mindfleet bench embed`: sentence-transformers on PyTorch CPU, and ONNX Runtime
the way fastembed runs it.

Reads one JSON object on stdin:
    {"model_dir": DIR, "threads": N, "window": 256, "batches": [1, 8, 32],
     "short": [texts...], "code": [texts...], "short_n_batch1": K, "only_ort": false}
and prints one JSON object of figures on stdout:
    {"load_s", "per_s_batch1", "per_s_batch8", "per_s_batch32", "per_s_code_batch1", ...,
     "rss_mb", "torch", "sentence_transformers",
     "ort_load_s", "ort_export_s", "ort_per_s_batch1", ..., "ort_per_s_code_batch1", ...,
     "ort_max_abs_diff", "ort_min_cosine", "onnxruntime",
     "reference": {"short": [vectors], "code": [vectors]}}
or, when ONNX Runtime cannot run, "ort_error" in place of the "ort_" figures. With "only_ort"
(a later turn of the bench, which takes ours and ONNX Runtime's figures in turns), the "ort_"
figures alone, without the comparison with sentence-transformers.

The pipeline is the model's own (BERT, mean pooling, L2 normalisation) built explicitly, so
the directory needs only config.json, tokenizer.json and model.safetensors. For ONNX Runtime the
same BERT is exported to ONNX in a temporary directory, run in one session (CPU, every graph
optimisation, `threads` intra-op threads, 1 inter-op), fed by the `tokenizers` library, and
pooled and normalised in numpy, as fastembed does. "ort_max_abs_diff" and "ort_min_cosine" compare
its embeddings of the first 32 short texts with sentence-transformers' (both peers compute the
same thing). "rss_mb" is the peak before ONNX Runtime starts. "reference" holds
sentence-transformers' embeddings of the first 32 short texts and the first 8 code windows, for
the bench to compare ours with.
"""

import json
import resource
import sys
import time


def timed(embed, req, out, prefix):
    """Embeddings per second over the same texts and batches for each peer, into `out`."""
    for name, texts in (("", req["short"]), ("code_", req["code"])):
        for b in req["batches"]:
            run = texts[: req["short_n_batch1"]] if b == 1 else texts
            t = time.perf_counter()
            for i in range(0, len(run), b):
                embed(run[i : i + b], b)
            out[f"{prefix}per_s_{name}batch{b}"] = len(run) / (time.perf_counter() - t)


def ort(req, reference):
    """ONNX Runtime's figures, "ort_" keys; `reference` holds the torch embeddings of the first
    32 short texts (None: no comparison)."""
    import os
    import inspect
    import tempfile

    import numpy as np
    import onnxruntime
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    class Bert(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    def tokenizer():
        tok = Tokenizer.from_file(os.path.join(req["model_dir"], "tokenizer.json"))
        pad = tok.padding or {}
        tok.enable_truncation(max_length=req["window"])
        # Pad to the longest of the batch (tokenizer.json may ask for a fixed length).
        tok.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"))
        return tok

    names = ["input_ids", "attention_mask", "token_type_ids"]
    out = {"onnxruntime": onnxruntime.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        bert = Bert(AutoModel.from_pretrained(req["model_dir"])).eval()
        sample = tokenizer().encode_batch(["warm up", "the export's sample batch"])
        args = tuple(torch.tensor([getattr(e, a) for e in sample]) for a in ("ids", "attention_mask", "type_ids"))
        # The TorchScript exporter takes dynamic_axes; newer torch defaults to the dynamo one.
        legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
        path = os.path.join(tmp, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(
                bert, args, path, input_names=names, output_names=["last_hidden_state"],
                dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                              "last_hidden_state": {0: "batch", 1: "sequence"}},
                opset_version=17, do_constant_folding=True, **legacy,
            )
        out["ort_export_s"] = time.perf_counter() - t
        del bert

        t = time.perf_counter()
        tok = tokenizer()
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = req["threads"]
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        out["ort_load_s"] = time.perf_counter() - t
    inputs = [i.name for i in session.get_inputs()]

    def embed(texts, _batch=None):
        enc = tok.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
        }
        hidden = session.run(None, {n: feed[n] for n in inputs})[0]
        mask = feed["attention_mask"][..., None].astype(hidden.dtype)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    embed(["warm up"] * 8)
    timed(embed, req, out, "ort_")
    if reference is None:
        return out
    ours = embed(req["short"][: len(reference)])
    out["ort_max_abs_diff"] = float(np.abs(ours - reference).max())
    cos = (ours * reference).sum(axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    out["ort_min_cosine"] = float(cos.min())
    return out


def main():
    req = json.load(sys.stdin)
    import torch

    torch.set_num_threads(req["threads"])
    if req.get("only_ort"):
        json.dump(ort(req, None), sys.stdout)
        return
    import sentence_transformers
    from sentence_transformers import SentenceTransformer, models

    t = time.perf_counter()
    word = models.Transformer(req["model_dir"], max_seq_length=req["window"])
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")
    load_s = time.perf_counter() - t
    model.encode(["warm up"] * 8, batch_size=8)

    out = {"load_s": load_s, "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    timed(lambda texts, b: model.encode(texts, batch_size=b, normalize_embeddings=True), req, out, "")
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    reference = model.encode(req["short"][:32], batch_size=32, normalize_embeddings=True)
    out["reference"] = {
        "short": reference.tolist(),
        "code": model.encode(req["code"][:8], batch_size=8, normalize_embeddings=True).tolist(),
    }
    del model

    try:
        import onnxruntime  # noqa: F401
    except ImportError as e:
        out["ort_error"] = f"onnxruntime not importable: {e}"
    else:
        try:
            out.update(ort(req, reference))
        except Exception as e:  # the torch figures stand without it
            out["ort_error"] = f"{type(e).__name__}: {e}"
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
