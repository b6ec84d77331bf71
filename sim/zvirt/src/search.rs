//! The engine's search language, the part of it a client writes in `search=` (the oVirt
//! search-syntax reference; the search backend's SyntaxChecker): conditions
//! `<field> = <value>` and `<field> != <value>`, a value bare or in double quotes, `*` in it
//! standing for any run of characters (the backend searches with ILIKE); conditions joined
//! by `and` and `or` (`and` binds tighter); then `sortby <field> [asc|desc]` and
//! `page <n>` — with the REST `max`, the engine's paging (`page 1` is the first page).
//!
//! What the backend cannot parse — `'` or `;` anywhere, a value ending in `\`, a field
//! the object type lacks, an operator it does not know — it refuses, and the REST layer
//! answers such a listing with an empty collection (200), not a fault: [`parse`] answers
//! `None` for it.

/// One condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    pub field: String,
    pub negated: bool,
    pub value: String,
}

/// A parsed search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Search {
    /// Alternatives (`or`), each every one of its conditions (`and`); none: everything.
    pub any: Vec<Vec<Condition>>,
    /// `sortby`: the field and whether descending.
    pub sort: Option<(String, bool)>,
    /// `page`: 1-based.
    pub page: Option<usize>,
}

/// Splits `text` into words: a quoted value is one word (quotes kept off), and `=`/`!=`
/// are words of their own.
fn words(text: &str) -> Option<Vec<(String, bool)>> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '"' => {
                chars.next();
                let mut w = String::new();
                loop {
                    match chars.next()? {
                        '"' => break,
                        c => w.push(c),
                    }
                }
                out.push((w, true));
            }
            '=' => {
                chars.next();
                out.push(("=".into(), false));
            }
            '!' => {
                chars.next();
                if chars.next()? != '=' {
                    return None;
                }
                out.push(("!=".into(), false));
            }
            _ => {
                let mut w = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || c == '=' || c == '!' || c == '"' {
                        break;
                    }
                    w.push(c);
                    chars.next();
                }
                out.push((w, false));
            }
        }
    }
    Some(out)
}

/// Reads `text` as a search over objects with `fields` (lower case); `None` when the
/// backend would refuse it.
pub(crate) fn parse(text: &str, fields: &[&str]) -> Option<Search> {
    if text.contains(['\'', ';']) {
        return None;
    }
    let words = words(text)?;
    let mut search = Search::default();
    let mut group: Vec<Condition> = Vec::new();
    let mut i = 0;
    let keyword = |i: usize, k: &str| {
        words
            .get(i)
            .is_some_and(|(w, quoted)| !quoted && w.eq_ignore_ascii_case(k))
    };
    while i < words.len() {
        if keyword(i, "sortby") {
            let field = words.get(i + 1)?.0.to_lowercase();
            if !fields.contains(&field.as_str()) {
                return None;
            }
            i += 2;
            let desc = keyword(i, "desc");
            if desc || keyword(i, "asc") {
                i += 1;
            }
            search.sort = Some((field, desc));
            continue;
        }
        if keyword(i, "page") {
            let n: usize = words.get(i + 1)?.0.parse().ok()?;
            search.page = Some(n.max(1));
            i += 2;
            continue;
        }
        if search.sort.is_some() || search.page.is_some() {
            // Conditions come before sortby and page.
            return None;
        }
        if keyword(i, "and") && !group.is_empty() {
            i += 1;
            continue;
        }
        if keyword(i, "or") && !group.is_empty() {
            search.any.push(std::mem::take(&mut group));
            i += 1;
            continue;
        }
        let (field, _) = words.get(i)?;
        let field = field.to_lowercase();
        if !fields.contains(&field.as_str()) {
            return None;
        }
        let negated = match words.get(i + 1)?.0.as_str() {
            "=" => false,
            "!=" => true,
            _ => return None,
        };
        let (value, _) = words.get(i + 2)?;
        if value.ends_with('\\') {
            return None;
        }
        group.push(Condition {
            field,
            negated,
            value: value.clone(),
        });
        i += 3;
    }
    if !group.is_empty() {
        search.any.push(group);
    } else if !search.any.is_empty() {
        // A trailing `or`.
        return None;
    }
    Some(search)
}

impl Search {
    /// Whether an object whose fields read as `field` matches.
    pub(crate) fn matches(&self, field: impl Fn(&str) -> String, case_sensitive: bool) -> bool {
        self.any.is_empty()
            || self.any.iter().any(|all| {
                all.iter().all(|c| {
                    let hit = wildcard(&c.value, &field(&c.field), case_sensitive);
                    hit != c.negated
                })
            })
    }

    /// Orders `items` as the search asks (else by `default` ascending, as the backend
    /// appends its own ORDER BY), then cuts the page: `page n` of `max` rows (no `max`:
    /// of Integer.MAX_VALUE, as the REST layer asks).
    pub(crate) fn page<T>(
        &self,
        mut items: Vec<T>,
        default: &str,
        field: impl Fn(&T, &str) -> String,
        max: Option<usize>,
    ) -> Vec<T> {
        let (by, desc) = self
            .sort
            .clone()
            .unwrap_or_else(|| (default.to_owned(), false));
        items.sort_by(|a, b| {
            let order = field(a, &by)
                .to_lowercase()
                .cmp(&field(b, &by).to_lowercase());
            if desc {
                order.reverse()
            } else {
                order
            }
        });
        // No `max`: the engine's page is Integer.MAX_VALUE rows long, so `page 2` and
        // later are empty.
        let max = max.unwrap_or(usize::MAX);
        let skip = self.page.unwrap_or(1).saturating_sub(1).saturating_mul(max);
        items.into_iter().skip(skip).take(max).collect()
    }
}

/// Whether `value` matches `pattern`: case-insensitively unless asked, `*` standing for any
/// run of characters.
pub(crate) fn wildcard(pattern: &str, value: &str, case_sensitive: bool) -> bool {
    let (pattern, value) = if case_sensitive {
        (pattern.to_owned(), value.to_owned())
    } else {
        (pattern.to_lowercase(), value.to_lowercase())
    };
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == value;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if value.len() < first.len() + last.len()
        || !value.starts_with(first)
        || !value[first.len()..].ends_with(last)
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The fields of a VM search the simulator answers (of the engine's
/// VmConditionFieldAutoCompleter: `id` is its `vm_guid`, `cluster` the cluster's name).
pub(crate) const VM_FIELDS: &[&str] = &["name", "id", "cluster", "status"];
/// The fields of a disk search it answers (DiskConditionFieldAutoCompleter: `alias` and
/// `name` are both `disk_alias`).
pub(crate) const DISK_FIELDS: &[&str] = &["alias", "name", "id", "description"];

/// The search a listing was asked with: everything without one, `None` for one the
/// backend refuses (`valid` false: the simulator told to refuse every search) — an `id`
/// compared with anything but a UUID included (the field is typed: no wildcards).
pub(crate) fn searched(text: Option<&str>, fields: &[&str], valid: bool) -> Option<Search> {
    let Some(text) = text else {
        return Some(Search::default());
    };
    if !valid {
        return None;
    }
    let search = parse(text, fields)?;
    let typed = search
        .any
        .iter()
        .flatten()
        .filter(|c| c.field == "id")
        .all(|c| is_uuid(&c.value));
    typed.then_some(search)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// What a VM's `field` reads as in a search.
pub(crate) fn vm_field(st: &super::State, vm: &super::SimVm, field: &str) -> String {
    match field {
        "name" => vm.name.clone(),
        "id" => vm.id.clone(),
        "status" => vm.status.clone(),
        "cluster" => st
            .clusters
            .iter()
            .find(|c| c.id == vm.cluster)
            .map(|c| c.name.clone())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// What a disk's `field` reads as in a search.
pub(crate) fn disk_field(_: &super::State, d: &super::SimDisk, field: &str) -> String {
    match field {
        "alias" | "name" => d.alias.clone(),
        "id" => d.id.clone(),
        "description" => d.description.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VM: &[&str] = &["name", "id", "status", "cluster"];

    fn c(field: &str, negated: bool, value: &str) -> Condition {
        Condition {
            field: field.into(),
            negated,
            value: value.into(),
        }
    }

    /// The reference's own examples, and the forms the providers write.
    #[test]
    fn the_reference_s_forms_parse() {
        assert_eq!(
            parse("name=myvm", VM).unwrap().any,
            vec![vec![c("name", false, "myvm")]]
        );
        let s = parse("sortby name page 2", VM).unwrap();
        assert_eq!(
            (s.any.len(), s.sort, s.page),
            (0, Some(("name".into(), false)), Some(2))
        );
        assert_eq!(parse("page 1", VM).unwrap().page, Some(1));
        let s = parse("status != down and cluster = \"prod 1\" or name=web*", VM).unwrap();
        assert_eq!(
            s.any,
            vec![
                vec![c("status", true, "down"), c("cluster", false, "prod 1")],
                vec![c("name", false, "web*")],
            ]
        );
        let s = parse("name=a or name=b sortby name desc page 3", VM).unwrap();
        assert_eq!(s.any.len(), 2);
        assert_eq!((s.sort, s.page), (Some(("name".into(), true)), Some(3)));
    }

    #[test]
    fn what_the_backend_refuses_is_none() {
        for bad in [
            "name='x'",
            "name=x;",
            "name=\"x\\\"",
            "color=red",
            "name > x",
            "name=",
            "name=\"open",
            "name=a or",
            "page 1 name=a",
        ] {
            assert_eq!(parse(bad, VM), None, "{bad}");
        }
    }

    #[test]
    fn matching_is_case_insensitive_with_wildcards_and_negation() {
        let s = parse("name=Web-* and status!=down", VM).unwrap();
        let vm = |name: &'static str, status: &'static str| {
            move |f: &str| match f {
                "name" => name.to_owned(),
                "status" => status.to_owned(),
                _ => String::new(),
            }
        };
        assert!(s.matches(vm("web-1", "up"), false));
        assert!(!s.matches(vm("web-1", "down"), false));
        assert!(!s.matches(vm("web-1", "up"), true));
        assert!(!s.matches(vm("db-1", "up"), false));
        assert!(wildcard("*c1*", "{\"cluster\":\"c1\"}", false));
        assert!(!wildcard("ab*ba", "aba", false));
    }

    #[test]
    fn pages_are_max_long_and_one_based_in_the_sort_order() {
        let s = parse("page 2", VM).unwrap();
        let items: Vec<String> = (0..25).rev().map(|i| format!("vm-{i:02}")).collect();
        let got = s.page(items.clone(), "name", |v, _| v.clone(), Some(10));
        assert_eq!(got.first().map(String::as_str), Some("vm-10"));
        assert_eq!(got.len(), 10);
        let last =
            parse("page 3", VM)
                .unwrap()
                .page(items.clone(), "name", |v, _| v.clone(), Some(10));
        assert_eq!(last.len(), 5);
        let none =
            parse("page 4", VM)
                .unwrap()
                .page(items.clone(), "name", |v, _| v.clone(), Some(10));
        assert!(none.is_empty());
        let all = parse("sortby name", VM).unwrap();
        assert_eq!(
            all.page(items.clone(), "name", |v, _| v.clone(), None)
                .len(),
            25
        );
        // `page 2` without `max`: past Integer.MAX_VALUE rows, nothing.
        assert!(s.page(items, "name", |v, _| v.clone(), None).is_empty());
    }
}
