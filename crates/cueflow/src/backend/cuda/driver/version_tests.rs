//! The per-version function lists (`api-versions.txt`, generated from cudarc's versioned
//! bindings by `scripts/cuda-api-versions.py`) against what the driver layer calls, and the
//! version gating against fake drivers made from those lists: which entry point a call takes
//! and which feature is `Unsupported`, naming which version, on every CUDA 12.x.

use super::*;
use crate::backend::cuda::driver::library::verdict;

const TABLE: &str = include_str!("api-versions.txt");

/// `(library, function, first, last)` rows of the table (`last` `None`: still in the newest).
fn rows() -> Vec<(&'static str, &'static str, u32, Option<u32>)> {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "bad row {l:?}");
            let last = (f[3] != "-").then(|| f[3].parse().expect("a version"));
            (f[0], f[1], f[2].parse().expect("a version"), last)
        })
        .collect()
}

/// Whether the driver of CUDA `v` has `function`, by the table (what the old-driver shim of
/// `scripts/gpu-driver-floor.sh` hides is exactly the rest).
fn in_version(v: Version, function: &str) -> bool {
    rows().iter().any(|&(lib, f, first, last)| {
        lib == "driver" && f == function && first <= v.0 && last.is_none_or(|l| v.0 <= l)
    })
}

/// The functions the shim hides for version `v`: those of a later version only.
fn hidden(v: Version) -> Vec<&'static str> {
    rows()
        .into_iter()
        .filter(|&(lib, _, first, _)| lib == "driver" && first > v.0)
        .map(|r| r.1)
        .collect()
}

/// A fake driver of CUDA `v` exporting exactly that version's functions.
fn fake(v: Version) -> Api {
    verdict("fake", v, |s| in_version(v, s)).expect("every 12.x driver passes the floor")
}

const FLOOR_RUNS: [Version; 5] = [
    Version::new(12, 0),
    Version::new(12, 2),
    Version::new(12, 4),
    Version::new(12, 6),
    Version::new(12, 8),
];

#[test]
fn base_functions_are_in_every_driver_from_the_floor_on() {
    for f in BASE {
        let row = rows().into_iter().find(|r| r.1 == *f);
        let (_, _, first, last) = row.unwrap_or_else(|| panic!("{f} is not a driver function"));
        assert!(first <= Version::FLOOR.0, "{f} came with {first}");
        assert!(last.is_none(), "{f} is gone from the newest headers");
    }
}

#[test]
fn optional_functions_came_when_the_table_says() {
    for f in Func::ALL {
        let row = rows().into_iter().find(|r| r.1 == f.symbol());
        let (_, _, first, last) = row.unwrap_or_else(|| panic!("{f:?} is not in the table"));
        assert_eq!(Version(first), f.since(), "{f:?}");
        assert!(last.is_none(), "{f:?} is gone from the newest headers");
        assert_eq!(Func::of_symbol(f.symbol()), Some(f));
    }
    for o in Old::ALL {
        for v in FLOOR_RUNS.into_iter().chain([Version::new(12, 9)]) {
            assert!(in_version(v, o.symbol()), "{o:?} missing from {v}");
        }
    }
}

#[test]
fn hidden_lists_per_version() {
    let h = |v| hidden(v);
    assert!(h(Version::new(12, 0)).contains(&"cuFuncGetParamInfo"));
    assert!(h(Version::new(12, 0)).contains(&"cuCtxSetFlags"));
    assert!(!h(Version::new(12, 2)).contains(&"cuCtxSetFlags"));
    assert!(h(Version::new(12, 2)).contains(&"cuStreamBeginCaptureToGraph"));
    assert!(!h(Version::new(12, 4)).contains(&"cuFuncGetParamInfo"));
    assert!(h(Version::new(12, 6)).contains(&"cuEventElapsedTime_v2"));
    assert!(!h(Version::new(12, 8)).contains(&"cuEventElapsedTime_v2"));
    for v in FLOOR_RUNS {
        for f in BASE {
            assert!(!h(v).contains(f), "{f} hidden at {v}");
        }
        // Old entry points were never "later only".
        for o in Old::ALL {
            assert!(!h(v).contains(&o.symbol()), "{o:?} hidden at {v}");
        }
    }
}

#[test]
fn below_the_floor_or_without_a_base_function_is_refused() {
    let why = verdict("libcuda.so.1", Version::new(11, 8), |_| true).unwrap_err();
    assert!(
        why.contains("CUDA 11.8") && why.contains("12.0 or newer"),
        "{why}"
    );
    let why = verdict("libcuda.so.1", Version::new(12, 4), |s| {
        s != "cuLaunchKernel"
    })
    .unwrap_err();
    assert!(why.contains("cuLaunchKernel"), "{why}");
}

#[test]
fn entry_points_by_version() {
    for v in FLOOR_RUNS {
        let api = fake(v);
        let ctx = api.pick(Func::CtxCreateV4, Old::CtxCreateV2).unwrap();
        assert_eq!(ctx == Entry::New, v >= Version::new(12, 5), "{v}");
        let el = api
            .pick(Func::EventElapsedTimeV2, Old::EventElapsedTime)
            .unwrap();
        assert_eq!(el == Entry::New, v >= Version::new(12, 8), "{v}");
        let pf = api
            .pick(Func::MemPrefetchAsyncV2, Old::MemPrefetchAsync)
            .unwrap();
        assert_eq!(pf == Entry::New, v >= Version::new(12, 2), "{v}");
        assert_eq!(api.supports(Feature::ParamInfo), v >= Version::new(12, 4));
        assert_eq!(
            api.supports(Feature::EagerLoading),
            v >= Version::new(12, 4)
        );
        assert_eq!(
            api.supports(Feature::CaptureToGraph),
            v >= Version::new(12, 3)
        );
    }
    // A driver that kept neither entry point: an error, not a panic.
    let bare = Api::probe(Version::new(13, 0), |_| false);
    assert!(matches!(
        bare.pick(Func::EventElapsedTimeV2, Old::EventElapsedTime),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn unsupported_features_name_the_version_they_need() {
    let msg = |api: Api, f| match api.require(f) {
        Err(Error::Unsupported(m)) => m,
        other => panic!(
            "{f:?} on {}: expected Unsupported, got {other:?}",
            api.version
        ),
    };
    let m = msg(fake(Version::new(12, 0)), Feature::SyncMode);
    assert!(
        m.contains("needs a CUDA 12.1 driver or newer (this driver is CUDA 12.0)"),
        "{m}"
    );
    let m = msg(fake(Version::new(12, 2)), Feature::ConditionalIfWhile);
    assert!(m.contains("needs a CUDA 12.3 driver"), "{m}");
    // if/else and switch: the functions are there from 12.3, the node kinds from 12.8.
    let m = msg(fake(Version::new(12, 6)), Feature::ConditionalElseSwitch);
    assert!(m.contains("needs a CUDA 12.8 driver"), "{m}");
    assert!(fake(Version::new(12, 8))
        .require(Feature::ConditionalElseSwitch)
        .is_ok());
    assert!(fake(Version::new(12, 4))
        .require(Feature::ConditionalIfWhile)
        .is_ok());
    // A missing function's own error names its version too.
    let m = match fake(Version::new(12, 0)).missing(Func::FuncGetParamInfo) {
        Error::Unsupported(m) => m,
        other => panic!("{other:?}"),
    };
    assert!(
        m.contains("cuFuncGetParamInfo needs a CUDA 12.4 driver"),
        "{m}"
    );
}

#[test]
fn every_feature_has_its_version_and_either_a_fallback_or_none() {
    for f in Feature::ALL {
        let newest = fake(Version::new(12, 9));
        assert!(newest.supports(f), "{f:?} unsupported on 12.9");
        let oldest = fake(Version::FLOOR);
        assert_eq!(oldest.supports(f), f.needs() <= Version::FLOOR, "{f:?}");
        assert!(!f.what().is_empty());
    }
}

/// Every "needs a newer driver" refusal reads back as the version it names, which tests and
/// examples compare with the device's driver to skip instead of failing; nothing else does.
#[test]
fn a_refusal_for_an_old_driver_names_the_version_it_needs() {
    let e = needs(
        "conditional graph nodes (if, while)",
        Version::new(12, 3),
        Version::new(12, 2),
    );
    assert_eq!(e.needed_driver_version(), Some(12_030), "{e}");
    assert!(e
        .to_string()
        .contains("needs a CUDA 12.3 driver or newer (this driver is CUDA 12.2)"));
    for f in Feature::ALL {
        let e = needs(f.what(), f.needs(), Version::FLOOR);
        assert_eq!(e.needed_driver_version(), Some(f.needs().0), "{e}");
    }
    assert_eq!(
        Error::Unsupported("no cuBLAS".into()).needed_driver_version(),
        None
    );
    let other = Error::Unavailable("the library needs a CUDA 12.3 driver or newer".into());
    assert_eq!(other.needed_driver_version(), None, "only Unsupported");
}
