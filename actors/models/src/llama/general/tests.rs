//! The general path on tiny GGUF files written here (random weights, a vocabulary of a few
//! hundred tokens, a chat template): for each architecture, the file loads on the path it
//! should, its template renders as written, and its logits are candle-transformers' own for the
//! same tokens (for `gemma3`, those of a plain Gemma 3 written here, itself checked against
//! candle's), read in one pass, continued token by token, and rolled back. Then Gemma 3's
//! sliding window, the engine on this path, LoRA's refusal, and the refusals of files it cannot
//! run.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use candle_transformers::models::{
    quantized_gemma3, quantized_llama, quantized_phi3, quantized_qwen2, quantized_qwen3,
};

use crate::llama::backend::{KvCache, Part};
use crate::llama::batch::{BatchConfig, Outcome, Work};
use crate::llama::forward::Scratch;
use crate::llama::{ChatMessage, GenerateRequest, Llm, LlmConfig, LlmError};

const HIDDEN: usize = 64;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 32;
const FFN: usize = 128;
const LAYERS: usize = 2;
/// The tiny gemma3's sliding window.
const WINDOW: usize = 8;

/// A tiny model's file: its metadata and tensors, as `gguf_file::write` takes them.
struct Tiny {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, QTensor)>,
    seed: u64,
    /// The matrices' type.
    matrices: GgmlDType,
}

impl Tiny {
    fn new(arch: &str) -> Tiny {
        // gemma3's is compared with a model written out plainly whose sums run in another order:
        // on Q8_0 matrices (whose inputs are rounded to 8 bits too) a last-bit difference may
        // round an input the other way, so its matrices are f32.
        let matrices = if arch == "gemma3" { GgmlDType::F32 } else { GgmlDType::Q8_0 };
        let mut t = Tiny { metadata: Vec::new(), tensors: Vec::new(), seed: 0x5eed, matrices };
        t.meta("general.architecture", Value::String(arch.into()));
        let u = |n: usize| Value::U32(n as u32);
        t.meta(&format!("{arch}.context_length"), u(256));
        t.meta(&format!("{arch}.embedding_length"), u(HIDDEN));
        t.meta(&format!("{arch}.block_count"), u(LAYERS));
        t.meta(&format!("{arch}.feed_forward_length"), u(FFN));
        t.meta(&format!("{arch}.attention.head_count"), u(HEADS));
        t.meta(&format!("{arch}.attention.head_count_kv"), u(KV_HEADS));
        t.meta(&format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6));
        t.meta(&format!("{arch}.rope.freq_base"), Value::F32(10_000.0));
        t.meta(&format!("{arch}.rope.dimension_count"), u(HEAD_DIM));
        t.meta(&format!("{arch}.attention.key_length"), u(HEAD_DIM));
        t.meta(&format!("{arch}.attention.value_length"), u(HEAD_DIM));
        if arch == "gemma3" {
            // Shorter than the prompts, so that the window cuts; layer 0 is local, layer 1 global.
            t.meta("gemma3.attention.sliding_window", u(WINDOW));
            t.meta("gemma3.attention.sliding_window_type", u(2));
        }
        t
    }

    fn meta(&mut self, key: &str, v: Value) {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.into(), v));
    }

    /// Random values in -0.5..0.5 (a small generator of our own: the same file every run).
    fn random(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                (self.seed % 10_000) as f32 / 10_000.0 - 0.5
            })
            .collect()
    }

    fn matrix(&mut self, name: &str, rows: usize, cols: usize) {
        let values = self.random(rows * cols);
        let t = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        self.tensors.push((name.into(), QTensor::quantize(&t, self.matrices).unwrap()));
    }

    fn vector(&mut self, name: &str, len: usize) {
        let values: Vec<f32> = self.random(len).into_iter().map(|v| 1.0 + v / 4.0).collect();
        let t = Tensor::from_vec(values, len, &Device::Cpu).unwrap();
        self.tensors.push((name.into(), QTensor::quantize(&t, GgmlDType::F32).unwrap()));
    }

    /// The tensors candle's model of `arch` reads.
    fn weights(&mut self, arch: &str, vocab: usize) {
        let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
        self.matrix("token_embd.weight", vocab, HIDDEN);
        self.vector("output_norm.weight", HIDDEN);
        if arch == "phi3" {
            self.matrix("output.weight", vocab, HIDDEN);
        }
        for l in 0..LAYERS {
            let b = format!("blk.{l}");
            self.vector(&format!("{b}.attn_norm.weight"), HIDDEN);
            self.vector(&format!("{b}.ffn_norm.weight"), HIDDEN);
            self.matrix(&format!("{b}.ffn_down.weight"), HIDDEN, FFN);
            if arch == "phi3" {
                self.matrix(&format!("{b}.attn_qkv.weight"), q + 2 * kv, HIDDEN);
                self.matrix(&format!("{b}.attn_output.weight"), HIDDEN, q);
                self.matrix(&format!("{b}.ffn_up.weight"), 2 * FFN, HIDDEN);
                continue;
            }
            self.matrix(&format!("{b}.attn_q.weight"), q, HIDDEN);
            self.matrix(&format!("{b}.attn_k.weight"), kv, HIDDEN);
            self.matrix(&format!("{b}.attn_v.weight"), kv, HIDDEN);
            self.matrix(&format!("{b}.attn_output.weight"), HIDDEN, q);
            self.matrix(&format!("{b}.ffn_gate.weight"), FFN, HIDDEN);
            self.matrix(&format!("{b}.ffn_up.weight"), FFN, HIDDEN);
            if arch == "qwen2" {
                self.vector(&format!("{b}.attn_q.bias"), q);
                self.vector(&format!("{b}.attn_k.bias"), kv);
                self.vector(&format!("{b}.attn_v.bias"), kv);
            }
            if matches!(arch, "qwen3" | "gemma3") {
                self.vector(&format!("{b}.attn_q_norm.weight"), HEAD_DIM);
                self.vector(&format!("{b}.attn_k_norm.weight"), HEAD_DIM);
            }
            if arch == "gemma3" {
                self.vector(&format!("{b}.post_attention_norm.weight"), HIDDEN);
                self.vector(&format!("{b}.post_ffw_norm.weight"), HIDDEN);
            }
        }
    }

    fn write(&self, path: &Path) {
        let metadata: Vec<(&str, &Value)> = self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensors: Vec<(&str, &QTensor)> = self.tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut f = std::fs::File::create(path).unwrap();
        gguf_file::write(&mut f, &metadata, &tensors).unwrap();
    }
}

fn strings(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
}

/// GPT-2's printable stand-in for each byte.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|x| !printable(*x)).count() as u32 + 1;
    char::from_u32(255 + shifted).unwrap()
}

/// A byte-level BPE vocabulary: every byte, a few merges, and the control tokens given.
fn gpt2_vocab(t: &mut Tiny, pre: &str, controls: &[&str]) -> usize {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ t", "Ġt he", "a s", "i s"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    for c in controls {
        tokens.push(c.to_string());
        types.push(3);
    }
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    t.meta("tokenizer.ggml.model", Value::String("gpt2".into()));
    t.meta("tokenizer.ggml.pre", Value::String(pre.into()));
    t.meta("tokenizer.ggml.tokens", strings(&refs));
    t.meta("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect()));
    t.meta("tokenizer.ggml.merges", strings(&merges));
    tokens.len()
}

/// A SentencePiece vocabulary: controls, a newline token of its own (user-defined, as Gemma's),
/// the 256 bytes, and pieces with scores.
fn spm_vocab(t: &mut Tiny, controls: &[&str]) -> usize {
    let mut tokens: Vec<String> = vec!["<pad>".into(), "<eos>".into(), "<bos>".into(), "<unk>".into()];
    let mut types = vec![3, 3, 3, 2];
    for c in controls {
        tokens.push(c.to_string());
        types.push(3);
    }
    tokens.push("\n".into());
    types.push(4);
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let pieces = [
        "▁", "a", "b", "e", "h", "i", "l", "o", "r", "s", "t", "y", "B", "H", ".", "!", "he", "ll", "hell", "hello",
        "▁b", "▁br", "▁is", "ie", "ief", "f",
    ];
    for p in pieces {
        tokens.push(p.into());
        types.push(1);
    }
    let scores: Vec<Value> = tokens
        .iter()
        .zip(&types)
        .map(|(tok, ty)| Value::F32(if *ty == 1 { tok.chars().count() as f32 } else { 0.0 }))
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    t.meta("tokenizer.ggml.model", Value::String("llama".into()));
    t.meta("tokenizer.ggml.tokens", strings(&refs));
    t.meta("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect()));
    t.meta("tokenizer.ggml.scores", Value::Array(scores));
    t.meta("tokenizer.ggml.bos_token_id", Value::U32(2));
    t.meta("tokenizer.ggml.eos_token_id", Value::U32(1));
    t.meta("tokenizer.ggml.unknown_token_id", Value::U32(3));
    tokens.len()
}

const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const QWEN3: &str = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content.strip() + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

const PHI3: &str = "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

const LLAMA3: &str = "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/// A tiny file of `arch` in `dir`, and the prompt its template renders for [`chat`].
fn tiny(dir: &Path, arch: &str) -> (PathBuf, &'static str) {
    let mut t = Tiny::new(arch);
    let (vocab, expected) = match arch {
        "qwen2" => {
            let v = gpt2_vocab(&mut t, "qwen2", &["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
            t.meta("tokenizer.ggml.eos_token_id", Value::U32(v as u32 - 1));
            t.meta("tokenizer.chat_template", Value::String(CHATML.into()));
            (
                v,
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello, is the sky blue?<|im_end|>\n<|im_start|>assistant\n",
            )
        }
        "qwen3" => {
            let v =
                gpt2_vocab(&mut t, "qwen2", &["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]);
            t.meta("tokenizer.ggml.eos_token_id", Value::U32(v as u32 - 3));
            t.meta("tokenizer.chat_template", Value::String(QWEN3.into()));
            (
                v,
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello, is the sky blue?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
            )
        }
        "llama" => {
            let v = gpt2_vocab(
                &mut t,
                "llama-bpe",
                &["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
            );
            t.meta("tokenizer.ggml.bos_token_id", Value::U32(v as u32 - 4));
            t.meta("tokenizer.ggml.eos_token_id", Value::U32(v as u32 - 1));
            t.meta("tokenizer.chat_template", Value::String(LLAMA3.into()));
            (
                v,
                "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhello, is the sky blue?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            )
        }
        // No template in the file: Gemma 3's own.
        "gemma3" => {
            let v = spm_vocab(&mut t, &["<start_of_turn>", "<end_of_turn>"]);
            t.meta("tokenizer.ggml.add_space_prefix", Value::Bool(false));
            (v, "<bos><start_of_turn>user\nBe brief.\n\nhello, is the sky blue?<end_of_turn>\n<start_of_turn>model\n")
        }
        "phi3" => {
            let v = spm_vocab(&mut t, &["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]);
            t.meta("tokenizer.chat_template", Value::String(PHI3.into()));
            (v, "<|system|>\nBe brief.<|end|>\n<|user|>\nhello, is the sky blue?<|end|>\n<|assistant|>\n")
        }
        other => unreachable!("{other}"),
    };
    t.weights(arch, vocab);
    let path = dir.join(format!("{arch}.gguf"));
    t.write(&path);
    (path, expected)
}

fn chat() -> Vec<ChatMessage> {
    vec![ChatMessage::system("Be brief."), ChatMessage::user("hello, is the sky blue?")]
}

/// candle-transformers' own model of the file, to compare with (for `gemma3`, our plain one:
/// candle's has the wrong activation and window, see [`super::gemma3`]).
enum Reference {
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    Gemma3(PlainGemma3),
    Phi3(quantized_phi3::ModelWeights),
    Llama(quantized_llama::ModelWeights),
}

impl Reference {
    fn load(path: &Path) -> Reference {
        let bytes = std::fs::read(path).unwrap();
        let mut r = Cursor::new(bytes);
        let ct = gguf_file::Content::read(&mut r).unwrap();
        let arch = ct.metadata["general.architecture"].to_string().unwrap().clone();
        let d = &Device::Cpu;
        match arch.as_str() {
            "qwen2" => Reference::Qwen2(quantized_qwen2::ModelWeights::from_gguf(ct, &mut r, d).unwrap()),
            "qwen3" => Reference::Qwen3(quantized_qwen3::ModelWeights::from_gguf(ct, &mut r, d).unwrap()),
            "gemma3" => Reference::Gemma3(PlainGemma3::load(path)),
            "phi3" => Reference::Phi3(quantized_phi3::ModelWeights::from_gguf(false, ct, &mut r, d).unwrap()),
            "llama" => Reference::Llama(quantized_llama::ModelWeights::from_gguf(ct, &mut r, d).unwrap()),
            other => unreachable!("{other}"),
        }
    }

    /// The logits after reading `ids` from the start, in one pass (a fresh model each time).
    fn logits(path: &Path, ids: &[u32]) -> Vec<f32> {
        let x = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let out = match &mut Reference::load(path) {
            Reference::Gemma3(m) => return m.logits(ids, Activation::Gelu, Gemma3Mask::Window),
            Reference::Qwen2(m) => m.forward(&x, 0),
            Reference::Qwen3(m) => m.forward(&x, 0),
            Reference::Phi3(m) => m.forward(&x, 0),
            Reference::Llama(m) => m.forward(&x, 0),
        };
        out.unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }
}

#[derive(Clone, Copy)]
enum Activation {
    /// Gemma's own (`gelu_pytorch_tanh`).
    Gelu,
    /// candle 0.11.1's.
    Silu,
}

/// Which keys a local layer's query sees.
#[derive(Clone, Copy)]
enum Gemma3Mask {
    /// Less than the window before it (llama.cpp's and transformers' Gemma 3).
    Window,
    /// Up to the window before it: candle 0.11.1's, one position wider.
    Candle,
}

/// Gemma 3 written out plainly for a sequence read whole from its start: every position's
/// attention over every key, masked position by position, in loops over f32. Only the matrix
/// products are candle's quantized ones (so that the rounding of their Q8_0 inputs is the same as
/// on the path).
struct PlainGemma3 {
    embed: Vec<Vec<f32>>,
    layers: Vec<PlainLayer>,
    norm: Vec<f32>,
    output: QMatMul,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f32,
    window: usize,
    pattern: usize,
    freqs: (f32, f32),
}

struct PlainLayer {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    out: QMatMul,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    /// attn, post_attention, ffn, post_ffw, q, k.
    norms: [Vec<f32>; 6],
}

impl PlainGemma3 {
    fn load(path: &Path) -> PlainGemma3 {
        let mut r = Cursor::new(std::fs::read(path).unwrap());
        let ct = gguf_file::Content::read(&mut r).unwrap();
        let d = &Device::Cpu;
        let int = |k: &str| ct.metadata[&format!("gemma3.{k}")].to_u32().unwrap() as usize;
        let float = |k: &str, or: f32| ct.metadata.get(&format!("gemma3.{k}")).map_or(or, |v| v.to_f32().unwrap());
        let mut matrix = |name: &str| QMatMul::from_qtensor(ct.tensor(&mut r, name, d).unwrap()).unwrap();
        let output = matrix("token_embd.weight");
        let mut layers = Vec::new();
        for l in 0..int("block_count") {
            let mut m = |what: &str| matrix(&format!("blk.{l}.{what}.weight"));
            let (q, k, v, out) = (m("attn_q"), m("attn_k"), m("attn_v"), m("attn_output"));
            let (gate, up, down) = (m("ffn_gate"), m("ffn_up"), m("ffn_down"));
            layers.push(PlainLayer { q, k, v, out, gate, up, down, norms: Default::default() });
        }
        let embed = ct.tensor(&mut r, "token_embd.weight", d).unwrap().dequantize(d).unwrap().to_vec2().unwrap();
        let mut vector = |name: &str| -> Vec<f32> {
            ct.tensor(&mut r, name, d).unwrap().dequantize(d).unwrap().flatten_all().unwrap().to_vec1().unwrap()
        };
        for (l, layer) in layers.iter_mut().enumerate() {
            let names = ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm"];
            layer.norms = names.map(|n| vector(&format!("blk.{l}.{n}.weight")));
        }
        PlainGemma3 {
            embed,
            layers,
            norm: vector("output_norm.weight"),
            output,
            hidden: int("embedding_length"),
            heads: int("attention.head_count"),
            kv_heads: int("attention.head_count_kv"),
            head_dim: int("attention.key_length"),
            eps: float("attention.layer_norm_rms_epsilon", 1e-6),
            window: int("attention.sliding_window"),
            pattern: ct
                .metadata
                .get("gemma3.attention.sliding_window_type")
                .map_or(6, |v| v.to_u32().unwrap() as usize),
            freqs: (float("rope.local_freq_base", 10_000.0), float("rope.freq_base", 1_000_000.0)),
        }
    }

    fn rms(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
        let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let r = 1.0 / (mean + eps).sqrt();
        x.iter().zip(w).map(|(v, w)| v * r * w).collect()
    }

    /// Each row times a quantized matrix, as the path computes it.
    fn product(m: &QMatMul, rows: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let cols = rows[0].len();
        let flat: Vec<f32> = rows.concat();
        let x = Tensor::from_vec(flat, (rows.len(), cols), &Device::Cpu).unwrap();
        m.forward(&x).unwrap().to_vec2().unwrap()
    }

    /// Rotates one head's vector to `pos` (halves rotated together, as Gemma's "neox" rope).
    fn rope(x: &mut [f32], pos: usize, freq: f32) {
        let half = x.len() / 2;
        for i in 0..half {
            let angle = pos as f32 / freq.powf((2 * i) as f32 / x.len() as f32);
            let (sin, cos) = angle.sin_cos();
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * cos - b * sin;
            x[i + half] = a * sin + b * cos;
        }
    }

    /// The logits after `ids`, read from position 0.
    fn logits(&self, ids: &[u32], activation: Activation, mask: Gemma3Mask) -> Vec<f32> {
        let (hd, n) = (self.head_dim, ids.len());
        let scale = (self.hidden as f32).sqrt();
        let mut x: Vec<Vec<f32>> =
            ids.iter().map(|id| self.embed[*id as usize].iter().map(|v| v * scale).collect()).collect();
        for (l, layer) in self.layers.iter().enumerate() {
            let local = !(l + 1).is_multiple_of(self.pattern);
            let freq = if local { self.freqs.0 } else { self.freqs.1 };
            let sees = |q: usize, k: usize| {
                k <= q
                    && (!local
                        || match mask {
                            Gemma3Mask::Window => q - k < self.window,
                            Gemma3Mask::Candle => q - k <= self.window,
                        })
            };
            let [attn_norm, post_attn, ffn_norm, post_ffn, q_norm, k_norm] = &layer.norms;
            let h: Vec<Vec<f32>> = x.iter().map(|r| Self::rms(r, attn_norm, self.eps)).collect();
            let heads = |m: &QMatMul, count: usize, norm: Option<&Vec<f32>>| -> Vec<Vec<Vec<f32>>> {
                Self::product(m, &h)
                    .into_iter()
                    .enumerate()
                    .map(|(pos, row)| {
                        (0..count)
                            .map(|i| {
                                let head = &row[i * hd..(i + 1) * hd];
                                let Some(w) = norm else { return head.to_vec() };
                                let mut head = Self::rms(head, w, self.eps);
                                Self::rope(&mut head, pos, freq);
                                head
                            })
                            .collect()
                    })
                    .collect()
            };
            let (q, k, v) = (
                heads(&layer.q, self.heads, Some(q_norm)),
                heads(&layer.k, self.kv_heads, Some(k_norm)),
                heads(&layer.v, self.kv_heads, None),
            );
            let group = self.heads / self.kv_heads;
            let attended: Vec<Vec<f32>> = (0..n)
                .map(|t| {
                    let mut row = Vec::with_capacity(self.heads * hd);
                    for (hq, query) in q[t].iter().enumerate() {
                        let kv = hq / group;
                        let scores: Vec<f32> = (0..n)
                            .map(|j| {
                                if !sees(t, j) {
                                    return f32::NEG_INFINITY;
                                }
                                query.iter().zip(&k[j][kv]).map(|(a, b)| a * b).sum::<f32>() / (hd as f32).sqrt()
                            })
                            .collect();
                        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
                        let sum: f32 = e.iter().sum();
                        row.extend((0..hd).map(|c| (0..n).map(|j| e[j] / sum * v[j][kv][c]).sum::<f32>()));
                    }
                    row
                })
                .collect();
            let o = Self::product(&layer.out, &attended);
            let x1: Vec<Vec<f32>> = x
                .iter()
                .zip(&o)
                .map(|(r, o)| r.iter().zip(Self::rms(o, post_attn, self.eps)).map(|(a, b)| a + b).collect())
                .collect();
            let f: Vec<Vec<f32>> = x1.iter().map(|r| Self::rms(r, ffn_norm, self.eps)).collect();
            let (gate, up) = (Self::product(&layer.gate, &f), Self::product(&layer.up, &f));
            let act = |g: f32| match activation {
                Activation::Gelu => {
                    0.5 * g * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (g + 0.044_715 * g * g * g)).tanh())
                }
                Activation::Silu => g / (1.0 + (-g).exp()),
            };
            let gated: Vec<Vec<f32>> =
                gate.iter().zip(&up).map(|(g, u)| g.iter().zip(u).map(|(g, u)| act(*g) * u).collect()).collect();
            let down = Self::product(&layer.down, &gated);
            x = x1
                .iter()
                .zip(&down)
                .map(|(r, d)| r.iter().zip(Self::rms(d, post_ffn, self.eps)).map(|(a, b)| a + b).collect())
                .collect();
        }
        let last = Self::rms(&x[n - 1], &self.norm, self.eps);
        Self::product(&self.output, &[last]).pop().unwrap()
    }
}

fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    let worst = ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-4, "{what}: logits differ by {worst}");
}

fn load(path: &Path, general: bool) -> Llm {
    let config = LlmConfig { max_context: 128, threads: Some(1) };
    if general { Llm::load_general(path, config) } else { Llm::load_with(path, config) }.unwrap()
}

/// Our logits after `ids` read after `cache`.
fn read(llm: &Llm, cache: &mut KvCache, ids: &[u32]) -> Vec<f32> {
    let mut parts = [Part { cache, ids, prompt: true, adapter: None }];
    llm.forward_batch(&mut Scratch::default(), &mut parts).unwrap().pop().unwrap()
}

/// The file loads on the general path, its template renders as written, and a prompt read in one
/// pass, then two tokens more one by one, then a roll-back and another token, give candle's
/// logits for the same tokens.
fn matches_candle(arch: &str, general: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = tiny(dir.path(), arch);
    let llm = load(&path, general);
    assert_eq!(llm.path(), format!("candle {arch}"));
    assert!(!llm.batches());
    let tok = llm.tokenizer();
    // The ChatML template (SmolLM2's, in the qwen2 file) keeps the turn-by-turn path.
    assert_eq!(tok.renders_template(), arch != "qwen2", "{arch}");
    assert_eq!(tok.render_chat(&chat()), expected, "{arch}: the chat template");
    let prompt = tok.encode_chat(&chat()).unwrap();
    let mut text_ids = tok.encode(expected).unwrap();
    if arch == "phi3" {
        // Its template writes no bos, which the file asks for (a SentencePiece default).
        text_ids.insert(0, 2);
    } else {
        // (SentencePiece's prefix space after each special token keeps phi3's from decoding
        // back to the text.)
        assert_eq!(tok.decode(&prompt).unwrap(), expected, "{arch}: the ids decode to the prompt");
    }
    assert_eq!(prompt, text_ids, "{arch}: the prompt's ids are its text's");

    let mut cache = llm.model.cache();
    assert_close(&read(&llm, &mut cache, &prompt), &Reference::logits(&path, &prompt), &format!("{arch}: prompt"));
    let mut ids = prompt.clone();
    for next in [7, 42] {
        ids.push(next);
        assert_close(&read(&llm, &mut cache, &[next]), &Reference::logits(&path, &ids), &format!("{arch}: +{next}"));
    }
    cache.truncate(prompt.len());
    ids.truncate(prompt.len());
    ids.push(99);
    assert_close(&read(&llm, &mut cache, &[99]), &Reference::logits(&path, &ids), &format!("{arch}: rolled back"));
}

#[test]
fn qwen2_on_the_general_path_gives_candles_logits() {
    matches_candle("qwen2", false);
}

#[test]
fn qwen3_on_the_general_path_gives_candles_logits() {
    matches_candle("qwen3", false);
}

#[test]
fn gemma3_on_the_general_path_gives_the_plain_gemma3s_logits() {
    matches_candle("gemma3", false);
}

#[test]
fn phi3_on_the_general_path_gives_candles_logits() {
    matches_candle("phi3", false);
}

#[test]
fn llama_on_the_general_path_gives_candles_logits() {
    matches_candle("llama", true);
}

/// A sequence three windows long, past the tiny gemma3's window of [`WINDOW`].
fn long_ids(llm: &Llm) -> Vec<u32> {
    let tok = llm.tokenizer();
    let mut ids = tok.encode_chat(&chat()).unwrap();
    ids.extend(tok.encode_plain(" hello is the sky blue? hello, the sky is blue.").unwrap());
    assert!(ids.len() > 3 * WINDOW, "{} ids", ids.len());
    ids
}

#[test]
fn the_plain_gemma3_with_candles_activation_and_mask_gives_candles_logits() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let ids = long_ids(&load(&path, false));
    let plain = PlainGemma3::load(&path);
    let bytes = std::fs::read(&path).unwrap();
    let mut r = Cursor::new(bytes);
    let ct = gguf_file::Content::read(&mut r).unwrap();
    let mut candle = quantized_gemma3::ModelWeights::from_gguf(ct, &mut r, &Device::Cpu).unwrap();
    // From position 0 in one pass, where candle applies its window.
    for n in [WINDOW, WINDOW + 2, ids.len()] {
        let x = Tensor::new(&ids[..n], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let theirs: Vec<f32> = candle.forward(&x, 0).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let ours = plain.logits(&ids[..n], Activation::Silu, Gemma3Mask::Candle);
        assert_close(&ours, &theirs, &format!("{n} tokens"));
    }
    // The two differences are not noise on this file.
    let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let silu = plain.logits(&ids, Activation::Silu, Gemma3Mask::Window);
    assert!(worst(&silu, &plain.logits(&ids, Activation::Silu, Gemma3Mask::Candle)) > 1e-2, "the mask");
    assert!(worst(&silu, &plain.logits(&ids, Activation::Gelu, Gemma3Mask::Window)) > 1e-2, "the activation");
}

#[test]
fn gemma3_past_its_sliding_window_gives_the_same_logits_read_at_once_token_by_token_or_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let llm = load(&path, false);
    let ids = long_ids(&llm);
    let plain = PlainGemma3::load(&path);
    let want = |n: usize| plain.logits(&ids[..n], Activation::Gelu, Gemma3Mask::Window);
    // At once.
    let mut cache = llm.model.cache();
    assert_close(&read(&llm, &mut cache, &ids), &want(ids.len()), "at once");
    // Token by token from a prefix shorter than the window.
    let mut cache = llm.model.cache();
    read(&llm, &mut cache, &ids[..3]);
    for n in 4..=ids.len() {
        assert_close(&read(&llm, &mut cache, &ids[n - 1..n]), &want(n), &format!("token {n}"));
    }
    // In parts of several tokens, each continuing the last across the window's edge.
    let mut cache = llm.model.cache();
    let mut n = 0;
    for part in [5, WINDOW + 3, 2, WINDOW] {
        let logits = read(&llm, &mut cache, &ids[n..n + part]);
        n += part;
        assert_close(&logits, &want(n), &format!("part to {n}"));
    }
}

#[test]
fn gemma3s_local_layers_keep_only_the_positions_their_window_needs() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let ids = long_ids(&load(&path, false));
    let mut r = Cursor::new(std::fs::read(&path).unwrap());
    let ct = gguf_file::Content::read(&mut r).unwrap();
    let mut model = super::gemma3::Gemma3::from_gguf(&ct, &mut r, 128, &Device::Cpu).unwrap();
    let x = Tensor::new(&ids[..20], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&x, 0).unwrap();
    // Layer 0 is local, layer 1 global.
    assert_eq!(model.cached(), [WINDOW - 1, 20]);
    for (i, id) in ids[20..].iter().enumerate() {
        model.forward(&Tensor::new(&[[*id]], &Device::Cpu).unwrap(), 20 + i).unwrap();
    }
    assert_eq!(model.cached(), [WINDOW - 1, ids.len()]);
    // A pass elsewhere than where the sequence stopped is refused; from 0 it starts anew.
    let one = Tensor::new(&[[ids[0]]], &Device::Cpu).unwrap();
    let e = model.forward(&one, 3).unwrap_err().to_string();
    assert!(e.contains("position 3"), "{e}");
    model.forward(&one, 0).unwrap();
    assert_eq!(model.cached(), [1, 1]);
}

#[test]
fn a_history_longer_than_the_context_loses_its_oldest_messages_on_a_rendered_template() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let llm = load(&path, false);
    let mut messages = vec![ChatMessage::system("Be brief.")];
    for i in 0..12 {
        messages.push(ChatMessage::user(format!("is the sky blue {i}?")));
        messages.push(ChatMessage::assistant(format!("hello {i}")));
    }
    messages.push(ChatMessage::user("hello?"));
    let p = llm.prompt(&messages, 16).unwrap();
    let trim = p.trimmed.expect("trimmed");
    assert!(trim.dropped_messages > 0, "{trim:?}");
    assert!(p.ids.len() + 16 <= 128 && trim.tokens_after == p.ids.len(), "{trim:?}");
    assert_eq!(trim.tokens_before, llm.tokenizer().encode_chat(&messages).unwrap().len());
    // What is left: the system message, then the newest others whole (or the oldest of them cut),
    // and the question.
    let text = llm.tokenizer().decode(&p.ids).unwrap();
    assert!(text.starts_with("<bos><start_of_turn>user\nBe brief.\n\n"), "{text}");
    assert!(text.ends_with("<start_of_turn>user\nhello?<end_of_turn>\n<start_of_turn>model\n"), "{text}");
    assert!(!text.contains("blue 0?") && text.contains("hello 11"), "{text}");
    // The system message and the question alone do not fit: refused, nothing cut from them.
    let long = vec![ChatMessage::system("hello ".repeat(200)), ChatMessage::user("hello?")];
    assert!(matches!(llm.prompt(&long, 16), Err(LlmError::ContextOverflow { .. })));
}

#[test]
fn a_llama_file_is_run_on_the_fast_path_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "llama");
    let fast = load(&path, false);
    assert_eq!(fast.path(), "fast llama (q8 kernels)");
    assert!(fast.batches() && fast.trains());
}

#[test]
fn label_scores_on_the_general_path_are_the_references_log_probabilities() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let llm = load(&path, false);
    let tok = llm.tokenizer();
    let prompt = tok.encode_chat(&chat()).unwrap();
    // "hello" is one token, "brief" several: the second is read token by token after a roll-back.
    let c = llm.classify(&chat(), &["hello", "brief"]).unwrap();
    let logprob = |ids: &[u32], label: &[u32]| -> f64 {
        let mut at = ids.to_vec();
        let mut sum = 0.0;
        for &t in label {
            sum += super::super::log_softmax(&Reference::logits(&path, &at))[t as usize];
            at.push(t);
        }
        sum
    };
    for s in &c.scores {
        let ids = tok.encode_plain(&s.label).unwrap();
        let want = logprob(&prompt, &ids);
        assert!((s.logprob as f64 - want).abs() < 1e-3, "{}: {} against the reference's {want}", s.label, s.logprob);
    }
    assert_eq!(c.scores.len(), 2);
    assert_eq!(c.tokens_in, prompt.len());
}

#[test]
fn a_schema_fill_on_the_general_path_validates() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "qwen3");
    let llm = load(&path, false);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"]
    });
    let f = llm.fill(&chat(), &schema, 48).unwrap();
    let shape = crate::llama::schema::Shape::compile(&schema).unwrap();
    assert!(shape.check(&f.value).is_ok(), "{}", f.text);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&f.text).unwrap(), f.value);
}

#[test]
fn requests_given_together_are_answered_one_at_a_time_as_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "qwen2");
    let llm = load(&path, false);
    let reqs: Vec<GenerateRequest> = ["hello", "is the sky blue?", "the sky"]
        .iter()
        .map(|q| GenerateRequest::new(vec![ChatMessage::user(*q)], 6))
        .collect();
    let alone: Vec<String> =
        reqs.iter().map(|r| llm.generate(r, |_| ControlFlow::Continue(())).unwrap().text).collect();
    let mut engine =
        llm.engine::<usize>(BatchConfig { max_batch: 8, kv_bytes: usize::MAX, prefix_reuse: true, step_tokens: 4 });
    assert_eq!(engine.config().max_batch, 1, "the general path does not batch");
    let mut waiting: Vec<_> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            engine.prepare(Work::Generate(r.clone()), i, Box::new(|_| ControlFlow::Continue(()))).ok().unwrap()
        })
        .collect();
    let mut answers = BTreeMap::new();
    while answers.len() < reqs.len() {
        if !waiting.is_empty() && engine.has_room(&waiting[0]) {
            engine.admit(waiting.remove(0));
        }
        for (i, outcome) in engine.step() {
            let Outcome::Generated(g) = outcome else { panic!("a generation") };
            answers.insert(i, g.unwrap().text);
        }
    }
    assert_eq!(answers.into_values().collect::<Vec<_>>(), alone);
}

#[test]
fn a_lora_adapter_on_the_general_path_is_refused_with_the_path_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "phi3");
    let llm = load(&path, false);
    assert!(!llm.trains(), "no LoRA training on candle's path");
    let adapter = std::sync::Arc::new(crate::llama::Adapter::new(1, 1.0, vec![BTreeMap::new(); LAYERS]).unwrap());
    let req = GenerateRequest::new(chat(), 4);
    let e = llm.generate_with(&req, Some(adapter), |_| ControlFlow::Continue(())).err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()) && msg.contains("candle phi3") && msg.contains("LoRA"), "{msg}");
}

fn load_err(path: &Path) -> String {
    match Llm::load(path) {
        Err(e @ LlmError::Load { .. }) => e.to_string(),
        Err(e) => panic!("not a load error: {e}"),
        Ok(llm) => panic!("{} loaded on {}", path.display(), llm.path()),
    }
}

#[test]
fn a_file_of_another_architecture_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "qwen2");
    let mut bytes = std::fs::read(&path).unwrap();
    // The architecture's value, "qwen2", becomes "mamba" (the same length: the file stays whole).
    let at = bytes.windows(5).position(|w| w == b"qwen2").unwrap();
    let key_end = bytes.windows(20).position(|w| w == b"general.architecture").unwrap() + 20;
    assert!(at > key_end, "the first qwen2 is the architecture's value");
    bytes[at..at + 5].copy_from_slice(b"mamba");
    std::fs::write(&path, &bytes).unwrap();
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{}: architecture \"mamba\" is not supported", path.display())), "{msg}");
}

#[test]
fn a_truncated_file_is_refused_naming_its_first_lost_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "gemma3");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{}: truncated: tensor ", path.display())), "{msg}");
}

#[test]
fn altered_bytes_in_a_files_header_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = tiny(dir.path(), "qwen3");
    let bytes = std::fs::read(&path).unwrap();
    // A tensor's type becomes one no GGUF reader knows.
    let name = b"blk.0.attn_q.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let mut altered = bytes.clone();
    // After the name: the number of dimensions (u32), two dimensions (u64 each), the type (u32).
    altered[at + 4 + 16..at + 4 + 16 + 4].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&path, &altered).unwrap();
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{}: not a readable GGUF file", path.display())), "{msg}");
    // The magic altered: not a GGUF file at all.
    let mut altered = bytes;
    altered[0] ^= 0xff;
    std::fs::write(&path, &altered).unwrap();
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{}: not a readable GGUF file", path.display())), "{msg}");
}

#[test]
fn a_file_missing_a_tensor_its_architecture_needs_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Tiny::new("qwen3");
    let vocab = gpt2_vocab(&mut t, "qwen2", &["<|im_start|>", "<|im_end|>"]);
    t.meta("tokenizer.chat_template", Value::String(QWEN3.into()));
    t.weights("qwen3", vocab);
    t.tensors.retain(|(name, _)| name != "blk.1.attn_k_norm.weight");
    let path = dir.path().join("holed.gguf");
    t.write(&path);
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{}: candle qwen3: ", path.display())), "{msg}");
    assert!(msg.contains("blk.1.attn_k_norm.weight"), "{msg}");
}
