//! Where a volume may go when nodes have zones, as vsphere-csi-driver places it: a host's
//! zone and region are the tags, in the configured categories, nearest to it (on the
//! host, its cluster, folders, datacenter — as the ccm reads a node's); a volume of zone
//! Z goes on a datastore every host of Z mounts, so every node of Z can take it; and a
//! volume's place is read back from its datastore — the whole region when every zone of
//! the region reaches it, else one zone.

use std::collections::{BTreeMap, BTreeSet};

use overcast_cloud::{CloudError, Zone};

use crate::inventory::View;
use crate::soap::Moref;
use crate::tags::{nearest, Tags};

/// One datastore as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datastore {
    pub moref: Moref,
    /// Without a trailing `/`, as [`same_url`] compares.
    pub url: String,
    pub free: u64,
}

/// What one read of the inventory and its tags says.
#[derive(Debug, Clone, Default)]
pub struct Places {
    /// Each host's zone (`Zone::default()` when it has none) and the datastores it
    /// mounts.
    pub hosts: Vec<(Zone, BTreeSet<Moref>)>,
    /// The accessible datastores.
    pub datastores: Vec<Datastore>,
}

/// The categories whose tags name zones and regions, and how they are read.
pub struct Topology {
    pub zone_category: Option<String>,
    pub region_category: Option<String>,
    pub tags: Tags,
}

const PARENT_PATHS: &[&str] = &["name", "parent"];

impl Topology {
    /// The hosts, their ancestors and the datastores (one PropertyCollector call on
    /// `view`, which must hold those types), and their tags (one REST call, and a read
    /// of each tag not seen before).
    pub async fn read(&self, view: &View) -> Result<Places, CloudError> {
        let props = view
            .retrieve(&[
                ("HostSystem", &["name", "parent", "datastore"]),
                ("ComputeResource", PARENT_PATHS),
                ("Folder", PARENT_PATHS),
                ("Datacenter", PARENT_PATHS),
                ("Datastore", &["summary"]),
            ])
            .await?;
        let mut parents = BTreeMap::new();
        let mut hosts = Vec::new();
        let mut datastores = Vec::new();
        for p in &props {
            match p.obj.kind.as_str() {
                "Datastore" => {
                    let s = p.get("summary").cloned().unwrap_or_default();
                    if s.text_at(&["accessible"]) == Some("true") {
                        datastores.push(Datastore {
                            moref: p.obj.clone(),
                            url: s
                                .text_at(&["url"])
                                .unwrap_or_default()
                                .trim_end_matches('/')
                                .to_owned(),
                            free: s
                                .text_at(&["freeSpace"])
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0),
                        });
                    }
                    continue;
                }
                "HostSystem" => {
                    let mounted: BTreeSet<Moref> = p
                        .get("datastore")
                        .map(|a| a.children.iter().filter_map(Moref::of).collect())
                        .unwrap_or_default();
                    hosts.push((p.obj.clone(), mounted));
                }
                _ => {}
            }
            if let Some(parent) = p.get("parent").and_then(Moref::of) {
                parents.insert(p.obj.clone(), parent);
            }
        }
        let chains: Vec<Vec<Moref>> = hosts.iter().map(|(h, _)| ancestors(&parents, h)).collect();
        let objects: Vec<Moref> = chains
            .iter()
            .flatten()
            .filter(|m| m.kind != "Folder")
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let attached = self.tags.attached(&objects).await?;
        Ok(Places {
            hosts: hosts
                .into_iter()
                .zip(chains)
                .map(|((_, mounted), chain)| {
                    let zone = Zone {
                        zone: nearest(&chain, &attached, self.zone_category.as_deref()),
                        region: nearest(&chain, &attached, self.region_category.as_deref()),
                    };
                    (zone, mounted)
                })
                .collect(),
            datastores,
        })
    }
}

/// `obj` and its ancestors, nearest first.
fn ancestors(parents: &BTreeMap<Moref, Moref>, obj: &Moref) -> Vec<Moref> {
    let mut out = vec![obj.clone()];
    while let Some(p) = parents.get(out.last().expect("never empty")) {
        if out.contains(p) || out.len() > 64 {
            break;
        }
        out.push(p.clone());
    }
    out
}

/// Whether two datastore URLs name the same datastore (CNS answers them with a
/// trailing `/`, StorageClasses are written either way).
pub fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

impl Places {
    /// The zones hosts are in, sorted; empty when no host has one.
    pub fn zones(&self) -> Vec<Zone> {
        self.hosts
            .iter()
            .map(|(z, _)| z.clone())
            .filter(|z| *z != Zone::default())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The hosts of `zone` (of its region, for a whole region).
    fn hosts_of<'a>(&'a self, zone: &'a Zone) -> impl Iterator<Item = &'a BTreeSet<Moref>> {
        let whole_region = zone.zone.is_empty();
        self.hosts
            .iter()
            .filter(move |(z, _)| {
                if whole_region {
                    z.region == zone.region && *z != Zone::default()
                } else {
                    z == zone
                }
            })
            .map(|(_, m)| m)
    }

    /// The accessible datastores every host of `zone` mounts (every datastore when the
    /// zone is none, as without topology); none for a zone without hosts.
    pub fn shared(&self, zone: &Zone) -> Vec<&Datastore> {
        if *zone == Zone::default() {
            return self.datastores.iter().collect();
        }
        let mut hosts = self.hosts_of(zone).peekable();
        if hosts.peek().is_none() {
            return Vec::new();
        }
        let mut common: Option<BTreeSet<&Moref>> = None;
        for mounted in hosts {
            let these: BTreeSet<&Moref> = mounted.iter().collect();
            common = Some(match common {
                None => these,
                Some(c) => c.intersection(&these).copied().collect(),
            });
        }
        let common = common.unwrap_or_default();
        self.datastores
            .iter()
            .filter(|d| common.contains(&d.moref))
            .collect()
    }

    /// Where a volume on the datastore `url` can be used: the whole region when every
    /// zone of that region reaches it (`Zone { region, zone: "" }`; no place at all
    /// when that region is none), else `prefer` when it reaches the datastore, else the
    /// first zone that does. No zone reaching it (or no zones): `Zone::default()`.
    pub fn zone_of(&self, url: &str, prefer: Option<&Zone>) -> Zone {
        let zones = self.zones();
        let reaching: Vec<&Zone> = zones
            .iter()
            .filter(|z| self.shared(z).iter().any(|d| same_url(&d.url, url)))
            .collect();
        let Some(first) = reaching.first() else {
            return Zone::default();
        };
        let regions: BTreeSet<&str> = reaching.iter().map(|z| z.region.as_str()).collect();
        let pick_region = prefer
            .map(|p| p.region.as_str())
            .filter(|r| regions.contains(r))
            .unwrap_or(first.region.as_str());
        let whole = zones
            .iter()
            .filter(|z| z.region == pick_region)
            .all(|z| reaching.contains(&z));
        if whole {
            return Zone {
                region: pick_region.to_owned(),
                zone: String::new(),
            };
        }
        prefer
            .filter(|p| reaching.contains(p))
            .unwrap_or(first)
            .clone()
    }

    /// The freest datastore a volume of `zone` may use, its space.
    pub fn free_in(&self, zone: &Zone, url: Option<&str>) -> u64 {
        self.shared(zone)
            .into_iter()
            .filter(|d| url.is_none_or(|u| same_url(&d.url, u)))
            .map(|d| d.free)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(id: &str, free: u64) -> Datastore {
        Datastore {
            moref: Moref::new("Datastore", id),
            url: format!("ds:///vmfs/volumes/{id}"),
            free,
        }
    }

    fn zone(region: &str, zone: &str) -> Zone {
        Zone {
            region: region.into(),
            zone: zone.into(),
        }
    }

    fn mounts(ids: &[&str]) -> BTreeSet<Moref> {
        ids.iter().map(|i| Moref::new("Datastore", i)).collect()
    }

    /// Region r1: zone a (two hosts, sharing `shared` and `a-only`; one also mounts
    /// `half`), zone b (one host: `shared`, `b-only`); a host in no zone mounts `loose`.
    fn places() -> Places {
        Places {
            hosts: vec![
                (zone("r1", "a"), mounts(&["shared", "a-only", "half"])),
                (zone("r1", "a"), mounts(&["shared", "a-only"])),
                (zone("r1", "b"), mounts(&["shared", "b-only"])),
                (Zone::default(), mounts(&["loose"])),
            ],
            datastores: vec![
                ds("shared", 10),
                ds("a-only", 30),
                ds("half", 50),
                ds("b-only", 20),
                ds("loose", 90),
            ],
        }
    }

    fn ids(list: Vec<&Datastore>) -> Vec<&str> {
        list.iter().map(|d| d.moref.id.as_str()).collect()
    }

    #[test]
    fn a_zone_takes_the_datastores_all_its_hosts_mount() {
        let p = places();
        assert_eq!(p.zones(), [zone("r1", "a"), zone("r1", "b")]);
        assert_eq!(ids(p.shared(&zone("r1", "a"))), ["shared", "a-only"]);
        assert_eq!(ids(p.shared(&zone("r1", "b"))), ["shared", "b-only"]);
        // A whole region: what every host of it mounts.
        assert_eq!(ids(p.shared(&zone("r1", ""))), ["shared"]);
        assert!(p.shared(&zone("r1", "c")).is_empty());
        assert_eq!(p.free_in(&zone("r1", "a"), None), 30);
        assert_eq!(
            p.free_in(&zone("r1", "a"), Some("ds:///vmfs/volumes/shared/")),
            10
        );
        assert_eq!(
            p.free_in(&zone("r1", "b"), Some("ds:///vmfs/volumes/a-only")),
            0
        );
    }

    #[test]
    fn a_volume_is_placed_by_the_zones_its_datastore_reaches() {
        let p = places();
        let url = |id: &str| format!("ds:///vmfs/volumes/{id}/");
        assert_eq!(p.zone_of(&url("a-only"), None), zone("r1", "a"));
        assert_eq!(
            p.zone_of(&url("b-only"), Some(&zone("r1", "a"))),
            zone("r1", "b")
        );
        // Every zone of the region reaches it: the region.
        assert_eq!(
            p.zone_of(&url("shared"), Some(&zone("r1", "b"))),
            zone("r1", "")
        );
        // Mounted by part of a zone, or by no zone's hosts: nowhere known.
        assert_eq!(p.zone_of(&url("half"), None), Zone::default());
        assert_eq!(p.zone_of(&url("loose"), None), Zone::default());
        // Two regions: a datastore both zones of r2 reach, and one of r1.
        let mut p = places();
        p.hosts.push((zone("r2", "c"), mounts(&["x"])));
        p.hosts.push((zone("r2", "d"), mounts(&["x", "shared"])));
        p.datastores.push(ds("x", 1));
        assert_eq!(p.zone_of(&url("x"), None), zone("r2", ""));
        // `shared` reaches all of r1 and one zone of r2: the preferred region decides.
        assert_eq!(
            p.zone_of(&url("shared"), Some(&zone("r2", "d"))),
            zone("r2", "d")
        );
        assert_eq!(p.zone_of(&url("shared"), None), zone("r1", ""));
    }

    #[test]
    fn ancestors_stop_at_a_loop() {
        let m = |i: &str| Moref::new("Folder", i);
        let parents = BTreeMap::from([(m("a"), m("b")), (m("b"), m("a"))]);
        assert_eq!(ancestors(&parents, &m("a")), [m("a"), m("b")]);
    }
}
