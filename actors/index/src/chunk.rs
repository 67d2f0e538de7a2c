//! Cutting files into chunks where their structure is: definitions of code (from a tree-sitter
//! parse), sections of Markdown, windows of lines for anything else.
//!
//! A chunk never has more tokens than the embedding model's window, measured with the model's
//! own tokenizer (the [`Chunker`]'s counter), not guessed from characters:
//! - a definition that fits is one chunk, with the comments and attributes right above it;
//! - a container that does not fit (an `impl`, a trait, a class, a module) gives a chunk per
//!   member, each with the container's header repeated above it as context;
//! - anything else that does not fit is cut into windows of whole lines, each with the
//!   definition's signature (or the section's heading) repeated above it;
//! - code between definitions (imports, top-level statements) is gathered into `code` chunks;
//! - then neighbours are merged: consecutive chunks that are whole runs of lines under the same
//!   context (top-level definitions of a file, members of one container, sections of a
//!   document) become one chunk while the result fits the window. Short definitions alone make
//!   chunks of a few lines, which match a word or two and carry little for the model to embed;
//!   merged, a chunk holds about a window of related code and is found by both rankings more
//!   often. (On the retrieval evaluation, `docs/BENCHMARKS.md`, this raised hybrid MRR@10.)
//!
//! [`line_windows`] is the naive alternative, for comparison: fixed windows of lines whatever the
//! file, and whatever their length in tokens.

use std::path::Path;

use tree_sitter::{Node, Parser};

/// The languages chunked by their structure; everything else is [`Lang::Text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Lang {
    Rust,
    TypeScript,
    Tsx,
    JavaScript,
    Python,
    Go,
    Markdown,
    Text,
}

impl Lang {
    /// By the file's extension; files without a known one are text.
    pub fn of(path: &Path) -> Lang {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        match ext.as_str() {
            "rs" => Lang::Rust,
            "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "js" | "mjs" | "cjs" | "jsx" => Lang::JavaScript,
            "py" | "pyi" => Lang::Python,
            "go" => Lang::Go,
            "md" | "markdown" => Lang::Markdown,
            _ => Lang::Text,
        }
    }

    /// The name filters use (`--lang`, `--types`); TSX is TypeScript.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::TypeScript | Lang::Tsx => "typescript",
            Lang::JavaScript => "javascript",
            Lang::Python => "python",
            Lang::Go => "go",
            Lang::Markdown => "markdown",
            Lang::Text => "text",
        }
    }

    /// Every name [`Lang::name`] gives.
    pub const NAMES: [&'static str; 7] = ["rust", "typescript", "javascript", "python", "go", "markdown", "text"];

    fn grammar(self) -> Option<tree_sitter::Language> {
        Some(match self {
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
            Lang::Markdown | Lang::Text => return None,
        })
    }
}

/// A piece of a file, with where it is. Lines count from 1; `end_line` is included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `function`, `method`, `impl`, `struct`, `class`, `section`, `code`, `lines`, ...; the
    /// kind of all its parts for merged neighbours, `mixed` when they differ.
    pub kind: &'static str,
    /// The definition's name (`Type::method` for members), or a section's headings; those of
    /// its parts, comma-separated, for merged neighbours.
    pub symbol: Option<String>,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
}

/// Cuts texts into chunks of at most `max_tokens` tokens as `count` measures them.
pub struct Chunker<'a> {
    max_tokens: usize,
    count: &'a dyn Fn(&str) -> usize,
    merge: bool,
}

/// Lines of a window of plain text, and how many the next window repeats.
const TEXT_WINDOW: usize = 40;
const TEXT_OVERLAP: usize = 10;

impl<'a> Chunker<'a> {
    pub fn new(max_tokens: usize, count: &'a dyn Fn(&str) -> usize) -> Chunker<'a> {
        Chunker { max_tokens: max_tokens.max(8), count, merge: true }
    }

    /// Without merging neighbours: each definition that fits a chunk of its own.
    pub fn unmerged(mut self) -> Chunker<'a> {
        self.merge = false;
        self
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The chunks of one file's text, in file order.
    pub fn chunk(&self, lang: Lang, text: &str) -> Vec<Chunk> {
        let mut out = Vec::new();
        match lang {
            Lang::Markdown => self.markdown(text, &mut out),
            Lang::Text => self.windows(text, &mut out),
            code => {
                let mut parser = Parser::new();
                let tree =
                    code.grammar().and_then(|g| parser.set_language(&g).ok()).and_then(|()| parser.parse(text, None));
                match tree {
                    Some(tree) => {
                        let lines = Lines::new(text);
                        Code { chunker: self, lang: code, text, lines: &lines, out: &mut out }
                            .members(tree.root_node(), None);
                    }
                    None => self.windows(text, &mut out),
                }
            }
        }
        out.retain(|c| !c.text.trim().is_empty());
        if lang == Lang::Text {
            return out;
        }
        if !self.merge {
            return out;
        }
        self.merge(text, out)
    }

    /// Neighbours merged: consecutive chunks whose texts are the same context followed by their
    /// own lines of `text` become one (the context, then the lines from the first's to the
    /// last's) while that fits. Pieces of a definition cut to fit are never merged: each was
    /// filled as far as it fits.
    fn merge(&self, text: &str, chunks: Vec<Chunk>) -> Vec<Chunk> {
        let lines = Lines::new(text);
        let own = |c: &Chunk| &text[lines.span(c.start_line - 1, c.end_line - 1)];
        // The context above a chunk's own lines, when its text is that context and those lines.
        let prefix = |c: &Chunk| c.text.strip_suffix(own(c)).map(str::to_string);
        let mut out: Vec<Chunk> = Vec::new();
        let mut parts: Vec<Chunk> = Vec::new();
        let mut current: Option<String> = None; // prefix of `parts`
        let flush = |parts: &mut Vec<Chunk>, out: &mut Vec<Chunk>| {
            if parts.len() == 1 {
                out.push(parts.pop().expect("one"));
                return;
            }
            if parts.is_empty() {
                return;
            }
            let first = &parts[0];
            let last = &parts[parts.len() - 1];
            let pre = prefix(first).expect("checked");
            let kind = if parts.iter().all(|p| p.kind == first.kind) { first.kind } else { "mixed" };
            let mut symbols: Vec<&str> = Vec::new();
            for p in parts.iter() {
                if let Some(s) = p.symbol.as_deref()
                    && !symbols.contains(&s)
                {
                    // A container's or a heading's name goes when its members' names come.
                    symbols.retain(|o| !(s.starts_with(&format!("{o}::")) || s.starts_with(&format!("{o} > "))));
                    symbols.push(s);
                }
            }
            let merged = Chunk {
                kind,
                symbol: (!symbols.is_empty()).then(|| symbols.join(", ")),
                start_line: first.start_line,
                end_line: last.end_line,
                text: format!("{pre}{}", &text[lines.span(first.start_line - 1, last.end_line - 1)]),
            };
            parts.clear();
            out.push(merged);
        };
        for c in chunks {
            let p = prefix(&c);
            let joins = match (&p, &current, parts.last()) {
                (Some(p), Some(cur), Some(last)) if p == cur && c.start_line > last.end_line => {
                    let first = &parts[0];
                    let candidate = format!("{p}{}", &text[lines.span(first.start_line - 1, c.end_line - 1)]);
                    self.fits(&candidate)
                }
                _ => false,
            };
            if !joins {
                flush(&mut parts, &mut out);
                current = p.clone();
            }
            if p.is_some() {
                parts.push(c);
            } else {
                flush(&mut parts, &mut out);
                current = None;
                out.push(c);
            }
        }
        flush(&mut parts, &mut out);
        out
    }

    fn fits(&self, text: &str) -> bool {
        (self.count)(text) <= self.max_tokens
    }

    /// Overlapping windows of whole lines of plain text.
    fn windows(&self, text: &str, out: &mut Vec<Chunk>) {
        let lines: Vec<&str> = text.lines().collect();
        let to = lines.len();
        let mut start = 0;
        while start < to {
            let end = (start + TEXT_WINDOW).min(to);
            for (text, a, b) in self.fit_lines(&lines[start..end], "") {
                out.push(Chunk {
                    kind: "lines",
                    symbol: None,
                    start_line: start + a + 1,
                    end_line: start + b + 1,
                    text,
                });
            }
            if end == to {
                break;
            }
            start = end.saturating_sub(TEXT_OVERLAP).max(start + 1);
        }
    }

    /// `lines` cut into pieces that fit with `context` above each: (text, first line, last
    /// line), indices into `lines`. A line too long to fit alone is cut between characters
    /// into pieces of that one line.
    fn fit_lines(&self, lines: &[&str], context: &str) -> Vec<(String, usize, usize)> {
        let mut pieces = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            // Grow the piece one line at a time; the counter sees the whole text each time a
            // line is added, so what is measured is what is stored.
            let mut text = context.to_string();
            let mut n = 0;
            while i + n < lines.len() {
                let mut next = text.clone();
                next.push_str(lines[i + n]);
                next.push('\n');
                if !self.fits(&next) {
                    break;
                }
                text = next;
                n += 1;
            }
            if n > 0 {
                pieces.push((text, i, i + n - 1));
                i += n;
                continue;
            }
            let mut rest = lines[i];
            while !rest.is_empty() {
                let mut cut = rest.len();
                while cut > 0 && !self.fits(&format!("{context}{}\n", &rest[..cut])) {
                    cut = floor_boundary(rest, cut * 3 / 4);
                }
                let cut = cut.max(rest.chars().next().map_or(rest.len(), char::len_utf8));
                pieces.push((format!("{context}{}\n", &rest[..cut]), i, i));
                rest = &rest[cut..];
            }
            i += 1;
        }
        pieces
    }

    fn markdown(&self, text: &str, out: &mut Vec<Chunk>) {
        let lines: Vec<&str> = text.lines().collect();
        // Sections: (first line, heading level, title); the text before any heading is one too.
        let mut sections: Vec<(usize, usize, Option<String>)> = vec![(0, 0, None)];
        let mut fence: Option<&str> = None;
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if let Some(f) = fence {
                if trimmed.starts_with(f) {
                    fence = None;
                }
                continue;
            }
            if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                fence = Some(&trimmed[..3]);
                continue;
            }
            let level = trimmed.chars().take_while(|c| *c == '#').count();
            if (1..=6).contains(&level) && trimmed[level..].starts_with([' ', '\t']) && line.len() - trimmed.len() < 4 {
                sections.push((i, level, Some(trimmed[level..].trim().trim_end_matches('#').trim().to_string())));
            }
        }
        let mut path: Vec<(usize, String)> = Vec::new();
        for (k, (start, level, title)) in sections.iter().enumerate() {
            let end = sections.get(k + 1).map_or(lines.len(), |s| s.0);
            if let Some(title) = title {
                path.retain(|(l, _)| l < level);
                path.push((*level, title.clone()));
            }
            if start >= &end {
                continue;
            }
            let symbol =
                (!path.is_empty()).then(|| path.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(" > "));
            let body = &lines[*start..end];
            let whole: String = body.iter().flat_map(|l| [*l, "\n"]).collect();
            if self.fits(&whole) {
                out.push(Chunk { kind: "section", symbol, start_line: start + 1, end_line: end, text: whole });
                continue;
            }
            // Too long: windows of its lines, each under the section's heading.
            let (context, rest) = match title {
                Some(_) => (format!("{}\n", body[0]), &body[1..]),
                None => (String::new(), body),
            };
            let first = start + usize::from(title.is_some());
            for (text, a, b) in self.fit_lines(rest, &context) {
                let (start_line, end_line) = (first + a + 1, first + b + 1);
                out.push(Chunk { kind: "section", symbol: symbol.clone(), start_line, end_line, text });
            }
        }
    }
}

/// `text` cut into windows of `lines` lines each (the last one shorter), without overlap and
/// whatever its language or structure: the naive chunking a retrieval evaluation compares the
/// [`Chunker`]'s with. A window is not cut to fit any model's window, so a model that embeds it
/// sees its first tokens only. Windows of blank lines only are left out.
pub fn line_windows(text: &str, lines: usize) -> Vec<Chunk> {
    let all: Vec<&str> = text.lines().collect();
    all.chunks(lines.max(1))
        .enumerate()
        .map(|(i, window)| Chunk {
            kind: "lines",
            symbol: None,
            start_line: i * lines.max(1) + 1,
            end_line: i * lines.max(1) + window.len(),
            text: window.iter().flat_map(|l| [*l, "\n"]).collect(),
        })
        .filter(|c| !c.text.trim().is_empty())
        .collect()
}

/// Byte offsets of line starts, to turn node positions into whole lines.
struct Lines {
    starts: Vec<usize>,
    len: usize,
}

impl Lines {
    fn new(text: &str) -> Lines {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Lines { starts, len: text.len() }
    }

    /// Bytes of whole lines `from..=to` (0-based rows).
    fn span(&self, from: usize, to: usize) -> std::ops::Range<usize> {
        let end = self.starts.get(to + 1).copied().unwrap_or(self.len);
        self.starts[from.min(self.starts.len() - 1)]..end
    }
}

/// One parsed file being cut.
struct Code<'c, 'a> {
    chunker: &'c Chunker<'a>,
    lang: Lang,
    text: &'c str,
    lines: &'c Lines,
    out: &'c mut Vec<Chunk>,
}

/// A member of a container: the container's header and symbol.
#[derive(Clone)]
struct Context {
    header: String,
    symbol: Option<String>,
}

impl Code<'_, '_> {
    /// The named children of `parent`: each definition a chunk of its own (with the comments
    /// and attributes right above it), the runs of other nodes between them `code` chunks.
    fn members(&mut self, parent: Node<'_>, ctx: Option<&Context>) {
        let mut run: Option<(usize, usize)> = None; // rows of pending non-definition nodes
        // Rows of the comments and attributes at the end of the run, right above what follows.
        let mut lead: Option<(usize, usize)> = None;
        let mut cursor = parent.walk();
        let children: Vec<Node<'_>> = parent.named_children(&mut cursor).collect();
        for node in children {
            let (start, end) = (node.start_position().row, node.end_position().row);
            if let Some(kind) = self.definition(node) {
                let first = lead.filter(|(l, e)| *l < start && e + 1 >= start).map_or(start, |(l, _)| l);
                if let Some((a, _)) = run
                    && a < first
                {
                    self.code(a, first - 1, ctx);
                }
                run = None;
                lead = None;
                self.definition_chunk(node, kind, first, ctx);
                continue;
            }
            let attached = matches!(
                node.kind(),
                "line_comment" | "block_comment" | "comment" | "attribute_item" | "inner_attribute_item" | "decorator"
            );
            lead = match lead {
                Some((l, e)) if attached && start <= e + 1 => Some((l, end)),
                _ if attached => Some((start, end)),
                _ => None,
            };
            run = Some(match run {
                Some((a, _)) => (a, end),
                None => (start, end),
            });
        }
        if let Some((a, e)) = run {
            self.code(a, e, ctx);
        }
    }

    /// Rows `from..=to` of code between definitions (blank rows at either end left out).
    fn code(&mut self, mut from: usize, mut to: usize, ctx: Option<&Context>) {
        let blank = |row: usize| self.text[self.lines.span(row, row)].trim().is_empty();
        while from < to && blank(from) {
            from += 1;
        }
        while to > from && blank(to) {
            to -= 1;
        }
        let span = self.lines.span(from, to);
        let lines: Vec<&str> = self.text[span].lines().collect();
        let context = ctx.map_or("", |c| c.header.as_str());
        for (text, a, b) in self.chunker.fit_lines(&lines, context) {
            let symbol = ctx.and_then(|c| c.symbol.clone());
            self.out.push(Chunk { kind: "code", symbol, start_line: from + a + 1, end_line: from + b + 1, text });
        }
    }

    fn definition_chunk(&mut self, node: Node<'_>, kind: &'static str, first: usize, ctx: Option<&Context>) {
        let end = node.end_position().row;
        let own = &self.text[self.lines.span(first, end)];
        let context = ctx.map_or("", |c| c.header.as_str());
        let name = self.name(node);
        let symbol = match (ctx.and_then(|c| c.symbol.as_deref()), name) {
            (Some(outer), Some(name)) => Some(format!("{outer}::{name}")),
            (outer, name) => name.or(outer.map(str::to_string)),
        };
        let whole = format!("{context}{own}");
        if self.chunker.fits(&whole) {
            self.out.push(Chunk { kind, symbol, start_line: first + 1, end_line: end + 1, text: whole });
            return;
        }
        // Too long. Its signature: from its first row (not its comments) to where its body
        // opens, or its first row when it has no body.
        let row = node.start_position().row;
        let body = self.body(node);
        let sig_end = body.map_or(row, header_end).max(row);
        let header = format!("{context}{}", &self.text[self.lines.span(row, sig_end)]);
        let header_fits = self.chunker.fits(&format!("{header}\n"));
        if let Some(body) = body.filter(|b| header_fits && self.has_definitions(*b)) {
            // A container: a chunk per member, each under the header; the comments above the
            // container go with the code before its first member.
            if first < row {
                self.code(first, row - 1, ctx);
            }
            let inner = Context { header, symbol };
            return self.members(body, Some(&inner));
        }
        // Windows of its lines, each under its signature when that leaves room.
        if !header_fits || sig_end >= end {
            let lines: Vec<&str> = own.lines().collect();
            for (text, a, b) in self.chunker.fit_lines(&lines, context) {
                self.push(kind, &symbol, first + a, first + b, text);
            }
            return;
        }
        let rest: Vec<&str> = self.text[self.lines.span(sig_end + 1, end)].lines().collect();
        let mut pieces = self.chunker.fit_lines(&rest, &header).into_iter();
        // The first piece holds the comments and signature as they are, if they fit with it.
        let head = format!("{context}{}", &self.text[self.lines.span(first, sig_end)]);
        if let Some((text, _, b)) = pieces.next() {
            let joined = format!("{head}{}", &text[header.len()..]);
            if self.chunker.fits(&joined) {
                self.push(kind, &symbol, first, sig_end + 1 + b, joined);
            } else {
                let lines: Vec<&str> = self.text[self.lines.span(first, sig_end)].lines().collect();
                for (head_text, a, hb) in self.chunker.fit_lines(&lines, context) {
                    self.push(kind, &symbol, first + a, first + hb, head_text);
                }
                self.push(kind, &symbol, sig_end + 1, sig_end + 1 + b, text);
            }
        }
        for (text, a, b) in pieces {
            self.push(kind, &symbol, sig_end + 1 + a, sig_end + 1 + b, text);
        }
    }

    /// A chunk of rows `from..=to` (0-based).
    fn push(&mut self, kind: &'static str, symbol: &Option<String>, from: usize, to: usize, text: String) {
        self.out.push(Chunk { kind, symbol: symbol.clone(), start_line: from + 1, end_line: to + 1, text });
    }

    fn has_definitions(&self, body: Node<'_>) -> bool {
        let mut cursor = body.walk();
        body.named_children(&mut cursor).any(|n| self.definition(n).is_some())
    }

    /// The block holding a definition's members or statements.
    fn body<'t>(&self, node: Node<'t>) -> Option<Node<'t>> {
        let inner = self.unwrap(node);
        inner.child_by_field_name("body").or_else(|| {
            // Go: a type's struct or interface body sits in its spec.
            let mut cursor = inner.walk();
            let spec = inner.named_children(&mut cursor).find(|n| n.kind() == "type_spec")?;
            spec.child_by_field_name("type")
        })
    }

    /// The definition an export, a decoration or a declaration wraps, or the node itself.
    fn unwrap<'t>(&self, node: Node<'t>) -> Node<'t> {
        match node.kind() {
            "export_statement" => node.child_by_field_name("declaration").unwrap_or(node),
            "decorated_definition" => node.child_by_field_name("definition").unwrap_or(node),
            _ => node,
        }
    }

    /// The kind of chunk `node` is as a definition, or `None` for other code.
    fn definition(&self, node: Node<'_>) -> Option<&'static str> {
        let inner = self.unwrap(node);
        let kind = match (self.lang, inner.kind()) {
            (Lang::Rust, "function_item" | "function_signature_item") => "function",
            (Lang::Rust, "impl_item") => "impl",
            (Lang::Rust, "struct_item" | "union_item") => "struct",
            (Lang::Rust, "enum_item") => "enum",
            (Lang::Rust, "trait_item") => "trait",
            (Lang::Rust, "mod_item") if inner.child_by_field_name("body").is_some() => "module",
            (Lang::Rust, "macro_definition") => "macro",
            (Lang::Rust, "const_item" | "static_item") => "const",
            (Lang::Rust, "type_item") => "type",
            (_, "function_declaration" | "generator_function_declaration" | "function_definition") => {
                if self.in_class(node) { "method" } else { "function" }
            }
            (_, "method_definition" | "method_declaration") => "method",
            (_, "class_declaration" | "abstract_class_declaration" | "class_definition" | "class") => "class",
            (_, "interface_declaration") => "interface",
            (_, "type_alias_declaration") => "type",
            (Lang::Go, "type_declaration") => "type",
            (_, "enum_declaration") => "enum",
            (_, "internal_module" | "module") if matches!(self.lang, Lang::TypeScript | Lang::Tsx) => "module",
            (Lang::TypeScript | Lang::Tsx | Lang::JavaScript, "lexical_declaration" | "variable_declaration") => {
                // `const f = () => ...` and `const C = class ...` are definitions.
                let mut cursor = inner.walk();
                let defines = inner.named_children(&mut cursor).any(|d| {
                    d.child_by_field_name("value").is_some_and(|v| {
                        matches!(v.kind(), "arrow_function" | "function_expression" | "function" | "class")
                    })
                });
                if !defines {
                    return None;
                }
                "function"
            }
            _ => return None,
        };
        Some(kind)
    }

    fn in_class(&self, node: Node<'_>) -> bool {
        let mut up = node.parent();
        while let Some(p) = up {
            if matches!(p.kind(), "class_definition" | "class_body" | "class_declaration") {
                return true;
            }
            if matches!(p.kind(), "function_definition" | "module" | "program" | "source_file") {
                return false;
            }
            up = p.parent();
        }
        false
    }

    /// A definition's name as written (`Trait for Type` for a Rust impl).
    fn name(&self, node: Node<'_>) -> Option<String> {
        let inner = self.unwrap(node);
        let text = |n: Node<'_>| self.text[n.byte_range()].to_string();
        if inner.kind() == "impl_item" {
            let ty = inner.child_by_field_name("type").map(text)?;
            return Some(match inner.child_by_field_name("trait").map(text) {
                Some(t) => format!("{t} for {ty}"),
                None => ty,
            });
        }
        if let Some(name) = inner.child_by_field_name("name") {
            return Some(text(name));
        }
        // Declarations name what they declare: `const f = ...`, Go's `type T struct`.
        let mut cursor = inner.walk();
        let named = inner.named_children(&mut cursor).find_map(|d| d.child_by_field_name("name"));
        named.map(text)
    }
}

/// The last row of a container's header: the row its body opens on, or the row before for an
/// indented block that begins a line of its own (Python).
fn header_end(body: Node<'_>) -> usize {
    let row = body.start_position().row;
    let parent = body.parent().map_or(0, |p| p.start_position().row);
    if body.kind() == "block" && row > parent { row - 1 } else { row }
}

/// The largest char boundary of `s` at or before `i`.
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests;
