//! The clouds by name: the one list every binary's `--cloud` (env `OVERCAST_CLOUD`) and
//! every `deploy/overlays/<name>` use.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudName {
    /// The embedded local cloud: sparse files attached as loop devices.
    Local,
    /// Deckhouse Virtualization Platform (issue 16).
    Dvp,
    /// OpenStack (issue 17).
    Openstack,
    /// VMware vSphere.
    Vsphere,
    /// zVirt / oVirt REST v4 (issue 18).
    Zvirt,
}

impl CloudName {
    pub const ALL: [CloudName; 5] = [
        Self::Local,
        Self::Dvp,
        Self::Openstack,
        Self::Vsphere,
        Self::Zvirt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Dvp => "dvp",
            Self::Openstack => "openstack",
            Self::Vsphere => "vsphere",
            Self::Zvirt => "zvirt",
        }
    }
}

impl fmt::Display for CloudName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CloudName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.as_str()).collect();
                format!("unknown cloud {s:?} (one of: {})", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_and_others_are_refused() {
        for c in CloudName::ALL {
            assert_eq!(c.as_str().parse::<CloudName>(), Ok(c));
        }
        let err = "aws".parse::<CloudName>().unwrap_err();
        assert!(
            err.contains("one of: local, dvp, openstack, vsphere, zvirt"),
            "{err}"
        );
    }
}
