//! A persona's recorded history as storage keeps it (`mindfleet_cognition::history` writes and
//! reads its entries): the rows of entries a persona sends, and the note of the commit that
//! ends each.

use serde::{Deserialize, Serialize};

/// What one persona commit wrote to the journal, as its recorded history notes it after the
/// inputs that led to it (`mindfleet replay` compares what it replays with these rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The delivery finished (or deferred).
    pub seq: u64,
    /// The decision's key in `decisions`; `None`: the delivery was no longer pending, so
    /// nothing was written (a stale finish).
    pub decision: Option<u64>,
    /// The plan's key in `plans`.
    pub plan: Option<u64>,
    /// The reply's key in `outbox`.
    pub outbox: Option<u64>,
    /// The xxh3 of what the commit said (`mindfleet_cognition::history::digest`): checked
    /// even after retention forgot the rows.
    pub digest: u64,
}

impl Committed {
    /// The entry that notes it in a history: [`RecordBatch::COMMITTED`], then its fields as
    /// stored.
    pub fn entry(&self) -> Vec<u8> {
        let mut e = Vec::new();
        self.write_entry(&mut e);
        e
    }

    fn write_entry(&self, out: &mut Vec<u8>) {
        out.push(RecordBatch::COMMITTED);
        crate::stored::encode_to(self, out);
    }

    /// The commit an entry notes, when it is a commit's note (as [`Committed::entry`] writes
    /// it, or as JSON: `{"Committed": {...}}`).
    pub fn of_entry(entry: &[u8]) -> Option<Committed> {
        #[derive(Deserialize)]
        enum Noted {
            Committed(Committed),
        }
        match entry.split_first()? {
            (&RecordBatch::COMMITTED, fields) => crate::stored::decode(fields).ok(),
            (b'{', _) => serde_json::from_slice::<Noted>(entry).ok().map(|Noted::Committed(c)| c),
            _ => None,
        }
    }
}

/// Entries of a persona's recorded history (see `mindfleet_cognition::history`), as stored
/// together in one row of `record`: a byte of flags, the note of the commit that carried them
/// when there is one (its length in 4 bytes, little-endian, then the entry), then the entries
/// framed the same way, compressed (lz4) when more than one. An entry is JSON (its first byte
/// `{`) or binary (its first byte a tag: [`RecordBatch::BINARY`], [`RecordBatch::COMMITTED`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordBatch {
    pub entries: u64,
    /// What is stored: the flags, then the frames (with no note: storage adds it).
    pub stored: Vec<u8>,
}

impl RecordBatch {
    /// The entries are compressed with lz4.
    pub const LZ4: u8 = 1;
    /// The first entry is a `Begin`: a run of the lifecycle starts there.
    pub const BEGINS: u8 = 2;
    /// A commit's note comes first, and is the last entry.
    pub const NOTED: u8 = 4;

    /// An entry's tag: the lifecycle's own entry as stored (bincode).
    pub const BINARY: u8 = 1;
    /// An entry's tag: a commit's note ([`Committed::entry`]).
    pub const COMMITTED: u8 = 2;

    /// Appends to `frames` an entry that `write` writes, framed.
    pub fn frame(frames: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
        let at = frames.len();
        frames.extend_from_slice(&[0; 4]);
        write(frames);
        let len = u32::try_from(frames.len() - at - 4).expect("an entry under 4 GiB");
        frames[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// `entries` packed together (none: an empty batch).
    pub fn pack(entries: &[Vec<u8>]) -> RecordBatch {
        let mut frames = Vec::new();
        for e in entries {
            Self::frame(&mut frames, |f| f.extend_from_slice(e));
        }
        Self::from_frames(&frames, entries.len() as u64)
    }

    /// The `entries` entries of `frames` ([`RecordBatch::frame`]) packed.
    pub fn from_frames(frames: &[u8], entries: u64) -> RecordBatch {
        let mut flags = 0;
        if frames.get(4..).is_some_and(|f| f.starts_with(b"{\"Begin\"")) {
            flags |= Self::BEGINS;
        }
        let mut stored = Vec::new();
        stored.push(0);
        if entries > 1 {
            flags |= Self::LZ4;
            // As `compress_prepend_size`, into this buffer.
            let len = u32::try_from(frames.len()).expect("a batch under 4 GiB");
            stored.extend_from_slice(&len.to_le_bytes());
            let at = stored.len();
            stored.resize(at + lz4_flex::block::get_maximum_output_size(frames.len()), 0);
            let n = lz4_flex::block::compress_into(frames, &mut stored[at..]).expect("room for the worst case");
            stored.truncate(at + n);
        } else {
            stored.extend_from_slice(frames);
        }
        stored[0] = flags;
        RecordBatch { entries, stored }
    }

    /// Writes the row of `stored` noted with commit `note` into `row`: what storage keeps.
    pub fn noted(stored: &[u8], note: &Committed, row: &mut Vec<u8>) {
        let (flags, frames) = stored.split_first().map_or((0, &[][..]), |(f, rest)| (*f, rest));
        row.push(flags | Self::NOTED);
        Self::frame(row, |r| note.write_entry(r));
        row.extend_from_slice(frames);
    }

    /// Whether a stored batch begins a run of the lifecycle (read without unpacking it).
    pub fn begins(stored: &[u8]) -> bool {
        stored.first().is_some_and(|f| f & Self::BEGINS != 0)
    }

    /// The entries of a stored batch, in order (a commit's note last).
    pub fn unpack(stored: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let (flags, mut rest) = match stored.split_first() {
            Some((flags, _)) if flags & !(Self::LZ4 | Self::BEGINS | Self::NOTED) != 0 => {
                return Err(format!("stored in an unknown way ({flags})"));
            }
            Some((flags, rest)) => (*flags, rest),
            None => return Err("empty".into()),
        };
        let mut note = None;
        if flags & Self::NOTED != 0 {
            let (n, after) = unframe(rest).ok_or("its commit's note is cut short")?;
            note = Some(n.to_vec());
            rest = after;
        }
        let body = match flags & Self::LZ4 {
            0 => std::borrow::Cow::Borrowed(rest),
            _ => lz4_flex::block::decompress_size_prepended(rest).map_err(|e| e.to_string())?.into(),
        };
        let mut entries = Vec::new();
        let mut at = &body[..];
        while !at.is_empty() {
            let (e, after) = unframe(at).ok_or_else(|| format!("entry {} is cut short", entries.len()))?;
            entries.push(e.to_vec());
            at = after;
        }
        entries.extend(note);
        Ok(entries)
    }
}

/// The first entry framed in `bytes`, and what follows it.
fn unframe(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_unpacks_to_its_entries_then_its_note_and_refuses_a_cut() {
        let entries = [br#"{"Begin":{}}"#.to_vec(), vec![RecordBatch::BINARY, 0, b'\n', 7], b"{}".to_vec()];
        let note = Committed { seq: 1, decision: Some(2), plan: None, outbox: None, digest: 3 };
        for n in [1, 3] {
            let batch = RecordBatch::pack(&entries[..n]);
            assert!(RecordBatch::begins(&batch.stored));
            assert_eq!(batch.stored[0] & RecordBatch::LZ4 != 0, n > 1);
            assert_eq!(RecordBatch::unpack(&batch.stored).unwrap(), entries[..n]);
            let mut row = Vec::new();
            RecordBatch::noted(&batch.stored, &note, &mut row);
            let back = RecordBatch::unpack(&row).unwrap();
            assert_eq!(back[..n], entries[..n]);
            assert_eq!(back.len(), n + 1);
            assert_eq!(Committed::of_entry(&back[n]), Some(note));
            assert!(RecordBatch::unpack(&row[..row.len() - 1]).is_err(), "cut short");
        }
        // A note alone: a commit with no entry before it.
        let mut row = Vec::new();
        RecordBatch::noted(&RecordBatch::pack(&[]).stored, &note, &mut row);
        assert_eq!(RecordBatch::unpack(&row).unwrap(), [note.entry()]);
        assert!(!RecordBatch::begins(&row));
        let e = RecordBatch::unpack(&[16]).unwrap_err();
        assert!(e.contains("unknown way (16)"), "{e}");
        assert_eq!(
            Committed::of_entry(br#"{"Committed":{"seq":1,"decision":2,"plan":null,"outbox":null,"digest":3}}"#),
            Some(note)
        );
        assert_eq!(Committed::of_entry(br#"{"Changed":"Tick"}"#), None);
    }
}
