//! The data dir's disk, and what the writer tells the fleet while it cannot write to it.
//!
//! A write that fails for a reason outside the database (a full disk, an I/O error) leaves
//! redb's handle refusing every later request ("Previous I/O error"), so the writer drops it
//! and opens the file again once the disk may have healed: see [`super::recover`]. Until then
//! [`Health`] says why, for `/health`, the dump and the answers to new events.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::Database;

/// The open database, shared by the writer and the readers of every [`super::Storage`]
/// handle. Empty while the writer reopens it.
#[derive(Clone)]
pub(super) struct DbSlot(Arc<RwLock<Option<Arc<Database>>>>);

impl DbSlot {
    pub(super) fn new(db: Database) -> DbSlot {
        DbSlot(Arc::new(RwLock::new(Some(Arc::new(db)))))
    }

    /// The database, or `None` while it is being reopened.
    pub(super) fn get(&self) -> Option<Arc<Database>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes the database out, so that readers let go of it; the caller drops it once it is
    /// the last holder (redb locks the file for one handle at a time).
    pub(super) fn take(&self) -> Option<Arc<Database>> {
        self.0.write().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(super) fn put(&self, db: Arc<Database>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(db);
    }
}

/// Why the writer cannot write, while it cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What failed, naming the disk and the data dir.
    pub reason: String,
    /// The disk is full (ENOSPC, EDQUOT): new events are refused with 507.
    pub no_space: bool,
}

/// The writer's state as the rest of the fleet sees it. Cloning is cheap.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<Watch>);

#[derive(Debug, Default)]
struct Watch {
    failure: Mutex<Option<Failure>>,
    /// The data dir and the free space the writer needs on its disk (`[storage] min_free_mb`).
    floor: Option<(PathBuf, u64)>,
}

impl Health {
    /// The health of a writer whose data dir `data_dir` needs `min_free_mb` MiB free.
    pub(super) fn watching(data_dir: &Path, min_free_mb: u64) -> Health {
        Health(Arc::new(Watch { failure: Mutex::default(), floor: Some((data_dir.to_path_buf(), min_free_mb)) }))
    }

    /// Why the writer cannot write now, or `None` when it can. A disk with less free space than
    /// the writer needs to resume after a failure counts as full even before a write fails on
    /// it: the writer would write on it until it fails, then wait for that much space.
    pub fn failure(&self) -> Option<Failure> {
        let failed = self.0.failure.lock().unwrap_or_else(|e| e.into_inner()).clone();
        failed.or_else(|| {
            let (dir, need_mb) = self.0.floor.as_ref()?;
            let disk = disk_of(dir).ok()?;
            (disk.free_mb() < *need_mb).then(|| Failure { reason: nearly_full(dir, &disk, *need_mb), no_space: true })
        })
    }

    pub(super) fn set(&self, f: Option<Failure>) {
        *self.0.failure.lock().unwrap_or_else(|e| e.into_inner()) = f;
    }
}

/// How a failed write is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The disk is full: wait for space, reopen, resume.
    NoSpace,
    /// Another I/O error: the same.
    Io,
    /// Not the disk's fault (a record that does not decode, a value too large): the batch's
    /// requests get the error and the writer goes on.
    Other,
}

pub(super) fn kind(e: &redb::Error) -> Kind {
    match e {
        redb::Error::Io(io) if is_no_space(io) => Kind::NoSpace,
        redb::Error::Io(_) | redb::Error::PreviousIo => Kind::Io,
        _ => Kind::Other,
    }
}

fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// The filesystem a directory is on: its free space and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Bytes an unprivileged process may still write.
    pub free_bytes: u64,
    /// Where it is mounted and what it is, as `/proc/self/mountinfo` says ("/data (ext4 /dev/vdb)").
    pub name: String,
}

impl Disk {
    pub fn free_mb(&self) -> u64 {
        self.free_bytes >> 20
    }
}

/// The disk `dir` is on (which must exist).
pub fn disk_of(dir: &Path) -> std::io::Result<Disk> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a NUL-terminated path; statvfs only writes into the zeroed struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let free_bytes = (s.f_bavail as u64).saturating_mul(s.f_frsize as u64);
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let name = mount_of(&abs).unwrap_or_else(|| format!("the disk of {}", abs.display()));
    Ok(Disk { free_bytes, name })
}

/// "MOUNTPOINT (FSTYPE SOURCE)" of the mount holding `abs`: the longest mount point that
/// is a prefix of it.
fn mount_of(abs: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(PathBuf, String)> = None;
    for line in info.lines() {
        // id parent major:minor root mount-point options [optional...] - fstype source super
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(mount), Some(dash)) = (f.get(4), f.iter().position(|x| *x == "-")) else { continue };
        let mount = PathBuf::from(mount.replace("\\040", " "));
        if !abs.starts_with(&mount)
            || best.as_ref().is_some_and(|(b, _)| b.as_os_str().len() >= mount.as_os_str().len())
        {
            continue;
        }
        let fstype = f.get(dash + 1).copied().unwrap_or("?");
        let name = match f.get(dash + 2).copied() {
            Some(source) if source != fstype => format!("{} ({fstype} {source})", mount.display()),
            _ => format!("{} ({fstype})", mount.display()),
        };
        best = Some((mount, name));
    }
    best.map(|(_, n)| n)
}

/// Why the data dir cannot be written, naming its disk, the data dir and the free space.
pub(super) fn describe(data_dir: &Path, error: &redb::Error, kind: Kind) -> String {
    let disk = disk_of(data_dir);
    let on = match &disk {
        Ok(d) => format!("{}, {} MiB free", d.name, d.free_mb()),
        Err(_) => "its disk".to_string(),
    };
    match kind {
        Kind::NoSpace => format!(
            "the disk is full: data dir {} on {on}: {error}; new events are refused until space is freed, \
             then the fleet resumes by itself",
            data_dir.display()
        ),
        _ => format!(
            "storage cannot write: data dir {} on {on}: {error}; retrying, and the fleet resumes by itself \
             once a write succeeds",
            data_dir.display()
        ),
    }
}

/// Why the writer still waits: the disk has less free space than it needs to resume.
pub(super) fn still_full(data_dir: &Path, disk: &Disk, need_mb: u64) -> String {
    format!(
        "the disk is full: data dir {} on {}, {} MiB free, {need_mb} MiB needed to resume ([storage] min_free_mb); \
         new events are refused until space is freed, then the fleet resumes by itself",
        data_dir.display(),
        disk.name,
        disk.free_mb()
    )
}

/// Why the fleet is not healthy although no write failed yet: the disk has less free space than
/// the writer needs to resume after one.
fn nearly_full(data_dir: &Path, disk: &Disk, need_mb: u64) -> String {
    format!(
        "the disk is full: data dir {} on {} has {} MiB free, less than [storage] min_free_mb ({need_mb} MiB); \
         a write may fail at any time, and new events are refused once one does, until space is freed",
        data_dir.display(),
        disk.name,
        disk.free_mb()
    )
}

/// Retries after a failed write: 100 ms, doubling up to 10 s.
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
    at: Instant,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(10);

    pub(super) fn new() -> Backoff {
        Backoff { next: Self::FIRST, at: Instant::now() + Self::FIRST }
    }

    /// How long until the next try.
    pub(super) fn wait(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// A try failed: the next waits twice as long, at most [`Backoff::MAX`].
    pub(super) fn failed(&mut self) {
        self.next = (self.next * 2).min(Self::MAX);
        self.at = Instant::now() + self.next;
    }
}

/// Logs a failure that repeats at most once per interval, with how often it was left out.
#[derive(Debug)]
pub(super) struct RateLimited {
    every: Duration,
    last: Option<Instant>,
    left_out: u64,
}

impl RateLimited {
    pub(super) fn new(every: Duration) -> RateLimited {
        RateLimited { every, last: None, left_out: 0 }
    }

    /// `Some(n)` when this one is to be logged, with the `n` left out since the last.
    pub(super) fn due(&mut self) -> Option<u64> {
        match self.last {
            Some(t) if t.elapsed() < self.every => {
                self.left_out += 1;
                None
            }
            _ => {
                self.last = Some(Instant::now());
                Some(std::mem::take(&mut self.left_out))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_below_min_free_mb_is_unhealthy_before_any_write_fails() {
        let dir = std::env::temp_dir();
        assert_eq!(Health::watching(&dir, 0).failure(), None);
        let f = Health::watching(&dir, u64::MAX >> 21).failure().expect("no disk has that much free");
        assert!(f.no_space && f.reason.contains("disk is full") && f.reason.contains("min_free_mb"), "{}", f.reason);
        // A recorded failure is reported as it is.
        let h = Health::watching(&dir, 0);
        let failed = Failure { reason: "I/O error".into(), no_space: false };
        h.set(Some(failed.clone()));
        assert_eq!(h.failure(), Some(failed));
    }

    #[test]
    fn the_backoff_doubles_up_to_ten_seconds() {
        let mut b = Backoff::new();
        assert!(b.wait() <= Duration::from_millis(100));
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            b.failed();
            assert!(b.next >= last && b.next <= Backoff::MAX, "{:?}", b.next);
            last = b.next;
        }
        assert_eq!(last, Backoff::MAX);
    }

    #[test]
    fn a_repeated_failure_is_logged_once_per_interval_with_the_count_left_out() {
        let mut r = RateLimited::new(Duration::from_secs(3600));
        assert_eq!(r.due(), Some(0));
        assert_eq!(r.due(), None);
        assert_eq!(r.due(), None);
        r.last = Some(Instant::now() - Duration::from_secs(3601));
        assert_eq!(r.due(), Some(2));
    }

    #[test]
    fn a_full_disk_is_told_from_other_io_errors() {
        let full = redb::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(kind(&full), Kind::NoSpace);
        assert_eq!(kind(&redb::Error::Io(std::io::Error::from_raw_os_error(libc::EIO))), Kind::Io);
        assert_eq!(kind(&redb::Error::PreviousIo), Kind::Io);
        assert_eq!(kind(&redb::Error::Corrupted("x".into())), Kind::Other);
    }

    #[test]
    fn the_disk_of_a_dir_is_named_by_its_mount() {
        let d = disk_of(Path::new("/")).unwrap();
        assert!(d.name.starts_with("/ ("), "{}", d.name);
    }
}
