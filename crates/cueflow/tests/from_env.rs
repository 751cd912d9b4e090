//! `Device::from_env` accepts every documented `CUEFLOW_DEVICE` value (DV1's device naming,
//! issue 18): one test in a binary of its own, because it changes the process environment.

use cueflow::{Device, DeviceSpec, Error};

#[test]
fn from_env_accepts_every_documented_value() {
    let cases: &[(&str, DeviceSpec)] = &[
        ("host", DeviceSpec::Host(0)),
        ("host:1", DeviceSpec::Host(1)),
        ("host:2x", DeviceSpec::Host(0)),
        ("host:0,host:1", DeviceSpec::Host(0)),
        (" HOST:3 ", DeviceSpec::Host(3)),
    ];
    for (value, spec) in cases {
        std::env::set_var("CUEFLOW_DEVICE", value);
        let dev = Device::from_env().unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(dev.spec(), *spec, "{value}");
        let all = Device::list_from_env().unwrap();
        assert_eq!(all[0].spec(), *spec, "{value}");
    }
    std::env::set_var("CUEFLOW_DEVICE", "host:2x");
    assert_eq!(Device::list_from_env().unwrap().len(), 2);
    for bad in ["gpu", "host:x", "host:0x", "host:0,host:0"] {
        std::env::set_var("CUEFLOW_DEVICE", bad);
        assert!(
            matches!(Device::from_env(), Err(Error::UnknownDevice(_))),
            "{bad} was accepted"
        );
    }
    // A CUDA list opens its first GPU, or says why CUDA is unavailable — never "unknown".
    std::env::set_var("CUEFLOW_DEVICE", "cuda:0,cuda:1");
    match Device::from_env() {
        Ok(d) => assert_eq!(d.spec(), DeviceSpec::Cuda(0)),
        Err(e) => assert!(matches!(e, Error::Unavailable(_)), "{e}"),
    }
    std::env::remove_var("CUEFLOW_DEVICE");
    assert_eq!(Device::from_env().unwrap().spec(), DeviceSpec::Host(0));
}
