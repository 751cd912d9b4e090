//! A long window runs in parts (SPEC AG2): once the calls held so far reach a part's end and
//! every template the window still repeats may be cut there, they run as a graph of their own,
//! so the device starts on a long window while the program is still enqueuing it. The parts
//! grow from 32 calls to 256 (ends at 32, 96, 224, 480, then every 256 calls): the first
//! starts the device early, and no part outlasts the program's enqueuing of the next by much.
//!
//! A template may be cut at a part's end unless a wait after it names an event whose record
//! (the latest before the wait) comes before it: each part's graph holds its waits as edges
//! from its own record nodes. A call of a later part that depends on an earlier part's call
//! depends on that part's launch, as on any issued call. And a part's launch waits for all the
//! work of its streams before it, so a cut must fall where the window is joined into one
//! stream: otherwise the parts of a pipeline over several streams would run one after another
//! (the chunked pipeline of `cueflow demo`, cut at 32 and 96 calls, took 1.04 × its time
//! without the mode on an H200).

use super::key::{EventCall, Keys};

/// The part ends up to [`MAX_CALLS`](super::window::MAX_CALLS).
fn is_part_end(n: usize) -> bool {
    matches!(n, 32 | 96 | 224) || (n >= 480 && (n - 480) % 256 == 0)
}

/// The first part end at or after `n` (`n` itself if it is one).
pub(super) fn next_part_end(n: usize) -> usize {
    match n {
        0..=32 => 32,
        33..=96 => 96,
        97..=224 => 224,
        _ => 480 + (n.max(480) - 480).div_ceil(256) * 256,
    }
}

/// The part ends a window repeating `keys` may launch at: inside the template (its end is
/// always one), where no wait waits on a record before the end, and where the cut adds no
/// ordering ([`joined_at`]).
pub(super) fn cuts_of(keys: &Keys) -> Vec<usize> {
    // Per wait, the span (record, wait] no cut may fall in.
    let spans: Vec<(usize, usize)> = keys
        .iter()
        .enumerate()
        .filter_map(|(p, k)| match k.event() {
            Some(EventCall::Wait(r)) => Some((r, p)),
            _ => None,
        })
        .collect();
    (1..keys.len())
        .filter(|&n| is_part_end(n) && !spans.iter().any(|&(r, p)| r < n && n <= p))
        .filter(|&n| joined_at(keys, n))
        .collect()
}

/// True if a cut before call `n` adds no ordering: a part's launch waits for all the work its
/// streams had before it, so the calls after the cut would wait for every call before it.
/// That holds already where the window is joined into one stream `S` at the cut (the stream
/// of call `n - 1`): every other stream's last call before the cut is a record that `S`
/// waited for before the cut, and every other stream's first call after it is a wait on a
/// record `S` made after the cut. (A window on one stream always is; a pipeline over several
/// streams is not, and replays whole: its parts would run one after another.) Records and
/// waits are matched by place: a wait names the record it waits for.
fn joined_at(keys: &Keys, n: usize) -> bool {
    let Some(s) = keys.get(n - 1).map(|k| k.actor()) else {
        return false;
    };
    // Before the cut: per other stream, whether its last call is a record `S` waited for.
    let mut last: Vec<(u64, Option<usize>, bool)> = Vec::new(); // (stream, record, joined)
    for (i, k) in keys.iter().enumerate().take(n) {
        let (actor, event) = (k.actor(), k.event());
        if actor == s {
            if let Some(EventCall::Wait(r)) = event {
                for l in last.iter_mut().filter(|l| l.1 == Some(r)) {
                    l.2 = true;
                }
            }
            continue;
        }
        let record = (event == Some(EventCall::Record)).then_some(i);
        match last.iter_mut().find(|l| l.0 == actor) {
            Some(l) => *l = (actor, record, false),
            None => last.push((actor, record, false)),
        }
    }
    if last.iter().any(|l| !l.2) {
        return false;
    }
    // After the cut: each other stream starts with a wait on a record `S` made after it.
    let mut from_s: Vec<usize> = Vec::new(); // S's records after the cut
    let mut started: Vec<u64> = Vec::new();
    for (i, k) in keys.iter().enumerate().skip(n) {
        let (actor, event) = (k.actor(), k.event());
        if actor == s {
            if event == Some(EventCall::Record) {
                from_s.push(i);
            }
            continue;
        }
        if !started.contains(&actor) {
            match event {
                Some(EventCall::Wait(r)) if from_s.contains(&r) => started.push(actor),
                _ => return false,
            }
        }
    }
    true
}

/// True if a window that holds `n` calls repeating the templates `cuts` belong to may run
/// them now as a part.
#[inline]
pub(super) fn cut_here(n: usize, mut cuts: impl Iterator<Item = bool>) -> bool {
    is_part_end(n) && cuts.all(|ok| ok)
}

#[cfg(test)]
mod tests {
    use super::{cuts_of, is_part_end, next_part_end};
    use crate::core::graphs::autograph::key::Keys;

    type Call = (u64, Option<(bool, u64)>);
    const fn launch(s: u64) -> Call {
        (s, None)
    }
    const fn record(s: u64, e: u64) -> Call {
        (s, Some((false, e)))
    }
    const fn wait(s: u64, e: u64) -> Call {
        (s, Some((true, e)))
    }

    /// `n` launches on stream 0 after `before`, then `after`.
    fn cut_of(before: &[Call], after: &[Call]) -> Vec<usize> {
        let mut calls = before.to_vec();
        while calls.len() < 32 {
            calls.push(launch(0));
        }
        calls.extend_from_slice(after);
        cuts_of(&Keys::of_test_calls(&calls))
    }

    #[test]
    fn next_part_end_is_the_first_part_end_from_n() {
        for n in 0..5000 {
            let want = (n..).find(|&m| is_part_end(m)).unwrap();
            assert_eq!(next_part_end(n), want, "n = {n}");
        }
    }

    #[test]
    fn one_stream_is_cut() {
        assert_eq!(cut_of(&[], &[launch(0); 10]), [32]);
    }

    #[test]
    fn streams_that_overlap_at_the_cut_are_not() {
        // Stream 1 still open before the cut.
        assert_eq!(cut_of(&[launch(1)], &[launch(0)]), Vec::<usize>::new());
        // Stream 1 starts after the cut without waiting for stream 0.
        assert_eq!(cut_of(&[], &[launch(0), launch(1)]), Vec::<usize>::new());
        // Round robin over four streams, no events: the chunked pipeline.
        let rr: Vec<Call> = (0..64).map(|i| launch(i % 4)).collect();
        assert!(cuts_of(&Keys::of_test_calls(&rr)).is_empty());
    }

    #[test]
    fn a_join_before_and_a_fork_after_allow_the_cut() {
        let before = [launch(1), record(1, 9), wait(0, 9)];
        let after = [record(0, 8), wait(1, 8), launch(1), launch(0)];
        assert_eq!(cut_of(&before, &after), [32]);
        // The join waited for an earlier record: stream 1 ran on after it.
        let late = [record(1, 9), wait(0, 9), launch(1)];
        assert_eq!(cut_of(&late, &after), Vec::<usize>::new());
        // The event was recorded again by stream 2 before the wait: stream 1 is not joined.
        let superseded = [launch(1), record(1, 9), record(2, 9), wait(0, 9)];
        assert_eq!(cut_of(&superseded, &after), Vec::<usize>::new());
        // The fork waits for a record made before the cut.
        let early = [record(0, 8), wait(1, 8), launch(1), launch(0)];
        let forked_early = [launch(1), record(1, 9), wait(0, 9), record(0, 8)];
        assert_eq!(cut_of(&forked_early, &early[1..]), Vec::<usize>::new());
    }

    #[test]
    fn parts_grow_to_256_calls() {
        let ends: Vec<usize> = (1..=1300).filter(|&n| is_part_end(n)).collect();
        assert_eq!(ends, [32, 96, 224, 480, 736, 992, 1248]);
    }
}
