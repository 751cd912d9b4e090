//! The kernel disk cache's size bound (KC3): least-recently-used eviction that is safe with
//! any number of processes sharing the directory.
//!
//! # The bound
//! `CUEFLOW_KERNEL_CACHE_MAX_BYTES` bounds the bytes of the cache's entries (`*.cfk`): a plain
//! number of bytes, or one with a binary suffix (`512K`, `256M`, `2G`; `KiB`, `MiB`, `GiB` too);
//! `unlimited` turns eviction off. Unset or unparseable: [`DEFAULT_MAX_BYTES`] (256 MiB — a
//! compiled kernel is typically 5 KiB to 1 MiB, so that is hundreds to thousands of kernels).
//!
//! # Recency
//! An entry's modification time is its last use: a store writes it, a load that finds the entry
//! valid sets it to now ([`touch`]). No index file is kept, so nothing can get out of step with
//! the entries and there is no lock to take: every process reads the same directory.
//!
//! # Eviction
//! After each store, the process lists the directory; when the entries' bytes exceed the bound,
//! it removes entries oldest-first until they fit again. The newest entry — normally the one
//! just stored — is never removed, so one entry larger than the bound still works (a cache of
//! one). Temporary files that a crashed writer left behind (older than an hour) are removed on
//! the way; younger ones belong to writers still at work and are left alone.
//!
//! # Concurrent processes
//! Entries are written whole to a temporary name and renamed into place (`cache.rs`), so an
//! entry is never seen half-written. Eviction only unlinks: a reader that already opened the
//! file keeps reading the whole of it (POSIX unlink semantics); a reader that comes after finds
//! no file and recompiles; a writer's rename after an unlink simply puts a fresh entry back.
//! Every file-system call tolerates a file vanishing under it (another process evicted it
//! first), and a failure to evict leaves the cache larger, never broken. Two processes evicting
//! at once may together remove a little more than needed; that costs a recompilation, not a
//! wrong image.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The bound when `CUEFLOW_KERNEL_CACHE_MAX_BYTES` is unset or unparseable: 256 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// Temporary files older than this are a crashed writer's and are removed.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// The bound in bytes that `value` (the variable's text) asks for; `None` for `unlimited`.
pub(crate) fn parse_max_bytes(value: Option<&str>) -> Option<u64> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Some(DEFAULT_MAX_BYTES);
    };
    let lower = v.to_ascii_lowercase();
    if ["unlimited", "none", "off"].contains(&lower.as_str()) {
        return None;
    }
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match lower[digits.len()..].trim() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Some(DEFAULT_MAX_BYTES),
    };
    match digits.trim().parse::<u64>() {
        Ok(n) => Some(n.saturating_mul(unit)),
        Err(_) => Some(DEFAULT_MAX_BYTES),
    }
}

/// The bound the environment asks for (`None`: unlimited).
pub(crate) fn max_bytes_from_env() -> Option<u64> {
    let v = std::env::var("CUEFLOW_KERNEL_CACHE_MAX_BYTES").ok();
    parse_max_bytes(v.as_deref())
}

/// Mark `path` as used now (its modification time), best effort: a file evicted meanwhile or a
/// read-only cache only loses recency.
pub(crate) fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// One entry as eviction sees it.
struct Listed {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

/// Bring the entries of `dir` within `max` bytes, least recently used first (module docs).
/// Returns the paths removed (by this call; another process may have removed others).
pub(crate) fn evict(dir: &Path, max: u64) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut entries = Vec::new();
    for e in read.flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        // Metadata of a file that vanished (evicted by another process) is skipped.
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.starts_with('.') && name.ends_with(".tmp") {
            if now.duration_since(used).is_ok_and(|age| age > STALE_TMP) {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if name.ends_with(".cfk") {
            entries.push(Listed {
                path,
                bytes: meta.len(),
                used,
            });
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    if total <= max {
        return Vec::new();
    }
    // Oldest first; ties by name, so that processes agree on the order.
    entries.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.path.cmp(&b.path)));
    let newest = entries.pop(); // never removed
    let mut removed = Vec::new();
    for e in entries {
        if total <= max {
            break;
        }
        match std::fs::remove_file(&e.path) {
            Ok(()) => removed.push(e.path),
            // Another process removed it first: its bytes are gone all the same.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            // Cannot remove (permissions): leave it; the cache only stays larger.
            Err(_) => continue,
        }
        total = total.saturating_sub(e.bytes);
    }
    drop(newest);
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::cache::{DiskCache, Entry};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cueflow-evict-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn entry(bytes: usize) -> Entry {
        Entry {
            image: vec![7; bytes],
            cubin: true,
            lowered: Vec::new(),
        }
    }

    fn set_age(c: &DiskCache, key: u128, secs_ago: u64) {
        let f = std::fs::File::options()
            .write(true)
            .open(c.path_of(key))
            .unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
            .unwrap();
    }

    #[test]
    fn max_bytes_parses_units_and_falls_back_to_the_default() {
        assert_eq!(parse_max_bytes(None), Some(DEFAULT_MAX_BYTES));
        assert_eq!(parse_max_bytes(Some("")), Some(DEFAULT_MAX_BYTES));
        assert_eq!(parse_max_bytes(Some("1000")), Some(1000));
        assert_eq!(parse_max_bytes(Some("512K")), Some(512 << 10));
        assert_eq!(parse_max_bytes(Some(" 256 MiB ")), Some(256 << 20));
        assert_eq!(parse_max_bytes(Some("2g")), Some(2 << 30));
        assert_eq!(parse_max_bytes(Some("unlimited")), None);
        assert_eq!(parse_max_bytes(Some("12 parsecs")), Some(DEFAULT_MAX_BYTES));
        assert_eq!(parse_max_bytes(Some("-5")), Some(DEFAULT_MAX_BYTES));
    }

    /// KC3 with a bound: the least recently *used* entries go first — a load refreshes an
    /// entry — and the bound holds after every store.
    #[test]
    fn kc3_eviction_is_least_recently_used() {
        let d = tmpdir("lru");
        let entry_bytes = entry(10_000);
        // Room for three entries of ~10 KB, not four.
        let c = DiskCache::at(d.clone()).with_max_bytes(Some(35_000));
        for k in 1..=3u128 {
            c.store(k, &entry_bytes).unwrap();
        }
        set_age(&c, 1, 300);
        set_age(&c, 2, 200);
        set_age(&c, 3, 100);
        // Key 1 is the oldest written, but a load makes it the most recently used.
        assert!(c.load(1).is_some());
        c.store(4, &entry_bytes).unwrap();
        assert!(
            c.load(2).is_none(),
            "the least recently used entry was evicted"
        );
        for k in [1, 3, 4] {
            assert!(c.load(k).is_some(), "entry {k} kept");
        }
        let total: u64 = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        assert!(total <= 35_000, "{total} bytes over the bound");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn kc3_an_entry_over_the_bound_is_kept_alone_and_unlimited_keeps_all() {
        let d = tmpdir("over");
        let c = DiskCache::at(d.clone()).with_max_bytes(Some(1000));
        c.store(1, &entry(100)).unwrap();
        set_age(&c, 1, 60);
        c.store(2, &entry(5000)).unwrap();
        assert!(c.load(2).is_some(), "the newest entry stays, however large");
        assert!(c.load(1).is_none());
        let u = DiskCache::at(d.clone()).with_max_bytes(None);
        for k in 3..10 {
            u.store(k, &entry(5000)).unwrap();
        }
        assert!((2..10).all(|k| u.load(k).is_some()));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Stale temporary files of crashed writers are removed; young ones (a writer at work)
    /// and files that vanish during eviction are tolerated.
    #[test]
    fn kc3_eviction_tolerates_vanishing_files_and_cleans_stale_temporaries() {
        let d = tmpdir("tmp");
        let c = DiskCache::at(d.clone()).with_max_bytes(Some(1));
        let stale = d.join(".0001.123.456.tmp");
        let young = d.join(".0002.123.789.tmp");
        std::fs::write(&stale, b"half an entry").unwrap();
        std::fs::write(&young, b"being written").unwrap();
        let f = std::fs::File::options().write(true).open(&stale).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
        c.store(1, &entry(10)).unwrap();
        assert!(!stale.exists() && young.exists());
        // Evicting a directory whose files another process already removed, or one that is
        // gone altogether, is no error.
        assert!(evict(&d.join("missing"), 0).is_empty());
        let _ = std::fs::remove_dir_all(&d);
        assert!(evict(&d, 0).is_empty());
    }

    /// Several processes (threads here, each with its own cache handle) storing, loading and
    /// evicting in one directory: every load sees a whole entry or none, and the directory
    /// ends within the bound plus the one entry each writer may keep.
    #[test]
    fn kc3_concurrent_stores_and_evictions_never_expose_a_broken_entry() {
        let d = tmpdir("race");
        let max = 60_000u64;
        std::thread::scope(|s| {
            for t in 0..6u128 {
                let c = DiskCache::at(d.clone()).with_max_bytes(Some(max));
                s.spawn(move || {
                    for i in 0..30u128 {
                        let k = t * 1000 + i % 10;
                        let mut e = entry(8000);
                        e.image = vec![(k % 251) as u8; 8000];
                        c.store(k, &e).unwrap();
                        if let Some(got) = c.load(k) {
                            assert_eq!(got.image, e.image, "a whole entry of its own key");
                        }
                    }
                });
            }
        });
        let c = DiskCache::at(d.clone()).with_max_bytes(Some(max));
        c.store(99_999, &entry(8000)).unwrap();
        let total: u64 = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        assert!(
            total <= max,
            "{total} bytes after a quiet store, bound {max}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
