//! The `openstack` provider on Overcast's OpenStack client (the csi's and the ccm's:
//! Keystone sessions, the catalog, microversions, the same error typing), with
//! terraform-provider-openstack 1.54.1's names, schemas and state — what Deckhouse's
//! OpenStack layouts pin — so a state that provider wrote plans no change here.
//!
//! Served: the provider block (its arguments and their `OS_*` variables); networks,
//! subnets, routers and their interfaces, ports, security groups and rules, floating IPs
//! (Neutron's and Nova's) and their associations, key pairs, server groups, block-storage
//! volumes v2 and v3, volume attachments, servers; the data sources of images, networks,
//! subnets, flavors, key pairs, server groups, security groups and Nova's and Cinder's
//! availability zones.
//! Missing (said in docs/STATUS.md): the provider's other resources (load balancers, DNS,
//! object storage, …), Keystone token and clouds.yaml authentication, client certificates.

// The core's modules under the names this crate's files use.
pub(crate) use overcast_terraform_core::{cty, resource, schema};

mod common;
mod compute;
mod floatingip;
mod image;
mod instance;
pub mod migrate;
mod network;
mod port;
mod router;
mod secgroup;
mod subnet;
mod volume;
mod volume_attach;

use std::sync::Arc;

use overcast_cloud_http::{HttpClient, HttpSettings};
use overcast_cloud_openstack::config::{Auth, Credential, Domain, Named};
use overcast_cloud_openstack::keystone::Keystone;
use overcast_cloud_openstack::OpenStack;
use overcast_terraform_core::server::Server;

pub use common::{Cloud, Os};
pub use instance::user_data_hash;

use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome};
use crate::schema::{optional, Block, Obj};

/// The provider block's string arguments, each with the variables it falls back to
/// (upstream's `schema.MultiEnvDefaultFunc`).
const STRINGS: [(&str, &[&str], &str); 23] = [
    ("auth_url", &["OS_AUTH_URL"], "Keystone's URL."),
    ("region", &["OS_REGION_NAME"], "The region."),
    ("user_name", &["OS_USERNAME"], "The user's name."),
    ("user_id", &["OS_USER_ID"], "The user's id."),
    (
        "application_credential_id",
        &["OS_APPLICATION_CREDENTIAL_ID"],
        "An application credential's id.",
    ),
    (
        "application_credential_name",
        &["OS_APPLICATION_CREDENTIAL_NAME"],
        "An application credential's name.",
    ),
    (
        "application_credential_secret",
        &["OS_APPLICATION_CREDENTIAL_SECRET"],
        "The application credential's secret.",
    ),
    (
        "tenant_id",
        &["OS_TENANT_ID", "OS_PROJECT_ID"],
        "The project's id.",
    ),
    (
        "tenant_name",
        &["OS_TENANT_NAME", "OS_PROJECT_NAME"],
        "The project's name.",
    ),
    ("password", &["OS_PASSWORD"], "The user's password."),
    (
        "token",
        &["OS_TOKEN", "OS_AUTH_TOKEN"],
        "A Keystone token (not supported here).",
    ),
    (
        "user_domain_name",
        &["OS_USER_DOMAIN_NAME"],
        "The user's domain, by name.",
    ),
    (
        "user_domain_id",
        &["OS_USER_DOMAIN_ID"],
        "The user's domain, by id.",
    ),
    (
        "project_domain_name",
        &["OS_PROJECT_DOMAIN_NAME"],
        "The project's domain, by name.",
    ),
    (
        "project_domain_id",
        &["OS_PROJECT_DOMAIN_ID"],
        "The project's domain, by id.",
    ),
    ("domain_id", &["OS_DOMAIN_ID"], "The domain of both, by id."),
    (
        "domain_name",
        &["OS_DOMAIN_NAME"],
        "The domain of both, by name.",
    ),
    (
        "default_domain",
        &["OS_DEFAULT_DOMAIN"],
        "The domain when none is named (default).",
    ),
    (
        "endpoint_type",
        &["OS_ENDPOINT_TYPE"],
        "public, internal or admin.",
    ),
    (
        "cacert_file",
        &["OS_CACERT"],
        "PEM certificates (a file, or the PEM itself) the endpoints are signed by.",
    ),
    (
        "cert",
        &["OS_CERT"],
        "A client certificate (not supported here).",
    ),
    (
        "key",
        &["OS_KEY"],
        "The client certificate's key (not supported here).",
    ),
    (
        "cloud",
        &["OS_CLOUD"],
        "An entry of clouds.yaml (not supported here).",
    ),
];

fn provider_block() -> Block {
    let mut attrs: Vec<_> = STRINGS
        .iter()
        .map(|(name, _, about)| {
            let a = optional(name, Type::String, about);
            if matches!(*name, "password" | "token" | "key") {
                a.sensitive()
            } else {
                a
            }
        })
        .collect();
    for (name, about) in [
        ("insecure", "Skip verifying the endpoints' certificates."),
        ("system_scope", "A system-scoped token."),
        ("swauth", "Swift's own authentication (unused)."),
        ("use_octavia", "Deprecated upstream; unused."),
        (
            "delayed_auth",
            "Authenticate at the first call (always so here).",
        ),
        ("allow_reauth", "Renew an expired token (always so here)."),
        ("disable_no_cache_header", "Unused."),
        (
            "enable_logging",
            "Unused: calls are logged by Overcast's tracing.",
        ),
    ] {
        attrs.push(optional(name, Type::Bool, about));
    }
    attrs.push(optional(
        "max_retries",
        Type::Number,
        "Retries of a call (Overcast retries idempotent calls itself).",
    ));
    attrs.push(optional(
        "endpoint_overrides",
        Type::Map(Box::new(Type::String)),
        "Endpoints instead of the catalog's (not supported here).",
    ));
    Block::new("OpenStack (Keystone v3).", attrs)
}

/// The argument, else the first of its variables that is set, else `None`.
fn arg(c: &Obj, name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(Value::String(v)) = c.get(name) {
        if !v.is_empty() {
            return Some(v.clone());
        }
    }
    let vars = STRINGS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, _)| *v)
        .unwrap_or(&[]);
    vars.iter().filter_map(|k| env(k)).find(|v| !v.is_empty())
}

/// Keystone's credentials as gophercloud's `clientconfig` reads the arguments: an
/// application credential if one is named, else the user and password scoped to the
/// project; `domain_*` stands for the user's and the project's domains where those are
/// not named, `default_domain` where nothing is.
pub fn auth(c: &Obj, env: &dyn Fn(&str) -> Option<String>) -> Outcome<Auth> {
    let get = |k: &str| arg(c, k, env);
    for unsupported in ["token", "cert", "key", "cloud"] {
        if get(unsupported).is_some() {
            return Err(Diag::at(
                unsupported,
                format!("{unsupported} is not supported by this provider"),
                "authenticate with a user and password or an application credential",
            ));
        }
    }
    let fallback = match (get("domain_id"), get("domain_name")) {
        (Some(id), _) => Domain::Id(id),
        (None, Some(name)) => Domain::Name(name),
        (None, None) => Domain::Id(get("default_domain").unwrap_or_else(|| "default".into())),
    };
    let domain = |id: &str, name: &str| match (get(id), get(name)) {
        (Some(id), _) => Domain::Id(id),
        (None, Some(name)) => Domain::Name(name),
        (None, None) => fallback.clone(),
    };
    let user = match (get("user_id"), get("user_name")) {
        (Some(id), _) => Some(Named::Id(id)),
        (None, Some(name)) => Some(Named::Name {
            name,
            domain: domain("user_domain_id", "user_domain_name"),
        }),
        (None, None) => None,
    };
    if let Some(secret) = get("application_credential_secret") {
        let credential = match (
            get("application_credential_id"),
            get("application_credential_name"),
        ) {
            (Some(id), _) => Credential::Id(id),
            (None, Some(name)) => Credential::Name {
                name,
                user: user.ok_or_else(|| {
                    Diag::at(
                        "user_name",
                        "An application credential by name needs its user",
                        "set user_name or user_id",
                    )
                })?,
            },
            (None, None) => {
                return Err(Diag::at(
                    "application_credential_id",
                    "An application credential secret needs the credential's id or name",
                    "",
                ))
            }
        };
        return Ok(Auth::ApplicationCredential { credential, secret });
    }
    let user = user.ok_or_else(|| {
        Diag::at(
            "user_name",
            "No user to authenticate as",
            "set user_name (or user_id) and password, or an application credential",
        )
    })?;
    let password = get("password")
        .ok_or_else(|| Diag::at("password", "No password", "set password (or OS_PASSWORD)"))?;
    let project = match (get("tenant_id"), get("tenant_name")) {
        (Some(id), _) => Named::Id(id),
        (None, Some(name)) => Named::Name {
            name,
            domain: domain("project_domain_id", "project_domain_name"),
        },
        (None, None) => {
            return Err(Diag::at(
                "tenant_name",
                "No project to work in",
                "set tenant_name or tenant_id",
            ))
        }
    };
    Ok(Auth::Password {
        user,
        password,
        project,
    })
}

fn configure(c: &Obj, env: &dyn Fn(&str) -> Option<String>) -> Outcome<Cloud> {
    let get = |k: &str| arg(c, k, env);
    let auth_url = get("auth_url").ok_or_else(|| {
        Diag::at(
            "auth_url",
            "auth_url is required",
            "set auth_url (or OS_AUTH_URL)",
        )
    })?;
    let auth = auth(c, env)?;
    let mut settings = HttpSettings::new("openstack");
    settings.insecure = match c.get("insecure") {
        Some(Value::Bool(b)) => *b,
        _ => env("OS_INSECURE").is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
    };
    if let Some(ca) = get("cacert_file") {
        // Upstream takes the PEM itself as well as a path to it.
        settings.ca_pem = Some(if ca.contains("-----BEGIN") {
            ca
        } else {
            std::fs::read_to_string(&ca)
                .map_err(|e| Diag::at("cacert_file", format!("Cannot read {ca}"), e.to_string()))?
        });
    }
    let interface = match get("endpoint_type").as_deref() {
        None | Some("public" | "publicURL") => "public",
        Some("internal" | "internalURL") => "internal",
        Some("admin" | "adminURL") => "admin",
        Some(other) => {
            return Err(Diag::at(
                "endpoint_type",
                "endpoint_type is public, internal or admin",
                format!("not {other:?}"),
            ))
        }
    };
    let region = get("region");
    let http = HttpClient::new(settings, None)
        .map_err(|e| Diag::new("Cannot make the HTTP client", e.to_string()))?;
    let keystone = Keystone::new(http.clone(), &auth_url, auth)
        .map_err(|e| Diag::at("auth_url", "Cannot use Keystone's URL", e.to_string()))?;
    let api = Arc::new(OpenStack::new(
        http,
        keystone,
        interface.into(),
        region.clone(),
    ));
    Ok(Arc::new(Os::new(api, region.unwrap_or_default())))
}

pub fn server() -> Server<Cloud> {
    let env = |k: &str| std::env::var(k).ok();
    Server::new(
        provider_block(),
        Box::new(move |c| Box::pin(std::future::ready(configure(&c, &env)))),
    )
    .legacy()
    .resource("openstack_compute_instance_v2", instance::Instance)
    .resource("openstack_compute_keypair_v2", compute::Keypair)
    .resource("openstack_compute_servergroup_v2", compute::ServerGroup)
    .resource(
        "openstack_compute_volume_attach_v2",
        volume_attach::VolumeAttach,
    )
    .resource(
        "openstack_compute_floatingip_v2",
        floatingip::ComputeFloatingIp,
    )
    .resource(
        "openstack_compute_floatingip_associate_v2",
        floatingip::ComputeFloatingIpAssociate,
    )
    .resource(
        "openstack_blockstorage_volume_v3",
        volume::Volume { v2: false },
    )
    .resource(
        "openstack_blockstorage_volume_v2",
        volume::Volume { v2: true },
    )
    .resource("openstack_networking_network_v2", network::Network)
    .resource("openstack_networking_subnet_v2", subnet::Subnet)
    .resource("openstack_networking_router_v2", router::Router)
    .resource(
        "openstack_networking_router_interface_v2",
        router::RouterInterface,
    )
    .resource("openstack_networking_port_v2", port::Port)
    .resource("openstack_networking_secgroup_v2", secgroup::SecGroup)
    .resource(
        "openstack_networking_secgroup_rule_v2",
        secgroup::SecGroupRule,
    )
    .resource(
        "openstack_networking_floatingip_v2",
        floatingip::NetworkingFloatingIp,
    )
    .resource(
        "openstack_networking_floatingip_associate_v2",
        floatingip::NetworkingFloatingIpAssociate,
    )
    .data_source("openstack_images_image_v2", image::ImageData)
    .data_source("openstack_networking_network_v2", network::NetworkData)
    .data_source("openstack_networking_subnet_v2", subnet::SubnetData)
    .data_source("openstack_networking_secgroup_v2", secgroup::SecGroupData)
    .data_source("openstack_compute_flavor_v2", compute::FlavorData)
    .data_source("openstack_compute_keypair_v2", compute::KeypairData)
    .data_source("openstack_compute_servergroup_v2", compute::ServerGroupData)
    .data_source(
        "openstack_compute_availability_zones_v2",
        compute::AvailabilityZones(overcast_cloud_openstack::Service::Compute),
    )
    .data_source(
        "openstack_blockstorage_availability_zones_v3",
        compute::AvailabilityZones(overcast_cloud_openstack::Service::BlockStorage),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::s;

    fn env(_: &str) -> Option<String> {
        None
    }

    /// Deckhouse's provider block (`terraform-modules/providers.tf`): user, password,
    /// project by name, one `domain_name` for both.
    #[test]
    fn deckhouse_s_domain_name_is_the_user_s_and_the_project_s() {
        let c = Obj::from([
            ("auth_url".to_owned(), s("http://keystone:5000/v3")),
            ("user_name".to_owned(), s("deckhouse")),
            ("password".to_owned(), s("secret")),
            ("tenant_name".to_owned(), s("kube")),
            ("domain_name".to_owned(), s("Default")),
            ("token".to_owned(), s("")),
            ("application_credential_secret".to_owned(), s("")),
        ]);
        let a = auth(&c, &env).unwrap();
        assert_eq!(
            a,
            Auth::Password {
                user: Named::Name {
                    name: "deckhouse".into(),
                    domain: Domain::Name("Default".into())
                },
                password: "secret".into(),
                project: Named::Name {
                    name: "kube".into(),
                    domain: Domain::Name("Default".into())
                },
            }
        );
    }

    #[test]
    fn the_variables_stand_in_for_what_the_block_leaves_out() {
        let vars = |k: &str| match k {
            "OS_USERNAME" => Some("admin".to_owned()),
            "OS_PASSWORD" => Some("p".to_owned()),
            "OS_PROJECT_ID" => Some("proj-1".to_owned()),
            _ => None,
        };
        let a = auth(&Obj::new(), &vars).unwrap();
        assert_eq!(
            a,
            Auth::Password {
                user: Named::Name {
                    name: "admin".into(),
                    domain: Domain::Id("default".into())
                },
                password: "p".into(),
                project: Named::Id("proj-1".into()),
            }
        );
    }

    #[test]
    fn a_token_is_refused_by_name() {
        let c = Obj::from([("token".to_owned(), s("gAAAA"))]);
        assert_eq!(
            auth(&c, &env).unwrap_err().attribute.as_deref(),
            Some("token")
        );
    }
}
