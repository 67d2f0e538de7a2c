//! Sentence embeddings with all-MiniLM-L6-v2: BERT (our own forward pass, [`bert`]), mean
//! pooling over the tokens, L2 normalisation (the sentence-transformers pipeline of the model).
//!
//! [`Embedder`] is the model itself, synchronous and CPU-bound: callers run it on a thread of
//! their own, never on the tokio workers that carry the actors (`mindfleet-actors`'
//! `EmbeddingWorker` is the fleet's one).

pub mod bert;

use std::ops::Range;
use std::path::{Path, PathBuf};

use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use bert::{Bert, BertConfig, Input, Output};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    #[error("{file}: {message}")]
    Load { file: PathBuf, message: String },
    #[error("tokenizing: {0}")]
    Tokenize(String),
    /// Tokens the model cannot take (an id outside its vocabulary, too many tokens).
    #[error("model input: {0}")]
    Input(String),
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
}

/// One text's embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// Unit length, `Embedder::dimensions()` values.
    pub vector: Vec<f32>,
    /// Tokens the model saw, [CLS] and [SEP] included.
    pub tokens: usize,
    /// Tokens of the whole text when it was longer than the model's window and was cut to it.
    pub truncated_from: Option<usize>,
}

pub struct Embedder {
    model: Bert,
    /// Cuts to the window; no padding (the model packs a batch's tokens without it).
    tokenizer: Tokenizer,
    /// No window: counts the tokens of a text that was cut.
    tokens: Tokens,
    dimensions: usize,
}

fn load_err(file: &Path, e: &dyn std::fmt::Display) -> EmbedError {
    EmbedError::Load { file: file.to_path_buf(), message: e.to_string() }
}

/// A model's tokenizer and window without its weights: what counting tokens needs.
pub struct Tokens {
    /// Never cuts and never pads.
    counter: Tokenizer,
    window: usize,
    /// Special tokens added to every input ([CLS] and [SEP]).
    specials: usize,
}

impl Tokens {
    /// Reads `config.json`, `tokenizer.json` and, for the window when present,
    /// `sentence_bert_config.json` of a HuggingFace-layout BERT directory.
    pub fn load(dir: &Path) -> Result<Tokens, EmbedError> {
        let max_positions = BertConfig::read(&dir.join("config.json"))?.max_positions;
        // The packaged tokenizer.json truncates and pads to 128; the model was trained and is
        // used (sentence_bert_config.json) with a window of 256.
        let sbert = dir.join("sentence_bert_config.json");
        let window = match std::fs::read_to_string(&sbert) {
            Ok(t) => serde_json::from_str::<serde_json::Value>(&t)
                .map_err(|e| load_err(&sbert, &e))?
                .get("max_seq_length")
                .and_then(|v| v.as_u64())
                .ok_or_else(|| load_err(&sbert, &"no max_seq_length"))? as usize,
            Err(_) => max_positions,
        };
        if window > max_positions {
            return Err(load_err(
                &sbert,
                &format!("max_seq_length {window} is past the model's {max_positions} positions"),
            ));
        }
        let tok_path = dir.join("tokenizer.json");
        let mut counter = Tokenizer::from_file(&tok_path).map_err(|e| load_err(&tok_path, &e))?;
        counter.with_truncation(None).map_err(|e| load_err(&tok_path, &e))?;
        counter.with_padding(None);
        let specials = counter.get_post_processor().map_or(0, |p| p.added_tokens(false));
        Ok(Tokens { counter, window, specials })
    }

    /// The most tokens one input can have, [CLS] and [SEP] included.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Tokens of the whole text, its special tokens included (however long it is).
    pub fn count(&self, text: &str) -> Result<usize, EmbedError> {
        Ok(self.counter.encode(text, true).map_err(|e| EmbedError::Tokenize(e.to_string()))?.len())
    }
}

impl Embedder {
    /// Loads a HuggingFace-layout BERT directory (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, and `sentence_bert_config.json` for the window when present).
    pub fn load(dir: &Path) -> Result<Embedder, EmbedError> {
        let config = BertConfig::read(&dir.join("config.json"))?;
        let weights = dir.join("model.safetensors");
        if !weights.exists() {
            return Err(load_err(&weights, &"missing"));
        }
        let tokens = Tokens::load(dir)?;
        let dimensions = config.hidden;
        let model = Bert::load(config, &weights, threads())?;
        let mut tokenizer = tokens.counter.clone();
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: tokens.window, ..Default::default() }))
            .map_err(|e| load_err(&dir.join("tokenizer.json"), &e))?;
        Ok(Embedder { model, tokenizer, tokens, dimensions })
    }

    /// Checks a model directory without loading its weights: `config.json` parses, the
    /// tokenizer is there, and the weights file has a well-formed safetensors header.
    pub fn check(dir: &Path) -> Result<(), EmbedError> {
        BertConfig::read(&dir.join("config.json"))?;
        let tok = dir.join("tokenizer.json");
        std::fs::metadata(&tok).map_err(|e| load_err(&tok, &e))?;
        let weights = dir.join("model.safetensors");
        let mut f = std::fs::File::open(&weights).map_err(|e| load_err(&weights, &e))?;
        let size = f.metadata().map_err(|e| load_err(&weights, &e))?.len();
        let mut len = [0u8; 8];
        std::io::Read::read_exact(&mut f, &mut len).map_err(|e| load_err(&weights, &e))?;
        let len = u64::from_le_bytes(len);
        if len.saturating_add(8) > size {
            return Err(load_err(
                &weights,
                &format!("header of {len} bytes in a file of {size}: truncated or corrupt"),
            ));
        }
        let mut header = vec![0u8; len as usize];
        std::io::Read::read_exact(&mut f, &mut header).map_err(|e| load_err(&weights, &e))?;
        serde_json::from_slice::<serde_json::Value>(&header)
            .map_err(|e| load_err(&weights, &format!("unreadable safetensors header: {e}")))?;
        Ok(())
    }

    /// The model's sizes.
    pub fn config(&self) -> &BertConfig {
        self.model.config()
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The most tokens one input can have, [CLS] and [SEP] included.
    pub fn window(&self) -> usize {
        self.tokens.window
    }

    /// Tokens of the whole text, its special tokens included (however long it is).
    pub fn count_tokens(&self, text: &str) -> Result<usize, EmbedError> {
        self.tokens.count(text)
    }

    /// Byte ranges of `text` that each fit the window once the special tokens are added, cut
    /// between words; a text that fits is one range. The text between two ranges is blank.
    pub fn pieces(&self, text: &str) -> Result<Vec<Range<usize>>, EmbedError> {
        let enc = self.tokens.counter.encode(text, false).map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        let offsets = enc.get_offsets();
        let words = enc.get_word_ids();
        if offsets.is_empty() {
            return Ok(vec![Range { start: 0, end: text.len() }]);
        }
        let budget = self.tokens.window.saturating_sub(self.tokens.specials).max(1);
        let mut out = Vec::new();
        let mut first = 0;
        while first < offsets.len() {
            let mut end = (first + budget).min(offsets.len());
            // Step back to the start of a word, unless one word fills the whole window.
            if end < offsets.len() {
                let mut b = end;
                while b > first + 1 && words[b].is_some() && words[b] == words[b - 1] {
                    b -= 1;
                }
                if b > first + 1 {
                    end = b;
                }
            }
            out.push(offsets[first].0..offsets[end - 1].1);
            first = end;
        }
        Ok(out)
    }

    /// Embeds a batch; a text longer than the window is cut to it and says so in
    /// `truncated_from`.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Embedding>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let _busy = crate::busy::Busy::new();
        let enc = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        let inputs: Vec<Input<'_>> =
            enc.iter().map(|e| Input { ids: e.get_ids(), type_ids: e.get_type_ids() }).collect();
        let mut vectors = self.model.forward(&inputs, Output::Mean)?;
        // Unit length.
        for v in &mut vectors {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
            v.iter_mut().for_each(|x| *x /= norm);
        }
        vectors
            .into_iter()
            .zip(enc.iter().zip(texts))
            .map(|(vector, (e, text))| {
                let tokens = e.len();
                // Only a text that fills the window can have been cut: count it whole.
                let truncated_from = if tokens < self.tokens.window {
                    None
                } else {
                    Some(self.tokens.count(text)?).filter(|len| *len > tokens)
                };
                Ok(Embedding { vector, tokens, truncated_from })
            })
            .collect()
    }
}

/// Threads the model runs on (`CANDLE_NUM_THREADS`, else `RAYON_NUM_THREADS`, else the
/// physical cores).
pub fn threads() -> usize {
    candle_core::utils::get_num_threads()
}
