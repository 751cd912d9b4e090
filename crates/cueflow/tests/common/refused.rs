//! The misuse suites' check that a refused call left nothing behind (ER3).

use cueflow::{Device, Error, Stream};

/// Run `call` with tracing on and return its error, asserting that it enqueued nothing and left
/// `s` idle.
#[track_caller]
pub fn refused<T: std::fmt::Debug>(
    dev: &Device,
    s: &Stream,
    call: impl FnOnce() -> cueflow::Result<T>,
) -> Error {
    dev.synchronize().unwrap();
    dev.start_trace().unwrap();
    let r = call();
    let t = dev.stop_trace().unwrap();
    let err = match r {
        Err(e) => e,
        Ok(v) => panic!("the call was accepted: {v:?}"),
    };
    assert!(t.ops.is_empty(), "a refused call enqueued {:#?}", t.ops);
    assert!(s.query().unwrap(), "a refused call left work on the stream");
    assert_eq!(
        dev.sticky_error(),
        None,
        "a refused call poisoned the device"
    );
    err
}
