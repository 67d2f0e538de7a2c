//! The embedder against reference vectors from sentence-transformers (an independent
//! implementation of the same model), on the real model files.

use mindfleet_actors::embed::{EmbedError, Embedder, cosine};
use mindfleet_runtime::models::MINILM;
use serde_json::Value;

use crate::util::pulled;

fn reference() -> Vec<(String, usize, Vec<f32>)> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/minilm_reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["max_seq_length"], 256);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let e = i["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            (i["text"].as_str().unwrap().to_string(), i["tokens"].as_u64().unwrap() as usize, e)
        })
        .collect()
}

#[test]
fn embeddings_match_sentence_transformers_alone_and_in_a_batch() {
    let e = Embedder::load(&pulled().join(MINILM.name)).unwrap();
    assert_eq!((e.dimensions(), e.window()), (384, 256));
    let items = reference();
    let texts: Vec<&str> = items.iter().map(|(t, _, _)| t.as_str()).collect();
    let batch = e.embed(&texts).unwrap();
    for ((text, tokens, want), got) in items.iter().zip(&batch) {
        assert_eq!(got.tokens, *tokens, "{text:?}");
        assert_eq!(got.truncated_from, None, "{text:?}");
        let c = cosine(&got.vector, want);
        assert!(c > 0.999, "{text:?}: cosine {c} to the reference");
        let alone = &e.embed(&[text.as_str()]).unwrap()[0];
        assert!(cosine(&alone.vector, &got.vector) > 0.9999, "{text:?}: padding changed it");
    }
    let norm: f32 = batch[0].vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    // A meaning test: eating food is close to eating bread, far from riding a horse.
    let (food, bread, horse) = (&batch[0].vector, &batch[1].vector, &batch[2].vector);
    assert!(cosine(food, bread) > cosine(food, horse) + 0.3, "{} vs {}", cosine(food, bread), cosine(food, horse));
}

#[test]
fn a_text_longer_than_the_window_is_cut_and_says_from_how_many_tokens() {
    let e = Embedder::load(&pulled().join(MINILM.name)).unwrap();
    let long = "word ".repeat(400);
    let got = &e.embed(&[long.as_str()]).unwrap()[0];
    assert_eq!(got.tokens, 256);
    assert_eq!(got.truncated_from, Some(402));
}

#[test]
fn a_model_dir_without_weights_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(pulled().join(MINILM.name).join("config.json"), dir.path().join("config.json")).unwrap();
    let e = Embedder::load(dir.path()).err().expect("no weights");
    assert!(matches!(e, EmbedError::Load { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors: missing"), "{e}");
}
