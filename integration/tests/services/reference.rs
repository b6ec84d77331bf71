//! `docs/reference.md`, the configuration reference of every flag and environment variable
//! of every binary and every key of each cloud's configuration file, is what the code
//! says (the binaries' `--help` from clap's definitions; each provider's
//! `config_keys()`, from the types and lists its reader checks files against): generated
//! from them, and this test fails when the two drift apart.
//! `OVERCAST_WRITE_REFERENCE=1 cargo test --workspace --locked --test services reference::` rewrites it.

use std::process::Command;

use overcast_cloud::CloudName;
use overcast_integration::binary;

/// Each binary and the subcommands whose own flags the reference lists.
const BINARIES: &[(&str, &[&[&str]])] = &[
    ("csi", &[]),
    ("registrar", &[]),
    ("ccm", &[]),
    ("discoverer", &[]),
    ("rbac-proxy", &[]),
    ("capi", &[&["crds"]]),
    ("overcastctl", &[&["identity"], &["controller"], &["node"]]),
];

fn help(name: &str, sub: &[&str]) -> String {
    // A clean environment: clap shows an `env` variable's current value in the help.
    let out = Command::new(binary(name))
        .env_clear()
        .args(sub)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(out.status.success(), "{name} {sub:?} --help failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn render() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Every flag of every binary, with the environment variable that sets it (`[env: …]`)\n\
         and its default, as the binary prints it with `--help`. Generated from clap's\n\
         definitions by `integration/tests/services/reference.rs`, which fails when this page and the\n\
         binaries drift apart; rewrite it with\n\
         `OVERCAST_WRITE_REFERENCE=1 cargo test --workspace --locked --test services reference::`.\n\
         Each cloud's configuration file (`--cloud-config`) is listed\n\
         [at the end](#cloud-configuration-files); what each setting means is on the cloud's\n\
         page under [clouds/](clouds/). `terraform-provider-overcast` takes no flags\n\
         (Terraform starts it; `migrate-state` is in\n\
         [components/terraform.md](components/terraform.md)).\n",
    );
    for (name, subs) in BINARIES {
        out.push_str(&format!(
            "\n## `{name}`\n\n```text\n{}\n```\n",
            help(name, &[])
        ));
        for sub in *subs {
            out.push_str(&format!(
                "\n### `{name} {}`\n\n```text\n{}\n```\n",
                sub.join(" "),
                help(name, sub)
            ));
        }
    }
    out.push_str(
        "\n## Cloud configuration files\n\n\
         The keys each cloud's reader knows, from the types and lists it checks a file\n\
         against (a key not listed is warned about, or refused where the format says so),\n\
         and the environment variables that win over the file.\n",
    );
    for cloud in CloudName::ALL {
        let keys = overcast_clouds::provider(cloud).config_keys();
        out.push_str(&format!(
            "\n### `{}`\n\n{}.\n\n| Section | Keys |\n|---|---|\n",
            cloud.as_str(),
            keys.format
        ));
        for (section, names) in &keys.sections {
            let section = if section.is_empty() {
                "(top level)"
            } else {
                section
            };
            let names: Vec<String> = names.iter().map(|k| format!("`{k}`")).collect();
            out.push_str(&format!("| {section} | {} |\n", names.join(", ")));
        }
        if !keys.env.is_empty() {
            out.push_str("\n| Variable | Sets |\n|---|---|\n");
            for (var, sets) in &keys.env {
                out.push_str(&format!("| `{var}` | {sets} |\n"));
            }
        }
    }
    out
}

#[test]
fn the_reference_is_what_the_binaries_say() {
    let path = overcast_integration::package_dir().join("../docs/reference.md");
    let now = render();
    if std::env::var_os("OVERCAST_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != now {
        let first = committed
            .lines()
            .zip(now.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(now.lines().count()));
        panic!(
            "docs/reference.md differs from the binaries' --help from line {}:\n  page: {:?}\n  help: {:?}\nrewrite it: OVERCAST_WRITE_REFERENCE=1 cargo test --workspace --locked --test services reference::",
            first + 1,
            committed.lines().nth(first),
            now.lines().nth(first)
        );
    }
}
