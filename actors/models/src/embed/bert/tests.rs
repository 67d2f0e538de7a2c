//! Our forward pass against candle_transformers' BertModel (padded batch, attention mask) on
//! the real model, token by token.

use std::path::PathBuf;

use crate::fetch::{MINILM, PACKAGES, default_dir, pull};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};

use super::rows::gelu;
use super::*;
use crate::math::exp;
use mindfleet_core::embedding::cosine;

fn model_dir() -> PathBuf {
    let dir = default_dir();
    pull(&dir, &PACKAGES, |_| {}).expect("models pull");
    dir.join(MINILM.name)
}

fn candle_model(dir: &Path) -> BertModel {
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config: Config = serde_json::from_str(&text).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).unwrap();
    BertModel::load(vb, &config).unwrap()
}

/// Token ids from a fixed generator, [CLS] first and [SEP] last, `len` in all.
fn ids(len: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut out: Vec<u32> = (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Ordinary word pieces: past the unused and special ids.
            1996 + ((s >> 33) % 28000) as u32
        })
        .collect();
    out[0] = 101;
    if len > 1 {
        out[len - 1] = 102;
    }
    out
}

/// Every token's hidden state from candle, the batch padded to its longest with a mask.
fn candle_tokens(model: &BertModel, batch: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let longest = batch.iter().map(Vec::len).max().unwrap();
    let pad = |f: &dyn Fn(&[u32], usize) -> u32| -> Vec<u32> {
        batch.iter().flat_map(|ids| (0..longest).map(move |p| f(ids, p))).collect()
    };
    let dims = (batch.len(), longest);
    let ids = Tensor::from_vec(pad(&|ids, p| ids.get(p).copied().unwrap_or(0)), dims, &Device::Cpu).unwrap();
    let types = Tensor::zeros(dims, DType::U32, &Device::Cpu).unwrap();
    let mask = Tensor::from_vec(pad(&|ids, p| u32::from(p < ids.len())), dims, &Device::Cpu).unwrap();
    let hidden = model.forward(&ids, &types, Some(&mask)).unwrap().to_vec3::<f32>().unwrap();
    hidden.into_iter().zip(batch).map(|(rows, ids)| rows[..ids.len()].concat()).collect()
}

fn inputs<'a>(batch: &'a [Vec<u32>], zeros: &'a [u32]) -> Vec<Input<'a>> {
    batch.iter().map(|ids| Input { ids, type_ids: &zeros[..ids.len()] }).collect()
}

#[test]
fn forward_matches_candle_bert_on_mixed_lengths_with_any_thread_count() {
    let dir = model_dir();
    let reference = candle_model(&dir);
    let zeros = vec![0u32; 512];
    // Mixed lengths, lengths far apart (2 and 256 in one batch), and a lone long input (which
    // runs its matmuls on all threads).
    let batches: Vec<Vec<Vec<u32>>> = vec![
        [9, 14, 17, 12, 30, 7, 16, 21].iter().enumerate().map(|(i, l)| ids(*l, i as u64)).collect(),
        [2, 256, 5, 64, 256, 3, 131, 1].iter().enumerate().map(|(i, l)| ids(*l, 100 + i as u64)).collect(),
        vec![ids(200, 7)],
        vec![ids(12, 8)],
    ];
    let wants: Vec<Vec<Vec<f32>>> = batches.iter().map(|b| candle_tokens(&reference, b)).collect();
    for threads in [1, 2, 3] {
        let cfg = BertConfig::read(&dir.join("config.json")).unwrap();
        let ours = Bert::load(cfg, &dir.join("model.safetensors"), threads).unwrap();
        for (batch, want) in batches.iter().zip(&wants) {
            let lens: Vec<usize> = batch.iter().map(Vec::len).collect();
            let got = ours.forward(&inputs(batch, &zeros), Output::Tokens).unwrap();
            let means = ours.forward(&inputs(batch, &zeros), Output::Mean).unwrap();
            assert_eq!(got.len(), batch.len());
            for (s, ((g, w), mean)) in got.iter().zip(want).zip(&means).enumerate() {
                assert_eq!(g.len(), w.len(), "threads {threads}, lengths {lens:?}, input {s}");
                for (p, (gr, wr)) in g.chunks(384).zip(w.chunks(384)).enumerate() {
                    let c = cosine(gr, wr);
                    assert!(c > 0.9999, "threads {threads}, lengths {lens:?}, input {s}, token {p}: cosine {c}");
                }
                let want_mean: Vec<f32> =
                    (0..384).map(|i| w.chunks(384).map(|r| r[i]).sum::<f32>() / (w.len() / 384) as f32).collect();
                let c = cosine(mean, &want_mean);
                assert!(c > 0.9999, "threads {threads}, lengths {lens:?}, input {s}: mean cosine {c}");
            }
        }
    }
}

#[test]
fn bad_tokens_are_an_error_naming_the_input_not_a_panic() {
    let dir = model_dir();
    let cfg = BertConfig::read(&dir.join("config.json")).unwrap();
    let ours = Bert::load(cfg, &dir.join("model.safetensors"), 1).unwrap();
    let zeros = [0u32; 600];
    let cases: [(&[u32], &[u32], &str); 4] = [
        (&[101, 40_000, 102], &zeros[..3], "input 0: token id 40000 at 1 is outside the vocabulary of 30522"),
        (&[101, 102], &[0, 2], "input 0: token type 2 at 1 is outside the 2 types"),
        (&[], &[], "input 0: no tokens"),
        (&[101; 600], &zeros, "input 0: 600 tokens, more than the model's 512 positions"),
    ];
    for (ids, type_ids, want) in cases {
        let e = ours.forward(&[Input { ids, type_ids }], Output::Mean).unwrap_err();
        assert_eq!(e.to_string(), format!("model input: {want}"));
    }
}

#[test]
fn a_config_with_another_activation_is_refused_naming_the_file_and_field() {
    let dir = tempfile_dir();
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(model_dir().join("config.json")).unwrap();
    std::fs::write(&path, text.replace("\"gelu\"", "\"relu\"")).unwrap();
    let e = BertConfig::read(&path).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: hidden_act: \"relu\" is not supported", path.display())), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mindfleet-bert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn chunks_cover_the_batch_in_order_and_give_every_thread_work() {
    for (lens, threads) in [
        (vec![16; 32], 2),
        (vec![256; 32], 2),
        (vec![2, 256, 5, 64, 256, 3, 131, 1], 3),
        (vec![10], 2),
        (vec![300, 1, 1, 1], 2),
    ] {
        let got = chunks(&lens, threads);
        let flat: Vec<usize> = got.iter().flat_map(|r| r.clone()).collect();
        assert_eq!(flat, (0..lens.len()).collect::<Vec<_>>(), "{lens:?}");
        assert!(got.iter().all(|r| !r.is_empty()), "{lens:?}: {got:?}");
        assert!(got.len() >= threads.min(lens.len()), "{lens:?}: {got:?}");
    }
    // Short sentences: two chunks of 256 tokens on two threads.
    assert_eq!(chunks(&[16; 32], 2), vec![0..16, 16..32]);
}

#[test]
fn exp_and_gelu_match_the_standard_library() {
    for i in -8700..=8800 {
        let x = i as f32 / 100.0;
        let (got, want) = (exp(x), x.exp());
        assert!((got - want).abs() <= want * 4e-7, "exp({x}) = {got}, want {want}");
    }
    for i in -1000..=1000 {
        let x = i as f32 / 100.0;
        let want = 0.5 * f64::from(x) * (1.0 + erf(f64::from(x) / std::f64::consts::SQRT_2));
        let got = gelu(x);
        assert!((f64::from(got) - want).abs() < 1e-6, "gelu({x}) = {got}, want {want}");
    }
}

/// erf in f64 by its Taylor series (|x| ≤ 3) or continued fraction, for reference.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let v = if a <= 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = e^{-a²}/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    v.copysign(x)
}
