//! The disk cache of compiled host objects (KC3 for the host backend's CUDA C path).
//!
//! Location, switch and size bound as the CUDA kernel cache's (`backend/kernel_cache.rs`):
//! `CUEFLOW_KERNEL_CACHE` (a directory, or `off`/`0`/`none` to turn it off), default
//! `$XDG_CACHE_HOME/cueflow/kernels`, else `~/.cache/cueflow/kernels`; host objects live in its
//! `host/` subdirectory. A location that cannot be used turns the cache off with one warning
//! (the prelude's headers then go to a scratch directory too). The directory is bounded by
//! `CUEFLOW_KERNEL_CACHE_MAX_BYTES`, least recently used entries evicted after each store; an
//! object a live kernel uses stays pinned ([`lookup`]: the kernel worker process opens it by
//! path at the kernel's first launch).
//!
//! An entry is `<key>.so` beside `<key>.sum` (magic, the key, the object's length and XXH3-64
//! checksum), each written to a temporary file and renamed into place, the `.sum` last. An
//! object is loaded only when its `.sum` is whole and its bytes match; anything else (a
//! truncated, corrupt or foreign entry) is recompiled and rewritten.
//!
//! The key is a 128-bit XXH3 hash (`kernel_cache::KeyHasher`, shared with the CUDA cache) of: the prelude's text, the compiler's path and version
//! line, the fixed and CPU flags, the source, the entry, every compile option (headers given as
//! text by content), and every file under the program's include directories by path, size and
//! modification time (bounded: past 4096 files the kernel is not cached).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::compiler;
use crate::backend::host::cxx::Compiler;
use crate::backend::kernel_cache::{self as shared, checksum, KeyHasher};
use crate::types::CompileOptions;

/// The `.sum` format: `2` since keys and checksums are XXH3 (1 was FNV-1a).
const MAGIC: &[u8; 8] = b"CFHOSTO2";
const MAX_DIR_FILES: usize = 4096;

/// The key of the object for (`source`, `entry`, `options`) built by `c`, or `None` when the
/// include directories are too large to key.
pub(super) fn key(
    c: &Compiler,
    source: &str,
    entry: &str,
    options: &CompileOptions,
) -> Option<u128> {
    let mut h = KeyHasher::default();
    for (name, text) in compiler::HEADERS {
        h.str(name);
        h.str(text);
    }
    h.str(&c.program.to_string_lossy());
    h.str(&c.version);
    for a in &c.pre_args {
        h.str(a);
    }
    for a in compiler::BASE_ARGS {
        h.str(a);
    }
    for a in compiler::cpu_flags() {
        h.str(&a);
    }
    h.str(source);
    h.str(entry);
    h.str(&format!("{options:?}"));
    let mut files = 0usize;
    for d in &options.include_dirs {
        hash_dir(&mut h, d, &mut files)?;
    }
    Some(h.finish())
}

fn hash_dir(h: &mut KeyHasher, dir: &Path, files: &mut usize) -> Option<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        let m = std::fs::metadata(&p).ok()?;
        if m.is_dir() {
            hash_dir(h, &p, files)?;
        } else {
            *files += 1;
            if *files > MAX_DIR_FILES {
                return None;
            }
            h.str(&p.to_string_lossy());
            h.bytes(&m.len().to_le_bytes());
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            h.bytes(&t.to_le_bytes());
        }
    }
    Some(())
}

/// The cache directory for host objects, or `None` when the cache is off or its location
/// cannot be used (said once).
pub(super) fn dir() -> Option<PathBuf> {
    let dir = shared::root_from_env()?.join("host");
    shared::usable(&dir).then_some(dir)
}

/// The files of one entry, for eviction: the object first (its recency and its pin).
const ENTRY_FILES: &[&str] = &["so", "sum"];

/// Path of the object of `key` in `dir`.
pub(super) fn object_path(dir: &Path, key: u128) -> PathBuf {
    dir.join(format!("{key:032x}.so"))
}

fn sum_path(dir: &Path, key: u128) -> PathBuf {
    dir.join(format!("{key:032x}.sum"))
}

/// An object of the cache, pinned: no eviction removes it while this lives (the kernel
/// worker process opens it by path).
pub(super) struct Cached {
    /// Where the object is.
    pub path: PathBuf,
    /// The open object, holding its shared lock (`kernel_cache::pin`).
    pub pin: File,
}

/// The object of `key` when its entry is whole and valid, pinned and marked as used now.
pub(super) fn lookup(dir: &Path, key: u128) -> Option<Cached> {
    let sum = std::fs::read(sum_path(dir, key)).ok()?;
    if sum.len() != 8 + 16 + 8 + 8 || &sum[..8] != MAGIC {
        return None;
    }
    let k = u128::from_le_bytes(sum[8..24].try_into().ok()?);
    let len = u64::from_le_bytes(sum[24..32].try_into().ok()?);
    let check = u64::from_le_bytes(sum[32..40].try_into().ok()?);
    let path = object_path(dir, key);
    // Pinned first, then checked: the bytes checked are the bytes the path keeps.
    let mut pin = shared::pin(&path)?;
    let mut obj = Vec::new();
    pin.read_to_end(&mut obj).ok()?;
    if k != key || obj.len() as u64 != len || checksum(&obj) != check {
        return None;
    }
    shared::touch(&path);
    Some(Cached { path, pin })
}

fn write_atomic(dir: &Path, name: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{}.{}.tmp", std::process::id(), shared::nanos()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.flush()?;
        std::fs::rename(&tmp, name)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Store the object `obj` (a compiled file) under `key`, then bring the directory within its
/// bound (`kernel_cache.rs`); returns where the object now is. Take it with [`lookup`] to pin
/// it: until then another process's eviction may remove it.
pub(super) fn store(dir: &Path, key: u128, obj: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let bytes = std::fs::read(obj)?;
    let path = object_path(dir, key);
    write_atomic(dir, &path, &bytes)?;
    let mut sum = Vec::with_capacity(40);
    sum.extend_from_slice(MAGIC);
    sum.extend_from_slice(&key.to_le_bytes());
    sum.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    sum.extend_from_slice(&checksum(&bytes).to_le_bytes());
    write_atomic(dir, &sum_path(dir, key), &sum)?;
    if let Some(max) = shared::max_bytes_from_env() {
        shared::evict(dir, max, ENTRY_FILES);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiler() -> Compiler {
        Compiler {
            program: PathBuf::from("/usr/bin/c++"),
            pre_args: Vec::new(),
            version: "c++ 12".into(),
        }
    }

    /// KC3: the key covers source, entry, options, compiler version.
    #[test]
    fn key_covers_source_entry_options_and_compiler() {
        let c = compiler();
        let o = CompileOptions::new();
        let k = key(&c, "src", "k", &o).unwrap();
        assert_eq!(k, key(&c, "src", "k", &o).unwrap());
        assert_ne!(k, key(&c, "src2", "k", &o).unwrap());
        assert_ne!(k, key(&c, "src", "k2", &o).unwrap());
        assert_ne!(k, key(&c, "src", "k", &o.clone().define("A", "1")).unwrap());
        let mut c2 = compiler();
        c2.version = "c++ 13".into();
        assert_ne!(k, key(&c2, "src", "k", &o).unwrap());
    }

    /// KC3: a stored entry is found; a corrupt or truncated one is not.
    #[test]
    fn corrupt_entries_are_never_found() {
        let dir = std::env::temp_dir().join(format!("cueflow-host-cache-{}", std::process::id()));
        let obj = dir.join("in.so");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&obj, b"object bytes").unwrap();
        let path = store(&dir, 7, &obj).unwrap();
        let found = |k| lookup(&dir, k).map(|c| c.path);
        assert_eq!(found(7), Some(path.clone()));
        assert_eq!(found(8), None);
        std::fs::write(&path, b"object bytez").unwrap();
        assert_eq!(found(7), None);
        std::fs::write(&path, b"object").unwrap();
        assert_eq!(found(7), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
