//! Filling a JSON value of a [`Shape`] (a tool's arguments): the [`Walker`] writes the JSON
//! text itself (braces, keys in order, commas, quotes) and the model decides only the values,
//! its tokens masked so that whatever it picks keeps the text valid:
//!
//! - a string: it opens with a token that is its quote and the beginning of its text (` "/`, as
//!   the tokenizer writes `"path": "/home"`, where a quote written alone would leave the model
//!   to start a path after ` "`, which it seldom does), then takes any token that is whole
//!   characters with no quote, backslash or control character (and no whitespace in a string of
//!   a `format`), within `maxLength`; it ends when the tokens
//!   that begin with a quote (or end the turn) are together more likely than the best token of
//!   text, once `minLength` is reached, or at [`MAX_STRING_TOKENS`];
//! - a number: digits, a sign and (not for an integer) a point, each only when a value within the
//!   bounds can still follow; it ends when the tokens that end a number (`,`, `}`, `]`,
//!   whitespace) are together more likely than the best digit;
//! - `enum`, `const` and booleans: every allowed value's JSON text is scored as the continuation
//!   (as a classification's labels, with the space before it: ` true`) and the most likely one
//!   is written;
//! - an array: after each item, the tokens beginning with `,` against those beginning with `]`,
//!   within `minItems` and `maxItems`; objects and arrays hold any of these.
//!
//! The walker is a state machine with no model: it is given the logits after the text read so
//! far and answers what to read next ([`Action`]); [`Filling`] runs it in a batch
//! ([`super::batch`]). The value it gives is built from its decisions, not parsed back, and
//! [`Shape::check`] holds of it.

use std::time::Instant;

use serde_json::{Map, Value};

use self::number::Grid;
use super::backend::KvCache;
use super::schema::{Bound, Format, Shape};
use super::scoring::Scoring;
use super::{GgufTokenizer, LlmError, Trim, ms};
use mindfleet_core::llm::Filled;

/// The most tokens of one string value after the one that opens it: it is closed there.
pub const MAX_STRING_TOKENS: usize = 128;

/// The most digits after a number's point.
pub const FRACTION_DIGITS: u32 = 6;

/// What each token can be in a JSON text being filled.
const TEXT: u8 = 1;
const SPACED: u8 = 2;
const CLOSES_STRING: u8 = 4;
const ENDS_NUMBER: u8 = 8;
const NEXT_ITEM: u8 = 16;
const ENDS_ARRAY: u8 = 32;
/// A quote and then text: a string's opening (its text is what follows the quote).
const OPENS: u8 = 64;
/// A space, a quote and text: a string's opening after `:` or `,`.
const OPENS_SPACED: u8 = 128;

/// The tokens of a vocabulary, sorted by what they can be in a JSON value.
pub struct Vocab {
    kinds: Vec<u8>,
    /// The text of each [`TEXT`] token, of each numeric one (`0-9`, `-`, `.`), and after the
    /// quote of each that [`OPENS`] a string; else empty.
    text: Vec<Box<str>>,
    chars: Vec<u16>,
    numeric: Vec<u32>,
}

impl Vocab {
    /// From each token's bytes and whether it ends the turn, in id order.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (&'a [u8], bool)>) -> Vocab {
        let mut v = Vocab { kinds: Vec::new(), text: Vec::new(), chars: Vec::new(), numeric: Vec::new() };
        let safe = |t: &str| !t.chars().any(|c| c == '"' || c == '\\' || c.is_control());
        for (id, (bytes, ends_turn)) in tokens.into_iter().enumerate() {
            let mut kind = 0;
            let whole = std::str::from_utf8(bytes).ok().filter(|t| !t.is_empty());
            // A string's text: the token's, or what follows the quote that opens it.
            let mut text = whole.filter(|t| safe(t));
            if text.is_some() {
                kind |= TEXT;
            } else if let Some((lead, rest)) = whole.and_then(|t| t.split_once('"')).filter(|(_, rest)| safe(rest)) {
                match lead {
                    "" => kind |= OPENS,
                    " " => kind |= OPENS_SPACED,
                    _ => {}
                }
                text = Some(rest).filter(|_| kind & (OPENS | OPENS_SPACED) != 0);
            }
            if text.is_some_and(|t| t.chars().any(char::is_whitespace)) {
                kind |= SPACED;
            }
            let first = bytes.first().copied();
            let starts = |set: &[u8]| first.is_some_and(|b| set.contains(&b));
            if starts(b"\"") || ends_turn {
                kind |= CLOSES_STRING;
            }
            if starts(b",}] \n\r\t") || ends_turn {
                kind |= ENDS_NUMBER;
            }
            if starts(b",") {
                kind |= NEXT_ITEM;
            }
            if starts(b"]") || ends_turn {
                kind |= ENDS_ARRAY;
            }
            if text.is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'.')) {
                v.numeric.push(id as u32);
            }
            v.kinds.push(kind);
            v.text.push(text.unwrap_or_default().into());
            v.chars.push(text.map_or(0, |t| t.chars().count().min(u16::MAX as usize) as u16));
        }
        v
    }

    /// A model's vocabulary, from its tokenizer.
    pub fn of(tokenizer: &GgufTokenizer) -> Vocab {
        Vocab::new((0..tokenizer.vocab_size() as u32).map(|id| (tokenizer.token_bytes(id), tokenizer.ends_turn(id))))
    }

    fn is(&self, id: usize, kind: u8) -> bool {
        self.kinds.get(id).is_some_and(|k| k & kind != 0)
    }
}

/// What the model is to read next, or the value.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The token the model picked, if any, then the text written after it; then the walker is
    /// given the logits after them ([`Walker::next`]).
    Read {
        token: Option<u32>,
        text: String,
    },
    /// Score each text as the continuation from here, with the logits just given as the first
    /// token's, and tell the walker the most likely ([`Walker::chose`]).
    Score(Vec<String>),
    Done(Value),
    /// No token can continue the value (bounds no decimal of a few digits meets).
    Fail(String),
}

/// Where the walk is: a value the model is deciding, or the end.
#[derive(Debug)]
enum At {
    /// `opening`: the space due before the quote, until a token opens the string.
    String {
        min: usize,
        max: Option<usize>,
        format: Option<Format>,
        opening: Option<&'static str>,
        text: String,
        chars: usize,
        tokens: usize,
    },
    Number {
        integer: bool,
        min: Bound,
        max: Bound,
        text: String,
    },
    Choice(Vec<Value>),
    /// Another item of the array on top of the stack, or its end.
    Item,
    Done(Value),
}

/// An object or array being filled.
#[derive(Debug)]
enum Frame {
    Object { rest: std::vec::IntoIter<(String, Shape)>, key: String, filled: Map<String, Value> },
    Array { items: Shape, min: usize, max: usize, filled: Vec<Value> },
}

enum Step {
    Begin(Shape),
    Complete(Value),
}

#[derive(Debug)]
pub struct Walker {
    stack: Vec<Frame>,
    at: At,
    /// Text written and not yet given out to read.
    pending: String,
    /// The JSON text so far.
    text: String,
    /// Whether the next value is written after a space (after `:` and `,`).
    spaced: bool,
}

impl Walker {
    /// A walker at the beginning of a value of `shape`, and the text to read first (the
    /// beginning of the answer: a prompt's end).
    pub fn new(shape: Shape) -> (Walker, String) {
        let mut w =
            Walker { stack: Vec::new(), at: At::Item, pending: String::new(), text: String::new(), spaced: false };
        w.walk(Step::Begin(shape));
        let first = std::mem::take(&mut w.pending);
        (w, first)
    }

    /// The JSON text written so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Decides at the current place from `logits`, the model's after all it has read, with
    /// `left` tokens of the answer left: a string or an array that would leave too few for the
    /// text still to write after it ends there.
    pub fn next(&mut self, vocab: &Vocab, logits: &[f32], left: usize) -> Action {
        let short = left <= self.reserve();
        loop {
            let token = match &self.at {
                At::Done(v) => return Action::Done(v.clone()),
                At::Choice(values) => {
                    let lead = if self.spaced { " " } else { "" };
                    return Action::Score(values.iter().map(|v| format!("{lead}{v}")).collect());
                }
                At::String { .. } => self.string(vocab, logits, short),
                At::Number { .. } => self.number(vocab, logits),
                At::Item => {
                    self.item(vocab, logits, short);
                    Ok(None)
                }
            };
            let token = match token {
                Ok(token) => token,
                Err(e) => return Action::Fail(e),
            };
            if let At::Done(v) = &self.at {
                return Action::Done(v.clone());
            }
            // A new place with nothing read since is decided on the same logits.
            if token.is_some() || !self.pending.is_empty() {
                return Action::Read { token, text: std::mem::take(&mut self.pending) };
            }
        }
    }

    /// The value at index `i` of the last [`Action::Score`] is the one.
    pub fn chose(&mut self, i: usize) -> Action {
        let value = match &mut self.at {
            At::Choice(values) if i < values.len() => values.swap_remove(i),
            _ => return Action::Fail("chose a value where none was offered".into()),
        };
        let lead = if std::mem::take(&mut self.spaced) { " " } else { "" };
        self.write(&format!("{lead}{value}"));
        self.walk(Step::Complete(value));
        match &self.at {
            At::Done(v) => Action::Done(v.clone()),
            _ => Action::Read { token: None, text: std::mem::take(&mut self.pending) },
        }
    }

    /// The field being filled, from the top (`options.depth`, `paths[]`; `.` for the top).
    pub fn field(&self) -> String {
        let mut path = String::new();
        for f in &self.stack {
            match f {
                Frame::Object { key, .. } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Frame::Array { .. } => path.push_str("[]"),
            }
        }
        if path.is_empty() { ".".into() } else { path }
    }

    /// About the tokens of the text still to write once the value being decided ends: the
    /// keys of the properties after it and the closing of what holds it (a key takes about a
    /// token for each two of its bytes, with its quotes, colon and comma).
    fn reserve(&self) -> usize {
        let frames: usize = self
            .stack
            .iter()
            .map(|f| match f {
                Frame::Object { rest, .. } => 1 + rest.as_slice().iter().map(|(k, _)| k.len() / 2 + 4).sum::<usize>(),
                Frame::Array { min, filled, .. } => 1 + min.saturating_sub(filled.len() + 1) * 3,
            })
            .sum();
        frames + 2
    }

    fn write(&mut self, s: &str) {
        self.pending.push_str(s);
        self.text.push_str(s);
    }

    /// Writes what needs no decision, from `step` on, up to the next decision or the end.
    fn walk(&mut self, mut step: Step) {
        loop {
            step = match step {
                // A value that is not a string or a choice writes its own space.
                Step::Begin(shape)
                    if self.spaced && !matches!(shape, Shape::String { .. } | Shape::Boolean | Shape::OneOf(_)) =>
                {
                    self.spaced = false;
                    self.write(" ");
                    Step::Begin(shape)
                }
                Step::Begin(shape) => match shape {
                    Shape::Object(fields) => {
                        self.write("{");
                        let mut rest = fields.into_iter();
                        match rest.next() {
                            None => {
                                self.write("}");
                                Step::Complete(Value::Object(Map::new()))
                            }
                            Some((key, shape)) => {
                                self.write(&format!("{}:", Value::from(key.as_str())));
                                self.spaced = true;
                                self.stack.push(Frame::Object { rest, key, filled: Map::new() });
                                Step::Begin(shape)
                            }
                        }
                    }
                    Shape::Array { items, min, max } => {
                        self.write("[");
                        let first = (min > 0).then(|| (*items).clone());
                        self.stack.push(Frame::Array { items: *items, min, max, filled: Vec::new() });
                        match first {
                            Some(item) => Step::Begin(item),
                            None if max == 0 => self.close_array(),
                            None => return self.at = At::Item,
                        }
                    }
                    Shape::String { min, max, format } => {
                        let opening = Some(if std::mem::take(&mut self.spaced) { " " } else { "" });
                        let text = String::new();
                        return self.at = At::String { min, max, format, opening, text, chars: 0, tokens: 0 };
                    }
                    Shape::Integer { min, max } => {
                        let (min, max) = (min as f64, max as f64);
                        let (min, max) =
                            (Bound { value: min, exclusive: false }, Bound { value: max, exclusive: false });
                        return self.at = At::Number { integer: true, min, max, text: String::new() };
                    }
                    Shape::Number { min, max } => {
                        return self.at = At::Number { integer: false, min, max, text: String::new() };
                    }
                    Shape::Boolean => return self.at = At::Choice(vec![true.into(), false.into()]),
                    Shape::OneOf(values) => return self.at = At::Choice(values),
                    Shape::Null => {
                        self.write("null");
                        Step::Complete(Value::Null)
                    }
                    Shape::Is(v) => {
                        self.write(&v.to_string());
                        Step::Complete(v)
                    }
                },
                Step::Complete(value) => match self.stack.last_mut() {
                    None => return self.at = At::Done(value),
                    Some(Frame::Object { rest, key, filled }) => {
                        filled.insert(std::mem::take(key), value);
                        match rest.next() {
                            Some((next, shape)) => {
                                *key = next;
                                let key = Value::from(key.as_str());
                                self.write(&format!(", {key}:"));
                                self.spaced = true;
                                Step::Begin(shape)
                            }
                            None => {
                                let Some(Frame::Object { filled, .. }) = self.stack.pop() else { unreachable!() };
                                self.write("}");
                                Step::Complete(Value::Object(filled))
                            }
                        }
                    }
                    Some(Frame::Array { items, min, max, filled }) => {
                        filled.push(value);
                        let (n, min, max, item) = (filled.len(), *min, *max, items.clone());
                        if n == max {
                            self.close_array()
                        } else if n < min {
                            self.write(",");
                            self.spaced = true;
                            Step::Begin(item)
                        } else {
                            return self.at = At::Item;
                        }
                    }
                },
            }
        }
    }

    fn close_array(&mut self) -> Step {
        let Some(Frame::Array { filled, .. }) = self.stack.pop() else { unreachable!("an array is on top") };
        self.write("]");
        Step::Complete(Value::Array(filled))
    }

    /// Another item or the end of the array, as the model's next token says more likely.
    fn item(&mut self, vocab: &Vocab, logits: &[f32], short: bool) {
        let Some(Frame::Array { items, filled, .. }) = self.stack.last() else { unreachable!("an array is on top") };
        let (first, item) = (filled.is_empty(), items.clone());
        if short {
            let step = self.close_array();
            return self.walk(step);
        }
        let odds = Odds::new(logits);
        let end = odds.sum(vocab, ENDS_ARRAY);
        // Before the first item anything but `]` begins one; after an item, `,` does.
        let more = if first { odds.total - end } else { odds.sum(vocab, NEXT_ITEM) };
        if end >= more {
            let step = self.close_array();
            self.walk(step);
        } else {
            if !first {
                self.write(",");
                self.spaced = true;
            }
            self.walk(Step::Begin(item));
        }
    }

    /// A token of the string (the first opens it), or its end (`None`).
    fn string(&mut self, vocab: &Vocab, logits: &[f32], short: bool) -> Result<Option<u32>, String> {
        let field = self.field();
        let At::String { min, max, format, opening, text, chars, tokens } = &self.at else {
            unreachable!("at a string")
        };
        let (min, format, opening, chars, tokens) = (*min, *format, *opening, *chars, *tokens);
        let room = max.map_or(usize::MAX, |m| m - chars);
        let kind = match opening {
            None => TEXT,
            Some(" ") => OPENS_SPACED,
            Some(_) => OPENS,
        };
        let best = if tokens == MAX_STRING_TOKENS || room == 0 || (short && opening.is_none() && chars >= min) {
            None
        } else {
            best_of(logits, |id| {
                vocab.is(id, kind) && !(format.is_some() && vocab.is(id, SPACED)) && vocab.chars[id] as usize <= room
            })
        };
        if let (Some(lead), None) = (opening, best) {
            // No token opens it here: the quote is written.
            self.write(&format!("{lead}\""));
            if let At::String { opening, .. } = &mut self.at {
                *opening = None;
            }
            return Ok(None);
        }
        let odds = Odds::new(logits);
        let close =
            opening.is_none() && chars >= min && best.is_none_or(|b| odds.sum(vocab, CLOSES_STRING) >= odds.of(b));
        if close {
            if let Some(f) = format.filter(|f| !f.matches(text)) {
                return Err(format!("field `{field}`: the model wrote {text:?}, not a {}", f.name()));
            }
            let value = Value::String(text.clone());
            self.write("\"");
            self.walk(Step::Complete(value));
            return Ok(None);
        }
        let Some(b) = best else {
            return Err(format!("field `{field}`: {tokens} tokens written without reaching minLength {min}"));
        };
        let piece = &vocab.text[b];
        if let At::String { text, chars, tokens, opening, .. } = &mut self.at {
            match opening.take() {
                Some(lead) => {
                    self.text.push_str(lead);
                    self.text.push('"');
                }
                None => *tokens += 1,
            }
            text.push_str(piece);
            *chars += vocab.chars[b] as usize;
        }
        self.text.push_str(piece);
        Ok(Some(b as u32))
    }

    /// A token of the number, or its end (`None`).
    fn number(&mut self, vocab: &Vocab, logits: &[f32]) -> Result<Option<u32>, String> {
        let field = self.field();
        let At::Number { integer, min, max, text } = &self.at else { unreachable!("at a number") };
        let grid = Grid::new(*integer, *min, *max);
        let best = vocab
            .numeric
            .iter()
            .map(|id| *id as usize)
            .filter(|id| *id < logits.len() && grid.feasible(&format!("{text}{}", vocab.text[*id])))
            .max_by(|a, b| logits[*a].total_cmp(&logits[*b]));
        let odds = Odds::new(logits);
        if grid.complete(text) && best.is_none_or(|b| odds.sum(vocab, ENDS_NUMBER) >= odds.of(b)) {
            let value: Value = match serde_json::from_str(text) {
                Ok(v) => v,
                Err(e) => return Err(format!("field `{field}`: {text:?} did not read as a number: {e}")),
            };
            self.walk(Step::Complete(value));
            return Ok(None);
        }
        let Some(b) = best else {
            return Err(format!("field `{field}`: no number within its bounds follows {text:?}"));
        };
        let piece = &vocab.text[b];
        if let At::Number { text, .. } = &mut self.at {
            text.push_str(piece);
        }
        self.text.push_str(piece);
        Ok(Some(b as u32))
    }
}

/// The most likely token `allowed` allows.
fn best_of(logits: &[f32], allowed: impl Fn(usize) -> bool) -> Option<usize> {
    (0..logits.len()).filter(|id| allowed(*id)).max_by(|a, b| logits[*a].total_cmp(&logits[*b]))
}

/// Probabilities of the next token, without the shared denominator.
struct Odds<'a> {
    logits: &'a [f32],
    max: f32,
    total: f64,
}

impl<'a> Odds<'a> {
    fn new(logits: &'a [f32]) -> Odds<'a> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total = logits.iter().map(|l| ((l - max) as f64).exp()).sum();
        Odds { logits, max, total }
    }

    fn of(&self, id: usize) -> f64 {
        ((self.logits[id] - self.max) as f64).exp()
    }

    fn sum(&self, vocab: &Vocab, kind: u8) -> f64 {
        (0..self.logits.len()).filter(|id| vocab.is(*id, kind)).map(|id| self.of(id)).sum()
    }
}

/// A fill in a batch: the walker, and the labels it is scoring when it is.
pub(crate) struct Filling {
    walker: Walker,
    /// Tokens of the answer at most, and where in the cache it begins.
    max_tokens: usize,
    start: usize,
    phase: Phase,
    pub(crate) prompt_ms: Option<f64>,
    pub(crate) generating: Option<Instant>,
}

enum Phase {
    Walking,
    /// The labels of an [`Action::Score`], being scored from `at` in the cache.
    Scoring {
        scoring: Box<Scoring>,
        at: usize,
    },
}

impl Filling {
    /// A fill whose answer begins at `start` in the cache (its opening is part of the prompt).
    pub(crate) fn new(walker: Walker, max_tokens: usize, start: usize) -> Filling {
        Filling { walker, max_tokens, start, phase: Phase::Walking, prompt_ms: None, generating: None }
    }

    /// Takes the logits of the last pass; the value once it is whole (or why it cannot be),
    /// else the tokens to read next are in `input`.
    pub(crate) fn next(
        &mut self,
        tokenizer: &GgufTokenizer,
        vocab: &Vocab,
        logits: &[f32],
        input: &mut Vec<u32>,
        cache: &mut KvCache,
    ) -> Option<Result<Value, LlmError>> {
        let left = self.max_tokens.saturating_sub(cache.len() - self.start);
        let mut action = match &mut self.phase {
            Phase::Walking => self.walker.next(vocab, logits, left),
            Phase::Scoring { scoring, at } => {
                scoring.next(logits, input, cache, *at)?;
                let best = scoring.best();
                self.phase = Phase::Walking;
                self.walker.chose(best)
            }
        };
        let over = |walker: &Walker, needed: usize| {
            Some(Err(LlmError::Request(format!(
                "field `{}`: the arguments need more than max_tokens {} ({needed} so far)",
                walker.field(),
                self.max_tokens
            ))))
        };
        loop {
            match action {
                Action::Read { token, text } => {
                    let mut ids: Vec<u32> = token.into_iter().collect();
                    if !text.is_empty() {
                        match tokenizer.encode_plain(&text) {
                            Ok(more) => ids.extend(more),
                            Err(e) => return Some(Err(e)),
                        }
                    }
                    let needed = cache.len() + ids.len() - self.start;
                    if needed > self.max_tokens {
                        return over(&self.walker, needed);
                    }
                    input.extend(ids);
                    return None;
                }
                Action::Score(labels) => {
                    let ids: Result<Vec<Vec<u32>>, LlmError> =
                        labels.iter().map(|l| tokenizer.encode_plain(l)).collect();
                    let ids = match ids {
                        Ok(ids) => ids,
                        Err(e) => return Some(Err(e)),
                    };
                    let needed = cache.len() - self.start + ids.iter().map(Vec::len).max().unwrap_or(0);
                    if needed > self.max_tokens {
                        return over(&self.walker, needed);
                    }
                    let at = cache.len();
                    let mut scoring = Box::new(Scoring::new(labels, ids));
                    if scoring.next(logits, input, cache, at).is_none() {
                        self.phase = Phase::Scoring { scoring, at };
                        return None;
                    }
                    action = self.walker.chose(scoring.best());
                }
                Action::Done(value) => return Some(Ok(value)),
                Action::Fail(e) => return Some(Err(LlmError::Request(e))),
            }
        }
    }

    /// The answer, once the value is whole; `read` is the tokens in the cache.
    pub(crate) fn finish(self, value: Value, tokens_in: usize, read: usize, trimmed: Option<Trim>) -> Filled {
        Filled {
            value,
            text: self.walker.text().to_string(),
            tokens_in,
            tokens_out: read.saturating_sub(tokens_in),
            prompt_ms: self.prompt_ms.unwrap_or(0.0),
            gen_ms: self.generating.map_or(0.0, ms),
            trimmed,
        }
    }
}

mod number;
#[cfg(test)]
mod tests;
