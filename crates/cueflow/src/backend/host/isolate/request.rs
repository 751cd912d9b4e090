//! Writing launch records into a slot's request area (W3, R5; `worker.cpp`'s `run_record`
//! reads them): each record is the [`Layout`] of one [`Call`], 64-aligned after the previous.

use super::ring::Layout;
use super::worker::Call;

/// Magic word that opens a launch record.
const MAGIC: u32 = 0x6b63_6663;

/// Where one call's record lies: its layout, for its path, symbol, parameters and read-only
/// ranges.
fn layout(c: &Call<'_>) -> Layout {
    Layout::new(
        c.so_path.as_os_str().len(),
        c.symbol.len(),
        c.params.len(),
        padded(c),
        c.read_only.len(),
    )
}

/// The parameters' bytes, each padded to 16.
fn padded(c: &Call<'_>) -> usize {
    c.params.iter().map(|p| p.len().next_multiple_of(16)).sum()
}

/// Bytes `c`'s record takes in a request, with the alignment of the next record (R5).
pub(crate) fn record_bytes(c: &Call<'_>) -> usize {
    layout(c).end.next_multiple_of(64)
}

/// Each call's record start and layout, and the request's length.
pub(super) fn layouts(calls: &[Call<'_>]) -> (Vec<(usize, Layout)>, usize) {
    let mut at = Vec::with_capacity(calls.len());
    let mut start = 0;
    for c in calls {
        let l = layout(c);
        let next = (start + l.end).next_multiple_of(64);
        at.push((start, l));
        start = next;
    }
    // The last record needs no padding after it.
    let len = at.last().map_or(0, |(start, l)| start + l.end);
    (at, len)
}

/// Write `c`'s record into `b` (exactly its layout `at`'s `end` bytes).
pub(super) fn write(b: &mut [u8], c: &Call<'_>, at: &Layout) {
    let (launch, params) = (&c.launch, c.params);
    let path = c.so_path.as_os_str().as_encoded_bytes();
    let words = [
        MAGIC,
        path.len() as u32,
        c.symbol.len() as u32,
        params.len() as u32,
        launch.grid[0],
        launch.grid[1],
        launch.grid[2],
        launch.block[0],
        launch.block[1],
        launch.block[2],
        launch.dyn_shared,
        launch.block_begin,
        launch.block_end,
        padded(c) as u32,
        c.read_only.len() as u32,
    ];
    for (k, w) in words.iter().enumerate() {
        b[4 * k..4 * k + 4].copy_from_slice(&w.to_ne_bytes());
    }
    b[at.path..at.path + path.len()].copy_from_slice(path);
    b[at.sym - 1] = 0;
    b[at.sym..at.sym + c.symbol.len()].copy_from_slice(c.symbol.as_bytes());
    b[at.sym + c.symbol.len()] = 0;
    let mut d = at.data;
    for (k, p) in params.iter().enumerate() {
        let size = at.sizes + 4 * k;
        b[size..size + 4].copy_from_slice(&(p.len() as u32).to_ne_bytes());
        b[d..d + p.len()].copy_from_slice(p);
        d += p.len().next_multiple_of(16);
    }
    for (k, r) in c.read_only.iter().enumerate() {
        let o = at.ro + 16 * k;
        b[o..o + 8].copy_from_slice(&(r.range.start as u64).to_ne_bytes());
        b[o + 8..o + 16].copy_from_slice(&(r.range.len() as u64).to_ne_bytes());
    }
}
