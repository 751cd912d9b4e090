//! Not misuse, and devices

use super::*;

/// ST7: an out-of-range priority is clamped, not refused.
#[test]
fn priority_out_of_range_is_not_an_error() {
    let dev = dev();
    let p = dev.properties().clone();
    for (asked, got) in [
        (p.priority_greatest - 1, p.priority_greatest),
        (i32::MIN, p.priority_greatest),
        (p.priority_least + 1, p.priority_least),
        (i32::MAX, p.priority_least),
    ] {
        let s = Stream::builder(&dev).priority(asked).build().unwrap();
        assert_eq!(s.priority(), got);
        kernels::empty(&s).unwrap();
        s.synchronize().unwrap();
    }
}

#[test]
fn unknown_device_string() {
    for name in ["gpu", "cuda:x", "cuda:-1", "cuda:", "host:", "host:x", ""] {
        match Device::open_str(name) {
            Err(Error::UnknownDevice(n)) => assert_eq!(n, name),
            other => panic!("{name:?} gave {other:?}"),
        }
    }
    assert!("cuda:1".parse::<cueflow::DeviceSpec>().is_ok());
    assert!(Device::open_str(" Host ").is_ok());
    assert!(Device::open_str("host:3").is_ok());
    for list in ["host:0x", "host:0,host:0", "host:1,gpu", "cuda:0,,cuda:1"] {
        assert!(
            matches!(Device::open_list(list), Err(Error::UnknownDevice(_))),
            "{list:?}"
        );
    }
    assert_eq!(Device::open_list("host:3x").unwrap().len(), 3);
}
