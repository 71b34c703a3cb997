//! Config variants: `--vary key=v1,v2` parsing, the cartesian product, and setting a
//! dotted key path in a TOML document (comments and layout of the base are kept).
//!
//! Keys starting with `bench.` are not config keys: they become bench arguments
//! (`bench.qd=1,8` → `--qd 1`, `--qd 8`), so queue depth sweeps like any other key.

use anyhow::{bail, Context};
use toml_edit::{DocumentMut, Item, Table, Value};

/// One `--vary`: a dotted key and its values (TOML literals, kept as written).
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

/// Splits `v1,v2,...` on commas outside brackets and quotes, so `[0],[0,1]` is two
/// values.
fn split_values(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut cur = String::new();
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(ch),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur.trim().to_string());
    out
}

impl Axis {
    pub fn parse(s: &str) -> anyhow::Result<Axis> {
        let Some((key, vals)) = s.split_once('=') else {
            bail!("--vary {s:?}: expected KEY=V1,V2 (e.g. rdma.credits=32,128)");
        };
        let key = key.trim().to_string();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            bail!("--vary {s:?}: key must be a dotted path like engine.cores");
        }
        let values = split_values(vals);
        if values.iter().any(String::is_empty) {
            bail!("--vary {s:?}: empty value");
        }
        Ok(Axis { key, values })
    }
}

/// Every combination, as (key, value) lists in axis order.
pub fn product(axes: &[Axis]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                a.values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((a.key.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// A TOML literal, or a bare word taken as a string (`idle=busy`).
pub fn literal(v: &str) -> Value {
    v.parse::<Value>().unwrap_or_else(|_| Value::from(v))
}

/// Sets `key` (dotted; a numeric segment after an array of tables indexes it, e.g.
/// `exports.0.path`) to `value`, creating tables on the way.
pub fn set(doc: &mut DocumentMut, key: &str, value: Value) -> anyhow::Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().context("empty key")?;
    let mut t: &mut Table = doc.as_table_mut();
    let mut i = 0;
    while i < path.len() {
        let seg = path[i];
        t = match t.entry(seg).or_insert_with(|| Item::Table(Table::new())) {
            Item::Table(next) => next,
            Item::ArrayOfTables(a) => {
                i += 1;
                let idx: usize = path.get(i).and_then(|s| s.parse().ok()).with_context(|| {
                    format!("{key}: {seg} is an array of tables; index it, e.g. {seg}.0.KEY")
                })?;
                let n = a.len();
                a.get_mut(idx)
                    .with_context(|| format!("{key}: {seg} has {n} entries"))?
            }
            _ => bail!("{key}: {seg:?} is not a table"),
        };
        i += 1;
    }
    if matches!(t.get(last), Some(Item::Table(_) | Item::ArrayOfTables(_))) {
        bail!("{key}: is a table, not a value");
    }
    // Keep the old value's decor (its inline comment and spacing).
    match t.get_mut(last) {
        Some(Item::Value(old)) => {
            let decor = old.decor().clone();
            *old = value;
            *old.decor_mut() = decor;
        }
        _ => {
            t.insert(last, Item::Value(value));
        }
    }
    Ok(())
}

/// Removes `key` (dotted) if present.
pub fn remove(doc: &mut DocumentMut, key: &str) {
    let parts: Vec<&str> = key.split('.').collect();
    let Some((last, path)) = parts.split_last() else {
        return;
    };
    let mut t: &mut Table = doc.as_table_mut();
    for seg in path {
        match t.get_mut(seg).and_then(Item::as_table_mut) {
            Some(next) => t = next,
            None => return,
        }
    }
    t.remove(last);
}

/// The value at a dotted key, if any (tables only).
#[cfg(test)]
pub fn get<'a>(doc: &'a DocumentMut, key: &str) -> Option<&'a Item> {
    let mut item = doc.as_item();
    for seg in key.split('.') {
        item = item.get(seg)?;
    }
    Some(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_outside_brackets() {
        let a = Axis::parse("engine.cores=[0],[0,1]").unwrap();
        assert_eq!(a.values, vec!["[0]", "[0,1]"]);
        let a = Axis::parse("engine.idle=busy,\"adaptive\"").unwrap();
        assert_eq!(a.values, vec!["busy", "\"adaptive\""]);
        let a = Axis::parse("x.y='a,b',c").unwrap();
        assert_eq!(a.values, vec!["'a,b'", "c"]);
        assert!(Axis::parse("novalue").is_err());
        assert!(Axis::parse("a..b=1").is_err());
        assert!(Axis::parse("a=1,,2").is_err());
    }

    #[test]
    fn cartesian_product() {
        let axes = [
            Axis::parse("a.x=1,2").unwrap(),
            Axis::parse("b.y=3,4,5").unwrap(),
        ];
        let p = product(&axes);
        assert_eq!(p.len(), 6);
        assert_eq!(
            p[0],
            vec![("a.x".into(), "1".into()), ("b.y".into(), "3".into())]
        );
        assert_eq!(
            p[5],
            vec![("a.x".into(), "2".into()), ("b.y".into(), "5".into())]
        );
        assert_eq!(product(&[]), vec![Vec::<(String, String)>::new()]);
    }

    #[test]
    fn sets_dotted_keys_keeping_comments() {
        let mut d: DocumentMut = "# top\n[rdma]\ncredits = 128 # per conn\n[engine]\ncores = [0]\n"
            .parse()
            .unwrap();
        set(&mut d, "rdma.credits", literal("32")).unwrap();
        assert!(d.to_string().contains("credits = 32 # per conn"), "{d}");
        set(&mut d, "engine.cores", literal("[0,1]")).unwrap();
        set(&mut d, "engine.idle", literal("busy")).unwrap();
        set(&mut d, "stats.listen", literal("\"127.0.0.1:1\"")).unwrap();
        let s = d.to_string();
        assert!(s.starts_with("# top\n"), "{s}");
        let v: toml_edit::DocumentMut = s.parse().unwrap();
        assert_eq!(v["rdma"]["credits"].as_integer(), Some(32));
        assert_eq!(v["engine"]["idle"].as_str(), Some("busy"));
        assert_eq!(v["engine"]["cores"].as_array().unwrap().len(), 2);
        assert_eq!(v["stats"]["listen"].as_str(), Some("127.0.0.1:1"));
        remove(&mut d, "stats.listen");
        assert!(get(&d, "stats.listen").is_none());
        assert!(get(&d, "rdma.credits").is_some());
        assert!(set(&mut d, "rdma.credits.x", literal("1")).is_err());
        let mut d: DocumentMut = "[[exports]]\npath = \"/\"\n[[exports]]\npath = \"/b\"\n"
            .parse()
            .unwrap();
        set(&mut d, "exports.1.squash", literal("all")).unwrap();
        assert_eq!(d["exports"][1]["squash"].as_str(), Some("all"));
        assert!(d["exports"][0].get("squash").is_none());
        assert!(set(&mut d, "exports.2.squash", literal("all")).is_err());
        assert!(set(&mut d, "exports.squash", literal("all")).is_err());
    }
}
