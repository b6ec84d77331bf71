//! First Class Disks' associations (`RetrieveVStorageObjectAssociations` on the vCenter's
//! `VcenterVStorageObjectManager`, vSphere API 6.7+): for each disk asked about, the VMs
//! holding it and under which device key. A CNS block volume is a First Class Disk with
//! the volume's id, so this answers "which VMs hold these volumes" in one call that grows
//! with the volumes asked about, where reading every VM's devices grows with the
//! inventory. (vsphere-csi-driver reads its node VMs' devices instead; it knows its
//! nodes from the CSINode objects, which this driver does not read.)

use overcast_cloud::CloudError;

use crate::session::{Endpoint, Vcenter};
use crate::soap::{el, Moref};

/// What the vCenter says of one disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Associations {
    pub id: String,
    /// The holding VMs' ids (`vmDiskAssociations.vmId`), as the vCenter spells them.
    pub vms: Vec<String>,
    /// The fault it answered for this disk alone (its type, as `NotFound`), if any.
    pub fault: Option<String>,
}

/// Why the associations could not be read at all.
#[derive(Debug)]
pub enum Unanswered {
    /// This vCenter has no such manager or method (an older vCenter, an ESXi host, vcsim).
    Unsupported(String),
    Failed(CloudError),
}

/// The associations of each `(disk id, its datastore)`, one call for all.
pub async fn associations(
    vc: &Vcenter,
    disks: &[(String, Moref)],
) -> Result<Vec<Associations>, Unanswered> {
    let content = vc.content().await.map_err(Unanswered::Failed)?;
    let Some(manager) = content.vstorage_object_manager.clone() else {
        return Err(Unanswered::Unsupported(
            "the service content names no vStorageObjectManager".into(),
        ));
    };
    let mut params = manager.xml("_this");
    for (id, datastore) in disks {
        params.push_str("<ids>");
        params.push_str(&format!("<id>{}</id>", el("id", id)));
        params.push_str(&datastore.xml("datastore"));
        params.push_str("</ids>");
    }
    let r = match vc
        .call(
            Endpoint::Vim,
            "RetrieveVStorageObjectAssociations",
            &params,
            true,
        )
        .await
    {
        Ok(r) => r,
        // vCenter's faults for a method or a manager it does not have.
        Err(CloudError::InvalidArgument(m))
            if m.contains("MethodNotFound") || m.contains("NotSupported") =>
        {
            return Err(Unanswered::Unsupported(m))
        }
        Err(e) => return Err(Unanswered::Failed(e)),
    };
    Ok(r.all("returnval")
        .map(|a| Associations {
            id: a.text_at(&["id", "id"]).unwrap_or_default().to_owned(),
            vms: a
                .all("vmDiskAssociations")
                .filter_map(|v| v.text_at(&["vmId"]))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect(),
            fault: a.child("fault").map(|f| {
                f.child("fault")
                    .and_then(|x| x.xsi_type.clone())
                    .unwrap_or_else(|| "fault".into())
            }),
        })
        .collect())
}
