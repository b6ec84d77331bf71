//! A server changed in place, as upstream's Update does: its name, power state, metadata,
//! tags, security groups, flavor (a resize, confirmed), image (a rebuild, when it does not
//! boot from a volume) and admin password — each only where the plan changed it.

use super::*;

pub(super) async fn update(os: &Cloud, prior: &Obj, p: &Obj) -> Outcome<Obj> {
    let id = path_id(prior, "id")?;
    let changed = |k: &str| prior.get(k) != p.get(k);
    let limit = timeout(p, "update", DEFAULT);
    if changed("name") {
        let name = string(p, "name").unwrap_or_default();
        call(
            os,
            Service::Compute,
            "server_update",
            Method::PUT,
            &format!("/servers/{id}"),
            Some(&json!({"server": {"name": name}})),
            &[200],
            "rename the server",
        )
        .await?;
    }
    if changed("power_state") {
        let old = string(prior, "power_state").unwrap_or("active");
        match string(p, "power_state").unwrap_or("active") {
            "shutoff" => {
                action(os, &id, "server_stop", json!({"os-stop": null})).await?;
                settle(os, &id, &[], &["SHUTOFF"], limit).await?;
            }
            "shelved_offloaded" => {
                action(os, &id, "server_shelve", json!({"shelve": null})).await?;
                settle(os, &id, &[], &["SHELVED_OFFLOADED"], limit).await?;
            }
            _ if old.starts_with("shelved") => {
                action(os, &id, "server_unshelve", json!({"unshelve": null})).await?;
                settle(os, &id, &[], &["ACTIVE"], limit).await?;
            }
            _ => {
                action(os, &id, "server_start", json!({"os-start": null})).await?;
                settle(os, &id, &[], &["ACTIVE"], limit).await?;
            }
        }
    }
    if changed("metadata") {
        let (old, new) = (map_json(prior, "metadata"), map_json(p, "metadata"));
        for k in old.keys().filter(|k| !new.contains_key(*k)) {
            if !safe(k) {
                return Err(Diag::at(
                    "metadata",
                    format!("The metadata key {k:?} cannot be removed through a path"),
                    "",
                ));
            }
            crate::common::delete(
                os,
                Service::Compute,
                "server_metadata_delete",
                &format!("/servers/{id}/metadata/{k}"),
            )
            .await?;
        }
        call(
            os,
            Service::Compute,
            "server_metadata_update",
            Method::POST,
            &format!("/servers/{id}/metadata"),
            Some(&json!({"metadata": new})),
            &[200],
            "set the server's metadata",
        )
        .await?;
    }
    if changed("security_groups") {
        let (old, new) = (
            list_of(prior, "security_groups"),
            list_of(p, "security_groups"),
        );
        for g in old.iter().filter(|g| !new.contains(g)) {
            let done = os
                .api
                .expect(
                    Service::Compute,
                    "server_remove_sg",
                    Method::POST,
                    &format!("/servers/{id}/action"),
                    Some(&json!({"removeSecurityGroup": {"name": g}})),
                    &[202],
                )
                .await;
            match done {
                Ok(_) | Err(overcast_cloud::CloudError::NotFound { .. }) => {}
                Err(e) => return Err(Diag::cloud(&format!("remove security group {g}"), e)),
            }
        }
        for g in new.iter().filter(|g| !old.contains(g)) {
            action(
                os,
                &id,
                "server_add_sg",
                json!({"addSecurityGroup": {"name": g}}),
            )
            .await?;
        }
    }
    if changed("admin_pass") {
        if let Some(pass) = string(p, "admin_pass").filter(|v| !v.is_empty()) {
            action(
                os,
                &id,
                "server_change_password",
                json!({"changePassword": {"adminPass": pass}}),
            )
            .await?;
        }
    }
    if changed("flavor_id") || changed("flavor_name") {
        let mut want = p.clone();
        if !changed("flavor_id") {
            // A new name: its flavor, not the id recorded for the old one.
            want.remove("flavor_id");
        }
        let flavor = flavor_ref(os, &want).await?;
        action(
            os,
            &id,
            "server_resize",
            json!({"resize": {"flavorRef": flavor}}),
        )
        .await?;
        let ignore = blocks(p, "vendor_options")
            .first()
            .and_then(|v| boolean(v, "ignore_resize_confirmation"))
            .unwrap_or(false);
        if ignore {
            settle(
                os,
                &id,
                &["RESIZE", "VERIFY_RESIZE"],
                &["ACTIVE", "SHUTOFF"],
                limit,
            )
            .await?;
        } else {
            settle(os, &id, &["RESIZE"], &["VERIFY_RESIZE"], limit).await?;
            action(
                os,
                &id,
                "server_confirm_resize",
                json!({"confirmResize": null}),
            )
            .await?;
            settle(os, &id, &["VERIFY_RESIZE"], &["ACTIVE", "SHUTOFF"], limit).await?;
        }
    }
    if (changed("image_id") || changed("image_name")) && !request::boots_from_volume(p) {
        let mut want = p.clone();
        if !changed("image_id") {
            want.remove("image_id");
        }
        let image = image_ref(os, &want).await?;
        action(
            os,
            &id,
            "server_rebuild",
            json!({"rebuild": {"imageRef": image}}),
        )
        .await?;
        settle(os, &id, &["REBUILD"], &["ACTIVE", "SHUTOFF"], limit).await?;
    }
    if changed("tags") {
        let tags = list_of(p, "tags");
        let done = os
            .api
            .call(
                Service::Compute,
                "server_tags_replace",
                Method::PUT,
                &format!("/servers/{id}/tags"),
                Some(&json!({"tags": tags})),
                Some(Microversion(2, 26)),
            )
            .await
            .map_err(|e| Diag::cloud("tag the server", e))?;
        if done.status.as_u16() != 200 {
            return Err(Diag::cloud(
                "tag the server",
                overcast_cloud_http::status_error("openstack", "server_tags_replace", &done),
            ));
        }
    }
    let server = read_server(os, &id).await?.ok_or_else(|| {
        Diag::new(
            "The server is gone",
            format!("server {id} vanished while it was changed"),
        )
    })?;
    let mut state = p.clone();
    state.extend(observe(os, p, &server).await?);
    Ok(state)
}
