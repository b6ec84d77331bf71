//! The zVirt configuration: the engine's API URL, an account, and how to trust the
//! engine's certificate. Read from the `--cloud-config` file (YAML: `server`, `username`,
//! `password`, `insecure`, `caBundle`) and from the variables Deckhouse's
//! cloud-provider-zvirt reads (`ZVIRT_API_URL`, `ZVIRT_USERNAME`, `ZVIRT_PASSWORD`,
//! `ZVIRT_INSECURE`, `ZVIRT_CA_BUNDLE`), which win over the file.

use std::path::Path;

use overcast_cloud::config::{read_optional, serde_fields, yaml_and_unknown_keys, FileKeys};
use overcast_cloud::ConfigError;
use serde::Deserialize;

const CLOUD: &str = "zvirt";

const API_URL: &str = "ZVIRT_API_URL";
const USERNAME: &str = "ZVIRT_USERNAME";
const PASSWORD: &str = "ZVIRT_PASSWORD";
const INSECURE: &str = "ZVIRT_INSECURE";
const CA_BUNDLE: &str = "ZVIRT_CA_BUNDLE";
/// The variables Deckhouse's cloud-provider-zvirt reads, and the key each wins over.
const ENV: [(&str, &str); 5] = [
    (API_URL, "server"),
    (USERNAME, "username"),
    (PASSWORD, "password"),
    (INSECURE, "insecure"),
    (CA_BUNDLE, "caBundle"),
];

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    server: Option<String>,
    username: Option<String>,
    password: Option<String>,
    insecure: Option<bool>,
    ca_bundle: Option<String>,
}

/// What the file and the variables take, for the configuration reference.
pub fn file_keys() -> FileKeys {
    FileKeys {
        format: "YAML",
        sections: vec![(String::new(), serde_fields::<File>().to_vec())],
        env: ENV.to_vec(),
    }
}

/// A complete zVirt configuration.
#[derive(Clone)]
pub struct Config {
    /// `https://engine/ovirt-engine/api`.
    pub api_url: String,
    pub username: String,
    /// Never logged (Debug shows it redacted).
    pub password: String,
    /// Skip verifying the engine's certificate (upstream's `insecure`).
    pub insecure: bool,
    /// PEM of the CA that signed the engine's certificate.
    pub ca_bundle: Option<String>,
    pub unknown_keys: Vec<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("api_url", &self.api_url)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("insecure", &self.insecure)
            .field("ca_bundle", &self.ca_bundle.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

impl Config {
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let text = read_optional(CLOUD, path)?;
        let (file, unknown_keys): (File, _) = yaml_and_unknown_keys(CLOUD, path, text.as_deref())?;
        let pick = |var: &str, from_file: Option<String>| {
            env(var)
                .filter(|v| !v.trim().is_empty())
                .or(from_file.filter(|v| !v.trim().is_empty()))
        };
        let api_url = pick(API_URL, file.server);
        let username = pick(USERNAME, file.username);
        let password = pick(PASSWORD, file.password);
        let insecure = match env(INSECURE).filter(|v| !v.is_empty()) {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => file.insecure.unwrap_or(false),
        };
        let ca_bundle = pick(CA_BUNDLE, file.ca_bundle);
        let mut missing = Vec::new();
        for (value, what) in [
            (&api_url, "the engine's API URL (server, or ZVIRT_API_URL)"),
            (&username, "the account (username, or ZVIRT_USERNAME)"),
            (&password, "its password (password, or ZVIRT_PASSWORD)"),
        ] {
            if value.is_none() {
                missing.push(what.to_owned());
            }
        }
        let (Some(api_url), Some(username), Some(password)) = (api_url, username, password) else {
            return Err(ConfigError::Missing {
                cloud: CLOUD,
                file: path.map(Path::to_path_buf),
                missing,
            });
        };
        let api_url = api_url.trim().trim_end_matches('/').to_owned();
        let scheme_ok = api_url.starts_with("https://") || api_url.starts_with("http://");
        if !scheme_ok || api_url.len() <= "https://".len() {
            return Err(ConfigError::invalid(
                CLOUD,
                path,
                format!("the API URL {api_url:?} is not an http(s) URL like https://engine/ovirt-engine/api"),
            ));
        }
        Ok(Self {
            api_url,
            username,
            password,
            insecure,
            ca_bundle,
            unknown_keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_missing_is_named_at_once() {
        let e = Config::load(None, &|_| None).unwrap_err().to_string();
        for what in ["ZVIRT_API_URL", "ZVIRT_USERNAME", "ZVIRT_PASSWORD"] {
            assert!(e.contains(what), "{e}");
        }
        let only_password_missing = |k: &str| match k {
            "ZVIRT_API_URL" => Some("https://engine/ovirt-engine/api".to_owned()),
            "ZVIRT_USERNAME" => Some("admin@internal".to_owned()),
            _ => None,
        };
        let e = Config::load(None, &only_password_missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ZVIRT_PASSWORD") && !e.contains("ZVIRT_USERNAME"),
            "{e}"
        );
    }

    #[test]
    fn file_and_upstreams_variables_and_the_password_stays_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud-config");
        std::fs::write(
            &path,
            "server: https://engine/ovirt-engine/api/\nusername: admin@internal\npassword: hunter2\ninsecure: true\nfoo: bar\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &|_| None).unwrap();
        assert_eq!(c.api_url, "https://engine/ovirt-engine/api");
        assert!(c.insecure);
        assert_eq!(c.unknown_keys, vec!["foo".to_owned()]);
        assert!(!format!("{c:?}").contains("hunter2"));
        let env = |k: &str| (k == "ZVIRT_PASSWORD").then(|| "from-env".to_owned());
        assert_eq!(
            Config::load(Some(&path), &env).unwrap().password,
            "from-env"
        );
        std::fs::write(&path, "server: engine\nusername: u\npassword: p\n").unwrap();
        let e = Config::load(Some(&path), &|_| None).unwrap_err();
        assert!(
            !e.is_missing() && e.to_string().contains("not an http(s) URL"),
            "{e}"
        );
    }
}
