//! What the host device reports of the machine (DV1): available memory, the CPU's clock and
//! its L2 cache, read from Linux's `/proc` and `/sys`; `None` where the system does not say
//! (another OS, a container that hides them), and the properties document the fallback.

use std::fs;

/// Memory the system could give without swapping: `MemAvailable` of `/proc/meminfo`, else
/// `sysinfo(2)`'s free RAM.
pub(super) fn available_bytes() -> Option<u64> {
    if let Ok(text) = fs::read_to_string("/proc/meminfo") {
        if let Some(kb) = meminfo_kb(&text, "MemAvailable:") {
            return Some(kb * 1024);
        }
    }
    // SAFETY: `info` is a valid, writable `sysinfo` struct; sysinfo(2) has no other
    // precondition.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sysinfo(&mut info) } == 0 {
        return Some(info.freeram as u64 * info.mem_unit.max(1) as u64);
    }
    None
}

/// The value in kB of `key` in `/proc/meminfo`'s text.
fn meminfo_kb(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The first CPU's peak clock in kHz: `cpuinfo_max_freq` of cpufreq, else the `cpu MHz` line
/// of `/proc/cpuinfo`.
pub(super) fn cpu_khz() -> Option<u32> {
    if let Ok(v) = fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") {
        if let Ok(khz) = v.trim().parse::<u32>() {
            return Some(khz);
        }
    }
    let text = fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = text
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    Some((mhz * 1000.0) as u32)
}

/// The first CPU's unified L2 cache in bytes, from sysfs (`size` is `2048K` or `2M`).
pub(super) fn l2_bytes() -> Option<u32> {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    for entry in fs::read_dir(base).ok()?.flatten() {
        let dir = entry.path();
        let level = fs::read_to_string(dir.join("level")).unwrap_or_default();
        if level.trim() != "2" {
            continue;
        }
        let size = fs::read_to_string(dir.join("size")).ok()?;
        return parse_size(size.trim());
    }
    None
}

fn parse_size(s: &str) -> Option<u32> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u32>().ok()?.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_sizes_parse() {
        let text = "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(meminfo_kb(text, "MemAvailable:"), Some(8_000_000));
        assert_eq!(meminfo_kb(text, "Nope:"), None);
        assert_eq!(parse_size("2048K"), Some(2 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
    }
}
