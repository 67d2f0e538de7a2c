//! Model-based test of [`Cursors`]: random sequences of open, fetch (forward, backward, at an
//! offset, with a limit), close and the passing of time, applied to the real store and to a
//! plain model of what each handle has read, compared after every step.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const TTL_MS: u64 = 1000;
const CAP: usize = 3;

/// What a handle is: its list, page size, the last page read (offset, length) and when it
/// expires.
#[derive(Debug, Clone)]
struct ModelCursor {
    items: Vec<u32>,
    page_size: usize,
    offset: usize,
    len: usize,
    expires: u64,
}

impl ModelCursor {
    /// The page of `limit` entries from `start`, as the docs of `fetch` describe it.
    fn read(&mut self, start: usize, limit: usize) -> Page<u32> {
        let entries: Vec<u32> = self.items.iter().skip(start).take(limit).copied().collect();
        let start = start.min(self.items.len());
        self.offset = start;
        self.len = entries.len();
        Page {
            offset: start,
            has_more: start + entries.len() < self.items.len(),
            has_previous: start > 0,
            total_count: self.items.len(),
            entries,
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Open {
        len: usize,
        page_size: usize,
    },
    Fetch {
        which: prop::sample::Index,
        direction: Direction,
        offset: Option<usize>,
        limit: Option<usize>,
    },
    Close {
        which: prop::sample::Index,
    },
    /// A handle never given out.
    FetchUnknown,
    Wait {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let direction = prop_oneof![Just(Direction::Forward), Just(Direction::Backward)];
    let size = prop_oneof![4 => 0usize..12, 1 => Just(usize::MAX)];
    prop_oneof![
        2 => (0usize..20, 0usize..6).prop_map(|(len, page_size)| Op::Open { len, page_size }),
        6 => (any::<prop::sample::Index>(), direction, prop::option::weighted(0.2, size.clone()), prop::option::of(size))
            .prop_map(|(which, direction, offset, limit)| Op::Fetch { which, direction, offset, limit }),
        1 => any::<prop::sample::Index>().prop_map(|which| Op::Close { which }),
        1 => Just(Op::FetchUnknown),
        2 => prop_oneof![0u64..400, Just(TTL_MS - 1), Just(TTL_MS)].prop_map(|ms| Op::Wait { ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn cursors_behave_as_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let mut real: Cursors<u32> = Cursors::new(TTL_MS, CAP);
        let mut model: BTreeMap<String, ModelCursor> = BTreeMap::new();
        // Every handle ever given out, closed and expired ones too.
        let mut handles: Vec<String> = Vec::new();
        let mut now = 0u64;
        let mut base = 0u32;
        for op in ops {
            model.retain(|_, c| c.expires > now);
            match op {
                Op::Open { len, page_size } => {
                    let items: Vec<u32> = (base..base + len as u32).collect();
                    base += 100;
                    let got = real.open(items.clone(), page_size, now);
                    if model.len() >= CAP {
                        prop_assert_eq!(got.unwrap_err(), CursorError::TooMany(CAP));
                        continue;
                    }
                    let (handle, page) = got.expect("under the cap");
                    prop_assert!(!handles.contains(&handle), "handle {} given twice", handle);
                    let page_size = page_size.max(1);
                    let mut c = ModelCursor { items, page_size, offset: 0, len: 0, expires: now + TTL_MS };
                    prop_assert_eq!(page, c.read(0, page_size));
                    model.insert(handle.clone(), c);
                    handles.push(handle);
                }
                Op::Fetch { which, direction, offset, limit } => {
                    if handles.is_empty() {
                        continue;
                    }
                    let handle = which.get(&handles).clone();
                    let got = real.fetch(&handle, direction, offset, limit, now);
                    let Some(c) = model.get_mut(&handle) else {
                        prop_assert_eq!(got.unwrap_err(), CursorError::Expired(handle));
                        continue;
                    };
                    c.expires = now + TTL_MS;
                    let limit = limit.unwrap_or(c.page_size).max(1);
                    let want = match (offset, direction) {
                        (Some(o), _) => c.read(o, limit),
                        (None, Direction::Forward) => c.read(c.offset + c.len, limit),
                        // The page before the last one: it ends where that one began.
                        (None, Direction::Backward) if c.offset > 0 => {
                            let start = c.offset.saturating_sub(limit);
                            let end = c.offset;
                            c.read(start, end - start)
                        }
                        (None, Direction::Backward) => c.read(0, limit),
                    };
                    prop_assert_eq!(got.expect("open"), want);
                }
                Op::Close { which } => {
                    if handles.is_empty() {
                        continue;
                    }
                    let handle = which.get(&handles).clone();
                    let got = real.close(&handle, now);
                    match model.remove(&handle) {
                        Some(_) => prop_assert_eq!(got, Ok(())),
                        None => prop_assert_eq!(got, Err(CursorError::Expired(handle))),
                    }
                }
                Op::FetchUnknown => {
                    let got = real.fetch("c0-0", Direction::Forward, None, None, now);
                    prop_assert_eq!(got.unwrap_err(), CursorError::Expired("c0-0".into()));
                }
                Op::Wait { ms } => {
                    now += ms;
                    continue;
                }
            }
            prop_assert_eq!(real.len(), model.len());
        }
    }

    /// Forward pages from the first one read the whole list once, in order; backward pages
    /// from the end read it again, in reverse page order.
    #[test]
    fn paging_forward_then_back_reads_every_entry_once(len in 0usize..50, page_size in 1usize..8) {
        let items: Vec<u32> = (0..len as u32).collect();
        let (mut c, first) = Cursor::open(items.clone(), page_size);
        let mut read = first.entries;
        let mut more = first.has_more;
        while more {
            let page = c.fetch(Direction::Forward, None, None);
            prop_assert!(!page.entries.is_empty());
            read.extend(page.entries);
            more = page.has_more;
        }
        prop_assert_eq!(&read, &items);
        let mut back: Vec<u32> = Vec::new();
        let mut previous = c.fetch(Direction::Forward, Some(len.saturating_sub(page_size)), None);
        back.splice(0..0, previous.entries.clone());
        while previous.has_previous {
            previous = c.fetch(Direction::Backward, None, None);
            back.splice(0..0, previous.entries.clone());
        }
        prop_assert_eq!(back, items);
    }
}

#[test]
fn a_limit_or_offset_of_usize_max_is_an_empty_or_short_page_not_an_overflow() {
    let (mut c, _) = Cursor::open(vec![1, 2, 3], 2);
    let page = c.fetch(Direction::Forward, Some(1), Some(usize::MAX));
    assert_eq!((page.entries, page.has_more, page.has_previous), (vec![2, 3], false, true));
    let page = c.fetch(Direction::Forward, Some(usize::MAX), Some(usize::MAX));
    assert_eq!((page.offset, page.entries.len(), page.has_more), (3, 0, false));
    let mut cs = Cursors::new(u64::MAX, 1);
    let (h, _) = cs.open(vec![1], 1, 5).unwrap();
    assert_eq!(cs.fetch(&h, Direction::Backward, None, Some(usize::MAX), u64::MAX - 1).unwrap().entries, [1]);
}
