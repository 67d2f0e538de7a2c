//! The keyword side: BM25 over the chunks' words and identifiers, in a tantivy index of its own
//! (`keyword/`), rebuilt from redb whenever it is missing, unreadable or behind.
//!
//! Identifiers are split where code splits them: `parse_config`, `parseConfig` and
//! `ParseConfig` each give `parse` and `config` as well as the whole identifier, so a question
//! in words finds code that names the same things. Words are lower-cased and stemmed (English),
//! and the commonest English words are dropped.
//!
//! Each document also holds its chunk's path as one untokenized term, so a search within a path
//! prefix (a persona's namespace of conversation memory) is a term range of the index, not a
//! filter over the best matches of the whole of it; and its id as a fast field, so a hit costs
//! no read of the document store.

use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, NumericOptions, STRING, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{Language, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::IndexError;

const TOKENIZER: &str = "code";
/// Memory for tantivy's indexing buffer (its minimum is 15 MB per thread).
const WRITER_BYTES: usize = 32 << 20;

pub struct Keyword {
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    id: Field,
    path: Field,
    body: Field,
}

fn err(what: &str, e: impl std::fmt::Display) -> IndexError {
    IndexError::Keyword(format!("{what}: {e}"))
}

impl Keyword {
    /// Opens the index in `dir`, or creates it empty (also in place of one that cannot be
    /// read: the caller then finds its generation behind and rebuilds it).
    pub fn open(dir: &Path) -> Result<(Keyword, bool), IndexError> {
        let mut schema = Schema::builder();
        let id = schema.add_u64_field("id", NumericOptions::default().set_indexed().set_fast());
        let path = schema.add_text_field("path", STRING);
        let indexing =
            TextFieldIndexing::default().set_tokenizer(TOKENIZER).set_index_option(IndexRecordOption::WithFreqs);
        let body = schema.add_text_field("body", TextOptions::default().set_indexing_options(indexing));
        let schema = schema.build();
        std::fs::create_dir_all(dir).map_err(|e| err(&dir.display().to_string(), e))?;
        let (index, fresh) = match Index::open_in_dir(dir) {
            Ok(index) if index.schema() == schema => (index, false),
            _ => {
                // Unreadable, or of another schema: start again (redb has everything).
                std::fs::remove_dir_all(dir).map_err(|e| err(&dir.display().to_string(), e))?;
                std::fs::create_dir_all(dir).map_err(|e| err(&dir.display().to_string(), e))?;
                (Index::create_in_dir(dir, schema).map_err(|e| err(&dir.display().to_string(), e))?, true)
            }
        };
        index
            .tokenizers()
            .register(TOKENIZER, TextAnalyzer::builder(CodeTokenizer).filter(Stemmer::new(Language::English)).build());
        let writer = index.writer_with_num_threads(1, WRITER_BYTES).map_err(|e| err("writer", e))?;
        let reader =
            index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(|e| err("reader", e))?;
        Ok((Keyword { index, reader, writer: Mutex::new(writer), id, path, body }, fresh))
    }

    /// The redb generation the index was last committed at.
    pub fn generation(&self) -> u64 {
        let metas = self.index.load_metas().ok();
        metas.and_then(|m| m.payload).and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    pub fn add(&self, id: u64, path: &str, text: &str) -> Result<(), IndexError> {
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.id, id);
        doc.add_text(self.path, path);
        doc.add_text(self.body, text);
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).add_document(doc).map_err(|e| err("add", e))?;
        Ok(())
    }

    pub fn remove(&self, id: u64) {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).delete_term(Term::from_field_u64(self.id, id));
    }

    pub fn clear(&self) -> Result<(), IndexError> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).delete_all_documents().map_err(|e| err("clear", e))?;
        Ok(())
    }

    /// Makes the changes so far visible, recording `generation`.
    pub fn commit(&self, generation: u64) -> Result<(), IndexError> {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut prepared = writer.prepare_commit().map_err(|e| err("commit", e))?;
        prepared.set_payload(&generation.to_string());
        prepared.commit().map_err(|e| err("commit", e))?;
        self.reader.reload().map_err(|e| err("reload", e))
    }

    /// The words of `query` as this index reads them.
    pub fn terms(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.index.tokenizers().get(TOKENIZER).expect("registered at open");
        let mut stream = analyzer.token_stream(query);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            if !out.contains(&t.text) {
                out.push(t.text.clone());
            }
        }
        out
    }

    /// The `n` best chunks for `query` by BM25 among those whose path starts with `prefix`,
    /// best first, with their scores.
    pub fn search(&self, query: &str, n: usize, prefix: Option<&str>) -> Result<Vec<(u64, f32)>, IndexError> {
        let terms = self.terms(query);
        if terms.is_empty() || n == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let q = TermQuery::new(Term::from_field_text(self.body, t), IndexRecordOption::WithFreqs);
                (Occur::Should, Box::new(q) as Box<dyn Query>)
            })
            .collect();
        let words = BooleanQuery::new(clauses);
        let query: Box<dyn Query> = match prefix {
            // Every path that starts with the prefix sorts between it and it followed by the
            // last code point; the range scores nothing, so BM25 alone ranks.
            Some(p) => {
                let within = RangeQuery::new(
                    Bound::Included(Term::from_field_text(self.path, p)),
                    Bound::Excluded(Term::from_field_text(self.path, &format!("{p}{}", char::MAX))),
                );
                Box::new(BooleanQuery::new(vec![
                    (Occur::Must, Box::new(words)),
                    (Occur::Must, Box::new(ConstScoreQuery::new(Box::new(within), 0.0))),
                ]))
            }
            None => Box::new(words),
        };
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(n).order_by_score()).map_err(|e| err("search", e))?;
        let mut ids = Vec::new();
        let mut out = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let seg = addr.segment_ord as usize;
            if ids.len() <= seg {
                ids.resize_with(seg + 1, || None);
            }
            if ids[seg].is_none() {
                let column = searcher.segment_reader(addr.segment_ord).fast_fields().u64("id");
                ids[seg] = Some(column.map_err(|e| err("search", e))?);
            }
            if let Some(id) = ids[seg].as_ref().and_then(|c| c.first(addr.doc_id)) {
                out.push((id, score));
            }
        }
        Ok(out)
    }
}

/// Words and the parts of identifiers; see the module doc.
#[derive(Clone, Default)]
struct CodeTokenizer;

struct CodeTokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokens;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokens {
        CodeTokens { tokens: split(text), at: 0 }
    }
}

impl TokenStream for CodeTokens {
    fn advance(&mut self) -> bool {
        self.at += 1;
        self.at <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.at - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.at - 1]
    }
}

const STOP_WORDS: [&str; 40] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "if", "in",
    "into", "is", "it", "its", "of", "on", "or", "that", "the", "their", "then", "there", "this", "to", "was", "we",
    "what", "when", "where", "which", "who", "why", "with",
];

fn split(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut push = |text: String, from: usize, to: usize| {
        let position = out.len();
        out.push(Token { offset_from: from, offset_to: to, position, text, position_length: 1 });
    };
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = text.char_indices().peekable();
    while let Some((start, c)) = rest.next() {
        if !is_word(c) {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some((i, c)) = rest.peek().copied() {
            if !is_word(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        let word = &text[start..end];
        let parts = parts(word);
        let whole = word.trim_matches('_').to_lowercase();
        if parts.len() > 1 {
            push(whole, start, end);
        }
        for (from, to) in parts {
            let part = text[start + from..start + to].to_lowercase();
            if !STOP_WORDS.contains(&part.as_str()) {
                push(part, start + from, start + to);
            }
        }
    }
    out
}

/// Byte ranges of an identifier's parts: split at underscores, at a lower-case letter or digit
/// followed by an upper-case one, and before the last capital of a run followed by lower case
/// (`HTTPServer` -> `HTTP`, `Server`).
fn parts(word: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        if c == '_' {
            if let Some(s) = start.take() {
                out.push((s, i));
            }
            continue;
        }
        if let Some(s) = start {
            let prev = chars[k - 1].1;
            let next = chars.get(k + 1).map(|x| x.1);
            let boundary = c.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_uppercase() && next.is_some_and(char::is_lowercase)));
            if boundary {
                out.push((s, i));
                start = Some(i);
            }
        } else {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s, word.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        split(text).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn identifiers_give_their_parts_as_well_as_themselves() {
        assert_eq!(words("parse_config"), ["parse_config", "parse", "config"]);
        assert_eq!(words("HTTPServer::readAll"), ["httpserver", "http", "server", "readall", "read", "all"]);
        assert_eq!(words("How is the config parsed?"), ["config", "parsed"]);
        assert_eq!(words("été déjà"), ["été", "déjà"]);
    }
}
