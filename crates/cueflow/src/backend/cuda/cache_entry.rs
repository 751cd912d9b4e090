//! One entry of the disk cache of compiled kernels (`cache.rs`, KC3): what is stored, and its
//! file format — a header (magic, format version, the full key, the image kind, the payload's
//! length and XXH3-64 checksum) and the payload (the image, the lowered names of its name
//! expressions, and its kernels' parameter sizes). A file that does not decode whole, of this
//! format and of its key, is no entry.

use crate::backend::kernel_cache::checksum;

/// A compiled image, the mangled names of its name expressions, and its kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// A cubin, or NUL-terminated PTX.
    pub image: Vec<u8>,
    /// True for a cubin.
    pub cubin: bool,
    /// (name expression, lowered name).
    pub lowered: Vec<(String, String)>,
    /// (kernel, parameter sizes in bytes) of every kernel, as NVRTC laid them out in its PTX
    /// (`ptx.rs`): what a driver older than CUDA 12.4 cannot report.
    pub kernels: Vec<(String, Vec<usize>)>,
}

const MAGIC: &[u8; 8] = b"CUEFLOWK";
/// 2: the kernels' parameter sizes were added. 3: keys and checksums are XXH3, not FNV-1a.
const VERSION: u32 = 3;
/// magic, version, key, kind, payload length, checksum.
const HEADER: usize = 8 + 4 + 16 + 1 + 8 + 8;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The file's bytes for `e` under `key`.
pub(super) fn encode(key: u128, e: &Entry) -> Vec<u8> {
    let mut payload = Vec::with_capacity(e.image.len() + 64);
    payload.extend_from_slice(&(e.image.len() as u64).to_le_bytes());
    payload.extend_from_slice(&e.image);
    payload.extend_from_slice(&(e.lowered.len() as u32).to_le_bytes());
    for (a, b) in &e.lowered {
        put_str(&mut payload, a);
        put_str(&mut payload, b);
    }
    payload.extend_from_slice(&(e.kernels.len() as u32).to_le_bytes());
    for (name, sizes) in &e.kernels {
        put_str(&mut payload, name);
        payload.extend_from_slice(&(sizes.len() as u32).to_le_bytes());
        for &s in sizes {
            payload.extend_from_slice(&(s as u64).to_le_bytes());
        }
    }
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.push(e.cubin as u8);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Reads a payload front to back; every read fails past the end.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.bytes(n)?.to_vec()).ok()
    }
}

/// The entry in `bytes` if it is whole, of this format and of `key`.
pub(super) fn decode(key: u128, bytes: &[u8]) -> Option<Entry> {
    let mut h = Reader { b: bytes, at: 0 };
    if h.bytes(8)? != MAGIC || h.u32()? != VERSION {
        return None;
    }
    if u128::from_le_bytes(h.bytes(16)?.try_into().ok()?) != key {
        return None;
    }
    let cubin = match h.bytes(1)?[0] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let (len, sum) = (h.u64()? as usize, h.u64()?);
    let payload = &bytes[HEADER..];
    if payload.len() != len || checksum(payload) != sum {
        return None;
    }
    let mut p = Reader { b: payload, at: 0 };
    let n = p.u64()? as usize;
    let image = p.bytes(n)?.to_vec();
    let mut lowered = Vec::new();
    for _ in 0..p.u32()? {
        lowered.push((p.string()?, p.string()?));
    }
    let mut kernels = Vec::new();
    for _ in 0..p.u32()? {
        let name = p.string()?;
        let sizes = (0..p.u32()?)
            .map(|_| p.u64().map(|s| s as usize))
            .collect::<Option<Vec<usize>>>()?;
        kernels.push((name, sizes));
    }
    (p.at == payload.len()).then_some(Entry {
        image,
        cubin,
        lowered,
        kernels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            image: vec![1, 2, 3, 0],
            cubin: false,
            lowered: vec![("k<int>".into(), "_Z1kIiEvv".into())],
            kernels: vec![("_Z1kIiEvv".into(), vec![8, 4]), ("empty".into(), vec![])],
        }
    }

    #[test]
    fn kernels_round_trip_and_every_cut_is_refused() {
        let bytes = encode(5, &entry());
        assert_eq!(decode(5, &bytes), Some(entry()));
        assert_eq!(decode(6, &bytes), None);
        for cut in 0..bytes.len() {
            assert_eq!(decode(5, &bytes[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn an_entry_of_the_first_format_is_no_entry() {
        let mut bytes = encode(5, &entry());
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(decode(5, &bytes), None);
    }
}
