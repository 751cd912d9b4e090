//! Item 9: typed errors, quiet caught panics, bounded threads.

use super::*;

/// Open devices until threads run out (`ulimit -v`): a typed `OutOfResources`, no panic; and
/// once they are dropped, a device opens and runs again.
#[test]
fn running_out_of_threads_is_a_typed_error() {
    if let Some(out) = child(
        "running_out_of_threads_is_a_typed_error",
        &[("MALLOC_ARENA_MAX", "2")],
    ) {
        let (_, stderr) = child_passed(&out, "THREADS-OK");
        assert!(!stderr.contains("panicked"), "{stderr}");
        return;
    }
    // Warm up what the first device and kernel allocate once per process.
    let warm = Device::host_with_workers(2).unwrap();
    kernels::empty(&Stream::new(&warm).unwrap()).unwrap();
    warm.synchronize().unwrap();
    drop(warm);
    limit_address_space(192 << 20);
    let mut devs = Vec::new();
    let err = loop {
        match Device::host_with_workers(4) {
            Ok(d) => devs.push(d),
            Err(e) => break e,
        }
        assert!(devs.len() < 10_000, "the limit did not bite");
    };
    assert!(matches!(err, Error::OutOfResources(_)), "{err:?}");
    let opened = devs.len();
    drop(devs);
    let dev = Device::host_with_workers(4).expect("a device after the others were dropped");
    let s = Stream::new(&dev).unwrap();
    kernels::empty(&s).unwrap();
    s.synchronize().unwrap();
    println!("THREADS-OK after {opened} devices: {err}");
}

/// Opening and dropping devices (each with a stream, a kernel and a completion) keeps the
/// thread count bounded: engines and completion watchers go with their device.
#[test]
fn device_churn_keeps_threads_bounded() {
    if let Some(out) = child("device_churn_keeps_threads_bounded", &[]) {
        let (stdout, _) = child_passed(&out, "CHURN-OK");
        say(format_args!(
            "{}",
            stdout
                .lines()
                .find(|l| l.contains("CHURN-OK"))
                .unwrap_or("")
        ));
        return;
    }
    let base = status("Threads");
    let mut most = base;
    for _ in 0..300 {
        let dev = Device::host_with_workers(2).unwrap();
        let s = Stream::new(&dev).unwrap();
        kernels::empty(&s).unwrap();
        s.completion().unwrap().wait().unwrap();
        s.record().unwrap().completion().unwrap().wait().unwrap();
        s.synchronize().unwrap();
        most = most.max(status("Threads"));
    }
    println!("CHURN-OK threads: {base} at the start, {most} at most");
    assert!(
        most <= base + 16,
        "threads piled up: {base} at the start, {most} at most"
    );
}

/// Panics that cueflow catches and returns as errors (a faulting host kernel, a panicking host
/// function, a collective timeout) print nothing; a program's own panic still prints.
#[test]
fn caught_panics_print_nothing() {
    if let Some(out) = child("caught_panics_print_nothing", &[]) {
        let (_, stderr) = child_passed(&out, "QUIET-OK");
        assert!(
            !stderr.contains("cueflow-")
                && !stderr.contains("illegal address")
                && !stderr.contains("a host function's panic")
                && !stderr.contains("timed out"),
            "a caught panic was printed:\n{stderr}"
        );
        assert!(
            stderr.contains("the program's own panic"),
            "the program's own panic must still print:\n{stderr}"
        );
        return;
    }
    let check = |r: Result<()>| {
        let e = r.unwrap_err();
        assert!(e.is_sticky(), "{e:?}");
    };
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    kernels::fault(&s).unwrap();
    check(s.synchronize());
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    s.host_fn(|| panic!("a host function's panic")).unwrap();
    check(s.synchronize());
    let devs = [Device::host_n(0, 2).unwrap(), Device::host_n(1, 2).unwrap()];
    let comm = Communicator::with_timeout(&devs, Duration::from_millis(50)).unwrap();
    let s: Vec<Stream> = devs.iter().map(|d| Stream::new(d).unwrap()).collect();
    let b: Vec<DeviceBuffer<f32>> = devs
        .iter()
        .map(|d| DeviceBuffer::new(d, 16).unwrap())
        .collect();
    s[1].host_fn(|| std::thread::sleep(Duration::from_millis(300)))
        .unwrap();
    comm.all_reduce(
        &[(&s[0], &b[0], &b[0]), (&s[1], &b[1], &b[1])],
        cueflow::ReduceOp::Sum,
    )
    .unwrap();
    check(s[0].synchronize());
    check(s[1].synchronize());
    let own = std::panic::catch_unwind(|| panic!("the program's own panic"));
    assert!(own.is_err());
    println!("QUIET-OK");
}
