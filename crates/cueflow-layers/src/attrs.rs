//! What an item's attributes say to the checker: whether it is compiled outside tests, and the
//! file a `#[path]` attribute names.

use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Lit, Meta, Token};

/// Whether an item with these attributes is left out of the library as it is built for users:
/// under `#[cfg(test)]` (or `doctest`, or any predicate that is false when those are).
pub(crate) fn test_only(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .any(|a| a.parse_args::<Meta>().ok().and_then(|m| holds(&m)) == Some(false))
}

/// The value of a `cfg` predicate when `test` and `doctest` are off; `None` where it depends on
/// something else (a feature, the target), which the checker counts as on: every backend's
/// code is checked whatever features a build picks.
fn holds(meta: &Meta) -> Option<bool> {
    match meta {
        Meta::Path(p) if p.is_ident("test") || p.is_ident("doctest") => Some(false),
        Meta::Path(_) | Meta::NameValue(_) => None,
        Meta::List(list) => {
            let inner = list
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .ok()?;
            let values: Vec<Option<bool>> = inner.iter().map(holds).collect();
            if list.path.is_ident("not") {
                values.first().copied().flatten().map(|v| !v)
            } else if list.path.is_ident("all") {
                if values.contains(&Some(false)) {
                    Some(false)
                } else {
                    values.iter().all(|v| *v == Some(true)).then_some(true)
                }
            } else if list.path.is_ident("any") {
                if values.contains(&Some(true)) {
                    Some(true)
                } else {
                    values.iter().all(|v| *v == Some(false)).then_some(false)
                }
            } else {
                None
            }
        }
    }
}

/// The file a `#[path = "…"]` attribute names, if there is one.
pub(crate) fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            Expr::Lit(e) => match &e.lit {
                Lit::Str(s) => Some(s.value()),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(src: &str) -> Vec<Attribute> {
        syn::parse_str::<syn::ItemFn>(&format!("{src} fn f() {{}}"))
            .expect("an item")
            .attrs
    }

    #[test]
    fn test_code_is_recognised_through_cfg_predicates() {
        assert!(test_only(&attrs("#[cfg(test)]")));
        assert!(test_only(&attrs("#[cfg(all(test, feature = \"cuda\"))]")));
        assert!(test_only(&attrs("#[cfg(doctest)]")));
        assert!(!test_only(&attrs("#[cfg(not(test))]")));
        assert!(!test_only(&attrs("#[cfg(any(test, loom))]")));
        assert!(!test_only(&attrs("#[cfg(feature = \"cuda\")]")));
        assert!(!test_only(&attrs("#[inline]")));
    }

    #[test]
    fn path_attributes_are_read() {
        assert_eq!(
            path_attr(&attrs("#[path = \"x_tests.rs\"]")).as_deref(),
            Some("x_tests.rs")
        );
        assert_eq!(path_attr(&attrs("#[inline]")), None);
    }
}
