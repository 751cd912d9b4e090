//! cueflow's source keeps the rules of `cueflow_layers::cueflow::RULES`.

use std::path::Path;

use cueflow_layers::cueflow::RULES;

#[test]
fn cueflow_keeps_its_layer_rules() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cueflow");
    let report = cueflow_layers::check(&dir, RULES).unwrap_or_else(|e| panic!("{e}"));
    // The tree and its imports were found (a wrong directory would pass every rule).
    assert!(report.files > 100, "{} files read", report.files);
    assert!(report.edges > 300, "{} import edges", report.edges);
    let broken: Vec<String> = report
        .broken
        .iter()
        .map(|f| format!("[{}] {}", f.rule, f.message))
        .collect();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    assert!(
        report.stale.is_empty(),
        "these files keep their rule now; strike them off its known list: {:#?}",
        report.stale
    );
}
