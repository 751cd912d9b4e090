//! Opening CUDA where it cannot be opened is an error, never a panic: on a machine without the
//! driver library (every CUDA device is unavailable), and everywhere for a device ordinal that
//! does not exist.

use std::panic::catch_unwind;

use cueflow::{Device, Error};

#[test]
fn missing_cuda_is_unavailable_not_a_panic() {
    let r = catch_unwind(|| Device::cuda(0).map(|d| d.properties().name.clone()));
    match r {
        Err(_) => panic!("Device::cuda(0) panicked"),
        Ok(Ok(name)) => println!("SKIP: CUDA is available here ({name})"),
        Ok(Err(Error::Unavailable(why))) => {
            assert!(!why.is_empty());
            println!("CUDA unavailable, as expected without a driver: {why}");
        }
        Ok(Err(other)) => panic!("expected Error::Unavailable, got {other:?}"),
    }
}

#[test]
fn absent_ordinal_is_unavailable() {
    for name in ["cuda:4096", "cuda:999999"] {
        let r = catch_unwind(|| Device::open_str(name).map(|_| ()));
        match r {
            Err(_) => panic!("opening {name} panicked"),
            Ok(Ok(())) => panic!("{name} opened, but no machine has that many devices"),
            Ok(Err(Error::Unavailable(why))) => assert!(!why.is_empty()),
            Ok(Err(other)) => panic!("{name}: expected Error::Unavailable, got {other:?}"),
        }
    }
}

#[test]
fn repeated_attempts_stay_errors() {
    // The loader's verdict is cached; asking again must not panic either (cudarc's own loader
    // would panic on the second call if it had been reached without a library).
    for _ in 0..3 {
        let r = catch_unwind(|| Device::cuda(0).err());
        assert!(r.is_ok(), "Device::cuda(0) panicked");
    }
}
