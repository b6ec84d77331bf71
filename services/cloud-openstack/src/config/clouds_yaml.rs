//! clouds.yaml, as the OpenStack clients read it: where it is looked for, and the
//! `[Global]` values one of its entries gives.

use std::path::Path;

use overcast_cloud::config::IniValue;
use overcast_cloud::ConfigError;

use super::CLOUD;

/// clouds.yaml's names for what cloud.conf's `[Global]` calls otherwise: the entry's
/// `auth` keys, then its own.
const CLOUDS_AUTH_KEYS: &[(&str, &str)] = &[
    ("auth_url", "auth-url"),
    ("username", "username"),
    ("user_id", "user-id"),
    ("password", "password"),
    ("project_id", "project-id"),
    ("project_name", "project-name"),
    ("tenant_id", "tenant-id"),
    ("tenant_name", "tenant-name"),
    ("user_domain_name", "user-domain-name"),
    ("user_domain_id", "user-domain-id"),
    ("project_domain_name", "project-domain-name"),
    ("project_domain_id", "project-domain-id"),
    ("domain_name", "domain-name"),
    ("domain_id", "domain-id"),
    ("application_credential_id", "application-credential-id"),
    ("application_credential_name", "application-credential-name"),
    (
        "application_credential_secret",
        "application-credential-secret",
    ),
];

/// Where clouds.yaml is looked for, as the OpenStack clients look (the first that exists).
fn clouds_files(env: &dyn Fn(&str) -> Option<String>) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    if let Some(f) = env("OS_CLIENT_CONFIG_FILE") {
        out.push(f.into());
    }
    out.push("clouds.yaml".into());
    if let Some(home) = env("HOME") {
        out.push(Path::new(&home).join(".config/openstack/clouds.yaml"));
    }
    out.push("/etc/openstack/clouds.yaml".into());
    out
}

/// The `[Global]` values an entry of clouds.yaml gives (`line` 0: not from cloud.conf).
pub(super) fn clouds_values(
    file: Option<&str>,
    cloud: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<IniValue>, ConfigError> {
    let invalid = |file: Option<std::path::PathBuf>, why: String| ConfigError::Invalid {
        cloud: CLOUD,
        file,
        line: None,
        why,
    };
    let candidates = match file {
        Some(f) => vec![std::path::PathBuf::from(f)],
        None => clouds_files(env),
    };
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        return Err(invalid(
            None,
            format!(
                "clouds.yaml not found (looked in {})",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(Some(path.clone()), e.to_string()))?;
    let doc: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| invalid(Some(path.clone()), format!("not YAML: {e}")))?;
    let entry = doc["clouds"].get(cloud).ok_or_else(|| {
        invalid(
            Some(path.clone()),
            format!("no cloud {cloud:?} under clouds: in it"),
        )
    })?;
    let text_of = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    let mut out = Vec::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            out.push(IniValue {
                key: key.to_owned(),
                value,
                line: 0,
            });
        }
    };
    for (yaml, ini) in CLOUDS_AUTH_KEYS {
        put(ini, text_of(&entry["auth"][*yaml]));
    }
    put("region", text_of(&entry["region_name"]));
    put("ca-file", text_of(&entry["cacert"]));
    if entry["verify"] == serde_json::Value::Bool(false) {
        put("tls-insecure", Some("true".into()));
    }
    Ok(out)
}
