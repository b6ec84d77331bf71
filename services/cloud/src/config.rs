//! What every provider's configuration shares: the error that names what is missing,
//! and the INI dialect (git-config / gcfg, as the Go providers read `cloud.conf` and
//! `vsphere.conf`) two of them use.
//!
//! A provider reads its own configuration — the `--cloud-config` file the manifests
//! mount from the Secret, and the environment variables its upstream reads — and says
//! everything that is missing at once, before anything is contacted. Values are never
//! echoed in an error: a misplaced password must not end up in a log.

use std::fmt;
use std::path::{Path, PathBuf};

mod keys;

pub use keys::{serde_fields, yaml_and_unknown_keys, FileKeys};

/// A configuration a provider cannot start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Settings the provider needs and did not get; each names where it may come from
    /// (`password in [Global] or OS_PASSWORD`).
    Missing {
        cloud: &'static str,
        file: Option<PathBuf>,
        missing: Vec<String>,
    },
    /// The file is there but wrong: the line (when known) and what is wrong with it.
    Invalid {
        cloud: &'static str,
        file: Option<PathBuf>,
        line: Option<usize>,
        why: String,
    },
}

impl ConfigError {
    pub fn invalid(cloud: &'static str, file: Option<&Path>, why: impl Into<String>) -> Self {
        Self::Invalid {
            cloud,
            file: file.map(Path::to_path_buf),
            line: None,
            why: why.into(),
        }
    }

    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Missing { .. })
    }
}

fn file_name(file: &Option<PathBuf>) -> String {
    match file {
        Some(f) => f.display().to_string(),
        None => "no --cloud-config file".into(),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing {
                cloud,
                file,
                missing,
            } => write!(
                f,
                "cloud {cloud:?} lacks credentials or settings ({}): {}",
                file_name(file),
                missing.join("; ")
            ),
            Self::Invalid {
                cloud,
                file,
                line,
                why,
            } => match line {
                Some(line) => write!(f, "cloud {cloud:?}: {} line {line}: {why}", file_name(file)),
                None => write!(f, "cloud {cloud:?}: {}: {why}", file_name(file)),
            },
        }
    }
}

impl std::error::Error for ConfigError {}

/// Reads the provider's file: `None` when no path was given or nothing is at it (a
/// provider may be configured from the environment alone, as upstream's are).
pub fn read_optional(
    cloud: &'static str,
    path: Option<&Path>,
) -> Result<Option<String>, ConfigError> {
    let Some(path) = path else { return Ok(None) };
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigError::invalid(
            cloud,
            Some(path),
            format!("cannot read it: {e}"),
        )),
    }
}

/// Reads and parses an INI cloud-config (absent or missing reads as empty); a malformed
/// line is [`ConfigError::Invalid`] naming it.
pub fn read_ini(cloud: &'static str, path: Option<&Path>) -> Result<Vec<IniSection>, ConfigError> {
    let text = read_optional(cloud, path)?.unwrap_or_default();
    parse_ini(&text).map_err(|(line, why)| ConfigError::Invalid {
        cloud,
        file: path.map(Path::to_path_buf),
        line: Some(line),
        why,
    })
}

/// A section whose keys are all accepted (read by a later part of the provider).
pub const ANY_KEY: &[&str] = &["*"];

/// Every section and key `known` does not list, as `[section] key (line n)` (the caller
/// warns): `known` gives a section's keys, or `None` for a section it does not know.
pub fn unknown_keys(
    sections: &[IniSection],
    known: impl Fn(&str) -> Option<&'static [&'static str]>,
) -> Vec<String> {
    let mut unknown = Vec::new();
    for s in sections {
        match known(&s.name) {
            None => unknown.push(format!("[{}] (line {})", s.name, s.line)),
            Some(keys) if keys == ANY_KEY => {}
            Some(keys) => unknown.extend(
                s.values
                    .iter()
                    .filter(|v| !keys.contains(&v.key.as_str()))
                    .map(|v| format!("[{}] {} (line {})", s.name, v.key, v.line)),
            ),
        }
    }
    unknown
}

/// One `key = value` of an INI file, with its line for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniValue {
    pub key: String,
    pub value: String,
    pub line: usize,
}

/// A `[Section]` or `[Section "subsection"]` and its values, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniSection {
    /// Lower-cased, as gcfg matches section names.
    pub name: String,
    /// Case kept (a vCenter host name).
    pub sub: Option<String>,
    pub line: usize,
    pub values: Vec<IniValue>,
}

impl IniSection {
    /// The last value of `key` (gcfg: names are case-insensitive; a later one wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|v| v.key.eq_ignore_ascii_case(key))
            .map(|v| v.value.as_str())
    }
}

/// The gcfg dialect of INI the Go providers' files are written in: `[Section]`,
/// `[Section "sub"]`, `key = value`, `#` and `;` comments, double-quoted values with
/// `\"`, `\\`, `\n`, `\t` escapes, a trailing `\` continuing a line. A malformed line is
/// refused with its number.
pub fn parse_ini(text: &str) -> Result<Vec<IniSection>, (usize, String)> {
    let mut sections: Vec<IniSection> = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, raw)) = lines.next() {
        let number = i + 1;
        let mut line = raw.to_owned();
        while line.trim_end().ends_with('\\') && !line.trim_end().ends_with("\\\\") {
            let cut = line.trim_end().len() - 1;
            line.truncate(cut);
            match lines.next() {
                Some((_, more)) => line.push_str(more),
                None => return Err((number, "the file ends inside a continued line".into())),
            }
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let inner = rest
                .split_once(']')
                .filter(|(_, after)| {
                    let after = after.trim();
                    after.is_empty() || after.starts_with('#') || after.starts_with(';')
                })
                .map(|(inner, _)| inner.trim())
                .ok_or((number, "a section header needs a closing ]".to_owned()))?;
            let (name, sub) = match inner.split_once(char::is_whitespace) {
                None => (inner, None),
                Some((name, sub)) => {
                    let sub = sub.trim();
                    let unquoted = sub
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .ok_or((
                            number,
                            format!("the subsection of [{name}] must be in double quotes"),
                        ))?;
                    (name, Some(unescape(unquoted).map_err(|e| (number, e))?))
                }
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                return Err((number, format!("{name:?} is not a section name")));
            }
            sections.push(IniSection {
                name: name.to_ascii_lowercase(),
                sub,
                line: number,
                values: Vec::new(),
            });
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err((number, "a value before any [section]".into()));
        };
        let (key, value) = match trimmed.split_once('=') {
            Some((k, v)) => (k.trim(), value_of(v.trim()).map_err(|e| (number, e))?),
            // gcfg: a bare name is a true boolean.
            None => (trimmed, "true".to_owned()),
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err((number, format!("{key:?} is not a key name")));
        }
        section.values.push(IniValue {
            key: key.to_ascii_lowercase(),
            value,
            line: number,
        });
    }
    Ok(sections)
}

/// A value: quoted parts unescaped, unquoted parts cut at a comment, spaces kept inside
/// quotes only.
fn value_of(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => out.push(escape(chars.next())?),
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    if quoted {
        return Err("a quoted value is not closed".into());
    }
    Ok(out.trim_end().to_owned())
}

fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.push(escape(chars.next())?);
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn escape(c: Option<char>) -> Result<char, String> {
    match c {
        Some('"') => Ok('"'),
        Some('\\') => Ok('\\'),
        Some('n') => Ok('\n'),
        Some('t') => Ok('\t'),
        Some(c) => Err(format!("unknown escape \\{c}")),
        None => Err("a value ends in a lone \\".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_go_providers_dialect() {
        let text = r#"
# OCCM
[Global]
auth-url = https://keystone:5000/v3 ; the endpoint
password = "p#ss \"word\""
Region=RegionOne
tls-insecure

[VirtualCenter "10.0.0.1"]
user = "admin@vsphere.local"
datacenters = dc1, \
  dc2
"#;
        let s = parse_ini(text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "global");
        assert_eq!(s[0].get("auth-url"), Some("https://keystone:5000/v3"));
        assert_eq!(s[0].get("password"), Some("p#ss \"word\""));
        assert_eq!(
            s[0].get("region"),
            Some("RegionOne"),
            "keys are case-insensitive"
        );
        assert_eq!(s[0].get("tls-insecure"), Some("true"));
        assert_eq!(s[1].name, "virtualcenter");
        assert_eq!(s[1].sub.as_deref(), Some("10.0.0.1"));
        assert_eq!(s[1].get("datacenters"), Some("dc1,   dc2"));
        assert_eq!(s[1].values[0].line, 10);
    }

    #[test]
    fn a_malformed_line_is_named() {
        for (text, line, says) in [
            ("[Global\nx = 1", 1, "closing ]"),
            ("x = 1", 1, "before any [section]"),
            ("[Global]\n\nuser = \"open", 3, "not closed"),
            ("[VirtualCenter 10.0.0.1]", 1, "double quotes"),
            ("[Global]\nbad key = 1", 2, "not a key name"),
            ("[Global]\nx = a\\q", 2, "unknown escape"),
        ] {
            let (at, why) = parse_ini(text).unwrap_err();
            assert_eq!(at, line, "{text:?}: {why}");
            assert!(why.contains(says), "{text:?}: {why}");
        }
    }

    #[test]
    fn errors_name_what_is_missing_and_never_a_value() {
        let e = ConfigError::Missing {
            cloud: "zvirt",
            file: None,
            missing: vec!["password (password or ZVIRT_PASSWORD)".into()],
        };
        assert_eq!(
            e.to_string(),
            "cloud \"zvirt\" lacks credentials or settings (no --cloud-config file): password (password or ZVIRT_PASSWORD)"
        );
        let e = ConfigError::Invalid {
            cloud: "openstack",
            file: Some("/etc/cloud.conf".into()),
            line: Some(4),
            why: "a quoted value is not closed".into(),
        };
        assert_eq!(
            e.to_string(),
            "cloud \"openstack\": /etc/cloud.conf line 4: a quoted value is not closed"
        );
    }
}
