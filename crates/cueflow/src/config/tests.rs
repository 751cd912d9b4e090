//! The docs table and this module list the same variables; the parse rules hold.

use super::*;

/// The `CUEFLOW_*` names in the first column of `docs/configuration.md`'s table of cueflow's
/// variables (the rows up to the next heading).
fn documented() -> Vec<String> {
    let doc = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ));
    let mut names = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with('#') {
            in_table = line.contains("cueflow's variables");
            continue;
        }
        let Some(first) = line.strip_prefix('|').and_then(|r| r.split('|').next()) else {
            continue;
        };
        let name = first.trim().trim_matches('`');
        if in_table && name.starts_with("CUEFLOW_") {
            names.push(name.to_string());
        }
    }
    names
}

/// The `"CUEFLOW_…"` literals of this module's source (names in quotes, whole): every
/// variable it defines.
fn defined_in_source() -> Vec<String> {
    let src = include_str!("mod.rs");
    let mut names = Vec::new();
    for piece in src.split("\"CUEFLOW_").skip(1) {
        let rest: String = piece
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if piece[rest.len()..].starts_with('"') {
            names.push(format!("CUEFLOW_{rest}"));
        }
    }
    names
}

#[test]
fn the_docs_table_lists_every_variable_once() {
    let mut listed: Vec<String> = ALL.iter().map(|v| v.name.to_string()).collect();
    let mut defined = defined_in_source();
    let mut documented = documented();
    for (what, names) in [
        ("config::ALL", &mut listed),
        ("config's source", &mut defined),
        ("docs/configuration.md", &mut documented),
    ] {
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(n, names.len(), "{what} names a variable twice");
    }
    assert!(listed.len() > 20, "{listed:?}");
    assert_eq!(listed, defined, "every Var of config/mod.rs is in ALL");
    assert_eq!(
        listed, documented,
        "docs/configuration.md's table lists the variables config/mod.rs reads"
    );
}

#[test]
fn sanitize_words() {
    use Sanitize::*;
    for (w, m) in [
        ("off", Off),
        ("0", Off),
        ("", Off),
        ("WARN", Warn),
        ("1", Warn),
        (" error ", Error),
        ("panic", Panic),
    ] {
        assert_eq!(sanitize_word(w), Some(m), "{w:?}");
    }
    assert_eq!(sanitize_word("loud"), None);
    assert_eq!(sanitize_setting("loud"), Warn, "an unknown mode warns");
}

#[test]
fn max_bytes_parses_units_and_falls_back_to_the_default() {
    let v = &KERNEL_CACHE_MAX_BYTES;
    let d = DEFAULT_KERNEL_CACHE_MAX_BYTES;
    assert_eq!(max_bytes_setting(v, None, d), Some(d));
    assert_eq!(max_bytes_setting(v, Some(""), d), Some(d));
    assert_eq!(max_bytes_setting(v, Some("1000"), d), Some(1000));
    assert_eq!(max_bytes_setting(v, Some("512K"), d), Some(512 << 10));
    assert_eq!(max_bytes_setting(v, Some(" 256 MiB "), d), Some(256 << 20));
    assert_eq!(max_bytes_setting(v, Some("0"), d), Some(0));
    assert_eq!(max_bytes_setting(v, Some("unlimited"), d), None);
    assert_eq!(max_bytes_setting(v, Some("12 parsecs"), d), Some(d));
    assert_eq!(max_bytes_setting(v, Some("-5"), d), Some(d));
    let p = &PINNED_CACHE_MAX_BYTES;
    assert_eq!(
        max_bytes_setting(p, Some("bad"), 7),
        Some(7),
        "its own default"
    );
}

#[test]
fn launch_timeouts_are_positive_seconds() {
    assert_eq!(
        launch_timeout_setting(" 1.5 "),
        Some(Duration::from_millis(1500))
    );
    for bad in ["0", "-1", "inf", "NaN", "soon", "1e10"] {
        assert_eq!(launch_timeout_setting(bad), None, "{bad}");
    }
}
