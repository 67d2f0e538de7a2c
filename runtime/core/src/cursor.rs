//! Paged reading of a ranked or time-ordered list: open (a snapshot and its first page), fetch
//! at any position, close. Search results page this way, and so can a persona's thoughts,
//! decisions or outbox.
//!
//! A [`Cursor`] holds the snapshot taken at open, so paging never sees the list change under
//! it. A fetch's position is relative to the last page returned: forward is the page after it,
//! backward the page before it; an offset asks for a page anywhere. [`Cursors`] keeps open
//! cursors by handle, each with a time to live, up to a cap.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Forward,
    Backward,
}

/// One page, and where it is in the whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub offset: usize,
    pub entries: Vec<T>,
    pub total_count: usize,
    pub has_more: bool,
    pub has_previous: bool,
}

/// A snapshot of a list, and the last page read of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cursor<T> {
    items: Vec<T>,
    page_size: usize,
    /// The last page returned: its offset and length.
    offset: usize,
    len: usize,
}

impl<T: Clone> Cursor<T> {
    /// The cursor over `items` (at least 1 per page) and its first page.
    pub fn open(items: Vec<T>, page_size: usize) -> (Cursor<T>, Page<T>) {
        let mut c = Cursor { items, page_size: page_size.max(1), offset: 0, len: 0 };
        let page = c.page(0, c.page_size);
        (c, page)
    }

    pub fn total(&self) -> usize {
        self.items.len()
    }

    /// The page at `offset` when given, else the one after (forward) or before (backward) the
    /// last page returned; `limit` entries (default: the page size).
    pub fn fetch(&mut self, direction: Direction, offset: Option<usize>, limit: Option<usize>) -> Page<T> {
        let limit = limit.unwrap_or(self.page_size).max(1);
        let (at, limit) = match (offset, direction) {
            (Some(o), _) => (o, limit),
            (None, Direction::Forward) => (self.offset + self.len, limit),
            // The page before ends where the last one began (so near the start it is shorter).
            (None, Direction::Backward) if self.offset > 0 => {
                (self.offset.saturating_sub(limit), limit.min(self.offset))
            }
            // At the start already: the first page again.
            (None, Direction::Backward) => (0, limit),
        };
        self.page(at, limit)
    }

    fn page(&mut self, at: usize, limit: usize) -> Page<T> {
        let at = at.min(self.items.len());
        // Saturating: a caller's `limit` may be anything up to `usize::MAX`.
        let end = at.saturating_add(limit).min(self.items.len());
        self.offset = at;
        self.len = end - at;
        Page {
            offset: at,
            entries: self.items[at..end].to_vec(),
            total_count: self.items.len(),
            has_more: end < self.items.len(),
            has_previous: at > 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("handle {0}: expired or closed")]
    Expired(String),
    #[error("too many open handles ({0}): close some or wait for them to expire")]
    TooMany(usize),
}

/// Open cursors by handle, each living `ttl_ms` after its last use, at most `cap` at once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cursors<T> {
    open: HashMap<String, (Cursor<T>, u64)>,
    ttl_ms: u64,
    cap: usize,
    next: u64,
}

impl<T: Clone> Cursors<T> {
    pub fn new(ttl_ms: u64, cap: usize) -> Cursors<T> {
        Cursors { open: HashMap::new(), ttl_ms, cap: cap.max(1), next: 0 }
    }

    /// Opens a cursor over `items` at time `now_ms`: its handle and first page.
    pub fn open(&mut self, items: Vec<T>, page_size: usize, now_ms: u64) -> Result<(String, Page<T>), CursorError> {
        self.expire(now_ms);
        if self.open.len() >= self.cap {
            return Err(CursorError::TooMany(self.cap));
        }
        self.next += 1;
        let handle = format!("c{:x}-{:x}", now_ms, self.next);
        let (cursor, page) = Cursor::open(items, page_size);
        self.open.insert(handle.clone(), (cursor, now_ms.saturating_add(self.ttl_ms)));
        Ok((handle, page))
    }

    pub fn fetch(
        &mut self,
        handle: &str,
        direction: Direction,
        offset: Option<usize>,
        limit: Option<usize>,
        now_ms: u64,
    ) -> Result<Page<T>, CursorError> {
        self.expire(now_ms);
        let (cursor, expires) = self.open.get_mut(handle).ok_or_else(|| CursorError::Expired(handle.into()))?;
        *expires = now_ms.saturating_add(self.ttl_ms);
        Ok(cursor.fetch(direction, offset, limit))
    }

    pub fn close(&mut self, handle: &str, now_ms: u64) -> Result<(), CursorError> {
        self.expire(now_ms);
        self.open.remove(handle).map(|_| ()).ok_or_else(|| CursorError::Expired(handle.into()))
    }

    /// Sets the time to live and the cap (of cursors read back from a file, to the current
    /// configuration's).
    pub fn set_limits(&mut self, ttl_ms: u64, cap: usize) {
        self.ttl_ms = ttl_ms;
        self.cap = cap.max(1);
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    fn expire(&mut self, now_ms: u64) {
        self.open.retain(|_, (_, expires)| *expires > now_ms);
    }
}

#[cfg(test)]
#[path = "cursor_props.rs"]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(p: &Page<u32>) -> (&[u32], bool, bool) {
        (&p.entries, p.has_previous, p.has_more)
    }

    #[test]
    fn pages_go_forward_backward_and_anywhere_with_the_flags_right() {
        let (mut c, first) = Cursor::open((0..10).collect::<Vec<u32>>(), 4);
        assert_eq!(entries(&first), (&[0, 1, 2, 3][..], false, true));
        assert_eq!(first.total_count, 10);
        assert_eq!(entries(&c.fetch(Direction::Forward, None, None)), (&[4, 5, 6, 7][..], true, true));
        assert_eq!(entries(&c.fetch(Direction::Forward, None, None)), (&[8, 9][..], true, false));
        // Past the end: empty, nothing more.
        let past = c.fetch(Direction::Forward, None, None);
        assert_eq!((entries(&past), past.offset), ((&[][..], true, false), 10));
        assert_eq!(entries(&c.fetch(Direction::Backward, None, None)), (&[6, 7, 8, 9][..], true, false));
        assert_eq!(entries(&c.fetch(Direction::Backward, None, None)), (&[2, 3, 4, 5][..], true, true));
        // Backward from offset 2 with pages of 4: the two before, not a page overlapping.
        assert_eq!(entries(&c.fetch(Direction::Backward, None, None)), (&[0, 1][..], false, true));
        assert_eq!(entries(&c.fetch(Direction::Backward, None, None)), (&[0, 1, 2, 3][..], false, true));
        assert_eq!(entries(&c.fetch(Direction::Forward, Some(5), Some(2))), (&[5, 6][..], true, true));
        assert_eq!(entries(&c.fetch(Direction::Forward, None, None)), (&[7, 8, 9][..], true, false));
        let (mut empty, page) = Cursor::open(Vec::<u32>::new(), 4);
        assert_eq!((entries(&page), page.total_count), ((&[][..], false, false), 0));
        assert!(empty.fetch(Direction::Backward, None, None).entries.is_empty());
    }

    #[test]
    fn handles_expire_close_and_are_capped() {
        let mut cs = Cursors::new(1000, 2);
        let (a, _) = cs.open(vec![1, 2, 3], 1, 0).unwrap();
        let (b, _) = cs.open(vec![4], 1, 0).unwrap();
        assert_ne!(a, b);
        assert_eq!(cs.open(vec![5], 1, 10).unwrap_err(), CursorError::TooMany(2));
        // Use keeps a handle alive; the other expires.
        assert_eq!(cs.fetch(&a, Direction::Forward, None, None, 900).unwrap().entries, [2]);
        assert_eq!(cs.fetch(&a, Direction::Forward, None, None, 1500).unwrap().entries, [3]);
        assert_eq!(cs.fetch(&b, Direction::Forward, None, None, 1500).unwrap_err(), CursorError::Expired(b.clone()));
        cs.close(&a, 1600).unwrap();
        assert_eq!(cs.close(&a, 1600).unwrap_err().to_string(), format!("handle {a}: expired or closed"));
        assert!(cs.is_empty());
    }
}
