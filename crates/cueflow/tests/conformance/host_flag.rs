//! HM7: a word the host and running kernels share, neither side waiting for the other.

use std::time::{Duration, Instant};

use cueflow::{
    kernels, Device, DeviceBuffer, HostFlag, KernelArgs, LaunchConfig, SanitizeMode, Stream,
};

use crate::support::*;

/// How long a kernel waits for a flag before it faults (`cf_wait_flag` traps): a test that
/// breaks HM7 fails by this fault, not by hanging.
const PATIENCE: Duration = Duration::from_secs(20);

/// `cf_wait_flag` on `flag`: the stream holds until the flag is `value`.
fn wait_for(s: &Stream, flag: &HostFlag, value: u32) -> cueflow::Result<()> {
    s.launch(
        &kernels::WAIT_FLAG,
        LaunchConfig::new(1, 32),
        KernelArgs::new()
            .flag(flag)
            .scalar(value)
            .scalar(PATIENCE.as_nanos() as u64),
    )
}

/// `cf_set_flag` on `flag`.
fn set(s: &Stream, flag: &HostFlag, value: u32) -> cueflow::Result<()> {
    s.launch(
        &kernels::SET_FLAG,
        LaunchConfig::new(1, 32),
        KernelArgs::new().flag(flag).scalar(value),
    )
}

/// Spin on the host until `flag` is `value` (loads never wait for device work).
fn host_waits_for(flag: &HostFlag, value: u32) {
    let t = Instant::now();
    while flag.load() != value {
        assert!(
            t.elapsed() < PATIENCE,
            "the flag stayed {} while a kernel was to make it {value}",
            flag.load()
        );
        std::thread::yield_now();
    }
}

/// HM7: a kernel waits on a flag while work queues behind it; the host's store (which does
/// not wait for that kernel, as a pinned buffer's host write would, MM3) lets it go, and the
/// work behind it then runs.
pub fn hm7_the_host_releases_a_kernel_that_waits_for_it(dev: &Device) {
    let s = side_stream(dev);
    let latch = HostFlag::new(dev).unwrap();
    assert_eq!(latch.load(), 0, "a new flag is 0");
    let out = DeviceBuffer::<f32>::new(dev, 4096).unwrap();
    wait_for(&s, &latch, 1).unwrap();
    kernels::fill(&s, &out, 3.0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !s.query().unwrap(),
        "the stream ran past a kernel the host had not released"
    );
    latch.store(1);
    s.synchronize().unwrap();
    assert_all(&download(&out), 3.0);
    assert_eq!(latch.load(), 1);
}

/// HM7: the other way round: a kernel stores to the flag, the host sees it while the kernel's
/// stream is still busy (waiting for the host's answer through the same flag), and answers.
/// `fetch_add` is the host's atomic read-modify-write.
pub fn hm7_a_kernel_and_the_host_take_turns_on_one_flag(dev: &Device) {
    let s = side_stream(dev);
    let flag = HostFlag::new(dev).unwrap();
    for round in 0..3u32 {
        let (ping, pong) = (2 * round + 1, 2 * round + 2);
        set(&s, &flag, ping).unwrap();
        wait_for(&s, &flag, pong).unwrap();
        host_waits_for(&flag, ping);
        assert!(
            !s.query().unwrap(),
            "the kernel waits for the host's answer"
        );
        assert_eq!(flag.fetch_add(1), ping);
        s.synchronize().unwrap();
        assert_eq!(flag.load(), pong);
    }
}

/// HM7 with AC3 and MM2: kernels on two streams and the host all use one flag at once, with no
/// event between them, and the sanitizer reports nothing (atomic accesses do not race); a flag
/// the program dropped while kernels still use it is not handed out again until they are done.
pub fn hm7_flag_accesses_are_no_race_and_outlive_the_handle(dev: &Device) {
    let mode = dev.sanitize_mode();
    dev.set_sanitize(SanitizeMode::Warn);
    let (a, b) = (side_stream(dev), side_stream(dev));
    let flag = HostFlag::new(dev).unwrap();
    wait_for(&a, &flag, 2).unwrap();
    set(&b, &flag, 1).unwrap();
    host_waits_for(&flag, 1);
    flag.store(2);
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    let reports = dev.take_sanitizer_reports();
    dev.set_sanitize(mode);
    assert!(reports.is_empty(), "{reports:#?}");
    // Dropped while one kernel waits on it and another, behind a spin, is to set it.
    let flag = HostFlag::new(dev).unwrap();
    wait_for(&a, &flag, 5).unwrap();
    kernels::spin(&b, Duration::from_millis(100), 1).unwrap();
    set(&b, &flag, 5).unwrap();
    let addr = flag.device_addr();
    drop(flag);
    let others: Vec<HostFlag> = (0..8).map(|_| HostFlag::new(dev).unwrap()).collect();
    assert!(
        others.iter().all(|o| o.device_addr() != addr),
        "the word of a dropped flag that kernels still use was handed out again"
    );
    a.synchronize().unwrap();
    b.synchronize().unwrap();
}
