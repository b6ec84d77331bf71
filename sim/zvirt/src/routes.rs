//! The engine's routes: what each method and path answers.

use super::*;

impl Engine {
    /// Answers in the engine's XML when the client asks for it (`Accept: application/xml`,
    /// as the SDKs do), reading an XML body too; JSON otherwise.
    pub(super) async fn handle(&self, req: Request<hyper::body::Incoming>) -> Answer {
        let header = |name: hyper::header::HeaderName| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let wants_xml = header(hyper::header::ACCEPT).contains("xml");
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let resp = self.handle_json(req).await;
        if !wants_xml
            || resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .is_none_or(|v| v != "application/json")
        {
            return resp;
        }
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let root = match status.as_u16() {
            400.. => "fault".to_owned(),
            _ => xml_root(&method, &path),
        };
        let mut r = Response::new(Full::new(Bytes::from(xml::to_xml(&root, &value))));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/xml;charset=UTF-8"),
        );
        r
    }

    pub(super) async fn handle_json(&self, req: Request<hyper::body::Incoming>) -> Answer {
        tokio::time::sleep(self.latency.answer).await;
        let slow = self.state.lock().expect("state").slow;
        if let Some(delay) = slow {
            tokio::time::sleep(delay).await;
        }
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        // `all_content=true`, or the `All-Content: true` header (BackendResource.isPopulate).
        let all_content_header = req
            .headers()
            .get("all-content")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let auth = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut st = self.state.lock().expect("state");
        if st.html {
            return html_page();
        }
        if path == "/ovirt-engine/sso/oauth/token" && method == "POST" {
            return self.login(&mut st, &body);
        }
        let Some(rest) = path.strip_prefix(API) else {
            return fault(404, "Not found");
        };
        let valid = auth
            .as_deref()
            .and_then(|t| st.tokens.get(t))
            .is_some_and(|until| Instant::now() < *until);
        if !valid {
            st.unauthorized += 1;
            // The engine answers an expired or unknown token with 401 and no fault.
            let mut r = answer(401, json!({}));
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
        self.tick(&mut st);
        let parts: Vec<&str> = rest.trim_matches('/').split('/').collect();
        let route = parts
            .iter()
            .enumerate()
            .map(|(i, p)| if i % 2 == 1 { "{id}" } else { p })
            .collect::<Vec<_>>()
            .join("/");
        *st.calls.entry(format!("{method} /{route}")).or_default() += 1;
        let doc: Value = match body.first() {
            Some(b'<') => match xml::from_xml(&String::from_utf8_lossy(&body)) {
                Ok((_, v)) => v,
                Err(e) => return fault(400, &format!("Request syntax error: {e}")),
            },
            _ => serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let search = form_value(&query, "search");
        let all_content = all_content_header
            || form_value(&query, "all_content").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        // The search backend's SyntaxChecker refuses `'` and `;` anywhere, and a value
        // ending in a backslash cannot close its quotes; the REST layer then answers the
        // listing with nothing at all: 200 and an empty collection, not a fault.
        let search_valid =
            search.as_deref().is_none_or(search_is_valid) && !(search.is_some() && st.blind_search);
        // `case_sensitive`: absent is false (AbstractBackendCollectionResource reads it with
        // missingValue=false, though the API model's documentation says the default is
        // true), present without a value is true.
        let case_sensitive = form_value(&query, "case_sensitive")
            .is_some_and(|v| v.is_empty() || v.eq_ignore_ascii_case("true"));
        // `max` caps a listing (no `max`: everything, as the engine answers).
        let max = form_value(&query, "max").and_then(|m| m.parse::<usize>().ok());
        match (method.as_str(), parts.as_slice()) {
            ("GET", [""]) => answer(
                200,
                json!({"product_info": {"name": "oVirt Engine", "vendor": "ovirt.org",
                    "version": {"major": "4", "minor": "5", "build": "4", "revision": "0", "full_version": "4.5.4"}}}),
            ),
            ("GET", ["disks"]) => {
                let Some(found) = searched(search.as_deref(), DISK_FIELDS, search_valid) else {
                    return collection("disk", Vec::new());
                };
                let matching: Vec<&SimDisk> = st
                    .disks
                    .values()
                    .filter(|d| found.matches(|f| disk_field(&st, d, f), case_sensitive))
                    .collect();
                // BackendDisksResource runs a search without `max` (Integer.MAX_VALUE
                // rows: `page 2` and later are empty) and cuts the first `max` of it;
                // no search: every disk, cut to `max`. Ordered by alias, then id.
                let list: Vec<Value> = found
                    .page(matching, "alias", |d, f| disk_field(&st, d, f), None)
                    .into_iter()
                    .take(max.unwrap_or(usize::MAX))
                    .map(|d| self.disk_json(&st, d, false))
                    .collect();
                collection("disk", list)
            }
            ("POST", ["disks"]) => self.add_disk(&mut st, &doc),
            ("GET", ["disks", id]) => match st.disks.get(*id) {
                Some(d) => answer(200, self.disk_json(&st, d, all_content)),
                None => not_found(id),
            },
            ("PUT", ["disks", id]) => self.update_disk(&mut st, id, &doc),
            ("DELETE", ["disks", id]) => self.remove_disk(&mut st, id),
            ("GET", ["vms"]) => {
                let Some(found) = searched(search.as_deref(), VM_FIELDS, search_valid) else {
                    return collection("vm", Vec::new());
                };
                let matching: Vec<&SimVm> = st
                    .vms
                    .values()
                    .filter(|vm| found.matches(|f| vm_field(&st, vm, f), case_sensitive))
                    .collect();
                // An administrator's VM search pages in SQL: `page n` of `max` rows,
                // ordered by name unless `sortby` says otherwise.
                let list: Vec<Value> = found
                    .page(matching, "name", |vm, f| vm_field(&st, vm, f), max)
                    .into_iter()
                    .map(|vm| {
                        let mut v = vm_json(vm, follows(&query, "reported_devices"));
                        // `follow` inlines a linked collection (the Follow interface
                        // every list of the API model extends).
                        if follows(&query, "disk_attachments") {
                            let attachments: Vec<Value> = vm
                                .attachments
                                .iter()
                                .map(|(d, a)| Self::attachment_json(vm, d, a))
                                .collect();
                            v["disk_attachments"] = if attachments.is_empty() {
                                json!({})
                            } else {
                                json!({ "disk_attachment": attachments })
                            };
                        }
                        v
                    })
                    .collect();
                collection("vm", list)
            }
            ("GET", ["vms", id]) => match st.vms.get(*id) {
                Some(vm) => answer(200, vm_json(vm, follows(&query, "reported_devices"))),
                None => not_found(id),
            },
            ("PUT", ["vms", id]) => self.update_vm(&mut st, id, &doc),
            ("GET", ["vms", id, "nics"]) => match st.vms.get(*id) {
                Some(vm) => collection(
                    "nic",
                    vm.nics.iter().map(|n| vms::nic_json(vm, n)).collect(),
                ),
                None => not_found(id),
            },
            ("POST", ["vms", id, "nics"]) => self.add_nic(&mut st, id, &doc),
            ("DELETE", ["vms", id, "nics", nic]) => match st.vms.get_mut(*id) {
                Some(vm) => match vm.nics.iter().position(|n| n.id == *nic) {
                    Some(i) => {
                        vm.nics.remove(i);
                        answer(200, json!({}))
                    }
                    None => not_found(nic),
                },
                None => not_found(id),
            },
            ("POST", ["vms"]) => {
                let clone = form_value(&query, "clone").is_some_and(|v| v.is_empty() || v == "true");
                self.add_vm_from_template(&mut st, &doc, clone)
            }
            ("POST", ["vms", id, action]) if matches!(*action, "start" | "stop" | "shutdown") => {
                self.vm_action(&mut st, id, action)
            }
            ("DELETE", ["vms", id]) => {
                let detach_only = form_value(&query, "detach_only").is_some_and(|v| v.is_empty() || v == "true");
                self.remove_vm_api(&mut st, id, detach_only)
            }
            ("GET", ["templates"]) if !search_valid => collection("template", Vec::new()),
            ("GET", ["templates"]) => self.templates(&st, search.as_deref(), case_sensitive),
            ("GET", ["templates", id]) => self.template(&st, id),
            ("GET", ["vms", id, "reporteddevices"]) => match st.vms.get(*id) {
                Some(vm) => answer(200, reported_devices(vm)),
                None => not_found(id),
            },
            ("GET", ["datacenters"]) => collection(
                "data_center",
                st.data_centers.iter().map(data_center_json).collect(),
            ),
            ("GET", ["instancetypes"]) => collection(
                "instance_type",
                INSTANCE_TYPES
                    .iter()
                    .map(|(name, cpus, mib)| {
                        let id = instance_type_id(name);
                        json!({"href": format!("{API}/instancetypes/{id}"), "id": id, "name": name,
                            "memory": (mib << 20).to_string(),
                            "cpu": {"topology": {"sockets": cpus.to_string(), "cores": "1", "threads": "1"}}})
                    })
                    .collect(),
            ),
            ("GET", ["vms", id, "diskattachments"]) => match st.vms.get(*id) {
                Some(vm) => collection(
                    "disk_attachment",
                    vm.attachments
                        .iter()
                        .map(|(d, a)| Self::attachment_json(vm, d, a))
                        .collect(),
                ),
                None => not_found(id),
            },
            ("POST", ["vms", id, "diskattachments"]) => self.attach(&mut st, id, &doc),
            ("GET", ["vms", id, "diskattachments", disk]) => {
                match st
                    .vms
                    .get(*id)
                    .and_then(|vm| Some((vm, vm.attachments.get(*disk)?)))
                {
                    Some((vm, a)) => answer(200, Self::attachment_json(vm, disk, a)),
                    None => not_found(disk),
                }
            }
            // Activating (or deactivating) an attachment: a plugged device is unplugged on
            // deactivation; activation takes the engine's activation time again.
            ("PUT", ["vms", id, "diskattachments", disk]) => {
                let file = st.disks.get(*disk).map(|d| d.file.clone());
                let Some(vm) = st.vms.get_mut(*id) else {
                    return not_found(id);
                };
                let Some(a) = vm.attachments.get_mut(*disk) else {
                    return not_found(disk);
                };
                match doc["active"].as_str() {
                    Some("false") => self.deactivated(disk, a, file.as_deref()),
                    Some("true") if a.device.is_none() => {
                        let soon = Instant::now() + self.latency.activate;
                        a.active_at = a.active_at.min(soon);
                    }
                    _ => {}
                }
                let vm = &st.vms[*id];
                answer(200, Self::attachment_json(vm, disk, &vm.attachments[*disk]))
            }
            // DetachDiskFromVmCommand.validate: the VM must exist (400
            // ACTION_TYPE_FAILED_VM_NOT_FOUND), be Up or Down (409
            // ACTION_TYPE_FAILED_VM_STATUS_ILLEGAL), and have the disk (400
            // ACTION_TYPE_FAILED_CANNOT_DETACH_DISK_IS_NOT_ATTACHED_TO_VM) — never a 404.
            ("DELETE", ["vms", id, "diskattachments", disk]) => {
                let file = st.disks.get(*disk).map(|d| d.file.clone());
                let Some(vm) = st.vms.get_mut(*id) else {
                    return fault(400, "Cannot detach Virtual Disk. VM is not found.");
                };
                if vm.status != "up" && vm.status != "down" {
                    return fault(
                        409,
                        &format!(
                            "Cannot detach Virtual Disk because the VM is in {} status.",
                            vm_status_text(&vm.status)
                        ),
                    );
                }
                match vm.attachments.remove(*disk) {
                    Some(mut a) => {
                        self.unplug(disk, &mut a, file.as_deref());
                        answer(200, json!({}))
                    }
                    None => fault(
                        400,
                        &format!(
                            "Cannot detach Virtual Disk. The specified disk is not attached to the VM {}.",
                            vm.name
                        ),
                    ),
                }
            }
            // `ClusterService.get`: the REST layer's 404 for an id it does not hold.
            ("GET", ["clusters", id]) => match st.clusters.iter().find(|c| c.id == *id) {
                Some(c) => answer(
                    200,
                    json!({"href": format!("{API}/clusters/{}", c.id), "id": c.id, "name": c.name,
                        "data_center": data_center_ref(&st, &c.data_center, follows(&query, "data_center"))}),
                ),
                None => not_found(id),
            },
            ("GET", ["clusters"]) => collection(
                "cluster",
                st.clusters
                    .iter()
                    .map(|c| {
                        json!({"href": format!("{API}/clusters/{}", c.id), "id": c.id, "name": c.name,
                            "data_center": data_center_ref(&st, &c.data_center, follows(&query, "data_center"))})
                    })
                    .collect(),
            ),
            ("GET", ["storagedomains"]) => collection(
                "storage_domain",
                st.domains
                    .iter()
                    .map(|sd| {
                        let used: u64 = st
                            .disks
                            .values()
                            .filter(|d| d.domain == sd.id)
                            .map(|d| d.size)
                            .sum();
                        json!({
                            "href": format!("{API}/storagedomains/{}", sd.id), "id": sd.id,
                            "name": sd.name, "type": "data", "master": (sd.name == "data").to_string(),
                            "available": sd.available.to_string(), "used": used.to_string(),
                            "committed": used.to_string(), "external_status": sd.external_status,
                            "storage": {"type": sd.storage},
                            "data_centers": {"data_center": [
                                data_center_ref(&st, &sd.data_center, follows(&query, "data_centers"))]},
                        })
                    })
                    .collect(),
            ),
            _ => fault(404, &format!("No handler for {method} {path}")),
        }
    }
}
