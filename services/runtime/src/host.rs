//! This machine's hostname, as the kernel has it (a pod's name in Kubernetes): the
//! default node name, lease identity and certificate name of the services.

/// The hostname, or `None` when the kernel has none.
pub fn hostname() -> Option<String> {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = raw.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The hostname, or `localhost` when there is none.
pub fn hostname_or_localhost() -> String {
    hostname().unwrap_or_else(|| "localhost".to_owned())
}
