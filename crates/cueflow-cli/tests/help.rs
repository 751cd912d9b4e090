//! `cueflow --help` and every subcommand's help read without the project's jargon: no "seeds"
//! (the project's starting documents), no bare rule ids of the specification (`AC4`, `CP3`),
//! no `SPEC`, no `H2D`/`D2H` shorthand (say host-to-device, device-to-host).

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cueflow"))
        .args(args)
        .arg("--help")
        .output()
        .expect("the cueflow binary runs");
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The jargon in `text`, one entry per finding.
fn jargon(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        let b = word.as_bytes();
        let rule_id = (3..=4).contains(&b.len())
            && b[..2].iter().all(u8::is_ascii_uppercase)
            && b[2..].iter().all(u8::is_ascii_digit);
        if rule_id
            || ["SPEC", "H2D", "D2H"].contains(&word)
            || word.to_lowercase().starts_with("seed")
        {
            found.push(word.to_string());
        }
    }
    found
}

#[test]
fn jargon_is_recognised() {
    assert_eq!(
        jargon("the seeds' pipeline (SPEC AC4), the H2D copy, --h2d-gbps, FP16"),
        ["seeds", "SPEC", "AC4", "H2D", "FP16"]
    );
}

#[test]
fn every_help_text_reads_without_jargon() {
    let top = help(&[]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(
        commands,
        ["demo", "bench", "info", "model", "trace"],
        "{top}"
    );
    for args in std::iter::once(vec![]).chain(commands.iter().map(|c| vec![*c])) {
        let text = help(&args);
        let found = jargon(&text);
        assert!(
            found.is_empty(),
            "`cueflow {args:?} --help` says {found:?}:\n{text}"
        );
    }
}
