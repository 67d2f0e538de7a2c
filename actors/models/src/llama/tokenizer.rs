//! The model's tokenizer and chat template, built from the GGUF metadata alone.
//!
//! Two kinds of vocabulary, as llama.cpp reads them:
//!
//! - GPT-2 byte-level BPE (`tokenizer.ggml.model = "gpt2"`: SmolLM2, Qwen, Llama 3), with the
//!   tokens, the merges and the pre-tokenizer the file names in `tokenizer.ggml.pre`: for
//!   `smollm`, every digit on its own, then the GPT-2 regex with no prefix space; for `qwen2`
//!   and `llama-bpe`, their regexes. Control tokens (`token_type` 3, `<|im_start|>` and the
//!   like) are special added tokens, so their text in a template maps to their ids. candle's own
//!   GGUF tokenizer helper adds a prefix space here, hence this one.
//! - SentencePiece (`"llama"`: Gemma, Phi-3), in [`spm`].
//!
//! The chat template is the file's own `tokenizer.chat_template`. When it renders every
//! conversation as ChatML does (SmolLM2's), a prompt is its turns' ids joined, which the
//! context budget and prefix reuse build on; any other template is rendered with minijinja
//! ([`jinja`]) and the rendered prompt tokenized. A file with no template gets its
//! architecture's (Gemma 3's), as llama.cpp does.

mod jinja;
mod spm;

use std::collections::VecDeque;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::{ChatMessage, LlmError};

/// GGUF `token_type` values (llama.cpp `llama_token_type`).
const TYPE_NORMAL: i64 = 1;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;
const TYPE_BYTE: i64 = 6;

/// Markers of the ChatML turns the template is written in.
const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

/// Tokens that end an assistant's turn in the templates of the common architectures, the
/// first one present being the one a template closes a turn with.
const TURN_ENDS: [&str; 6] = ["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|eom_id|>", "<|endoftext|>"];

/// The regexes of llama.cpp's pre-tokenizers `qwen2` and `llama-bpe` (Llama 3).
const QWEN2_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What stands for a message's content while a template is rendered to find where the contents
/// go (private-use characters, which no template writes).
const MARK_OPEN: char = '\u{10FFFD}';
const MARK_CLOSE: char = '\u{10FFFC}';

pub struct GgufTokenizer {
    codec: Codec,
    /// The bytes each id stands for; empty for control tokens, which print nothing.
    bytes: Vec<Vec<u8>>,
    /// Ids that end the assistant's turn: the file's eos, `<|im_end|>`, `<|endoftext|>`, and
    /// with a template other than ChatML the end-of-turn tokens of [`TURN_ENDS`].
    end_of_turn: Vec<u32>,
    /// The id the template closes a turn with.
    turn_end: u32,
    /// The bos id put before a rendered prompt that does not begin with it, when the file asks
    /// for one (`tokenizer.ggml.add_bos_token`).
    bos: Option<u32>,
    /// The text of control tokens, which a message's content must not turn into their ids.
    control: Vec<String>,
    template: Template,
}

enum Codec {
    Bpe {
        /// Control tokens in the text are their ids: for rendered templates and reference texts.
        special: Box<Tokenizer>,
        /// Control-token text is plain text: for message contents, which must not open or close
        /// a turn of their own.
        plain: Box<Tokenizer>,
    },
    Spm {
        spm: Box<spm::Spm>,
        /// Each token's text, for [`GgufTokenizer::decode`].
        texts: Vec<String>,
    },
}

enum Template {
    /// A prompt is its turns' ids joined ([`ChatTemplate`]).
    ChatMl {
        im_start: u32,
        im_end: u32,
        chat: ChatTemplate,
    },
    Jinja(Box<jinja::Jinja>),
}

impl GgufTokenizer {
    /// Reads the tokenizer from a GGUF file's metadata (the tensors are not read).
    pub fn load(path: &Path) -> Result<GgufTokenizer, LlmError> {
        let (_, content) = super::open_gguf(path)?;
        GgufTokenizer::from_gguf(&content).map_err(|message| LlmError::Load { file: path.to_path_buf(), message })
    }

    /// Builds the tokenizer from parsed GGUF metadata; the error says which key is wrong.
    pub fn from_gguf(ct: &Content) -> Result<GgufTokenizer, String> {
        let get = |key: &str| ct.metadata.get(key).ok_or_else(|| format!("no {key} in the metadata"));
        let strings = |key: &str| -> Result<Vec<String>, String> {
            let v = get(key)?.to_vec().map_err(|_| format!("{key} is not an array"))?;
            v.iter().map(|s| s.to_string().cloned().map_err(|_| format!("{key} holds a non-string"))).collect()
        };
        let model = get("tokenizer.ggml.model")?.to_string().map_err(|e| e.to_string())?;
        let tokens = strings("tokenizer.ggml.tokens")?;
        let types: Vec<i64> = get("tokenizer.ggml.token_type")?
            .to_vec()
            .map_err(|_| "tokenizer.ggml.token_type is not an array".to_string())?
            .iter()
            .map(int)
            .collect::<Option<_>>()
            .ok_or("tokenizer.ggml.token_type holds a non-integer")?;
        if types.len() != tokens.len() {
            return Err(format!("{} token types for {} tokens", types.len(), tokens.len()));
        }
        let token_id = |key: &str| -> Result<Option<u32>, String> {
            match ct.metadata.get(key) {
                None => Ok(None),
                Some(v) => match int(v) {
                    Some(i) if (0..tokens.len() as i64).contains(&i) => Ok(Some(i as u32)),
                    Some(i) => Err(format!("{key} {i} is not a token")),
                    None => Err(format!("{key} is not an integer")),
                },
            }
        };
        let flag = |key: &str| ct.metadata.get(key).and_then(|v| v.to_bool().ok());
        let (eos, bos) = (token_id("tokenizer.ggml.eos_token_id")?, token_id("tokenizer.ggml.bos_token_id")?);
        let (codec, bytes) = match model.as_str() {
            "gpt2" => bpe(ct, &tokens, &types)?,
            "llama" => {
                let scores: Vec<f32> = get("tokenizer.ggml.scores")?
                    .to_vec()
                    .map_err(|_| "tokenizer.ggml.scores is not an array".to_string())?
                    .iter()
                    .map(|v| v.to_f32().ok())
                    .collect::<Option<_>>()
                    .ok_or("tokenizer.ggml.scores holds a non-float")?;
                let unknown = token_id("tokenizer.ggml.unknown_token_id")?;
                // llama.cpp adds the prefix space to SentencePiece text unless the file says not to.
                let prefix = flag("tokenizer.ggml.add_space_prefix").unwrap_or(true);
                let spm = spm::Spm::new(&tokens, &types, scores, unknown, prefix)?;
                let bytes = tokens.iter().zip(&types).map(|(t, k)| spm::token_bytes(t, *k)).collect();
                (Codec::Spm { spm: Box::new(spm), texts: tokens.clone() }, bytes)
            }
            other => {
                return Err(format!(
                    "tokenizer.ggml.model is {other:?}; supported: gpt2 (byte-level BPE), llama (SentencePiece)"
                ));
            }
        };
        let id = |name: &str| tokens.iter().position(|t| t == name).map(|i| i as u32);
        let control: Vec<String> = tokens
            .iter()
            .zip(&types)
            .filter(|(t, k)| **k == TYPE_CONTROL && !t.is_empty())
            .map(|(t, _)| t.clone())
            .collect();

        let architecture = ct.metadata.get("general.architecture").and_then(|v| v.to_string().ok());
        let source = match (ct.metadata.get("tokenizer.chat_template"), architecture.map(String::as_str)) {
            (Some(v), _) => v.to_string().map_err(|e| format!("tokenizer.chat_template: {e}"))?.as_str(),
            (None, Some("gemma3")) => jinja::GEMMA3,
            (None, _) => return Err("no tokenizer.chat_template in the metadata".into()),
        };
        let text_of = |id: Option<u32>| id.map_or_else(String::new, |i| tokens[i as usize].clone());
        let rendered = jinja::Jinja::new(source, text_of(bos), text_of(eos));
        let chatml = match (id(IM_START), id(IM_END), &codec) {
            (Some(im_start), Some(im_end), Codec::Bpe { .. }) => match ChatTemplate::parse(source) {
                Ok(chat) => Some((im_start, im_end, chat)),
                Err(_) => None,
            },
            _ => None,
        };
        let template = match (chatml, rendered) {
            // ChatML read from the text, and rendered alike by the template itself (or minijinja
            // cannot read it): turns joined.
            (Some((im_start, im_end, chat)), Ok(j)) if chat.renders_like(&j) => {
                Template::ChatMl { im_start, im_end, chat }
            }
            (Some((im_start, im_end, chat)), Err(_)) => Template::ChatMl { im_start, im_end, chat },
            (_, Ok(j)) => Template::Jinja(Box::new(j)),
            (None, Err(e)) => return Err(e),
        };

        let (end_of_turn, turn_end) = match &template {
            Template::ChatMl { im_end, .. } => {
                let mut ends: Vec<u32> = eos.into_iter().chain([*im_end]).chain(id("<|endoftext|>")).collect();
                ends.sort_unstable();
                ends.dedup();
                (ends, *im_end)
            }
            Template::Jinja(_) => {
                let named: Vec<u32> = TURN_ENDS.iter().filter_map(|t| id(t)).collect();
                let eot = token_id("tokenizer.ggml.eot_token_id")?;
                let turn_end = named.first().copied().or(eot).or(eos).ok_or(
                    "no end-of-turn token (tokenizer.ggml.eos_token_id, eot_token_id, <end_of_turn>, <|im_end|>, ...)",
                )?;
                let mut ends: Vec<u32> = eos.into_iter().chain(eot).chain(named).collect();
                ends.sort_unstable();
                ends.dedup();
                (ends, turn_end)
            }
        };
        // SentencePiece files want a bos before the prompt unless they say not to.
        let add_bos = flag("tokenizer.ggml.add_bos_token").unwrap_or(matches!(codec, Codec::Spm { .. }));
        let bos = bos.filter(|_| add_bos && matches!(template, Template::Jinja(_)));
        Ok(GgufTokenizer { codec, bytes, end_of_turn, turn_end, bos, control, template })
    }

    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// Token ids of `text`, with the text of a control token (`<|im_start|>`) as its id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        match &self.codec {
            Codec::Bpe { special, .. } => encode(special, text),
            Codec::Spm { spm, .. } => Ok(spm.encode(text, true)),
        }
    }

    /// Token ids of `text` with every character as text: `<|im_end|>` is seven ordinary tokens.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        match &self.codec {
            Codec::Bpe { plain, .. } => encode(plain, text),
            Codec::Spm { spm, .. } => Ok(spm.encode(text, false)),
        }
    }

    /// The text of `ids`, control tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlmError> {
        match &self.codec {
            Codec::Bpe { special, .. } => special.decode(ids, false).map_err(|e| LlmError::Tokenize(e.to_string())),
            Codec::Spm { texts, .. } => {
                let mut out = Vec::new();
                for &id in ids {
                    match self.bytes.get(id as usize) {
                        Some(b) if b.is_empty() => out.extend_from_slice(texts[id as usize].as_bytes()),
                        Some(b) => out.extend_from_slice(b),
                        None => return Err(LlmError::Tokenize(format!("token {id} is not in the vocabulary"))),
                    }
                }
                Ok(String::from_utf8_lossy(&out).into_owned())
            }
        }
    }

    /// The bytes `id` stands for in generated text (nothing for a control token): a character
    /// can be split across tokens, so text is whole only once the bytes are joined.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether `id` ends the assistant's turn.
    pub fn ends_turn(&self, id: u32) -> bool {
        self.end_of_turn.contains(&id)
    }

    /// Whether prompts are the file's own template rendered by minijinja (`false`: ChatML turns
    /// joined, see the module's doc).
    pub fn renders_template(&self) -> bool {
        matches!(self.template, Template::Jinja(_))
    }

    /// The prompt the model's chat template renders for `messages`, with the opening of the
    /// assistant's turn after them. Empty when the template refuses the conversation
    /// ([`GgufTokenizer::encode_chat`] says why).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> String {
        match &self.template {
            Template::ChatMl { .. } => {
                let mut out = String::new();
                if let Some(default) = self.default_system(messages) {
                    out += &ChatTemplate::turn("system", default);
                }
                for m in messages {
                    out += &ChatTemplate::turn(&m.role, &m.content);
                }
                out + IM_START + "assistant\n"
            }
            Template::Jinja(j) => j.render(messages).unwrap_or_default(),
        }
    }

    /// The ids of [`GgufTokenizer::render_chat`], with the contents tokenized as plain text
    /// (a message cannot close its turn by writing `<|im_end|>`). Equal to encoding the
    /// rendered prompt whenever no content holds a control token's text.
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, LlmError> {
        self.encode_chat_as(messages, &Written::default())
    }

    /// [`GgufTokenizer::encode_chat`], with an assistant turn the model wrote in `written` read
    /// in the ids it wrote it in (ChatML; a rendered template reads every turn anew).
    pub(crate) fn encode_chat_as(&self, messages: &[ChatMessage], written: &Written) -> Result<Vec<u32>, LlmError> {
        let Template::Jinja(j) = &self.template else {
            let mut ids = self.default_system_ids(messages)?;
            for m in messages {
                ids.extend(self.turn_ids_as(m, written)?);
            }
            ids.extend(self.generation_prompt_ids()?);
            return Ok(ids);
        };
        let rendered = j.render(messages).map_err(LlmError::Request)?;
        let injected = messages.iter().any(|m| self.control.iter().any(|c| m.content.contains(c.as_str())));
        let mut ids = match injected {
            // No content can open or close a turn: the prompt is tokenized as llama.cpp does.
            false => self.encode(&rendered)?,
            true => self.encode_marked(j, messages, &rendered)?,
        };
        if let Some(bos) = self.bos
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        Ok(ids)
    }

    /// The prompt of a conversation where a content holds a control token's text: the template
    /// rendered with a marker for each content, its own text tokenized with control tokens and
    /// the contents as plain text. A template that changes the contents (`| trim`) cannot be
    /// cut so; the control tokens' text in the contents is then taken apart with a space.
    fn encode_marked(&self, j: &jinja::Jinja, messages: &[ChatMessage], rendered: &str) -> Result<Vec<u32>, LlmError> {
        let marked: Vec<ChatMessage> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| ChatMessage::new(m.role.clone(), format!("{MARK_OPEN}{i}{MARK_CLOSE}")))
            .collect();
        let text = j.render(&marked).map_err(LlmError::Request)?;
        let mut pieces: Vec<(&str, bool)> = Vec::new();
        let mut rest = text.as_str();
        while let Some(open) = rest.find(MARK_OPEN) {
            let after = &rest[open + MARK_OPEN.len_utf8()..];
            let close = after.find(MARK_CLOSE);
            let index = close.and_then(|c| after[..c].parse::<usize>().ok()).filter(|i| *i < messages.len());
            let (Some(close), Some(i)) = (close, index) else { break };
            pieces.push((&rest[..open], true));
            pieces.push((&messages[i].content, false));
            rest = &after[close + MARK_CLOSE.len_utf8()..];
        }
        pieces.push((rest, true));
        let rebuilt: String = pieces.iter().map(|(p, _)| *p).collect();
        if rebuilt == rendered {
            let mut ids = Vec::new();
            for (piece, template) in pieces {
                ids.extend(if template { self.encode(piece)? } else { self.encode_plain(piece)? });
            }
            return Ok(ids);
        }
        let defused: Vec<ChatMessage> = messages
            .iter()
            .map(|m| {
                let content = self.control.iter().fold(m.content.clone(), |c, t| {
                    let split = t.char_indices().nth(1).map_or(t.len(), |(i, _)| i);
                    c.replace(t.as_str(), &format!("{} {}", &t[..split], &t[split..]))
                });
                ChatMessage::new(m.role.clone(), content)
            })
            .collect();
        self.encode(&j.render(&defused).map_err(LlmError::Request)?)
    }

    /// The template's own system turn when the conversation does not open with one (ChatML).
    pub(crate) fn default_system(&self, messages: &[ChatMessage]) -> Option<&str> {
        let Template::ChatMl { chat, .. } = &self.template else { return None };
        let opens_with_system = messages.first().is_some_and(|m| m.role == "system");
        if messages.is_empty() || opens_with_system { None } else { chat.default_system.as_deref() }
    }

    pub(crate) fn default_system_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, LlmError> {
        match self.default_system(messages) {
            Some(text) => self.turn_ids("system", text),
            None => Ok(Vec::new()),
        }
    }

    /// The ChatML markers, or why a prompt is not made of turns.
    fn chatml(&self) -> Result<(u32, u32), LlmError> {
        match self.template {
            Template::ChatMl { im_start, im_end, .. } => Ok((im_start, im_end)),
            Template::Jinja(_) => {
                Err(LlmError::Tokenize("the chat template is not ChatML: no turns of its own".into()))
            }
        }
    }

    /// `<|im_start|>{role}\n{content}<|im_end|>\n` as ids. Control tokens split the text, so the
    /// ids of a prompt are the ids of its turns joined (ChatML only).
    pub(crate) fn turn_ids(&self, role: &str, content: &str) -> Result<Vec<u32>, LlmError> {
        let (im_start, im_end) = self.chatml()?;
        let mut ids = vec![im_start];
        ids.extend(self.encode_plain(&format!("{role}\n{content}"))?);
        ids.push(im_end);
        ids.extend(self.encode_plain("\n")?);
        Ok(ids)
    }

    /// [`GgufTokenizer::turn_ids`] of `m`; an assistant turn whose words the model wrote (in
    /// `written`) is the opening the model answered after, the ids it wrote, and the turn's end.
    pub(crate) fn turn_ids_as(&self, m: &ChatMessage, written: &Written) -> Result<Vec<u32>, LlmError> {
        match written.ids(&m.content).filter(|_| m.role == "assistant") {
            Some(wrote) => {
                let mut ids = self.generation_prompt_ids()?;
                ids.extend_from_slice(wrote);
                ids.push(self.chatml()?.1);
                ids.extend(self.encode_plain("\n")?);
                Ok(ids)
            }
            None => self.turn_ids(&m.role, &m.content),
        }
    }

    /// The ids of `text` the model wrote as `wrote`: the ids it wrote as long as their bytes
    /// spell the text's beginning (a stop string cuts the last ones' text), then the rest of
    /// the text tokenized.
    pub(crate) fn spell(&self, text: &str, wrote: &[u32]) -> Result<Vec<u32>, LlmError> {
        let (mut at, mut n) = (0, 0);
        for &id in wrote {
            let bytes = self.token_bytes(id);
            if bytes.is_empty() || !text.as_bytes()[at..].starts_with(bytes) {
                break;
            }
            at += bytes.len();
            n += 1;
        }
        // Back to a character's boundary: a token can end within a character.
        while !text.is_char_boundary(at) {
            n -= 1;
            at -= self.token_bytes(wrote[n]).len();
        }
        let mut ids = wrote[..n].to_vec();
        ids.extend(self.encode_plain(&text[at..])?);
        Ok(ids)
    }

    /// The id that closes a turn of the chat template: `<|im_end|>`, `<end_of_turn>`, ...
    pub(crate) fn im_end(&self) -> u32 {
        self.turn_end
    }

    pub(crate) fn generation_prompt_ids(&self) -> Result<Vec<u32>, LlmError> {
        let mut ids = vec![self.chatml()?.0];
        ids.extend(self.encode_plain("assistant\n")?);
        Ok(ids)
    }
}

/// The byte-level BPE of a `gpt2` vocabulary, and the bytes of each token.
fn bpe(ct: &Content, tokens: &[String], types: &[i64]) -> Result<(Codec, Vec<Vec<u8>>), String> {
    let merges: Merges = match ct.metadata.get("tokenizer.ggml.merges") {
        None => return Err("no tokenizer.ggml.merges in the metadata".into()),
        Some(v) => v
            .to_vec()
            .map_err(|_| "tokenizer.ggml.merges is not an array".to_string())?
            .iter()
            .map(|m| {
                let m = m.to_string().map_err(|_| "tokenizer.ggml.merges holds a non-string".to_string())?;
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| format!("tokenizer.ggml.merges: {m:?} is not two tokens"))
            })
            .collect::<Result<_, _>>()?,
    };
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| format!("BPE: {e}"))?;

    let pre = match ct.metadata.get("tokenizer.ggml.pre").map(|v| v.to_string()) {
        Some(Ok(p)) => p.as_str(),
        _ => "default",
    };
    let mut special = Tokenizer::new(bpe);
    let split = |pattern: &str| {
        Split::new(SplitPattern::Regex(pattern.into()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| format!("pre-tokenizer: {e}"))
    };
    match pre {
        // llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM: `\p{N}` isolated, then the GPT-2 regex.
        "smollm" => {
            let byte_level = ByteLevel::new(false, true, true);
            special.with_pre_tokenizer(Some(Sequence::new(vec![split(r"\p{N}")?.into(), byte_level.into()])));
        }
        "default" | "gpt2" => {
            special.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        }
        // The file's regex, then bytes to characters with no regex of GPT-2's own.
        "qwen2" | "llama-bpe" => {
            let pattern = if pre == "qwen2" { QWEN2_SPLIT } else { LLAMA3_SPLIT };
            let byte_level = ByteLevel::new(false, true, false);
            special.with_pre_tokenizer(Some(Sequence::new(vec![split(pattern)?.into(), byte_level.into()])));
        }
        other => return Err(format!("tokenizer.ggml.pre is {other:?}, supported: smollm, gpt2, qwen2, llama-bpe")),
    }
    special.with_decoder(Some(ByteLevelDecoder::default()));
    let added: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|(_, t)| matches!(**t, TYPE_CONTROL | TYPE_USER_DEFINED))
        .map(|(tok, t)| AddedToken::from(tok.clone(), *t == TYPE_CONTROL).normalized(false))
        .collect();
    special.add_special_tokens(added.iter().filter(|t| t.special).cloned()).map_err(|e| e.to_string())?;
    special.add_tokens(added.iter().filter(|t| !t.special).cloned()).map_err(|e| e.to_string())?;
    let mut plain = special.clone();
    plain.set_encode_special_tokens(true);

    let unbyte = byte_decoder();
    let bytes = tokens
        .iter()
        .zip(types)
        .map(|(tok, t)| match *t {
            TYPE_CONTROL => Vec::new(),
            TYPE_USER_DEFINED => tok.as_bytes().to_vec(),
            _ => {
                let mut out = Vec::with_capacity(tok.len());
                for c in tok.chars() {
                    match unbyte(c) {
                        Some(b) => out.push(b),
                        None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                out
            }
        })
        .collect();
    Ok((Codec::Bpe { special: Box::new(special), plain: Box::new(plain) }, bytes))
}

fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, LlmError> {
    let enc = tokenizer.encode_fast(text, false).map_err(|e| LlmError::Tokenize(e.to_string()))?;
    Ok(enc.get_ids().to_vec())
}

fn int(v: &Value) -> Option<i64> {
    Some(match *v {
        Value::U8(x) => x.into(),
        Value::I8(x) => x.into(),
        Value::U16(x) => x.into(),
        Value::I16(x) => x.into(),
        Value::U32(x) => x.into(),
        Value::I32(x) => x.into(),
        Value::U64(x) => i64::try_from(x).ok()?,
        Value::I64(x) => x,
        _ => return None,
    })
}

/// The inverse of GPT-2's `bytes_to_unicode`: printable bytes stand for themselves, the other
/// 68 for the characters from U+0100 on, in byte order.
fn byte_decoder() -> impl Fn(char) -> Option<u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = std::collections::HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("U+0100..U+0144 are chars")
        };
        table.insert(c, b);
    }
    move |c| table.get(&c).copied()
}

/// The SmolLM2 chat template (ChatML), read from `tokenizer.chat_template`:
///
/// ```text
/// {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
/// {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}
/// {% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
/// {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
/// ```
///
/// Read from the template's text (its default system prompt), and used only when the template,
/// rendered, gives the same prompts (`renders_like`); any other template is rendered each time.
struct ChatTemplate {
    default_system: Option<String>,
}

impl ChatTemplate {
    fn parse(template: &str) -> Result<ChatTemplate, String> {
        let chatml = template.contains(IM_START)
            && template.contains(IM_END)
            && template.contains("message['role']")
            && template.contains("message['content']");
        if !chatml {
            return Err("tokenizer.chat_template is not ChatML (<|im_start|>role ... <|im_end|>)".into());
        }
        // `'<|im_start|>system\n...<|im_end|>` inside a branch taken when messages[0] is not
        // the system's; the `\n` is an escape in the Jinja string or already a newline.
        let marker = format!("{IM_START}system");
        let default_system = template.find(&marker).and_then(|at| {
            let rest = &template[at + marker.len()..];
            let rest = rest.strip_prefix("\\n").or_else(|| rest.strip_prefix('\n'))?;
            let end = rest.find(IM_END)?;
            Some(rest[..end].replace("\\n", "\n"))
        });
        if template.contains("!= 'system'") && default_system.is_none() {
            return Err("tokenizer.chat_template: cannot read its default system prompt".into());
        }
        Ok(ChatTemplate { default_system })
    }

    fn turn(role: &str, content: &str) -> String {
        format!("{IM_START}{role}\n{content}{IM_END}\n")
    }

    /// Whether the file's template, rendered, gives what the turns joined give, on
    /// conversations of each shape the runtime sends.
    fn renders_like(&self, template: &jinja::Jinja) -> bool {
        let (s, u, a) =
            (ChatMessage::system("Be brief."), ChatMessage::user("Hi there"), ChatMessage::assistant("Hello!"));
        let shapes = [
            vec![u.clone()],
            vec![s.clone(), u.clone()],
            vec![s, u.clone(), a.clone(), u.clone()],
            vec![u.clone(), a, u],
        ];
        shapes.iter().all(|messages| {
            let mut joined = String::new();
            let opens_with_system = messages[0].role == "system";
            if let (false, Some(d)) = (opens_with_system, &self.default_system) {
                joined += &ChatTemplate::turn("system", d);
            }
            for m in messages {
                joined += &ChatTemplate::turn(&m.role, &m.content);
            }
            joined += IM_START;
            joined += "assistant\n";
            template.render(messages).is_ok_and(|r| r == joined)
        })
    }
}

/// Answers the model wrote, with the ids it wrote them in: a prompt that quotes one as the
/// assistant's turn reads those ids, which the model has the keys and values of (prefix
/// reuse), rather than the text tokenized anew (`Al` `ice` where it wrote `Alice`). The most
/// recent [`Written::KEEP`] are held.
#[derive(Debug, Default)]
pub(crate) struct Written(VecDeque<(String, Vec<u32>)>);

impl Written {
    const KEEP: usize = 256;

    pub(crate) fn note(&mut self, text: String, ids: Vec<u32>) {
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back((text, ids));
    }

    fn ids(&self, text: &str) -> Option<&[u32]> {
        self.0.iter().rev().find(|(t, _)| t == text).map(|(_, ids)| ids.as_slice())
    }
}
