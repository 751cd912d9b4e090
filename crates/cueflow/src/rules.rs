//! The rules of the specification ([`docs/spec.md`](crate::spec)) by id, each with its title
//! there and its meaning in one line, so that a message citing a rule says what the rule asks.
//!
//! The table is written by hand (a short meaning reads better in an error than a rule's first
//! sentence); the unit test below holds it to the specification: the same ids, the same titles.
//! A rule added to the specification needs a line here, and the test prints it.

use std::fmt;

/// `(id, title in the specification, meaning in one line)`. A meaning cites no rule id.
#[rustfmt::skip]
const RULES: &[(&str, &str, &str)] = &[
    ("ST1", "Order", "work on one stream runs in enqueue order, one operation after the other"),
    ("ST2", "Concurrency", "work on different streams is unordered unless an event, a host synchronization or a default-stream rule orders it"),
    ("ST3", "Asynchrony", "an enqueue returns without waiting for the device, pageable copies excepted"),
    ("ST4", "Legacy default stream", "work on the legacy default stream waits for, and is waited for by, every blocking stream of its device"),
    ("ST5", "Non-blocking streams", "a non-blocking stream does not synchronize with the legacy default stream"),
    ("ST6", "Per-thread default stream", "each host thread has a default stream of its own, a blocking stream"),
    ("ST7", "Priorities", "a stream priority is a hint clamped to the device's range; it never preempts running work"),
    ("ST8", "Query", "a stream query answers done or not ready without blocking"),
    ("ST9", "Synchronize", "a synchronize blocks the host until the work enqueued before it is done"),
    ("ST10", "Destroy", "dropping a stream returns at once; its pending work still runs"),
    ("EV1", "Record", "an event captures the work enqueued on its stream before the record"),
    ("EV2", "Re-record", "recording an event again changes what later waits and queries see, not earlier ones"),
    ("EV3", "Never recorded", "an event never recorded stands for no work"),
    ("EV4", "Stream wait", "a stream wait makes the stream's later work wait for the event's work, without blocking the host"),
    ("EV5", "Query / synchronize", "an event query never blocks; an event synchronize blocks until the event's work is done"),
    ("EV6", "Timing", "elapsed time needs two completed events, both recorded and created with timing on"),
    ("EV7", "Flags", "timing, blocking synchronization and inter-process use are creation flags of an event"),
    ("EV8", "Destroy", "dropping an event with pending work returns at once"),
    ("CP1", "Kinds", "copies in every direction and memsets are stream operations"),
    ("CP2", "Pinned", "a copy between device memory and pinned host memory is asynchronous"),
    ("CP3", "Pageable", "a copy from or to pageable host memory blocks the host until the host side is read or written"),
    ("CP4", "Bounds", "a copy or memset stays within its buffers and matches their sizes, or nothing is enqueued"),
    ("CP5", "Engines", "copies run on copy engines beside kernels; with two, both directions overlap"),
    ("MM1", "Stream-ordered allocation", "memory allocated on a stream is usable in that stream's order; another stream waits for an event first"),
    ("MM2", "Lifetime", "memory is never freed or reused while enqueued work may still touch it"),
    ("MM3", "Host access", "the host never touches pinned memory while device work on it may still run"),
    ("KN1", "Launch", "a launch with a bad shape is refused and poisons nothing"),
    ("KN2", "Faults", "a kernel fault is sticky: the device fails every later call"),
    ("HF1", "Host functions", "a host function runs in its stream's order"),
    ("HF2", "No device calls", "a host function must not call cueflow"),
    ("HF3", "Host functions over buffers", "a host function runs once over the buffers it declares; its panic is a sticky fault"),
    ("HF4", "Callbacks with a status", "a stream callback runs once and is told whether the device is in a sticky error state"),
    ("GR1", "Capture", "a capture records a stream's work into a graph; it cannot begin on the legacy stream and ends on the stream that began it"),
    ("GR2", "Illegal during capture", "synchronizing, querying or a synchronous copy during a capture is refused and invalidates the capture"),
    ("GR3", "Replay", "a graph launch runs as one unit in its stream's order, as many times as launched"),
    ("GR4", "Lifetime", "an instantiated graph keeps every buffer it touches alive, and its drop destroys it"),
    ("GR5", "Legacy stream during capture", "legacy-stream work while a blocking stream is captured is refused and invalidates the capture"),
    ("GR6", "Update", "an instantiated graph updates in place only when its shape stays the same"),
    ("GR7", "Memory nodes", "allocations and frees inside a capture become graph nodes that run at every replay"),
    ("GR8", "Explicit graphs", "a graph built node by node has no cycle and uses graph memory only while it is allocated"),
    ("GR9", "Conditional nodes", "if, while and switch nodes run their body as the graph's kernels decide at run time"),
    ("GR10", "Graph memory beyond the graph", "memory a graph allocates may be freed outside it, once the allocating launch is ordered before"),
    ("GR11", "Collectives in graphs", "a capture records collectives as nodes of each member's graph"),
    ("GR12", "Graph memory footprint", "a device reports the memory graph allocations take, with high-water marks, and trims what no allocation uses"),
    ("AG1", "Mode", "automatic graphs are on for a stream built or set with them, or for every stream of a device that has them on"),
    ("AG2", "Windows and recognition", "work that repeats a recent window's signature is held back and runs as one graph launch once the whole signature matched, a long window in parts as they complete; a device whose windows stop repeating turns cold until they repeat"),
    ("AG3", "Same results", "a replay keeps every stream order, event and dependency of the calls it replaces; changed scalar arguments are updated in place"),
    ("AG4", "What issues held work", "held work is issued in order before anything could observe it or be ordered after it"),
    ("AG5", "Observers see each call", "the sanitizer, automatic ordering, traces and errors see each held call as without the mode"),
    ("AG6", "Memory", "signatures hold no memory; a graph keeps its buffers only while it is replayed"),
    ("AC1", "Declared accesses", "every operation declares the byte ranges it reads and writes"),
    ("AC2", "Happens-before", "accesses are ordered by streams, events, default-stream rules, host synchronizations and graph launches"),
    ("AC3", "Race", "two unordered accesses to the same bytes, one of them a write, are a race"),
    ("AC4", "Sanitizer", "the race sanitizer reports each race with both accesses and the fix"),
    ("AC5", "Automatic ordering", "automatic ordering makes each operation wait for exactly the conflicting earlier work of other streams"),
    ("AC6", "Soundness", "the host backend never runs conflicting accesses at once: it runs them in enqueue order"),
    ("AC7", "Declarations verified", "a kernel that writes a buffer it declared read-only is caught where that is cheap: a fault on the host backend, a sanitizer report on CUDA"),
    ("MD1", "Devices", "every device has its own streams, memory and sticky errors"),
    ("MD2", "Cross-device waits", "a stream may wait for another device's event; another device's buffers are refused outside peer copies"),
    ("MD3", "Peer copies", "a copy between two devices is an ordinary, bounds-checked stream operation"),
    ("MD4", "Collectives", "collectives are operations of each member's stream, and the members must agree on them"),
    ("MD5", "Launched jobs", "a process started by torchrun, srun or mpirun finds its rank, device and peers from the launcher's variables, or gets a typed error"),
    ("DV1", "Properties", "every device reports its properties and its free memory"),
    ("DV2", "Flags", "how the host waits for a device is set before the device's first work"),
    ("DV3", "Naming", "errors name the device and the stream they concern"),
    ("DV4", "Driver floor", "a CUDA device opens on any driver from CUDA 12.0 on; what a driver cannot do is refused naming the version it needs"),
    ("HM1", "Registered memory", "registered host memory is pinned memory until unregistered, which never happens under running work"),
    ("HM2", "Portable memory", "pinned and registered memory serves every device of the process where unified addressing holds; elsewhere only memory made portable does"),
    ("HM3", "Mapped memory", "kernels use mapped pinned memory in place, tracked like device memory"),
    ("HM4", "Managed memory", "managed memory is valid on the host and every device; host access waits for the device work on it"),
    ("HM5", "Pools", "stream-ordered allocations come from pools with a release threshold and statistics"),
    ("HM6", "Peer access for kernels", "kernels use another device's memory only while peer access is enabled"),
    ("HM7", "Host flags", "a word of mapped memory that the host and running kernels read and write atomically, neither waiting for the other"),
    ("KC1", "Options", "CUDA C compiles with the program's options, and a compile error carries the compiler's log"),
    ("KC2", "Ahead of time", "a kernel can be compiled and loaded before its first launch"),
    ("KC3", "Cache", "compiled kernels are cached on disk; a stale or corrupt entry is recompiled, never loaded"),
    ("KC4", "Parameters", "kernel parameters are passed by value; buffers are declared as reads, writes or atomics"),
    ("HK1", "One source", "CUDA C kernels run on the host backend with CUDA's execution model"),
    ("HK2", "Same bits", "a CUDA C kernel writes the same bytes on the host backend as on a GPU, except where documented"),
    ("HK3", "Faults, not corruption", "a bad access by a kernel on the host backend is a sticky fault, never corruption"),
    ("HK4", "Time limit", "a host-backend kernel that runs past the device's time limit is stopped and becomes a sticky fault"),
    ("RL1", "Bounded queues", "at the queue depth an enqueue waits instead of growing memory"),
    ("RL2", "Nothing leaks", "memory and threads stay flat over any number of create, use and drop cycles"),
    ("RL3", "Pools give back", "pools reuse freed memory and release what is above their threshold"),
    ("RL4", "Completion order", "a completion resolves when its own work is done"),
    ("RL5", "Fault attribution", "a fault names its kernel, or every candidate and says so"),
    ("RL6", "Opening a device holds up nothing", "opening another device on a GPU loads no code already loaded there and waits for none of its running work"),
    ("ER1", "Not-ready is not an error", "not ready is an answer, not an error"),
    ("ER2", "Sticky", "after a sticky error every call on the device returns it; open a new device to recover"),
    ("ER3", "Validation", "misuse is refused at the call with a typed error, and nothing is enqueued"),
];

/// The meaning of rule `id`, if the specification has such a rule.
pub(crate) fn meaning(id: &str) -> Option<&'static str> {
    RULES.iter().find(|r| r.0 == id).map(|r| r.2)
}

/// The rule ids `text` cites, each once, in order of first citation: words of two capital
/// letters and a number that name a rule (`CP4`, `GR10`; `FP16` is no rule).
pub(crate) fn cited(text: &str) -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let end = (i..bytes.len())
            .find(|&j| !bytes[j].is_ascii_alphanumeric())
            .unwrap_or(bytes.len());
        let word = &bytes[i..end];
        if let Some(rule) = RULES.iter().find(|r| r.0.as_bytes() == word) {
            if !ids.contains(&rule.0) {
                ids.push(rule.0);
            }
        }
        i = end;
    }
    ids
}

/// Write ` (CP4: meaning; ER3: meaning)` for the rules `message` cites, leaving out those whose
/// meaning it already gives (an error that quotes another one).
pub(crate) fn explain(message: &str, f: &mut impl fmt::Write) -> fmt::Result {
    let mut first = true;
    for id in cited(message) {
        let meaning = meaning(id).unwrap_or_default();
        if message.contains(&format!("{id}: {meaning}")) {
            continue;
        }
        f.write_str(if first { " (" } else { "; " })?;
        write!(f, "{id}: {meaning}")?;
        first = false;
    }
    if !first {
        f.write_str(")")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(id, title)` of every `- **ID Title.**` bullet of the specification.
    fn spec_rules() -> Vec<(String, String)> {
        let spec = include_str!("../docs/spec.md");
        spec.lines()
            .filter_map(|l| l.trim_start().strip_prefix("- **"))
            .filter_map(|l| l.split_once(".**"))
            .filter_map(|(head, _)| head.split_once(' '))
            .map(|(id, title)| (id.to_string(), title.to_string()))
            .collect()
    }

    #[test]
    fn the_table_has_every_rule_of_the_specification_with_its_title() {
        let spec = spec_rules();
        assert!(spec.len() > 70, "the specification's rules: {spec:?}");
        let mut missing = Vec::new();
        for (id, title) in &spec {
            match RULES.iter().find(|r| r.0 == id) {
                Some(r) => assert_eq!(
                    r.1, title,
                    "rule {id} is titled {title:?} in docs/spec.md: check its meaning here"
                ),
                None => missing.push(format!("(\"{id}\", \"{title}\", \"…\"),")),
            }
        }
        assert!(
            missing.is_empty(),
            "rules of docs/spec.md without a meaning in src/rules.rs:\n{}",
            missing.join("\n")
        );
        for r in RULES {
            assert!(
                spec.iter().any(|(id, _)| id == r.0),
                "{} is not a rule of docs/spec.md",
                r.0
            );
            assert!(cited(r.2).is_empty(), "the meaning of {} cites a rule", r.0);
        }
    }

    #[test]
    fn citations_are_found_as_whole_words() {
        assert_eq!(
            cited("CP4 and (KN2, ER2), KN2 again"),
            ["CP4", "KN2", "ER2"]
        );
        assert_eq!(cited("ST4–ST6, GR10:"), ["ST4", "ST6", "GR10"]);
        assert!(cited("FP16 XCP4 CP400 CP4x cp4 GR1000").is_empty());
    }

    #[test]
    fn a_message_gets_the_meaning_of_each_rule_it_cites_once() {
        let mut out = String::new();
        explain("out of bounds (CP4): 3 > 2, see CP4 and ER3", &mut out).unwrap();
        assert_eq!(
            out,
            format!(
                " (CP4: {}; ER3: {})",
                meaning("CP4").unwrap(),
                meaning("ER3").unwrap()
            )
        );
        let quoted = format!("outer: inner (MM3: {})", meaning("MM3").unwrap());
        out.clear();
        explain(&quoted, &mut out).unwrap();
        assert_eq!(out, "", "a meaning already given is not repeated");
        explain("no rule here", &mut out).unwrap();
        assert_eq!(out, "");
    }
}
