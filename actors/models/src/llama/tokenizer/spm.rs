//! SentencePiece-style tokenization from GGUF metadata (`tokenizer.ggml.model = "llama"`: Gemma,
//! Phi-3, Llama 2), as llama.cpp does it: spaces become `▁`, the characters of a text are merged
//! pairwise, the pair whose merge is the vocabulary's best-scored piece first (the leftmost on a
//! tie), and what no piece covers falls back to its UTF-8 bytes (`<0x0A>`).
//!
//! Control and user-defined tokens are cut out of the text before that, as llama.cpp does:
//! user-defined ones always (`\n`, runs of spaces and HTML tags in Gemma's vocabulary), control
//! ones (`<start_of_turn>`) only when the text is read as a template (`special`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::{TYPE_BYTE, TYPE_CONTROL, TYPE_NORMAL, TYPE_USER_DEFINED};

/// What a space is written as in the pieces.
const SPACE: &str = "\u{2581}";

pub(super) struct Spm {
    /// Pieces a merge may produce (normal and user-defined tokens), by text.
    pieces: HashMap<String, u32>,
    scores: Vec<f32>,
    /// The token of each byte (`<0x00>` ... `<0xFF>`), when the vocabulary has it.
    bytes: [Option<u32>; 256],
    unknown: Option<u32>,
    /// Tokens cut out of the text before merging, longest first: (text, id, control).
    specials: Vec<(String, u32, bool)>,
    add_space_prefix: bool,
}

impl Spm {
    pub(super) fn new(
        tokens: &[String],
        types: &[i64],
        scores: Vec<f32>,
        unknown: Option<u32>,
        add_space_prefix: bool,
    ) -> Result<Spm, String> {
        if scores.len() != tokens.len() {
            return Err(format!("{} token scores for {} tokens", scores.len(), tokens.len()));
        }
        let mut pieces = HashMap::with_capacity(tokens.len());
        let mut bytes = [None; 256];
        let mut specials = Vec::new();
        for (id, (text, t)) in tokens.iter().zip(types).enumerate() {
            let id = id as u32;
            match *t {
                TYPE_NORMAL | TYPE_USER_DEFINED => {
                    pieces.entry(text.clone()).or_insert(id);
                }
                TYPE_BYTE => {
                    let hex = text.strip_prefix("<0x").and_then(|h| h.strip_suffix('>'));
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(b) => bytes[b as usize] = Some(id),
                        None => return Err(format!("token {id} {text:?} is a byte token but not <0xXX>")),
                    }
                }
                _ => {}
            }
            if matches!(*t, TYPE_CONTROL | TYPE_USER_DEFINED) && !text.is_empty() {
                specials.push((text.clone(), id, *t == TYPE_CONTROL));
            }
        }
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Ok(Spm { pieces, scores, bytes, unknown, specials, add_space_prefix })
    }

    /// The ids of `text`; control tokens' text is their id when `special`.
    pub(super) fn encode(&self, text: &str, special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        let mut prev_special = true;
        for fragment in self.partition(text, special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    let mut s = String::with_capacity(t.len() + SPACE.len());
                    if self.add_space_prefix && prev_special {
                        s.push_str(SPACE);
                    }
                    s.push_str(&t.replace(' ', SPACE));
                    self.merge(&s, &mut out);
                    prev_special = false;
                }
            }
        }
        out
    }

    /// The text cut at the special tokens it holds (the longest one at each place).
    fn partition<'t>(&self, text: &'t str, special: bool) -> Vec<Fragment<'t>> {
        let mut out = Vec::new();
        let (mut start, mut at) = (0, 0);
        while at < text.len() {
            let rest = &text[at..];
            let hit =
                self.specials.iter().find(|(s, _, control)| (special || !control) && rest.starts_with(s.as_str()));
            match hit {
                Some((s, id, _)) => {
                    if start < at {
                        out.push(Fragment::Text(&text[start..at]));
                    }
                    out.push(Fragment::Token(*id));
                    at += s.len();
                    start = at;
                }
                None => at += rest.chars().next().map_or(1, char::len_utf8),
            }
        }
        if start < text.len() {
            out.push(Fragment::Text(&text[start..]));
        }
        out
    }

    /// The pieces of `text` (spaces written as `▁`), merged best score first.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        // Symbols: (start, len) into text, linked as a list; a merged-away symbol has len 0.
        let mut sym: Vec<Symbol> = Vec::new();
        for (i, (at, c)) in text.char_indices().enumerate() {
            sym.push(Symbol { start: at, len: c.len_utf8(), prev: i.checked_sub(1), next: None });
            if i > 0 {
                sym[i - 1].next = Some(i);
            }
        }
        let mut queue = BinaryHeap::new();
        let mut merged_from: HashMap<&str, (usize, usize)> = HashMap::new();
        let bigram = |sym: &[Symbol], l: usize, r: usize, queue: &mut BinaryHeap<Bigram>| {
            let piece = &text[sym[l].start..sym[r].start + sym[r].len];
            if let Some(&id) = self.pieces.get(piece) {
                queue.push(Bigram { score: self.scores[id as usize], left: l, right: r, len: piece.len() });
            }
        };
        for i in 1..sym.len() {
            bigram(&sym, i - 1, i, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (b.left, b.right);
            if sym[l].len == 0 || sym[r].len == 0 || sym[l].len + sym[r].len != b.len {
                continue;
            }
            merged_from.insert(&text[sym[l].start..sym[l].start + b.len], (sym[l].len, sym[r].len));
            sym[l].len += sym[r].len;
            sym[r].len = 0;
            sym[l].next = sym[r].next;
            if let Some(n) = sym[r].next {
                sym[n].prev = Some(l);
            }
            if let Some(p) = sym[l].prev {
                bigram(&sym, p, l, &mut queue);
            }
            if let Some(n) = sym[l].next {
                bigram(&sym, l, n, &mut queue);
            }
        }
        let mut i = if sym.is_empty() { None } else { Some(0) };
        while let Some(s) = i {
            self.resegment(&text[sym[s].start..sym[s].start + sym[s].len], &merged_from, out);
            i = sym[s].next;
        }
    }

    /// The ids of one merged symbol: its piece, else the two it was merged from, else its bytes.
    fn resegment(&self, piece: &str, merged_from: &HashMap<&str, (usize, usize)>, out: &mut Vec<u32>) {
        if let Some(&id) = self.pieces.get(piece) {
            out.push(id);
            return;
        }
        if let Some(&(left, _)) = merged_from.get(piece) {
            self.resegment(&piece[..left], merged_from, out);
            self.resegment(&piece[left..], merged_from, out);
            return;
        }
        out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize].or(self.unknown)));
    }
}

enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A pair of neighbouring symbols whose merge is a piece; the best score first, then the leftmost.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

/// The bytes a SentencePiece token stands for in text: `▁` is a space, `<0x0A>` its byte.
pub(super) fn token_bytes(text: &str, kind: i64) -> Vec<u8> {
    match kind {
        TYPE_CONTROL => Vec::new(),
        TYPE_BYTE => {
            let hex = text.strip_prefix("<0x").and_then(|h| h.strip_suffix('>'));
            hex.and_then(|h| u8::from_str_radix(h, 16).ok()).map_or_else(Vec::new, |b| vec![b])
        }
        TYPE_USER_DEFINED => text.as_bytes().to_vec(),
        _ => text.replace(SPACE, " ").into_bytes(),
    }
}
