//! DV4: the CUDA backend opens on every driver from CUDA 12.0 on and uses what the driver has —
//! a feature newer than the driver is refused with `Error::Unsupported` naming the version it
//! needs, and what has a fallback runs on every driver; the host backend has every feature.
//! `scripts/gpu-driver-floor.sh` runs this through drivers of CUDA 12.0 to 12.8.

use cueflow::{Device, DriverFeature, Error, Graph, KernelArgs};

use crate::conditional::{one, put};
use crate::support::*;

fn feature<'a>(features: &'a [DriverFeature], name: &str) -> &'a DriverFeature {
    features
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no driver feature {name:?} in {features:#?}"))
}

/// DV4: each feature is available exactly when the driver is as new as it needs; an `if` node
/// runs where the driver has conditional nodes and is refused, naming CUDA 12.3, where it has
/// not; NVRTC's major version is never newer than the driver's.
pub fn dv4_features_follow_the_driver(dev: &Device) {
    let p = dev.properties();
    if is_host(dev) {
        assert!(p.driver_features.is_empty(), "{:?}", p.driver_features);
        assert_eq!(p.nvrtc_version, None);
        return;
    }
    assert!(p.driver_version >= 12_000, "driver {}", p.driver_version);
    if let Some(n) = p.nvrtc_version {
        assert!(
            n / 1000 <= p.driver_version / 1000,
            "NVRTC {n}, driver {}",
            p.driver_version
        );
    }
    for f in &p.driver_features {
        assert_eq!(f.available, f.needs <= p.driver_version, "{f:?}");
    }
    let cond = feature(&p.driver_features, "conditional graph nodes (if, while)");
    let out = upload(dev, &[0u32]);
    let mut g = Graph::new(dev);
    let h = g.condition(1, true);
    let mut body = Graph::new(dev);
    body.add_kernel(
        &[],
        &put(),
        one(),
        KernelArgs::new().write(&out).scalar(9u32),
    )
    .unwrap();
    g.add_if(&[], &h, &body).unwrap();
    match (cond.available, g.instantiate()) {
        (true, Ok(exec)) => {
            let s = side_stream(dev);
            exec.launch(&s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(download(&out)[0], 9);
        }
        (false, Err(Error::Unsupported(m))) => {
            let need = format!(
                "needs a CUDA {}.{} driver",
                cond.needs / 1000,
                cond.needs % 1000 / 10
            );
            assert!(m.contains(&need), "{m}");
        }
        (available, r) => panic!(
            "conditional nodes available: {available}, instantiation: {:?}",
            r.map(|_| ())
        ),
    }
}
