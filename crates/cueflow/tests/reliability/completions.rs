//! Item 7 (RL4): completions in their own order.

use super::*;

fn completions_resolve_in_their_own_order(dev: &Device) {
    // An older completion that stays pending: a kernel gate (a host-function gate would hold
    // the device's host-function runner, which resolves completions, as on CUDA).
    let old = Stream::new(dev).unwrap();
    let flag = DeviceBuffer::<u32>::new(dev, 1).unwrap();
    kernels::wait_flag(&old, &flag, 1, Duration::from_secs(20)).unwrap();
    let pending = old.record().unwrap();
    let c_old = pending.completion().unwrap();
    // Work already done: its completion resolves now.
    let s = Stream::new(dev).unwrap();
    kernels::empty(&s).unwrap();
    let done = s.record().unwrap();
    s.synchronize().unwrap();
    // Work still pending but short: its completion resolves when it is done.
    let short = Stream::new(dev).unwrap();
    kernels::spin(&short, Duration::from_millis(30), 1).unwrap();
    let soon = short.record().unwrap();
    let never = Event::new(dev).unwrap();
    let (c_done, c_soon, c_never) = (
        done.completion().unwrap(),
        soon.completion().unwrap(),
        never.completion().unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for c in [c_done, c_never, c_soon] {
            tx.send(c.wait()).unwrap();
        }
    });
    for what in [
        "a done event",
        "a never-recorded event",
        "a short pending event",
    ] {
        let r = rx.recv_timeout(Duration::from_secs(3));
        assert!(
            matches!(r, Ok(Ok(()))),
            "the completion of {what} waited behind an unrelated pending one: {r:?}"
        );
    }
    let opener = Stream::new(dev).unwrap();
    kernels::set_flag(&opener, &flag, 1).unwrap();
    c_old.wait().unwrap();
}

#[test]
fn completions_resolve_in_their_own_order_host() {
    completions_resolve_in_their_own_order(&Device::host().unwrap());
}

#[test]
fn completions_resolve_in_their_own_order_cuda() {
    if let Some(dev) = cuda() {
        completions_resolve_in_their_own_order(&dev);
    }
}
