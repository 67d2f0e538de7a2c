//! What goes wrong reading a fleet file: the error with its place, and how a place is found
//! (the line and column of a byte, the key path of a value serde refused).

use std::fmt;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::MAX_FLEET_FILE_BYTES;

/// A configuration error with the place it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File the error is in (`<embedded>` for the built-in default).
    pub path: PathBuf,
    /// 1-based line and column, when the error has a place in the file.
    pub line: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// 1-based line and column (in characters) of a byte offset.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Why a fleet or reference file could not be read.
pub(super) enum ReadError {
    Io(std::io::Error),
    TooLarge,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::TooLarge => {
                write!(f, "larger than the limit of 4 MiB ({MAX_FLEET_FILE_BYTES} bytes)")
            }
        }
    }
}

/// Reads a file of at most [`MAX_FLEET_FILE_BYTES`]: refused from its size when it has one, and
/// never read past the limit (`/dev/zero` and pipes have no size).
pub(super) fn read_capped(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    if file.metadata().map_err(ReadError::Io)?.len() > MAX_FLEET_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    let mut bytes = Vec::new();
    file.take(MAX_FLEET_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_FLEET_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes)
        .map_err(|_| ReadError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is not UTF-8")))
}

/// A serde error of `text` (a fleet or reference file) at its place, with the dotted path of the
/// key it is about: serde's own message names the expected type, not the key.
pub(super) fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let mut message = e.message().trim_end_matches('\n').to_string();
    // serde's words for TOML's types: a datetime reaches serde as a map, a table is one of our
    // `Raw*` structs.
    let at_digit =
        e.span().and_then(|s| text.get(s.start..)).is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    if at_digit {
        message = message.replace("invalid type: map,", "invalid type: datetime,");
    }
    if let Some(i) = message.find("expected struct Raw") {
        message.replace_range(i.., "expected a table");
    }
    let message = message.as_str();
    let key = e.span().and_then(|s| key_path_at(text, s, message.starts_with("duplicate key")));
    ConfigError {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_col(text, s.start)),
        message: match key {
            Some(key) => format!("`{key}`: {message}"),
            None => message.to_string(),
        },
    }
}

/// The dotted path (`storage.max_pending`, `persona[1].inbox_capacity`, arrays counted from
/// 0) of the key or value at byte `at` of a TOML document, found in the document's spanned
/// tree. A table's span is its header, so every branch is searched, the deepest match wins.
///
/// A `repeated` key is not in the tree (the parser kept the first): its path is that of the
/// nearest key of the same name before it, which is in the same table.
pub(super) fn key_path_at(text: &str, span: std::ops::Range<usize>, repeated: bool) -> Option<String> {
    let (root, _) = toml::de::DeTable::parse_recoverable(text);
    let root = Spanned::new(root.span(), toml::de::DeValue::Table(root.into_inner()));
    let mut path = String::new();
    if find_key(&root, span.start, &mut path) && !path.is_empty() {
        return Some(path);
    }
    if !repeated {
        return None;
    }
    let written = text.get(span.clone())?;
    let name = written.trim_matches(|c| c == '"' || c == '\'');
    let mut nearest = None;
    if !name.is_empty() && !name.contains('\n') {
        keys_named(&root, name, span.start, &mut String::new(), &mut nearest);
    }
    nearest.map(|(_, path)| path)
}

/// Appends a key to a dotted path, quoted unless bare.
pub(super) fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        path.push_str(key);
    } else {
        path.push_str(&format!("{key:?}"));
    }
}

pub(super) fn find_key(v: &Spanned<toml::de::DeValue<'_>>, at: usize, path: &mut String) -> bool {
    use toml::de::DeValue;
    let len = path.len();
    match v.get_ref() {
        DeValue::Table(t) => {
            for (k, child) in t.iter() {
                push_key(path, k.get_ref());
                if k.span().contains(&at) || find_key(child, at, path) {
                    return true;
                }
                path.truncate(len);
            }
        }
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                if find_key(item, at, path) {
                    return true;
                }
                path.truncate(len);
            }
        }
        _ => {}
    }
    v.span().contains(&at)
}

/// The path of the last key called `name` that starts before `before`, into `nearest`.
pub(super) fn keys_named(
    v: &Spanned<toml::de::DeValue<'_>>,
    name: &str,
    before: usize,
    path: &mut String,
    nearest: &mut Option<(usize, String)>,
) {
    use toml::de::DeValue;
    let len = path.len();
    match v.get_ref() {
        DeValue::Table(t) => {
            for (k, child) in t.iter() {
                push_key(path, k.get_ref());
                let at = k.span().start;
                if k.get_ref() == name && at < before && nearest.as_ref().is_none_or(|(n, _)| *n < at) {
                    *nearest = Some((at, path.clone()));
                }
                keys_named(child, name, before, path, nearest);
                path.truncate(len);
            }
        }
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                keys_named(item, name, before, path, nearest);
                path.truncate(len);
            }
        }
        _ => {}
    }
}
