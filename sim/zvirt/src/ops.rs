//! The engine's operations behind the routes: login, disks, attachments.

use super::*;

impl Engine {
    pub(super) fn login(&self, st: &mut State, body: &[u8]) -> Answer {
        let form = String::from_utf8_lossy(body).into_owned();
        let user = form_value(&form, "username");
        let password = form_value(&form, "password");
        let grant = form_value(&form, "grant_type");
        if grant.as_deref() != Some("password")
            || user.as_deref() != Some(USER)
            || password.as_deref() != Some(PASSWORD)
        {
            return answer(
                400,
                json!({"error_code": "access_denied", "error": "Cannot authenticate user: Invalid username or password."}),
            );
        }
        st.logins += 1;
        let ttl = st.token_ttl.unwrap_or(Duration::from_secs(1800));
        let token = format!("{}{}", uuid().replace('-', ""), uuid().replace('-', ""));
        st.tokens.insert(token.clone(), Instant::now() + ttl);
        st.issued.push(token.clone());
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_add(ttl)
            .as_millis();
        answer(
            200,
            json!({"access_token": token, "scope": "ovirt-app-api ovirt-ext=token-info:authz-search",
                "exp": exp.to_string(), "token_type": "bearer"}),
        )
    }

    pub(super) fn add_disk(&self, st: &mut State, doc: &Value) -> Answer {
        let alias = doc["alias"].as_str().or(doc["name"].as_str()).unwrap_or("");
        let size = number(&doc["provisioned_size"]);
        // The engine takes the storage domain by id or by name.
        let domain_ref = &doc["storage_domains"]["storage_domain"][0];
        let domain_id = domain_ref["id"].as_str().unwrap_or("");
        let domain_name = domain_ref["name"].as_str().unwrap_or(domain_id);
        let (Some(size), false) = (size, alias.is_empty()) else {
            return fault(
                400,
                "Cannot add Virtual Disk. Request syntax error: provisioned_size and alias are required",
            );
        };
        // BaseDisk's bean validation: the alias @Size(max = 255) and @ValidI18NName
        // (letters, digits, `-_.`), the description @Size(max = 500) and
        // @ValidDescription (ASCII or letters).
        if alias.chars().count() > 255 {
            return fault(400, "size must be between 0 and 255");
        }
        if !alias
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return fault(
                400,
                "Disk alias name must be formed of alpha-numeric characters or \"-_.\"",
            );
        }
        let description = doc["description"].as_str().unwrap_or("");
        if description.chars().count() > 500 {
            return fault(400, "size must be between 0 and 500");
        }
        if !description
            .chars()
            .all(|c| c.is_ascii() || c.is_alphabetic())
        {
            return fault(
                400,
                "Disk description must be formed only from alpha-numeric characters and special characters that conform to the standard ASCII character set.",
            );
        }
        let Some(domain) = st
            .domains
            .iter_mut()
            .find(|d| d.name == domain_name || (!domain_id.is_empty() && d.id == domain_id))
        else {
            return fault(
                400,
                &format!("Cannot add Virtual Disk. Storage Domain {domain_name} does not exist"),
            );
        };
        if size > domain.available {
            return fault(
                409,
                &format!(
                    "Cannot add Virtual Disk. Low disk space on Storage Domain {}.",
                    domain.name
                ),
            );
        }
        domain.available -= size;
        let domain_id = domain.id.clone();
        let id = uuid();
        let file = self.dir.join(format!("{id}.img"));
        if std::fs::File::create(&file)
            .and_then(|f| f.set_len(size))
            .is_err()
        {
            return fault(500, "Internal Engine Error");
        }
        let stuck = st.stuck_alias.as_deref() == Some(alias);
        let disk = SimDisk {
            id: id.clone(),
            alias: alias.to_owned(),
            description: description.to_owned(),
            size,
            pending_size: None,
            format: doc["format"].as_str().unwrap_or("cow").to_owned(),
            sparse: doc["sparse"].as_str() == Some("true") || doc["sparse"] == json!(true),
            domain: domain_id,
            unlock_at: Some(Instant::now() + self.latency.locked),
            gone_at: None,
            file,
            stuck,
            illegal: false,
            removal_held: false,
        };
        let out = self.disk_json(st, &disk, false);
        st.disks.insert(id, disk);
        answer(201, out)
    }

    pub(super) fn update_disk(&self, st: &mut State, id: &str, doc: &Value) -> Answer {
        let Some(d) = st.disks.get_mut(id) else {
            return not_found(id);
        };
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                "Cannot edit Virtual Disk. Related operation is currently in progress. Please try again later.",
            );
        }
        // An alias is renamed at once (BaseDisk's rules, as at add).
        if let Some(alias) = doc["alias"].as_str() {
            if alias.is_empty()
                || alias.chars().count() > 255
                || !alias
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return fault(
                    400,
                    "Disk alias name must be formed of alpha-numeric characters or \"-_.\"",
                );
            }
            d.alias = alias.to_owned();
        }
        let Some(size) = number(&doc["provisioned_size"]) else {
            let d = &st.disks[id];
            return answer(200, self.disk_json(st, d, false));
        };
        if size < d.size {
            return fault(
                400,
                "Cannot edit Virtual Disk. New disk size must be larger than the current disk size.",
            );
        }
        d.pending_size = Some(size);
        d.unlock_at = Some(Instant::now() + self.latency.locked);
        let grow = size - d.size;
        let domain = d.domain.clone();
        if let Some(sd) = st.domains.iter_mut().find(|x| x.id == domain) {
            sd.available = sd.available.saturating_sub(grow);
        }
        let d = &st.disks[id];
        answer(200, self.disk_json(st, d, false))
    }

    pub(super) fn remove_disk(&self, st: &mut State, id: &str) -> Answer {
        let attached = st.vms.values().any(|vm| vm.attachments.contains_key(id));
        let Some(d) = st.disks.get_mut(id) else {
            return not_found(id);
        };
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                "Cannot remove Virtual Disk. Related operation is currently in progress. Please try again later.",
            );
        }
        // RemoveDiskCommand.validate: refused while a VM that has it plugged is not Down
        // (ACTION_TYPE_FAILED_VM_IS_NOT_DOWN, 409); with every such VM Down the engine
        // removes the disk *and its attachments*.
        d.gone_at = Some(Instant::now() + self.latency.remove);
        if attached {
            let running = st.vms.values().any(|vm| {
                vm.status != "down" && vm.attachments.get(id).is_some_and(|a| a.device.is_some())
            });
            if running {
                if let Some(d) = st.disks.get_mut(id) {
                    d.gone_at = None;
                }
                return fault(
                    409,
                    "Cannot remove Virtual Disk. At least one of the VMs is not down.",
                );
            }
            let file = st.disks.get(id).map(|d| d.file.clone());
            for vm in st.vms.values_mut() {
                if let Some(mut a) = vm.attachments.remove(id) {
                    self.unplug(id, &mut a, file.as_deref());
                }
            }
        }
        answer(200, json!({}))
    }

    pub(super) fn attach(&self, st: &mut State, vm_id: &str, doc: &Value) -> Answer {
        let disk_id = doc["disk"]["id"].as_str().unwrap_or("").to_owned();
        // AttachDiskToVmCommand.validate, in its order: the disk exists
        // (ACTION_TYPE_FAILED_DISK_NOT_EXIST, 400), is not illegal (400) nor locked
        // (ACTION_TYPE_FAILED_DISKS_LOCKED, 409), the VM exists
        // (ACTION_TYPE_FAILED_VM_NOT_FOUND, 400 — not a 404: the VM is the action's
        // parameter, not the resource).
        let Some(d) = st.disks.get(&disk_id) else {
            return fault(
                400,
                "Cannot attach Virtual Disk. The specified disk does not exist.",
            );
        };
        if d.illegal {
            return fault(
                400,
                "Cannot attach Virtual Disk. Disk is in an illegal state. Disks in an illegal state can only be deleted.",
            );
        }
        if d.unlock_at.is_some() || d.gone_at.is_some() {
            return fault(
                409,
                &format!(
                    "Cannot attach Virtual Disk: The following disks are locked: {}. Please try again in a few minutes.",
                    d.alias
                ),
            );
        }
        if !st.vms.contains_key(vm_id) {
            return fault(400, "Cannot attach Virtual Disk. VM is not found.");
        }
        if doc["interface"].as_str().is_none() {
            return fault(
                400,
                "Cannot attach Virtual Disk. Request syntax error: interface is required",
            );
        }
        if st
            .vms
            .values()
            .any(|vm| vm.id != vm_id && vm.attachments.contains_key(&disk_id))
        {
            return fault(
                409,
                "Cannot attach Virtual Disk. The disk is not shareable and is already attached to a VM.",
            );
        }
        // A disk's storage domain must be attached to the VM's data center (the engine's
        // ACTION_TYPE_FAILED_STORAGE_POOL_NOT_MATCH).
        let disk_dc = st
            .domains
            .iter()
            .find(|sd| sd.id == d.domain)
            .map(|sd| sd.data_center.clone());
        let vm_dc = st
            .clusters
            .iter()
            .find(|c| c.id == st.vms[vm_id].cluster)
            .map(|c| c.data_center.clone());
        if disk_dc != vm_dc {
            return fault(
                409,
                "Cannot attach Virtual Disk. The target Data Center does not contain the Virtual Disk.",
            );
        }
        let vm = st.vms.get_mut(vm_id).expect("checked");
        if vm.attachments.contains_key(&disk_id) {
            return fault(
                409,
                "Cannot attach Virtual Disk. The disk is already attached to VM.",
            );
        }
        let a = SimAttachment {
            active_at: Instant::now() + self.latency.activate,
            bootable: doc["bootable"].as_str() == Some("true") || doc["bootable"] == json!(true),
            device: None,
            read_only: doc["read_only"].as_str() == Some("true"),
            interface: doc["interface"].as_str().unwrap_or_default().to_owned(),
        };
        let out = Self::attachment_json(vm, &disk_id, &a);
        vm.attachments.insert(disk_id, a);
        answer(201, out)
    }
}
