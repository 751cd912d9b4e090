//! What the two backends' kernel disk caches share (KC3): where the cache is, what to do when
//! it cannot be used, and its size bound — least-recently-used eviction that is safe with any
//! number of processes sharing the directory. The CUDA backend keeps compiled images there
//! (`cuda/cache.rs`, one `<key>.cfk` per entry), the host backend compiled objects of CUDA C
//! (`host/cuda_c/cache.rs`, `<key>.so` beside `<key>.sum`, under `host/`).
//!
//! # Location
//! `CUEFLOW_KERNEL_CACHE` names the directory (`off`, `0`, `none`, `false` or empty turn the
//! cache off); unset, it is `$XDG_CACHE_HOME/cueflow/kernels`, else `~/.cache/cueflow/kernels`.
//!
//! # A cache that cannot be used is no cache
//! The cache is an optimisation: a location that is a file, lies under a file, or cannot be
//! written (permissions, a read-only file system) turns it off for the process, with one
//! warning line on standard error naming the location and why, and every kernel compiles as
//! without a cache ([`usable`]). Nothing else changes: no compilation fails because of it.
//!
//! # The bound
//! `CUEFLOW_KERNEL_CACHE_MAX_BYTES` bounds the bytes of a cache directory's entries: a plain
//! number of bytes, or one with a binary suffix (`512K`, `256M`, `2G`; `KiB`, `MiB`, `GiB` too);
//! `unlimited` turns eviction off. Unset or bad (which warns): 256 MiB (a compiled kernel is
//! typically 5 KiB to 1 MiB, so that is hundreds to thousands of kernels).
//! Each backend's directory is bounded on its own.
//!
//! # Recency
//! An entry's modification time is its last use: a store writes it, a load that finds the entry
//! valid sets it to now ([`touch`]). No index file is kept, so nothing can get out of step with
//! the entries and there is no lock to take: every process reads the same directory.
//!
//! # Eviction
//! After each store, the process lists the directory; when the entries' bytes exceed the bound,
//! it removes entries oldest-first until they fit again ([`evict`]). An entry is every file of
//! one key (`<key>.so` and `<key>.sum` are one entry). The newest entry — normally the one just
//! stored — is never removed, so one entry larger than the bound still works (a cache of one).
//! An entry **in use** is not removed either: a process that runs a host object from the cache
//! holds a shared lock (`flock`) on it for as long as the kernel lives ([`pin`]), because its
//! kernel worker process opens the object by path at its first launch; eviction takes each
//! victim's lock exclusively without waiting and skips the entry when it cannot. The directory
//! may then stay above the bound by what live processes use. Temporary files that a crashed
//! writer left behind (older than an hour) are removed on the way; younger ones belong to
//! writers still at work and are left alone.
//!
//! # Keys and checksums
//! Both caches key their entries with [`KeyHasher`] and check their payloads with
//! [`checksum`]: one hash (XXH3), stable across processes, builds and platforms.
//!
//! # Concurrent processes
//! Entries are written whole to a temporary name and renamed into place, so an entry is never
//! seen half-written. Eviction only unlinks: a reader that already opened the file keeps reading
//! the whole of it (POSIX unlink semantics); a reader that comes after finds no file and
//! recompiles; a writer's rename after an unlink simply puts a fresh entry back. Every
//! file-system call tolerates a file vanishing under it (another process evicted it first), and
//! a failure to evict leaves the cache larger, never broken. Two processes evicting at once may
//! together remove a little more than needed; that costs a recompilation, not a wrong image.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::config::KernelCache;

/// The bound when `CUEFLOW_KERNEL_CACHE_MAX_BYTES` is unset or bad: 256 MiB.
#[cfg(test)]
pub(crate) const DEFAULT_MAX_BYTES: u64 = crate::config::DEFAULT_KERNEL_CACHE_MAX_BYTES;

/// Temporary files older than this are a crashed writer's and are removed.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// The cache's directory as `CUEFLOW_KERNEL_CACHE` configures it (module docs), or `None` when
/// the cache is off or no default location exists. Whether it can be used is [`usable`]'s.
pub(crate) fn root_from_env() -> Option<PathBuf> {
    match crate::config::kernel_cache() {
        KernelCache::Off => None,
        KernelCache::At(dir) => Some(dir),
        KernelCache::Default => Some(user_cache_dir()?.join("kernels")),
    }
}

/// cueflow's directory among the user's caches, as the XDG base directories have it:
/// `$XDG_CACHE_HOME/cueflow`, else `~/.cache/cueflow`; `None` without either variable.
pub(crate) fn user_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    Some(base.join("cueflow"))
}

/// The hash of every cache key (128-bit XXH3 over the parts fed to it, each after its length,
/// so `("ab", "c")` and `("a", "bc")` differ): the same value in every process, build, Rust
/// version and platform, as a key that names files on disk must be (Cargo.toml says why XXH3).
#[derive(Clone, Default)]
pub(crate) struct KeyHasher(Xxh3);

impl KeyHasher {
    /// Feed `b`, after its length.
    pub fn bytes(&mut self, b: &[u8]) {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
    }

    /// Feed `s`'s bytes, after their length.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes())
    }

    /// Feed `v` (little-endian).
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes())
    }

    /// The key of everything fed so far.
    pub fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

/// The checksum an entry's header keeps of its payload (64-bit XXH3).
pub(crate) fn checksum(b: &[u8]) -> u64 {
    xxh3_64(b)
}

/// True when `dir` can hold cache entries: it exists or can be created, and a file can be
/// written in it. Checked once per directory and process; the first time a directory fails,
/// one warning line says so and the caller goes on without a cache (module docs).
pub(crate) fn usable(dir: &Path) -> bool {
    static SEEN: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock();
    if let Some((_, ok)) = seen.iter().find(|(d, _)| d == dir) {
        return *ok;
    }
    let probe = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".probe.{}.{}.tmp", std::process::id(), nanos()));
        File::create(&tmp)?;
        std::fs::remove_file(&tmp)
    };
    let ok = match probe() {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "cueflow: the kernel cache at {} cannot be used ({e}); kernels are compiled \
                 without it (set CUEFLOW_KERNEL_CACHE to a writable directory, or to off)",
                dir.display()
            );
            false
        }
    };
    seen.push((dir.to_path_buf(), ok));
    ok
}

/// Nanoseconds since the epoch: part of temporary names.
pub(crate) fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// The bound the environment asks for (`None`: unlimited), module docs.
pub(crate) fn max_bytes_from_env() -> Option<u64> {
    crate::config::kernel_cache_max_bytes()
}

/// Mark `path` as used now (its modification time), best effort: a file evicted meanwhile or a
/// read-only cache only loses recency.
pub(crate) fn touch(path: &Path) {
    if let Ok(f) = File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// `flock` on `f` with `op`; true when taken.
fn lock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: flock on a descriptor this function borrows open; no memory is passed.
    unsafe { libc::flock(f.as_raw_fd(), op) == 0 }
}

/// Open the entry file `path` and hold a shared lock on it, so that no eviction removes it
/// while the returned file is open (module docs: an entry in use). `None` when the file is
/// gone, or was replaced or removed while the lock was taken (then it is not the entry the
/// caller checked).
pub(crate) fn pin(path: &Path) -> Option<File> {
    let f = File::open(path).ok()?;
    if !lock(&f, libc::LOCK_SH) {
        return None;
    }
    let (held, now) = (f.metadata().ok()?, std::fs::metadata(path).ok()?);
    (held.ino() == now.ino() && held.dev() == now.dev()).then_some(f)
}

/// One entry as eviction sees it: the files of one key.
#[derive(Default)]
struct Listed {
    /// Its files, the main one (the first extension's) last.
    paths: Vec<PathBuf>,
    bytes: u64,
    used: Option<SystemTime>,
}

/// Bring the entries of `dir` within `max` bytes, least recently used first (module docs).
/// An entry is the files `<key>.<ext>` for the extensions `exts`; the first is its main file,
/// whose modification time is its last use and whose lock marks it in use. Returns the paths
/// removed by this call (another process may have removed others).
pub(crate) fn evict(dir: &Path, max: u64, exts: &[&str]) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut entries: BTreeMap<String, Listed> = BTreeMap::new();
    for e in read.flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        // Metadata of a file that vanished (evicted by another process) is skipped.
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.starts_with('.') && name.ends_with(".tmp") {
            if now
                .duration_since(modified)
                .is_ok_and(|age| age > STALE_TMP)
            {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let Some((stem, ext)) = name.rsplit_once('.') else {
            continue;
        };
        let Some(kind) = exts.iter().position(|x| *x == ext) else {
            continue;
        };
        let entry = entries.entry(stem.to_string()).or_default();
        entry.bytes += meta.len();
        if kind == 0 {
            entry.paths.push(path);
            entry.used = Some(modified);
        } else {
            entry.paths.insert(0, path);
            // A file without its main file dates the entry until the main file is seen.
            entry.used = entry.used.or(Some(modified));
        }
    }
    let mut entries: Vec<Listed> = entries.into_values().collect();
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    if total <= max {
        return Vec::new();
    }
    // Oldest first; ties by name, so that processes agree on the order.
    entries.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.paths.cmp(&b.paths)));
    entries.pop(); // the newest is never removed
    let mut removed = Vec::new();
    for e in entries {
        if total <= max {
            break;
        }
        // The main file's lock, taken without waiting: an entry in use stays (module docs).
        // Held while its files go, so that no process pins it meanwhile.
        let main = e.paths.last().and_then(|p| File::open(p).ok());
        if let Some(f) = &main {
            if !lock(f, libc::LOCK_EX | libc::LOCK_NB) {
                continue;
            }
        }
        for p in e.paths {
            match std::fs::remove_file(&p) {
                Ok(()) => removed.push(p),
                // Another process removed it first: its bytes are gone all the same.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                // Cannot remove (permissions): the cache only stays larger.
                Err(_) => {}
            }
        }
        total = total.saturating_sub(e.bytes);
        drop(main);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Write entry `key` of `bytes` bytes as files of `exts`, used `secs_ago`.
    fn put(d: &Path, key: u32, bytes: usize, exts: &[&str], secs_ago: u64) {
        for x in exts {
            let p = d.join(format!("{key:08x}.{x}"));
            std::fs::write(&p, vec![7u8; bytes / exts.len()]).unwrap();
            let f = File::options().write(true).open(&p).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
                .unwrap();
        }
    }

    fn has(d: &Path, key: u32, ext: &str) -> bool {
        d.join(format!("{key:08x}.{ext}")).exists()
    }

    fn dir_bytes(d: &Path) -> u64 {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }

    /// KC3 with a bound: the least recently *used* entries go first — a touch (a load)
    /// refreshes an entry — the bound holds after eviction, and an entry's files go together.
    /// Keys name files that later processes and other builds read: the hash is XXH3 as its
    /// specification defines it (its published values for empty input), not a hash that may
    /// change with a Rust release; and a part's length is fed, so parts cannot run together.
    #[test]
    fn the_hash_is_the_specified_xxh3_and_separates_parts() {
        assert_eq!(checksum(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(
            KeyHasher::default().finish(),
            0x99AA_06D3_0147_98D8_6001_C324_468D_497F
        );
        let key = |parts: &[&str]| {
            let mut h = KeyHasher::default();
            parts.iter().for_each(|p| h.str(p));
            h.finish()
        };
        assert_ne!(key(&["ab", "c"]), key(&["a", "bc"]));
        assert_eq!(key(&["ab", "c"]), key(&["ab", "c"]));
    }

    #[test]
    fn kc3_eviction_is_least_recently_used_and_takes_whole_entries() {
        let d = tmpdir("lru");
        let exts = ["so", "sum"];
        for (k, age) in [(1, 300), (2, 200), (3, 100)] {
            put(&d, k, 10_000, &exts, age);
        }
        touch(&d.join("00000001.so"));
        put(&d, 4, 10_000, &exts, 0);
        let removed = evict(&d, 35_000, &exts);
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(!has(&d, 2, "so") && !has(&d, 2, "sum"), "key 2 went whole");
        for k in [1, 3, 4] {
            assert!(has(&d, k, "so") && has(&d, k, "sum"), "entry {k} kept");
        }
        assert!(dir_bytes(&d) <= 35_000);
        // Files of other kinds are not entries: never counted, never removed.
        std::fs::write(d.join("notes.txt"), vec![0u8; 100_000]).unwrap();
        assert!(evict(&d, 35_000, &exts).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn kc3_an_entry_over_the_bound_is_kept_alone_and_unlimited_keeps_all() {
        let d = tmpdir("over");
        put(&d, 1, 100, &["cfk"], 60);
        put(&d, 2, 5000, &["cfk"], 0);
        evict(&d, 1000, &["cfk"]);
        assert!(has(&d, 2, "cfk"), "the newest entry stays, however large");
        assert!(!has(&d, 1, "cfk"));
        for k in 3..10 {
            put(&d, k, 5000, &["cfk"], 0);
        }
        assert!(evict(&d, u64::MAX, &["cfk"]).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// An entry pinned by a live user (a kernel worker will open it by path) is skipped;
    /// once unpinned it goes. A pin of a replaced or vanished file is refused.
    #[test]
    fn kc3_pinned_entries_are_not_evicted() {
        let d = tmpdir("pin");
        let exts = ["so", "sum"];
        put(&d, 1, 10_000, &exts, 300);
        put(&d, 2, 10_000, &exts, 200);
        put(&d, 3, 10_000, &exts, 0);
        let held = pin(&d.join("00000001.so")).expect("pinned");
        evict(&d, 10_000, &exts);
        assert!(
            has(&d, 1, "so") && has(&d, 1, "sum"),
            "the pinned entry stays"
        );
        assert!(!has(&d, 2, "so"), "the unpinned old one goes");
        drop(held);
        evict(&d, 10_000, &exts);
        assert!(!has(&d, 1, "so") && has(&d, 3, "so"));
        assert!(pin(&d.join("00000001.so")).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Stale temporary files of crashed writers are removed; young ones (a writer at work)
    /// and files that vanish during eviction are tolerated.
    #[test]
    fn kc3_eviction_tolerates_vanishing_files_and_cleans_stale_temporaries() {
        let d = tmpdir("tmp");
        let stale = d.join(".0001.123.456.tmp");
        let young = d.join(".0002.123.789.tmp");
        std::fs::write(&stale, b"half an entry").unwrap();
        std::fs::write(&young, b"being written").unwrap();
        let f = File::options().write(true).open(&stale).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
        put(&d, 1, 10, &["cfk"], 0);
        evict(&d, 1, &["cfk"]);
        assert!(!stale.exists() && young.exists());
        // Evicting a directory whose files another process already removed, or one that is
        // gone altogether, is no error.
        assert!(evict(&d.join("missing"), 0, &["cfk"]).is_empty());
        let _ = std::fs::remove_dir_all(&d);
        assert!(evict(&d, 0, &["cfk"]).is_empty());
    }

    /// A location that is a file, or lies under one, is not usable (and says so once); a
    /// fresh directory is created and usable.
    #[test]
    fn kc3_unusable_locations_are_refused() {
        let d = tmpdir("usable");
        let file = d.join("a-file");
        std::fs::write(&file, b"not a directory").unwrap();
        assert!(!usable(&file));
        assert!(!usable(&file.join("host")));
        assert!(!usable(&file), "the answer is kept");
        assert!(usable(&d.join("fresh").join("host")));
        assert!(d.join("fresh").join("host").is_dir());
        let _ = std::fs::remove_dir_all(&d);
    }
}
