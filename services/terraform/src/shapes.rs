//! Every resource's state shape at [`STATE_VERSION`], recorded in `state-shapes.json`: a
//! test fails when a shape changes without the version (why: `upgrade.rs` of the core).

#[cfg(test)]
mod tests {
    use overcast_terraform_core::upgrade::STATE_VERSION;

    /// Every resource's state type, by provider and resource, as JSON.
    fn shapes() -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("version".into(), serde_json::json!(STATE_VERSION));
        out.insert(
            "ovirt".into(),
            overcast_terraform_zvirt::server().state_types(),
        );
        out.insert(
            "deckhouse".into(),
            overcast_terraform_dvp::server().state_types(),
        );
        out.insert(
            "openstack".into(),
            overcast_terraform_openstack::server().state_types(),
        );
        serde_json::Value::Object(out)
    }

    #[test]
    fn a_resource_s_state_changes_shape_only_with_the_version() {
        let path =
            std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
                .join("src/state-shapes.json");
        let now = shapes();
        if std::env::var_os("OVERCAST_WRITE_STATE_SHAPES").is_some() {
            std::fs::write(&path, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
        }
        let recorded: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(
            now == recorded || now["version"] != recorded["version"],
            "a resource's state changed shape at schema version {STATE_VERSION}: bump \
             STATE_VERSION, add the step that brings version {STATE_VERSION} forward, then \
             record the shapes (OVERCAST_WRITE_STATE_SHAPES=1 cargo test -p overcast-terraform)"
        );
        assert_eq!(
            now, recorded,
            "the version was bumped: record the new shapes (OVERCAST_WRITE_STATE_SHAPES=1)"
        );
    }
}
