//! The checker catches what it is for: cueflow's rules run on small crates written for each
//! test (a layout like cueflow's, in a folder of their own), each with one violation injected,
//! and on the same crate without it, which passes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cueflow_layers::cueflow::RULES;
use cueflow_layers::{check, Report, Rule};

/// A crate laid out as cueflow is (api → core → backend contract ← host, cuda), keeping every
/// rule, with a path of each kind the checker resolves.
const BASE: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        "mod api;\nmod backend;\nmod config;\nmod core;\nmod error;\nmod types;\n\
         pub use api::device::Device;\npub use error::Error;\npub use types::Dim3;\n",
    ),
    ("src/error.rs", "pub struct Error;\n"),
    ("src/types.rs", "pub struct Dim3;\n"),
    (
        "src/config.rs",
        "pub(crate) fn device() -> Option<String> { std::env::var(\"CUEFLOW_DEVICE\").ok() }\n",
    ),
    ("src/api/mod.rs", "pub(crate) mod device;\n"),
    (
        "src/api/device.rs",
        "use crate::core::stream::CoreStream;\npub struct Device(CoreStream);\n",
    ),
    (
        "src/core/mod.rs",
        "pub(crate) mod events;\npub(crate) mod graph;\npub(crate) mod stream;\n\
         pub(crate) use crate::backend::contract::Op;\n",
    ),
    (
        "src/core/stream.rs",
        "use super::Op;\npub(crate) struct CoreStream(Op);\n\
         pub(crate) fn submit() { super::graph::build() }\n",
    ),
    ("src/core/graph.rs", "pub(crate) fn build() {}\n"),
    ("src/core/events.rs", "pub(crate) fn record() {}\n"),
    (
        "src/backend/mod.rs",
        "pub(crate) mod contract;\npub(crate) mod cuda;\npub(crate) mod host;\n\
         pub(crate) fn open() -> host::HostBackend { host::HostBackend }\n\
         pub(crate) fn sync() { cuda::stream::sync() }\n",
    ),
    (
        "src/backend/contract.rs",
        "pub(crate) struct Op(pub(crate) Option<crate::types::Dim3>);\n",
    ),
    (
        "src/backend/host/mod.rs",
        "mod engine;\npub(crate) struct HostBackend;\n",
    ),
    (
        "src/backend/host/engine.rs",
        "use super::super::contract::Op;\npub(crate) fn run(_: Op) {}\n",
    ),
    (
        "src/backend/cuda/mod.rs",
        "pub(crate) mod driver;\npub(crate) mod stream;\n",
    ),
    (
        "src/backend/cuda/driver/mod.rs",
        "use cudarc::driver::sys;\npub(crate) fn init() { unsafe { sys::cuInit(0) }; }\n",
    ),
    (
        "src/backend/cuda/stream.rs",
        "use crate::error::Error;\n\
         pub(crate) fn sync() -> Result<(), Error> { super::driver::init(); Ok(()) }\n",
    ),
    ("tests/smoke.rs", "#[test]\nfn runs() {}\n"),
];

/// Writes the base crate with `changes` (a file's new text, or a new file) into a folder named
/// after the test.
fn write_crate(test: &str, changes: &[(&str, &str)]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("injected")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    let mut files: BTreeMap<&str, &str> = BASE.iter().copied().collect();
    files.extend(changes.iter().copied());
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("a writable folder");
        std::fs::write(&path, text).expect("a writable file");
    }
    dir
}

/// The base crate with `changes`, checked against cueflow's rules without their known lists
/// (those name cueflow's own files).
fn check_with(test: &str, changes: &[(&str, &str)]) -> Report {
    let dir = write_crate(test, changes);
    let rules: Vec<Rule> = RULES.iter().map(|r| r.known(&[])).collect();
    check(&dir, &rules).unwrap_or_else(|e| panic!("{e}"))
}

/// The messages of `report` that break rule `rule`, which must be one of cueflow's.
fn broken<'r>(report: &'r Report, rule: &str) -> Vec<&'r str> {
    assert!(
        RULES.iter().any(|r| r.name == rule),
        "no rule named {rule:?}"
    );
    report.broken_by(rule)
}

fn all(report: &Report) -> Vec<String> {
    report
        .broken
        .iter()
        .map(|f| format!("[{}] {}", f.rule, f.message))
        .collect()
}

const NO_API_IN_BACKENDS: &str = "core and backends import neither api nor kernels";
const NO_CORE_IN_BACKENDS: &str = "backends import nothing of core";
const NO_CUDA_IN_HOST: &str = "the host backend imports nothing of the CUDA backend";
const NO_CIRCLE: &str = "no import circle of more than two files";
const NO_LONG_FILE: &str = "no file of src or tests over 700 lines";
const DRIVER_CALLS: &str = "no driver call outside the driver layer";
const TEST_FILES_RUN: &str = "every file under tests/ is compiled into a test target";
const CONFIG_AT_THE_BOTTOM: &str = "config imports no layer";
const TYPES_AT_THE_BOTTOM: &str = "types import no layer";
const NO_PUBLIC_IN_CONTRACT: &str = "no public type is defined in the backend contract";
const NAMES_IN_CONFIG: &str = "no CUEFLOW_ variable is named outside config";
const ENV_READS: &str =
    "the environment is read by config and the readers of other programs' conventions";

#[test]
fn the_base_crate_keeps_every_rule() {
    let report = check_with("base", &[]);
    assert!(report.broken.is_empty(), "{:#?}", all(&report));
    assert_eq!(report.files, BASE.len() - 1, "every source file was read");
    assert!(report.edges >= 8, "{} import edges", report.edges);
}

#[test]
fn a_root_re_export_used_in_a_backend_is_caught() {
    let host_mod = "mod engine;\nmod x;\npub(crate) struct HostBackend;\n";
    let report = check_with(
        "root_re_export",
        &[
            ("src/backend/host/mod.rs", host_mod),
            (
                "src/backend/host/x.rs",
                "pub(crate) fn f(_: &crate::Device) {}\n",
            ),
        ],
    );
    assert_eq!(
        broken(&report, NO_API_IN_BACKENDS),
        [
            "src/backend/host/x.rs:1 names `crate::Device`, defined in src/api/device.rs \
          (crate::api::device)"
        ],
        "{:#?}",
        all(&report)
    );
    // The same through a `use` of the root's name, and in a macro's body.
    for (test, text) in [
        ("root_re_export_use", "use crate::Device;\npub(crate) fn f(_: &Device) {}\n"),
        (
            "root_re_export_macro",
            "pub(crate) fn f() -> String { format!(\"{}\", std::mem::size_of::<crate::Device>()) }\n",
        ),
    ] {
        let report = check_with(
            test,
            &[("src/backend/host/mod.rs", host_mod), ("src/backend/host/x.rs", text)],
        );
        let found = broken(&report, NO_API_IN_BACKENDS);
        assert!(!found.is_empty(), "{test}: {:#?}", all(&report));
        assert!(found.iter().all(|m| m.starts_with("src/backend/host/x.rs:")), "{found:#?}");
    }
}

#[test]
fn a_re_export_inside_a_module_is_followed_to_the_definition() {
    // Core re-exports the api's type; a backend that names it through core breaks two rules:
    // it names core, and what it names is the api's.
    let report = check_with(
        "module_re_export",
        &[
            (
                "src/core/mod.rs",
                "pub(crate) mod events;\npub(crate) mod graph;\npub(crate) mod stream;\n\
                 pub(crate) use crate::backend::contract::Op;\npub(crate) use crate::api::device::*;\n",
            ),
            (
                "src/backend/host/engine.rs",
                "use super::super::contract::Op;\npub(crate) fn run(_: Op, _: crate::core::Device) {}\n",
            ),
        ],
    );
    assert_eq!(
        broken(&report, NO_CORE_IN_BACKENDS).len(),
        1,
        "{:#?}",
        all(&report)
    );
    // (Core's re-export of the api's module is itself a path from core into the api.)
    assert_eq!(
        broken(&report, NO_API_IN_BACKENDS),
        [
            "src/backend/host/engine.rs:2 names `crate::core::Device`, defined in \
             src/api/device.rs (crate::api::device)",
            "src/core/mod.rs:5 names `crate::api::device`, through src/api/mod.rs (crate::api)"
        ]
    );
}

#[test]
fn a_relative_path_into_another_backend_is_caught() {
    // `super::cuda` from the host backend's folder module, `super::super::cuda` from a file
    // below it, and a `use`d alias of the other backend.
    for (test, file, text) in [
        (
            "relative_super",
            "src/backend/host/mod.rs",
            "mod engine;\npub(crate) struct HostBackend;\n\
             pub(crate) fn wait() { let _ = super::cuda::stream::sync(); }\n",
        ),
        (
            "relative_super_super",
            "src/backend/host/engine.rs",
            "use super::super::contract::Op;\npub(crate) fn run(_: Op) {}\n\
             pub(crate) fn wait() { let _ = super::super::cuda::stream::sync(); }\n",
        ),
        (
            "relative_alias",
            "src/backend/host/engine.rs",
            "use super::super::{contract::Op, cuda as gpu};\npub(crate) fn run(_: Op) {}\n\
             pub(crate) fn wait() { let _ = gpu::stream::sync(); }\n",
        ),
    ] {
        let report = check_with(test, &[(file, text)]);
        let found = broken(&report, NO_CUDA_IN_HOST);
        assert!(!found.is_empty(), "{test}: {:#?}", all(&report));
        assert!(
            found.iter().all(|m| m.starts_with(file)),
            "{test}: {found:#?}"
        );
    }
}

#[test]
fn a_circle_of_three_files_is_caught_and_one_of_two_is_not() {
    // stream → graph (super::), graph → events (a `use`d module), events → stream (through a
    // re-export at the root).
    let circle = [
        ("src/core/graph.rs", "use crate::core::events;\npub(crate) fn build() { events::record() }\n"),
        ("src/core/events.rs", "pub(crate) fn record() { let _: Option<crate::CoreStream> = None; }\n"),
        (
            "src/lib.rs",
            "mod api;\nmod backend;\nmod core;\nmod error;\n\
             pub use api::device::Device;\npub use error::Error;\npub use core::stream::CoreStream;\n",
        ),
    ];
    let report = check_with("circle_of_three", &circle);
    let found = broken(&report, NO_CIRCLE);
    assert_eq!(found.len(), 1, "{:#?}", all(&report));
    for edge in [
        "src/core/stream.rs:3 -> src/core/graph.rs (`super::graph::build`)",
        "src/core/graph.rs:1 -> src/core/events.rs (`crate::core::events`)",
        "src/core/events.rs:1 -> src/core/stream.rs (`crate::CoreStream`)",
    ] {
        assert!(found[0].contains(edge), "{edge} in {}", found[0]);
    }
    // Two files that import each other are allowed (one such pair is documented in cueflow).
    let pair = [(
        "src/core/graph.rs",
        "pub(crate) fn build() { let _ = super::stream::submit; }\n",
    )];
    let report = check_with("circle_of_two", &pair);
    assert!(broken(&report, NO_CIRCLE).is_empty(), "{:#?}", all(&report));
}

#[test]
fn a_file_over_700_lines_is_caught_in_src_and_in_tests() {
    let long = "// a line\n".repeat(701);
    let just = "// a line\n".repeat(700);
    let graph_long = format!("pub(crate) fn build() {{}}\n{long}");
    let report = check_with(
        "long_files",
        &[
            ("src/core/graph.rs", &graph_long),
            (
                "tests/smoke.rs",
                &format!("#[test]\nfn runs() {{}}\n{long}"),
            ),
            ("tests/fits.rs", &just),
        ],
    );
    assert_eq!(
        broken(&report, NO_LONG_FILE),
        [
            "src/core/graph.rs: 702 lines; split it along its seams",
            "tests/smoke.rs: 703 lines; split it along its seams"
        ]
    );
}

#[test]
fn test_code_is_left_out() {
    // A backend's unit tests may use anything; so may a file that only tests compile.
    let report = check_with(
        "test_code",
        &[
            (
                "src/backend/host/mod.rs",
                "mod engine;\n#[cfg(test)]\nmod probe;\npub(crate) struct HostBackend;\n\
                 #[cfg(test)]\nfn probe() -> Option<crate::Device> { None }\n\
                 #[cfg(test)]\nmod tests { use crate::core::stream::CoreStream; }\n",
            ),
            (
                "src/backend/host/probe.rs",
                "use crate::api::device::Device;\n",
            ),
        ],
    );
    assert!(report.broken.is_empty(), "{:#?}", all(&report));
}

#[test]
fn a_driver_call_outside_the_driver_layer_is_caught() {
    for (test, text) in [
        (
            "driver_call",
            "pub(crate) fn sync() -> Result<(), crate::error::Error> {\n\
             unsafe { cudarc::driver::sys::cuCtxSynchronize() };\nOk(())\n}\n",
        ),
        (
            "driver_call_renamed",
            "use cudarc::driver::sys::{self as cu};\n\
             pub(crate) fn sync() -> Result<(), crate::error::Error> {\n\
             unsafe { cu::cuCtxSynchronize() };\nOk(())\n}\n",
        ),
    ] {
        let report = check_with(test, &[("src/backend/cuda/stream.rs", text)]);
        let found = broken(&report, DRIVER_CALLS);
        assert_eq!(found.len(), 1, "{test}: {:#?}", all(&report));
        assert!(
            found[0].contains("calls `cudarc::driver::sys::cuCtxSynchronize` outside"),
            "{}",
            found[0]
        );
    }
}

#[test]
fn a_test_file_no_target_compiles_is_caught() {
    let report = check_with(
        "orphan_test_file",
        &[
            ("tests/suite/main.rs", "mod reached;\n"),
            ("tests/suite/reached.rs", "#[test]\nfn runs() {}\n"),
            ("tests/suite/forgotten.rs", "#[test]\nfn never_runs() {}\n"),
            ("tests/common/helper.rs", "pub fn help() {}\n"),
            (
                "tests/smoke.rs",
                "#[path = \"common/helper.rs\"]\nmod helper;\n#[test]\nfn runs() {}\n",
            ),
        ],
    );
    assert_eq!(
        broken(&report, TEST_FILES_RUN),
        [
            "tests/suite/forgotten.rs is in no test target (no `mod` of tests/*.rs or \
          tests/*/main.rs reaches it), so it is never compiled"
        ]
    );
}

#[test]
fn a_known_list_only_shrinks() {
    let injected = [(
        "src/backend/cuda/stream.rs",
        "pub(crate) fn sync() { unsafe { cudarc::driver::sys::cuCtxSynchronize() }; }\n",
    )];
    let dir = write_crate("known_list", &injected);
    let with_known = |known: &'static [&'static str]| {
        let rule = Rule::calls_only_in(DRIVER_CALLS, "sys::cu", &["backend::cuda::driver"]);
        check(&dir, &[rule.known(known)]).unwrap_or_else(|e| panic!("{e}"))
    };
    // A file on the list may break the rule; one that joins it may not.
    let listed = with_known(&["src/backend/cuda/stream.rs"]);
    assert!(
        listed.broken.is_empty() && listed.stale.is_empty(),
        "{listed:#?}"
    );
    let joined = with_known(&[]);
    assert_eq!(joined.broken.len(), 1, "{joined:#?}");
    // An entry whose file keeps the rule now is reported, to be struck off.
    let kept = with_known(&["src/backend/cuda/stream.rs", "src/backend/cuda/mod.rs"]);
    assert_eq!(
        kept.stale,
        ["no driver call outside the driver layer: src/backend/cuda/mod.rs"]
    );
}

#[test]
fn a_missing_module_file_is_an_error_not_a_pass() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("injected/missing_module");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).expect("a writable folder");
    std::fs::write(dir.join("src/lib.rs"), "mod gone;\n").expect("a writable file");
    let err = check(&dir, RULES).expect_err("a `mod` without its file");
    assert!(
        err.contains("src/lib.rs:1: `mod gone;` names src/gone.rs"),
        "{err}"
    );
}

#[test]
fn config_importing_a_layer_is_caught() {
    let report = check_with(
        "config_imports_core",
        &[(
            "src/config.rs",
            "pub(crate) fn device() -> Option<String> { crate::core::graph::build(); None }\n",
        )],
    );
    let found = broken(&report, CONFIG_AT_THE_BOTTOM);
    assert_eq!(found.len(), 1, "{:#?}", all(&report));
    assert!(
        found[0].contains("src/config.rs:1 names `crate::core::graph::build`"),
        "{}",
        found[0]
    );
}

#[test]
fn an_environment_read_outside_config_is_caught() {
    for (test, text) in [
        (
            "env_read",
            "pub(crate) fn build() { let _ = std::env::var_os(\"HOME\"); }\n",
        ),
        (
            "env_read_used",
            "use std::env;\npub(crate) fn build() { let _ = env::var(\"HOME\"); }\n",
        ),
    ] {
        let report = check_with(test, &[("src/core/graph.rs", text)]);
        let found = broken(&report, ENV_READS);
        assert_eq!(found.len(), 1, "{test}: {:#?}", all(&report));
        assert!(found[0].starts_with("src/core/graph.rs:"), "{}", found[0]);
    }
}

#[test]
fn a_cueflow_variable_named_outside_config_is_caught() {
    let lookup = "fn lookup(_: &str) -> Option<String> { None }\n";
    for (test, code) in [
        (
            "name_in_call",
            "pub(crate) fn build() { let _ = lookup(\"CUEFLOW_DEVICE\"); }\n",
        ),
        (
            "name_in_macro",
            "pub(crate) fn build() { let _ = format!(\"{:?}\", lookup(\"CUEFLOW_X2\")); }\n",
        ),
        (
            "name_in_const",
            "const N: &str = \"CUEFLOW_TRACE\";\npub(crate) fn build() { let _ = lookup(N); }\n",
        ),
    ] {
        let text = format!("{code}{lookup}");
        let report = check_with(test, &[("src/core/graph.rs", &text)]);
        let found = broken(&report, NAMES_IN_CONFIG);
        assert_eq!(found.len(), 1, "{test}: {:#?}", all(&report));
        assert!(found[0].starts_with("src/core/graph.rs:"), "{}", found[0]);
    }
    // A message that mentions a variable, and test code, name none.
    let text = format!(
        "pub(crate) fn build() {{ let _ = lookup(\"set CUEFLOW_DEVICE=cuda\"); }}\n\
         #[cfg(test)]\nfn probe() {{ let _ = lookup(\"CUEFLOW_DEVICE\"); }}\n{lookup}"
    );
    let report = check_with("name_in_message", &[("src/core/graph.rs", &text)]);
    assert!(report.broken.is_empty(), "{:#?}", all(&report));
}

#[test]
fn types_importing_a_layer_is_caught() {
    let report = check_with(
        "types_import",
        &[(
            "src/types.rs",
            "pub struct Dim3;\npub(crate) fn f() { crate::core::graph::build() }\n",
        )],
    );
    let found = broken(&report, TYPES_AT_THE_BOTTOM);
    assert_eq!(found.len(), 1, "{:#?}", all(&report));
    assert!(found[0].starts_with("src/types.rs:2 names `crate::core::graph::build`"));
}

#[test]
fn a_public_type_defined_in_the_contract_is_caught() {
    let contract = "pub(crate) struct Op(pub(crate) Option<crate::types::Dim3>);\n\
                    pub struct Flags;\npub(crate) struct Inner;\n";
    let report = check_with(
        "public_in_contract",
        &[("src/backend/contract.rs", contract)],
    );
    assert_eq!(
        broken(&report, NO_PUBLIC_IN_CONTRACT),
        ["src/backend/contract.rs:2 defines the public `Flags` inside crate::backend::contract; \
          define it where public types live and import it"],
        "{:#?}",
        all(&report)
    );
    assert_eq!(report.broken.len(), 1, "{:#?}", all(&report));
}

const NO_LONG_FN: &str = "no function over 80 lines in the api, core or a backend";
const NO_MANY_PARAMS: &str =
    "no function with more than 5 parameters in the api, core or a backend";

/// A function `name` whose body has `lines` lines in all, from its `fn` to its closing brace.
fn function_of(name: &str, lines: usize) -> String {
    let body = "    let _ = 1;\n".repeat(lines.saturating_sub(2));
    format!("pub(crate) fn {name}() {{\n{body}}}\n")
}

#[test]
fn a_function_over_80_lines_is_caught_in_a_method_too() {
    let long = format!(
        "pub(crate) fn build() {{}}\n{}pub(crate) struct G;\nimpl G {{\n{}}}\n",
        function_of("fits", 80),
        function_of("walk", 81).replace("pub(crate) fn", "    pub(crate) fn")
    );
    let report = check_with("long_function", &[("src/core/graph.rs", &long)]);
    assert_eq!(
        broken(&report, NO_LONG_FN),
        ["src/core/graph.rs:84 `G::walk` has 81 lines; split it into steps that read on their own"],
        "{:#?}",
        all(&report)
    );
    assert_eq!(report.broken[0].key, "src/core/graph.rs: G::walk");
    // Test code is left out, and so is code outside the api, core and the backends.
    let test_only = format!(
        "pub(crate) fn build() {{}}\n#[cfg(test)]\n{}",
        function_of("walk", 81)
    );
    let report = check_with("long_test_function", &[("src/core/graph.rs", &test_only)]);
    assert!(report.broken.is_empty(), "{:#?}", all(&report));
    let config = format!(
        "pub(crate) fn device() -> Option<String> {{ None }}\n{}",
        function_of("parse", 81)
    );
    let report = check_with("long_config_function", &[("src/config.rs", &config)]);
    assert!(report.broken.is_empty(), "{:#?}", all(&report));
}

#[test]
fn a_function_with_more_than_5_parameters_is_caught_self_not_counted() {
    let text = "pub(crate) fn build() {}\n\
                pub(crate) struct G;\n\
                impl G {\n\
                    pub(crate) fn five(&self, a: u8, b: u8, c: u8, d: u8, e: u8) {}\n\
                    pub(crate) fn six(&self, a: u8, b: u8, c: u8, d: u8, e: u8, f: u8) {}\n\
                }\n\
                pub(crate) fn free(a: u8, b: u8, c: u8, d: u8, e: u8, f: u8) {}\n";
    let report = check_with("many_params", &[("src/core/graph.rs", text)]);
    assert_eq!(
        broken(&report, NO_MANY_PARAMS),
        [
            "src/core/graph.rs:5 `G::six` has 6 parameters; split it into steps that read on \
             their own",
            "src/core/graph.rs:7 `free` has 6 parameters; split it into steps that read on their \
             own"
        ],
        "{:#?}",
        all(&report)
    );
}
