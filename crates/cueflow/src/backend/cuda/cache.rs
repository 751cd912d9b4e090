//! The disk cache of compiled kernel images (KC3): a process does not recompile what an
//! earlier process compiled.
//!
//! # The key
//! An entry's key is a 128-bit XXH3 hash ([`KeyHasher`], shared with the host backend's cache)
//! of everything the image depends on:
//!
//! 1. the source text, the entry point and name expressions, and every NVRTC option (defines,
//!    include directories, standard, fast math, line info, registers, relocatable code);
//! 2. the **headers the source includes**, found the way NVRTC finds them: `#include`
//!    directives are followed through the headers given as text, the program's include
//!    directories and the toolkit's. A header found in a program directory (or given as text)
//!    is hashed by its content and followed further; a toolkit header by its path, size and
//!    modification time (reading the toolkit's headers on every launch would cost more than
//!    the cache saves, and they change only when the toolkit is reinstalled, which changes
//!    those too); a header found nowhere is hashed as absent, so that creating it later
//!    changes the key. A computed include (`#include MACRO`) cannot be followed: then the
//!    content of *every* file under the program's include directories is hashed instead
//!    (bounded; past the bound the kernel is not cached at all);
//! 3. the architecture option, the NVRTC version and the driver version.
//!
//! This is where CuPy goes stale: its key (`~/.cupy/kernel_cache`) is the source, the options
//! and the CUDA version, so editing a header that a kernel includes keeps loading the old
//! image until the cache is cleared by hand. Preprocessing the source to learn its headers
//! would be exact but costs a compiler run per key; hashing whole include directories on
//! every lookup costs a directory walk per launch. Following the includes costs a few file
//! reads of the program's own headers, and it is exact for every literal include.
//!
//! # The entries
//! One file per key, `<32 hex digits>.cfk`, under `CUEFLOW_KERNEL_CACHE` (default
//! `$XDG_CACHE_HOME/cueflow/kernels`, else `~/.cache/cueflow/kernels`; `off`, `0` or `none`
//! turn the cache off). A file holds a header (magic, format version, the full key, the image
//! kind, the payload's length and XXH3-64 checksum) and the payload (the image, the
//! lowered names of its name expressions and its kernels' parameter sizes: `cache_entry.rs`).
//! It is written to a temporary file in the same directory and renamed into place, so a
//! reader sees a whole entry or none; a file whose magic, version, key, length or checksum
//! does not match is never loaded — the kernel is recompiled and the entry rewritten. The directory is bounded by
//! `CUEFLOW_KERNEL_CACHE_MAX_BYTES` (default 256 MiB), least recently used entries evicted
//! first, safely with other processes at work in it, and a location that cannot be used turns
//! the cache off with one warning (`backend/kernel_cache.rs`, shared with the host backend).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(crate) use super::cache_entry::Entry;
use super::cache_entry::{decode, encode};
use crate::backend::kernel_cache as shared;
pub(crate) use crate::backend::kernel_cache::KeyHasher;

/// What an image depends on besides its headers.
pub(crate) struct KeyParts<'a> {
    pub source: &'a str,
    /// Entry point and name expressions.
    pub names: &'a [String],
    /// NVRTC arguments, architecture and toolkit include directories included.
    pub args: &'a [String],
    /// Headers given as text: (name, content).
    pub headers: &'a [(String, String)],
    /// The program's include directories (content-hashed).
    pub user_dirs: &'a [PathBuf],
    /// The toolkit's include directories (hashed by metadata).
    pub toolkit_dirs: &'a [PathBuf],
    /// NVRTC's version.
    pub nvrtc: (i32, i32),
    /// The driver's version (`cuDriverGetVersion`).
    pub driver: i32,
}

/// Past these, a computed include makes the kernel uncacheable rather than slow.
const MAX_DIR_FILES: usize = 4096;
const MAX_DIR_BYTES: u64 = 64 << 20;
/// Headers followed at most.
const MAX_HEADERS: usize = 4096;

/// The key of an image, or `None` when it cannot be keyed safely (a computed include over
/// include directories too large to hash).
pub(crate) fn key(p: &KeyParts<'_>) -> Option<u128> {
    let mut h = KeyHasher::default();
    h.str("cueflow kernel cache key v2");
    h.str(p.source);
    h.u64(p.names.len() as u64);
    p.names.iter().for_each(|n| h.str(n));
    h.u64(p.args.len() as u64);
    p.args.iter().for_each(|a| h.str(a));
    h.u64(p.headers.len() as u64);
    for (name, content) in p.headers {
        h.str(name);
        h.str(content);
    }
    h.u64(p.nvrtc.0 as u64);
    h.u64(p.nvrtc.1 as u64);
    h.u64(p.driver as u64);
    let mut walk = Walk {
        p,
        h: &mut h,
        seen: HashSet::new(),
        computed: false,
    };
    walk.text(p.source, None);
    if walk.computed {
        hash_dirs(&mut h, p.user_dirs)?;
    }
    Some(h.finish())
}

/// Following `#include` directives from the source.
struct Walk<'a, 'h> {
    p: &'a KeyParts<'a>,
    h: &'h mut KeyHasher,
    seen: HashSet<String>,
    computed: bool,
}

/// The included name of an `#include` line: `Some(Some((name, quoted)))` for a literal one,
/// `Some(None)` for a computed one, `None` for any other line.
pub(crate) fn include_of(line: &str) -> Option<Option<(&str, bool)>> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix("include")?.trim_start();
    let (close, quoted) = match rest.chars().next() {
        Some('"') => ('"', true),
        Some('<') => ('>', false),
        _ => return Some(None),
    };
    let body = &rest[1..];
    Some(body.find(close).map(|end| (&body[..end], quoted)))
}

impl Walk<'_, '_> {
    /// Follow the includes of `text`, a file in `dir` (`None`: the source or a text header).
    fn text(&mut self, text: &str, dir: Option<&Path>) {
        for line in text.lines() {
            match include_of(line) {
                None => {}
                Some(None) => self.computed = true,
                Some(Some((name, quoted))) => self.include(name, quoted, dir),
            }
        }
    }

    fn include(&mut self, name: &str, quoted: bool, dir: Option<&Path>) {
        if self.seen.len() >= MAX_HEADERS {
            self.computed = true;
            return;
        }
        let p = self.p;
        if let Some((n, content)) = p.headers.iter().find(|(n, _)| n == name) {
            if self.seen.insert(format!("text:{n}")) {
                self.text(content, None);
            }
            return;
        }
        let local = dir.filter(|_| quoted).map(|d| d.join(name));
        let user = local
            .into_iter()
            .chain(p.user_dirs.iter().map(|d| d.join(name)))
            .find(|f| f.is_file());
        if let Some(f) = user {
            if self.seen.insert(f.display().to_string()) {
                let content = std::fs::read(&f).unwrap_or_default();
                self.h.str(&f.display().to_string());
                self.h.bytes(&content);
                let text = String::from_utf8_lossy(&content).into_owned();
                self.text(&text, f.parent());
            }
            return;
        }
        if let Some(f) = p
            .toolkit_dirs
            .iter()
            .map(|d| d.join(name))
            .find(|f| f.is_file())
        {
            if self.seen.insert(f.display().to_string()) {
                self.h.str(&f.display().to_string());
                metadata(self.h, &f);
            }
            return;
        }
        if self.seen.insert(format!("missing:{name}")) {
            self.h.str("missing");
            self.h.str(name);
        }
    }
}

fn metadata(h: &mut KeyHasher, f: &Path) {
    if let Ok(m) = std::fs::metadata(f) {
        h.u64(m.len());
        if let Ok(t) = m.modified() {
            let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            h.u64(d.as_secs());
            h.u64(d.subsec_nanos() as u64);
        }
    }
}

/// Hash every file under `dirs` by content, in a fixed order; `None` past the bounds.
fn hash_dirs(h: &mut KeyHasher, dirs: &[PathBuf]) -> Option<()> {
    let (mut files, mut bytes) = (0usize, 0u64);
    for d in dirs {
        let mut stack = vec![d.clone()];
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            for e in entries {
                if e.is_dir() {
                    stack.push(e);
                } else if e.is_file() {
                    let content = std::fs::read(&e).ok()?;
                    files += 1;
                    bytes += content.len() as u64;
                    if files > MAX_DIR_FILES || bytes > MAX_DIR_BYTES {
                        return None;
                    }
                    h.str(&e.display().to_string());
                    h.bytes(&content);
                }
            }
        }
    }
    Some(())
}

/// A cache directory.
#[derive(Clone, Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// The size bound (`None`: unlimited), `kernel_cache.rs`.
    max_bytes: Option<u64>,
}

impl DiskCache {
    /// The cache `CUEFLOW_KERNEL_CACHE` configures, or `None` when it is off or its location
    /// cannot be used (said once, `kernel_cache.rs`).
    pub fn from_env() -> Option<DiskCache> {
        let dir = shared::root_from_env()?;
        shared::usable(&dir).then(|| DiskCache {
            dir,
            max_bytes: shared::max_bytes_from_env(),
        })
    }

    /// A cache in `dir` with the default bound (tests).
    #[cfg(test)]
    pub fn at(dir: PathBuf) -> DiskCache {
        DiskCache {
            dir,
            max_bytes: Some(shared::DEFAULT_MAX_BYTES),
        }
    }

    /// The same cache with another size bound (tests).
    #[cfg(test)]
    pub fn with_max_bytes(mut self, max: Option<u64>) -> DiskCache {
        self.max_bytes = max;
        self
    }

    fn path(&self, key: u128) -> PathBuf {
        self.dir.join(format!("{key:032x}.cfk"))
    }

    /// The entry of `key`, if one is stored whole and valid; a valid entry is marked as used
    /// now (its recency for eviction).
    pub fn load(&self, key: u128) -> Option<Entry> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        let e = decode(key, &bytes)?;
        shared::touch(&path);
        Some(e)
    }

    /// Store `e` under `key`: written to a temporary file, then renamed into place.
    pub fn store(&self, key: u128, e: &Entry) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(
            ".{key:032x}.{}.{}.tmp",
            std::process::id(),
            shared::nanos()
        ));
        let r = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode(key, e))?;
            f.flush()?;
            std::fs::rename(&tmp, self.path(key))
        })();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        if let (Ok(()), Some(max)) = (&r, self.max_bytes) {
            shared::evict(&self.dir, max, &["cfk"]);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cueflow-cache-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn parts<'a>(
        source: &'a str,
        args: &'a [String],
        headers: &'a [(String, String)],
        user: &'a [PathBuf],
        toolkit: &'a [PathBuf],
    ) -> KeyParts<'a> {
        KeyParts {
            source,
            names: &[],
            args,
            headers,
            user_dirs: user,
            toolkit_dirs: toolkit,
            nvrtc: (13, 0),
            driver: 13000,
        }
    }

    #[test]
    fn include_lines_parse() {
        assert_eq!(include_of("#include \"a.h\""), Some(Some(("a.h", true))));
        assert_eq!(
            include_of("  #  include <cuda/std/atomic>"),
            Some(Some(("cuda/std/atomic", false)))
        );
        assert_eq!(include_of("#include HEADER"), Some(None));
        assert_eq!(include_of("#define X 1"), None);
        assert_eq!(include_of("int x; // #include \"no.h\""), None);
    }

    #[test]
    fn key_covers_source_options_versions_and_arch() {
        let args = vec!["--gpu-architecture=sm_90".to_string()];
        let base = key(&parts("k", &args, &[], &[], &[])).unwrap();
        assert_eq!(
            base,
            key(&parts("k", &args, &[], &[], &[])).unwrap(),
            "deterministic"
        );
        assert_ne!(base, key(&parts("k2", &args, &[], &[], &[])).unwrap());
        let arch = vec!["--gpu-architecture=sm_80".to_string()];
        assert_ne!(base, key(&parts("k", &arch, &[], &[], &[])).unwrap());
        let more = vec![args[0].clone(), "-DN=4".to_string()];
        assert_ne!(base, key(&parts("k", &more, &[], &[], &[])).unwrap());
        let mut p = parts("k", &args, &[], &[], &[]);
        p.nvrtc = (13, 1);
        assert_ne!(base, key(&p).unwrap());
        let mut p = parts("k", &args, &[], &[], &[]);
        p.driver = 13010;
        assert_ne!(base, key(&p).unwrap());
        let names = vec!["scale<float>".to_string()];
        let mut p = parts("k", &args, &[], &[], &[]);
        p.names = &names;
        assert_ne!(base, key(&p).unwrap());
    }

    /// The staleness CuPy has: editing an included header must change the key — for headers
    /// in include directories, headers they include in turn, and headers given as text.
    #[test]
    fn header_edits_change_the_key() {
        let d = tmpdir("headers");
        let sub = d.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(d.join("a.h"), "#include \"sub/b.h\"\n#define A 1\n").unwrap();
        std::fs::write(sub.join("b.h"), "#define B 2\n").unwrap();
        std::fs::write(d.join("unused.h"), "#define U 3\n").unwrap();
        let src = "#include \"a.h\"\n#include <cuda_fp16.h>\n__global__ void k() {}";
        let user = vec![d.clone()];
        let k = || key(&parts(src, &[], &[], &user, &[])).unwrap();
        let k0 = k();
        std::fs::write(sub.join("b.h"), "#define B 3\n").unwrap();
        let k1 = k();
        assert_ne!(k0, k1, "an edit two includes deep changes the key");
        std::fs::write(d.join("unused.h"), "#define U 4\n").unwrap();
        assert_eq!(k1, k(), "a header the source does not include does not");
        // A missing header that appears later changes the key too.
        std::fs::write(
            d.join("cuda_fp16.h"),
            "// a local one shadows the toolkit's\n",
        )
        .unwrap();
        assert_ne!(k1, k());
        // Headers given as text.
        let h1 = vec![("t.h".to_string(), "#define T 1".to_string())];
        let h2 = vec![("t.h".to_string(), "#define T 2".to_string())];
        let src = "#include \"t.h\"";
        assert_ne!(
            key(&parts(src, &[], &h1, &[], &[])),
            key(&parts(src, &[], &h2, &[], &[]))
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn computed_includes_hash_the_whole_directory() {
        let d = tmpdir("computed");
        std::fs::write(d.join("x.h"), "1").unwrap();
        let src = "#define H \"x.h\"\n#include H\n";
        let user = vec![d.clone()];
        let k0 = key(&parts(src, &[], &[], &user, &[])).unwrap();
        std::fs::write(d.join("y.h"), "2").unwrap();
        assert_ne!(k0, key(&parts(src, &[], &[], &user, &[])).unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn toolkit_headers_are_keyed_by_metadata() {
        let tk = tmpdir("toolkit");
        std::fs::write(tk.join("cuda_fp16.h"), "v1").unwrap();
        let toolkit = vec![tk.clone()];
        let src = "#include <cuda_fp16.h>";
        let k0 = key(&parts(src, &[], &[], &[], &toolkit)).unwrap();
        std::fs::write(tk.join("cuda_fp16.h"), "version 2").unwrap(); // another size
        assert_ne!(k0, key(&parts(src, &[], &[], &[], &toolkit)).unwrap());
        let _ = std::fs::remove_dir_all(&tk);
    }

    fn entry() -> Entry {
        Entry {
            image: (0..=255u8).cycle().take(10_000).collect(),
            cubin: true,
            lowered: vec![("scale<float>".into(), "_Z5scaleIfEvPT_S0_".into())],
            kernels: vec![("_Z5scaleIfEvPT_S0_".into(), vec![8, 4])],
        }
    }

    #[test]
    fn entries_round_trip_and_are_written_atomically() {
        let d = tmpdir("roundtrip");
        let c = DiskCache::at(d.clone());
        assert_eq!(c.load(7), None);
        c.store(7, &entry()).unwrap();
        assert_eq!(c.load(7), Some(entry()));
        // Another key is another file; no temporary file is left behind.
        assert_eq!(c.load(8), None);
        let names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![format!("{:032x}.cfk", 7u128)]);
        // Overwriting replaces the whole entry.
        let mut e2 = entry();
        e2.image.truncate(10);
        c.store(7, &e2).unwrap();
        assert_eq!(c.load(7), Some(e2));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn corrupt_truncated_or_foreign_entries_are_never_loaded() {
        let d = tmpdir("corrupt");
        let c = DiskCache::at(d.clone());
        c.store(1, &entry()).unwrap();
        let path = d.join(format!("{:032x}.cfk", 1u128));
        let good = std::fs::read(&path).unwrap();
        // A flipped byte in the image: the checksum catches it.
        let mut bad = good.clone();
        let last = bad.len() - 100;
        bad[last] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(c.load(1), None);
        // Truncated (a crash mid-write without the rename would never show, but a disk may).
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert_eq!(c.load(1), None);
        // Empty, garbage, another format version.
        std::fs::write(&path, b"").unwrap();
        assert_eq!(c.load(1), None);
        std::fs::write(
            &path,
            b"not a cache entry at all, but long enough for a header",
        )
        .unwrap();
        assert_eq!(c.load(1), None);
        let mut other = good.clone();
        other[8] = 99;
        std::fs::write(&path, &other).unwrap();
        assert_eq!(c.load(1), None);
        // Another key's entry renamed onto this key's file: the stored key does not match.
        std::fs::write(&path, &good).unwrap();
        std::fs::copy(&path, d.join(format!("{:032x}.cfk", 2u128))).unwrap();
        assert_eq!(c.load(2), None);
        assert_eq!(c.load(1), Some(entry()));
        // A store repairs a corrupt entry.
        std::fs::write(&path, b"junk").unwrap();
        c.store(1, &entry()).unwrap();
        assert_eq!(c.load(1), Some(entry()));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn concurrent_writers_leave_one_whole_entry() {
        let d = tmpdir("concurrent");
        let c = DiskCache::at(d.clone());
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let c = c.clone();
                s.spawn(move || {
                    let mut e = entry();
                    e.image = vec![i; 50_000];
                    for _ in 0..10 {
                        c.store(3, &e).unwrap();
                        let got = c.load(3).expect("a reader always sees a whole entry");
                        assert!(got.image.iter().all(|&b| b == got.image[0]));
                    }
                });
            }
        });
        assert!(c.load(3).is_some());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// KC3 with a bound: several processes (threads here, each with its own handle) storing,
    /// loading and evicting in one directory: every load sees a whole entry of its key or
    /// none, and a quiet store ends within the bound (`kernel_cache.rs` has the LRU rules).
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
                        let mut e = entry();
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
        c.store(99_999, &entry()).unwrap();
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
