//! Slurm's compressed host lists (`SLURM_JOB_NODELIST`): `node[01-04,07]`, `a1,b[2-3]`,
//! `rack[1-2]-gpu[01-02]`. Hosts are separated by commas outside brackets; each bracket group
//! is a comma-separated list of numbers and ranges (`lo-hi`, zero padding kept), and a host
//! with several groups stands for every combination, the last group varying fastest (as
//! `scontrol show hostnames` lists them).

/// The hosts a list names, in its order, or why it is not a host list.
pub(crate) fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top(list)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("`{list}` has an empty host name"));
        }
        let mut names = vec![String::new()];
        for part in parts(item)? {
            names = match part {
                Part::Text(t) => names.into_iter().map(|n| n + t).collect(),
                Part::Group(g) => {
                    let values = group(g).map_err(|e| format!("`{list}`: {e}"))?;
                    names
                        .iter()
                        .flat_map(|n| values.iter().map(move |v| format!("{n}{v}")))
                        .collect()
                }
            };
            if names.len() > MAX_HOSTS {
                return Err(format!("`{list}` names more than {MAX_HOSTS} hosts"));
            }
        }
        hosts.extend(names);
    }
    Ok(hosts)
}

/// The first host of a list: where Slurm starts task 0.
pub(crate) fn first_host(list: &str) -> Result<String, String> {
    expand(list)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("`{list}` names no host"))
}

/// More hosts than any cluster has: a list naming more is a mistake, not a job.
const MAX_HOSTS: usize = 1 << 20;

enum Part<'a> {
    Text(&'a str),
    Group(&'a str),
}

/// Split at commas outside brackets; brackets must pair and not nest.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let (mut out, mut start, mut open) = (Vec::new(), 0, false);
    for (i, c) in list.char_indices() {
        match (c, open) {
            ('[', false) => open = true,
            (']', true) => open = false,
            ('[', true) | (']', false) => return Err(format!("`{list}`: unbalanced `{c}`")),
            (',', false) => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(format!("`{list}`: `[` without `]`"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// A host pattern's literal text and bracket groups, in order.
fn parts(item: &str) -> Result<Vec<Part<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("`{item}`: `[` without `]`"))?;
        if open > 0 {
            out.push(Part::Text(&rest[..open]));
        }
        out.push(Part::Group(&rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Part::Text(rest));
    }
    Ok(out)
}

/// The values of one bracket group, e.g. `01-03,07` → `01 02 03 07`.
fn group(g: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for r in g.split(',') {
        let r = r.trim();
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let num = |s: &str| {
            s.parse::<u64>()
                .ok()
                .filter(|_| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("`[{g}]`: `{r}` is not a number or a range lo-hi"))
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if a > b {
            return Err(format!("`[{g}]`: the range `{r}` runs backwards"));
        }
        if b - a >= MAX_HOSTS as u64 {
            return Err(format!("`[{g}]`: the range `{r}` is too long"));
        }
        let width = lo.len();
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_as_scontrol_does() {
        let cases: &[(&str, &[&str])] = &[
            ("node01", &["node01"]),
            (
                "node[01-04,07]",
                &["node01", "node02", "node03", "node04", "node07"],
            ),
            ("a1,b[2-3],c", &["a1", "b2", "b3", "c"]),
            ("gpu[8-10]", &["gpu8", "gpu9", "gpu10"]),
            ("gpu[08-10]-ib", &["gpu08-ib", "gpu09-ib", "gpu10-ib"]),
            ("r[1-2]-n[01-02]", &["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
            ("node[07,01-02]", &["node07", "node01", "node02"]),
        ];
        for (list, want) in cases {
            assert_eq!(expand(list).unwrap(), *want, "{list}");
        }
        assert_eq!(first_host("node[01-04,07]").unwrap(), "node01");
        assert_eq!(first_host("login,node[3-4]").unwrap(), "login");
    }

    #[test]
    fn malformed_lists_are_refused() {
        for bad in [
            "",
            "node[01-04",
            "node01-04]",
            "node[a-b]",
            "node[4-1]",
            "n[[1]]",
            "a,,b",
            "n[1-]",
            "n[]",
            "n[0-99999999999]",
        ] {
            assert!(expand(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
