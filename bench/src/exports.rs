//! Which export a run uses when `--export` is not given: the server's only one, asked
//! with MOUNT EXPORT (RFC 1813 Appendix I, §5.2.5). A server with several exports (or
//! none) is an error naming them, so a run never guesses. NFSv4.1 runs ask MOUNT on
//! their setup connection to the NFS port too (the gateway serves it there, RPC
//! programs share a connection) and name the path they found with PUTROOTFH + LOOKUP,
//! as they would a given one.

use nfs_wire::v3mount::ExportNode;

/// `given`, or else the only export `ask` lists.
pub fn choose(
    given: Option<&str>,
    ask: impl FnOnce() -> anyhow::Result<Vec<ExportNode>>,
) -> anyhow::Result<String> {
    if let Some(path) = given {
        return Ok(path.to_string());
    }
    let listed = ask().map_err(|e| anyhow::anyhow!("asking the server's exports: {e:#}"))?;
    let path = only(&listed)?;
    eprintln!("bench: using the server's only export {path} (--export to choose another)");
    Ok(path)
}

/// The one export of `listed`, or an error listing them.
fn only(listed: &[ExportNode]) -> anyhow::Result<String> {
    match listed {
        [one] => Ok(one.dir.clone()),
        [] => anyhow::bail!("the server lists no exports (MOUNT EXPORT); give one with --export"),
        many => {
            let names: Vec<&str> = many.iter().map(|e| e.dir.as_str()).collect();
            anyhow::bail!(
                "the server has {} exports ({}); choose one with --export",
                many.len(),
                names.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(dir: &str) -> ExportNode {
        ExportNode {
            dir: dir.to_string(),
            groups: vec!["*".to_string()],
        }
    }

    #[test]
    fn a_given_export_is_used_without_asking() {
        let got = choose(Some("/x"), || panic!("asked")).unwrap();
        assert_eq!(got, "/x");
    }

    #[test]
    fn the_only_export_is_chosen() {
        assert_eq!(choose(None, || Ok(vec![node("/data")])).unwrap(), "/data");
    }

    #[test]
    fn several_or_no_exports_are_errors_naming_them() {
        let e = choose(None, || Ok(vec![node("/a"), node("/b")])).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("2 exports (/a, /b)") && msg.contains("--export"),
            "{msg}"
        );
        let e = choose(None, || Ok(vec![])).unwrap_err();
        assert!(format!("{e:#}").contains("no exports"), "{e:#}");
        let e = choose(None, || anyhow::bail!("rejected: ProgUnavail")).unwrap_err();
        assert!(format!("{e:#}").contains("ProgUnavail"), "{e:#}");
    }
}
