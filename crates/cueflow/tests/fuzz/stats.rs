//! What the fuzzer's programs did, counted when `FUZZ_STATS` is set (to see that the
//! generator reaches what it should: conditional bodies that run, racy graphs refused,
//! operations the sanitizer refused…), printed every 500 programs and by `report`; and a
//! watchdog that ends the process, printing the program, when one runs longer than
//! `FUZZ_HANG_SECS` (default 120): a hang is a finding too.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

static ON: OnceLock<bool> = OnceLock::new();
static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

pub fn on() -> bool {
    *ON.get_or_init(|| std::env::var_os("FUZZ_STATS").is_some())
}

/// Count one `what` (a short label).
pub fn count(what: impl FnOnce() -> String) {
    if on() {
        *COUNTS.lock().unwrap().entry(what()).or_default() += 1;
    }
}

/// The counts so far, one per line.
pub fn report() -> String {
    COUNTS
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{v:>9}  {k}\n"))
        .collect()
}

/// Count a finished program; every 500, print the counts.
pub fn program_done() {
    if !on() {
        return;
    }
    count(|| "programs".into());
    let n = COUNTS.lock().unwrap()["programs"];
    if n % 500 == 0 {
        eprintln!("fuzz stats after {n} programs:\n{}", report());
    }
}

/// The variant name of a value's `Debug` form.
pub fn name(v: &(impl std::fmt::Debug + ?Sized)) -> String {
    let s = format!("{v:?}");
    s.split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Programs running now, by thread: when each started, and how to print it.
type Running = HashMap<ThreadId, (Instant, String, Box<dyn Fn() -> String + Send>)>;
static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// Watch the program `describe` prints, which this thread runs from now until
/// [`unwatch`]; `what` names the run (ordering, backend).
pub fn watch(what: String, describe: impl Fn() -> String + Send + 'static) {
    static WATCHDOG: OnceLock<()> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let limit = std::env::var("FUZZ_HANG_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120u64);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let running = RUNNING.lock().unwrap();
            for (start, what, describe) in running.iter().flat_map(|r| r.values()) {
                if start.elapsed() > Duration::from_secs(limit) {
                    eprintln!(
                        "fuzz: a program ({what}) has run for more than {limit} s: a hang. \
                         The program:\n{}",
                        describe()
                    );
                    std::process::abort();
                }
            }
        });
    });
    RUNNING
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(
            std::thread::current().id(),
            (Instant::now(), what, Box::new(describe)),
        );
}

/// This thread's program ended.
pub fn unwatch() {
    if let Some(r) = RUNNING.lock().unwrap().as_mut() {
        r.remove(&std::thread::current().id());
    }
}
