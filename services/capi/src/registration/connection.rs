//! Each cloud's object in node-manager's Secret, with the fields of its module's
//! `registration.yaml`: what the provider's own configuration says (the engine or
//! endpoint, the credentials), completed by what the installer recorded.

use serde_json::{json, Value};

use super::InstallerFacts;

/// zVirt's connection object: the engine and the credentials capz's machinery reads.
pub fn zvirt_connection(
    config: &overcast_cloud_zvirt::Config,
    ssh_public_key: Option<&str>,
) -> Value {
    json!({
        "sshPublicKey": ssh_public_key.unwrap_or_default(),
        "server": config.api_url,
        "username": config.username,
        "password": config.password,
        "insecure": config.insecure,
    })
}

/// DVP's connection object: only the labels every VM gets, when the installer set them.
pub fn dvp_connection(additional_vm_labels: Option<Value>) -> Value {
    match additional_vm_labels {
        Some(labels) if !labels.is_null() => json!({"additionalVMLabels": labels}),
        _ => json!({}),
    }
}

/// OpenStack's object (`openstack`): `connection` as cloud-provider-openstack's module
/// writes it — authURL, username, password, domainName, tenantName or tenantID, caCert,
/// region — from the cloud.conf `[Global]` the ccm reads (`ca_cert`: its `ca-file`'s
/// text); `instances`, `externalNetworkNames`, `externalNetworkDHCP` and `podNetworkMode`
/// from the discovery data the installer recorded, the network names else from the
/// cloud.conf's `[Networking]`. The module refuses to render without authURL, username,
/// password, domainName, region or internalNetworkNames; so does this, naming the key.
pub fn openstack_connection(
    config: &overcast_cloud_openstack::Config,
    ca_cert: Option<String>,
    facts: &InstallerFacts,
) -> Result<Value, String> {
    use overcast_cloud_openstack::config::{Auth, Domain, Named};
    let Auth::Password {
        user,
        password,
        project,
    } = &config.auth
    else {
        return Err(
            "node-manager's OpenStack connection takes a user and a password; an application credential cannot be registered"
                .into(),
        );
    };
    let Named::Name {
        name: username,
        domain,
    } = user
    else {
        return Err(
            "node-manager's OpenStack connection names the user (username), not its id (user-id)"
                .into(),
        );
    };
    let Domain::Name(domain_name) = domain else {
        return Err(
            "node-manager's OpenStack connection names the user's domain (domain-name), not its id"
                .into(),
        );
    };
    let mut connection = json!({
        "authURL": config.auth_url,
        "username": username,
        "password": password,
        "domainName": domain_name,
    });
    match project {
        Named::Name { name, .. } => connection["tenantName"] = json!(name),
        Named::Id(id) => connection["tenantID"] = json!(id),
    }
    if let Some(ca) = ca_cert {
        connection["caCert"] = json!(ca);
    }
    let region = config.region.clone().unwrap_or_default();
    for (key, value) in [
        ("authURL", config.auth_url.as_str()),
        ("username", username.as_str()),
        ("password", password.as_str()),
        ("domainName", domain_name.as_str()),
        ("region", region.as_str()),
    ] {
        if value.is_empty() {
            return Err(format!("node-manager's OpenStack connection needs {key}"));
        }
    }
    connection["region"] = json!(region);
    let d = &facts.discovery;
    let mut object = json!({"connection": connection});
    if !d["instances"].is_null() {
        object["instances"] = d["instances"].clone();
    }
    let external = match strings_or(
        &d["externalNetworkNames"],
        &config.networking.public_networks,
    ) {
        v if v.is_empty() && d["externalNetworkNames"].is_null() => None,
        v => Some(v),
    };
    if let Some(names) = external {
        object["externalNetworkNames"] = json!(names);
    }
    if !d["externalNetworkDHCP"].is_null() {
        object["externalNetworkDHCP"] = d["externalNetworkDHCP"].clone();
    }
    let internal = strings_or(
        &d["internalNetworkNames"],
        &config.networking.internal_networks,
    );
    if internal.is_empty() {
        return Err(
            "node-manager's OpenStack object needs internalNetworkNames: the installer's discovery data has none, nor does the cloud.conf's [Networking] internal-network-name"
                .into(),
        );
    }
    object["internalNetworkNames"] = json!(internal);
    // Written even when unknown (null), as the module does.
    object["podNetworkMode"] = d["podNetworkMode"].clone();
    Ok(object)
}

/// The discovery data's list when it has one, else the configuration's.
fn strings_or(recorded: &Value, configured: &[String]) -> Vec<String> {
    match recorded.as_array() {
        Some(_) => super::strings(recorded),
        None => configured.to_vec(),
    }
}

/// The vCenter node-manager's machines are made in: its address and credentials (read
/// from wherever the vsphere.conf says), and whether its certificate is checked.
pub struct VcenterLogin {
    pub server: String,
    pub username: String,
    pub password: String,
    pub insecure: bool,
}

/// vSphere's object (`vsphere`) as cloud-provider-vsphere's module writes it: the
/// vCenter and its credentials, the region and zone tag categories (the vsphere.conf's
/// `[Labels]`, else the cluster configuration's), and from the cluster configuration the
/// region, `sshKey`, `vmFolderPath` and the instance class defaults (`disableTimesync`,
/// true unless it says otherwise; the master node group's template and datastore; the
/// discovery data's `resourcePoolPath`). Keys the configuration lacks are null, as there.
pub fn vsphere_connection(
    login: &VcenterLogin,
    config: &overcast_cloud_vsphere::Config,
    facts: &InstallerFacts,
) -> Value {
    let c = &facts.configuration;
    let category = |ours: &Option<String>, key: &str| match ours {
        Some(v) => json!(v),
        None => c[key].clone(),
    };
    let mut defaults = json!({
        "disableTimesync": c.get("disableTimesync").cloned().unwrap_or(json!(true)),
    });
    if let Some(pool) = facts.discovery.get("resourcePoolPath") {
        defaults["resourcePoolPath"] = pool.clone();
    }
    let master_class = &c["masterNodeGroup"]["instanceClass"];
    if master_class.is_object() {
        defaults["template"] = master_class["template"].clone();
        defaults["datastore"] = master_class["datastore"].clone();
    }
    json!({
        "server": login.server,
        "username": login.username,
        "password": login.password,
        "insecure": login.insecure,
        "regionTagCategory": category(&config.region_category, "regionTagCategory"),
        "zoneTagCategory": category(&config.zone_category, "zoneTagCategory"),
        "region": c["region"],
        "sshKey": c["sshPublicKey"],
        "vmFolderPath": c["vmFolderPath"],
        "instanceClassDefaults": defaults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("overcast-capi-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    const CLOUD_CONF: &str = "[Global]\nauth-url = https://keystone:5000/v3\nusername = admin\npassword = s3cret\ntenant-name = demo\ndomain-name = Default\nregion = RegionOne\n";

    #[test]
    fn openstack_connection_is_the_module_s() {
        let conf = file(
            "os.conf",
            &format!("{CLOUD_CONF}[Networking]\ninternal-network-name = from-conf\n"),
        );
        let config =
            overcast_cloud_openstack::Config::load_with_env(Some(&conf), &|_| None).unwrap();
        let facts = InstallerFacts {
            configuration: json!({}),
            discovery: json!({
                "instances": {"sshKeyPairName": "k", "imageName": "ubuntu", "mainNetwork": "int", "securityGroups": ["sg"]},
                "internalNetworkNames": ["int"],
                "externalNetworkNames": ["ext"],
                "podNetworkMode": "DirectRoutingWithPortSecurityEnabled",
                "zones": ["nova"],
            }),
        };
        let o = openstack_connection(&config, Some("PEM".into()), &facts).unwrap();
        assert_eq!(
            o["connection"],
            json!({"authURL": "https://keystone:5000/v3", "username": "admin", "password": "s3cret",
                   "domainName": "Default", "tenantName": "demo", "caCert": "PEM", "region": "RegionOne"})
        );
        assert_eq!(o["instances"]["sshKeyPairName"], "k");
        assert_eq!(
            o["internalNetworkNames"],
            json!(["int"]),
            "the discovery data wins"
        );
        assert_eq!(o["externalNetworkNames"], json!(["ext"]));
        assert_eq!(o["podNetworkMode"], "DirectRoutingWithPortSecurityEnabled");
        assert!(o.get("externalNetworkDHCP").is_none());

        // Nothing recorded: the cloud.conf's networks; podNetworkMode null.
        let o = openstack_connection(&config, None, &InstallerFacts::default()).unwrap();
        assert_eq!(o["internalNetworkNames"], json!(["from-conf"]));
        assert!(o["podNetworkMode"].is_null() && o.get("instances").is_none());
        assert!(o["connection"].get("caCert").is_none());
        std::fs::remove_file(conf).unwrap();
    }

    #[test]
    fn openstack_registration_refuses_what_the_module_refuses() {
        let no_networks = file("os-bare.conf", CLOUD_CONF);
        let config =
            overcast_cloud_openstack::Config::load_with_env(Some(&no_networks), &|_| None).unwrap();
        let e = openstack_connection(&config, None, &InstallerFacts::default()).unwrap_err();
        assert!(e.contains("internalNetworkNames"), "{e}");
        let no_region = file(
            "os-noregion.conf",
            &CLOUD_CONF.replace("region = RegionOne\n", ""),
        );
        let config =
            overcast_cloud_openstack::Config::load_with_env(Some(&no_region), &|_| None).unwrap();
        let facts = InstallerFacts {
            configuration: Value::Null,
            discovery: json!({"internalNetworkNames": ["int"]}),
        };
        let e = openstack_connection(&config, None, &facts).unwrap_err();
        assert!(e.contains("region"), "{e}");
        let app = file(
            "os-app.conf",
            "[Global]\nauth-url = https://keystone:5000/v3\napplication-credential-id = abc\napplication-credential-secret = xyz\nregion = RegionOne\n",
        );
        let config =
            overcast_cloud_openstack::Config::load_with_env(Some(&app), &|_| None).unwrap();
        let e = openstack_connection(&config, None, &facts).unwrap_err();
        assert!(
            e.contains("application credential") && !e.contains("xyz"),
            "{e}"
        );
        for f in [no_networks, no_region, app] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn vsphere_object_is_the_module_s() {
        let conf = file(
            "vsphere.conf",
            "[Global]\ninsecure-flag = true\n\n[VirtualCenter \"vc.example\"]\nuser = \"u@vsphere.local\"\npassword = \"p\"\ndatacenters = \"dc1\"\n\n[Labels]\nregion = \"my-region-cat\"\nzone = \"my-zone-cat\"\n",
        );
        let config = overcast_cloud_vsphere::Config::load_with(Some(&conf), &|_| None).unwrap();
        let login = VcenterLogin {
            server: "vc.example".into(),
            username: "u@vsphere.local".into(),
            password: "p".into(),
            insecure: true,
        };
        let facts = InstallerFacts {
            configuration: json!({
                "region": "r1", "zones": ["z1", "z2"], "sshPublicKey": "ssh-rsa AAA",
                "vmFolderPath": "dev/k8s", "regionTagCategory": "k8s-region", "zoneTagCategory": "k8s-zone",
                "masterNodeGroup": {"instanceClass": {"template": "ubuntu", "datastore": "ds1"}},
            }),
            discovery: json!({"resourcePoolPath": "k8s-pool"}),
        };
        let v = vsphere_connection(&login, &config, &facts);
        assert_eq!(
            v,
            json!({
                "server": "vc.example", "username": "u@vsphere.local", "password": "p", "insecure": true,
                "regionTagCategory": "my-region-cat", "zoneTagCategory": "my-zone-cat",
                "region": "r1", "sshKey": "ssh-rsa AAA", "vmFolderPath": "dev/k8s",
                "instanceClassDefaults": {"disableTimesync": true, "resourcePoolPath": "k8s-pool",
                                          "template": "ubuntu", "datastore": "ds1"},
            })
        );
        std::fs::remove_file(conf).unwrap();
    }
}
