//! A long window runs in parts (SPEC AG2): once the calls held so far reach a part's end and
//! every template the window still repeats may be cut there, they run as a graph of their own,
//! so the device starts on a long window while the program is still enqueuing it. The parts
//! grow from 32 calls to 256 (ends at 32, 96, 224, 480, then every 256 calls): the first
//! starts the device early, and no part outlasts the program's enqueuing of the next by much.
//!
//! A template may be cut at a part's end unless a wait after it names an event whose record
//! (the latest before the wait) comes before it: each part's graph holds its waits as edges
//! from its own record nodes. A call of a later part that depends on an earlier part's call
//! depends on that part's launch, as on any issued call.

use super::key::Keys;

/// The part ends up to [`MAX_CALLS`](super::window::MAX_CALLS).
fn is_part_end(n: usize) -> bool {
    matches!(n, 32 | 96 | 224) || (n >= 480 && (n - 480) % 256 == 0)
}

/// The part ends a window repeating `keys` may launch at: inside the template (its end is
/// always one), where no wait waits on a record before the end.
pub(super) fn cuts_of(keys: &Keys) -> Vec<usize> {
    // Per wait, the span (record, wait] no cut may fall in.
    let mut recorded: Vec<(u64, usize)> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (p, k) in keys.iter().enumerate() {
        match k.event() {
            Some((false, id)) => match recorded.iter_mut().find(|(e, _)| *e == id) {
                Some(r) => r.1 = p,
                None => recorded.push((id, p)),
            },
            Some((true, id)) => {
                if let Some(&(_, r)) = recorded.iter().find(|(e, _)| *e == id) {
                    spans.push((r, p));
                }
            }
            None => {}
        }
    }
    (1..keys.len())
        .filter(|&n| is_part_end(n) && !spans.iter().any(|&(r, p)| r < n && n <= p))
        .collect()
}

/// True if a window that holds `n` calls repeating the templates `cuts` belong to may run
/// them now as a part.
#[inline]
pub(super) fn cut_here(n: usize, mut cuts: impl Iterator<Item = bool>) -> bool {
    is_part_end(n) && cuts.all(|ok| ok)
}

#[cfg(test)]
mod tests {
    use super::is_part_end;

    #[test]
    fn parts_grow_to_256_calls() {
        let ends: Vec<usize> = (1..=1300).filter(|&n| is_part_end(n)).collect();
        assert_eq!(ends, [32, 96, 224, 480, 736, 992, 1248]);
    }
}
