//! The model's tokenizer and chat template, built from the GGUF metadata alone.
//!
//! GPT-2 byte-level BPE (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`) with the
//! pre-tokenizer the file names in `tokenizer.ggml.pre`: for `smollm`, every digit on its own,
//! then the GPT-2 regex with no prefix space (as llama.cpp). Control tokens (`token_type` 3,
//! `<|im_start|>` and the like) are special added tokens, so their text in a template maps to
//! their ids. candle's own GGUF tokenizer helper adds a prefix space here, hence this one.

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
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// Markers of the ChatML turns the template is written in.
const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

pub struct GgufTokenizer {
    /// Control tokens in the text are their ids: for rendered templates and reference texts.
    special: Tokenizer,
    /// Control-token text is plain text: for message contents, which must not open or close a
    /// turn of their own.
    plain: Tokenizer,
    /// The bytes each id stands for; empty for control tokens, which print nothing.
    bytes: Vec<Vec<u8>>,
    /// Ids that end the assistant's turn: the file's eos, `<|im_end|>`, `<|endoftext|>`.
    end_of_turn: Vec<u32>,
    im_start: u32,
    im_end: u32,
    template: ChatTemplate,
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
        if model != "gpt2" {
            return Err(format!("tokenizer.ggml.model is {model:?}, only gpt2 (byte-level BPE) is supported"));
        }
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
        let merges: Merges = strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or(m))
            .collect::<Result<_, _>>()
            .map_err(|m| format!("tokenizer.ggml.merges: {m:?} is not two tokens"))?;
        let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| format!("BPE: {e}"))?;

        let pre = match ct.metadata.get("tokenizer.ggml.pre").map(|v| v.to_string()) {
            Some(Ok(p)) => p.as_str(),
            _ => "default",
        };
        let byte_level = ByteLevel::new(false, true, true);
        let mut special = Tokenizer::new(bpe);
        match pre {
            // llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM: `\p{N}` isolated, then the GPT-2 regex.
            "smollm" => {
                let digits = Split::new(SplitPattern::Regex(r"\p{N}".into()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| format!("pre-tokenizer: {e}"))?;
                special.with_pre_tokenizer(Some(Sequence::new(vec![digits.into(), byte_level.into()])));
            }
            "default" | "gpt2" => {
                special.with_pre_tokenizer(Some(byte_level));
            }
            other => return Err(format!("tokenizer.ggml.pre is {other:?}, supported: smollm, gpt2")),
        }
        special.with_decoder(Some(ByteLevelDecoder::default()));
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
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
            .zip(&types)
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
        let id = |name: &str| tokens.iter().position(|t| t == name).map(|i| i as u32);
        let im_start = id(IM_START).ok_or("no <|im_start|> token: the chat template needs it")?;
        let im_end = id(IM_END).ok_or("no <|im_end|> token: the chat template needs it")?;
        let eos = match ct.metadata.get("tokenizer.ggml.eos_token_id") {
            Some(v) => Some(int(v).ok_or("tokenizer.ggml.eos_token_id is not an integer")? as u32),
            None => None,
        };
        let mut end_of_turn: Vec<u32> = eos.into_iter().chain([im_end]).chain(id("<|endoftext|>")).collect();
        end_of_turn.sort_unstable();
        end_of_turn.dedup();
        if let Some(&bad) = end_of_turn.iter().find(|i| **i as usize >= tokens.len()) {
            return Err(format!("tokenizer.ggml.eos_token_id {bad} is not a token"));
        }
        let template = match ct.metadata.get("tokenizer.chat_template") {
            Some(v) => ChatTemplate::parse(v.to_string().map_err(|e| e.to_string())?)?,
            None => return Err("no tokenizer.chat_template in the metadata".into()),
        };
        Ok(GgufTokenizer { special, plain, bytes, end_of_turn, im_start, im_end, template })
    }

    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// Token ids of `text`, with the text of a control token (`<|im_start|>`) as its id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        encode(&self.special, text)
    }

    /// Token ids of `text` with every character as text: `<|im_end|>` is seven ordinary tokens.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        encode(&self.plain, text)
    }

    /// The text of `ids`, control tokens written out.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LlmError> {
        self.special.decode(ids, false).map_err(|e| LlmError::Tokenize(e.to_string()))
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

    /// The prompt the model's chat template renders for `messages`, with the opening of the
    /// assistant's turn after them.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> String {
        let mut out = String::new();
        if let Some(default) = self.default_system(messages) {
            out += &ChatTemplate::turn("system", default);
        }
        for m in messages {
            out += &ChatTemplate::turn(&m.role, &m.content);
        }
        out + IM_START + "assistant\n"
    }

    /// The ids of [`GgufTokenizer::render_chat`], with the contents tokenized as plain text
    /// (a message cannot close its turn by writing `<|im_end|>`). Equal to encoding the
    /// rendered prompt whenever no content holds a control token's text.
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, LlmError> {
        self.encode_chat_as(messages, &Written::default())
    }

    /// [`GgufTokenizer::encode_chat`], with an assistant turn the model wrote in `written` read
    /// in the ids it wrote it in.
    pub(crate) fn encode_chat_as(&self, messages: &[ChatMessage], written: &Written) -> Result<Vec<u32>, LlmError> {
        let mut ids = self.default_system_ids(messages)?;
        for m in messages {
            ids.extend(self.turn_ids_as(m, written)?);
        }
        ids.extend(self.generation_prompt_ids()?);
        Ok(ids)
    }

    /// The template's own system turn when the conversation does not open with one.
    pub(crate) fn default_system(&self, messages: &[ChatMessage]) -> Option<&str> {
        let opens_with_system = messages.first().is_some_and(|m| m.role == "system");
        if messages.is_empty() || opens_with_system { None } else { self.template.default_system.as_deref() }
    }

    pub(crate) fn default_system_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, LlmError> {
        match self.default_system(messages) {
            Some(text) => self.turn_ids("system", text),
            None => Ok(Vec::new()),
        }
    }

    /// `<|im_start|>{role}\n{content}<|im_end|>\n` as ids. Control tokens split the text, so the
    /// ids of a prompt are the ids of its turns joined.
    pub(crate) fn turn_ids(&self, role: &str, content: &str) -> Result<Vec<u32>, LlmError> {
        let mut ids = vec![self.im_start];
        ids.extend(self.encode_plain(&format!("{role}\n{content}"))?);
        ids.push(self.im_end);
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
                ids.push(self.im_end);
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

    /// The id that closes a turn of the chat template, `<|im_end|>`.
    pub(crate) fn im_end(&self) -> u32 {
        self.im_end
    }

    pub(crate) fn generation_prompt_ids(&self) -> Result<Vec<u32>, LlmError> {
        let mut ids = vec![self.im_start];
        ids.extend(self.encode_plain("assistant\n")?);
        Ok(ids)
    }
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
/// No Jinja engine: a template that is not ChatML is refused at load, and the default system
/// prompt is taken from the template's text.
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
