//! The index's open cursors (the pages of a `rag` answer a client reads in turn), kept in a file
//! across restarts when the index has one.

use super::*;

/// Open cursors, and the file that keeps them when there is one.
pub(super) struct CursorBook {
    pub(super) cursors: Cursors<Value>,
    file: Option<PathBuf>,
}

impl CursorBook {
    pub(super) fn load(file: Option<PathBuf>, config: &IndexConfig) -> CursorBook {
        let (ttl, cap) = (config.cursor_ttl.as_millis() as u64, config.max_cursors);
        let stored = file.as_ref().and_then(|f| match std::fs::read(f) {
            Ok(bytes) => serde_json::from_slice::<Cursors<Value>>(&bytes)
                .map_err(
                    |e| tracing::warn!(file = %f.display(), error = %e, "unreadable cursors; open handles are lost"),
                )
                .ok(),
            Err(_) => None,
        });
        let mut cursors = stored.unwrap_or_else(|| Cursors::new(ttl, cap));
        cursors.set_limits(ttl, cap);
        CursorBook { cursors, file }
    }

    /// Runs `f` on the cursors at the current time, then writes them to their file (atomically).
    pub(super) fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Cursors<Value>, u64) -> Result<T, CursorError>,
    ) -> Result<T, RagError> {
        let out = f(&mut self.cursors, now_ms()).map_err(|e| match e {
            CursorError::Expired(_) => RagError::NotFound(e.to_string()),
            CursorError::TooMany(_) => RagError::Invalid(e.to_string()),
        })?;
        if let Some(file) = &self.file {
            let tmp = file.with_extension("json.tmp");
            let bytes = serde_json::to_vec(&self.cursors).map_err(|e| RagError::Failed(e.to_string()))?;
            std::fs::write(&tmp, bytes)
                .and_then(|()| std::fs::rename(&tmp, file))
                .map_err(|e| RagError::Failed(format!("{}: {e}", file.display())))?;
        }
        Ok(out)
    }

    pub(super) fn open(
        &mut self,
        items: Vec<Value>,
        page_size: usize,
        note: Option<String>,
    ) -> Result<Value, RagError> {
        if !(1..=MAX_LIMIT).contains(&page_size) {
            return Err(RagError::Invalid(format!("page_size: {page_size} is not within 1..={MAX_LIMIT}")));
        }
        let (handle, page) = self.with(|c, now| c.open(items, page_size, now))?;
        let mut v = page_json(&handle, page);
        if let Some(note) = note {
            v["note"] = json!(note);
        }
        Ok(v)
    }
}

pub(super) fn page_json(handle: &str, page: Page<Value>) -> Value {
    let mut v = json!(page);
    v["handle"] = json!(handle);
    v
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
