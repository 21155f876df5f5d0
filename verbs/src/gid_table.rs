//! GID index selection from sysfs: which GID table slot a UD QP sends from.
//!
//! `/sys/class/infiniband/<dev>/ports/<n>/gids/<i>` holds the GIDs and
//! `.../gid_attrs/types/<i>` their type (`RoCE v2`, `IB/RoCE v1`; reading an empty slot's
//! type fails). RoCEv2 needs the slot whose GID is the RNIC's IP (IPv4-mapped for IPv4)
//! and whose type is `RoCE v2`; an operator may force an index instead.

use crate::error::VerbsError;
use crate::gid::Gid;
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Where the RDMA class lives in a real sysfs.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// The type of a GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidKind {
    /// `RoCE v2`: routable, UDP-encapsulated. The only kind probes use.
    RoceV2,
    /// `IB/RoCE v1`.
    IbOrRoceV1,
    /// Anything else the kernel reports.
    Other(String),
}

impl GidKind {
    fn parse(text: &str) -> Self {
        match text.trim() {
            "RoCE v2" => Self::RoceV2,
            "IB/RoCE v1" => Self::IbOrRoceV1,
            other => Self::Other(other.to_string()),
        }
    }
}

/// One populated GID table slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// RDMA device name (e.g. `mlx5_0`).
    pub device: String,
    /// Port number (1-based).
    pub port: u8,
    /// GID table index (`sgid_index` of the AH).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub kind: GidKind,
    /// The network device it belongs to, when sysfs says.
    pub netdev: Option<String>,
}

/// What GID to use: by device, by IP, or both, with an optional forced index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidSelector {
    /// RDMA device name; `None` = any device that has `ip`.
    pub device: Option<String>,
    /// The RNIC's IP; `None` = the device's first RoCEv2 GID (IPv4-mapped preferred).
    pub ip: Option<IpAddr>,
    /// Port; `None` = every port of the device.
    pub port: Option<u8>,
    /// Forced GID index (configuration override); needs a device.
    pub gid_index: Option<u32>,
}

/// Reads a sysfs tree rooted at `root` (normally [`SYSFS_INFINIBAND`]).
#[derive(Debug, Clone)]
pub struct SysfsGids {
    root: PathBuf,
}

impl Default for SysfsGids {
    fn default() -> Self {
        Self::new(SYSFS_INFINIBAND)
    }
}

fn sysfs_err(path: &Path) -> impl FnOnce(io::Error) -> VerbsError + '_ {
    move |source| VerbsError::Sysfs {
        path: path.to_path_buf(),
        source,
    }
}

impl SysfsGids {
    /// A reader of the RDMA class directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// RDMA device names, sorted.
    pub fn devices(&self) -> Result<Vec<String>, VerbsError> {
        if !self.root.is_dir() {
            return Err(VerbsError::NoRdmaSysfs(self.root.clone()));
        }
        let mut names = dir_names(&self.root)?;
        names.sort();
        Ok(names)
    }

    /// Port numbers of `device`, ascending.
    pub fn ports(&self, device: &str) -> Result<Vec<u8>, VerbsError> {
        let dir = self.root.join(device).join("ports");
        if !dir.is_dir() {
            return Err(VerbsError::NoSuchDevice {
                name: device.to_string(),
                available: self.devices()?,
            });
        }
        let mut ports: Vec<u8> = dir_names(&dir)?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        ports.sort_unstable();
        Ok(ports)
    }

    /// The populated slots of one port's GID table, by index.
    pub fn table(&self, device: &str, port: u8) -> Result<Vec<GidEntry>, VerbsError> {
        let port_dir = self.root.join(device).join("ports").join(port.to_string());
        let gids_dir = port_dir.join("gids");
        let mut indices: Vec<u32> = dir_names(&gids_dir)?
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        indices.sort_unstable();
        Ok(indices
            .into_iter()
            .filter_map(|i| self.entry_in(&port_dir, device, port, i))
            .collect())
    }

    /// One slot, `None` when empty, unreadable or without a type.
    pub fn entry(&self, device: &str, port: u8, index: u32) -> Option<GidEntry> {
        self.entry_in(
            &self.root.join(device).join("ports").join(port.to_string()),
            device,
            port,
            index,
        )
    }

    fn entry_in(&self, port_dir: &Path, device: &str, port: u8, index: u32) -> Option<GidEntry> {
        let name = index.to_string();
        let gid = Gid::parse_sysfs(&fs::read_to_string(port_dir.join("gids").join(&name)).ok()?)?;
        if gid.is_zero() {
            return None;
        }
        // The kernel refuses to read the type of an empty slot (EINVAL).
        let kind =
            GidKind::parse(&fs::read_to_string(port_dir.join("gid_attrs/types").join(&name)).ok()?);
        let netdev = fs::read_to_string(port_dir.join("gid_attrs/ndevs").join(&name))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Some(GidEntry {
            device: device.to_string(),
            port,
            index,
            gid,
            kind,
            netdev,
        })
    }

    /// Picks the GID a UD QP should send from.
    pub fn select(&self, sel: &GidSelector) -> Result<GidEntry, VerbsError> {
        let devices = match &sel.device {
            Some(name) => {
                let all = self.devices()?;
                if !all.contains(name) {
                    return Err(VerbsError::NoSuchDevice {
                        name: name.clone(),
                        available: all,
                    });
                }
                vec![name.clone()]
            }
            None if sel.ip.is_some() => self.devices()?,
            None => {
                return Err(VerbsError::Config(
                    "select the RDMA device by name or by IP".into(),
                ));
            }
        };
        if let Some(index) = sel.gid_index {
            return self.forced(&devices, sel, index);
        }
        let mut seen = Vec::new();
        for device in &devices {
            let ports = match sel.port {
                Some(p) => vec![p],
                None => self.ports(device)?,
            };
            for port in ports {
                seen.extend(self.table(device, port)?);
            }
        }
        let roce_v2 = |e: &&GidEntry| e.kind == GidKind::RoceV2;
        let chosen = match sel.ip {
            Some(ip) => {
                let want = Gid::from_ip(ip);
                seen.iter().filter(|e| e.gid == want).find(roce_v2)
            }
            None => seen
                .iter()
                .filter(roce_v2)
                .find(|e| e.gid.is_ipv4_mapped())
                .or_else(|| seen.iter().filter(roce_v2).find(|e| !is_link_local(e.gid))),
        };
        chosen
            .cloned()
            .ok_or_else(|| no_gid_error(sel, &devices, &seen))
    }

    fn forced(
        &self,
        devices: &[String],
        sel: &GidSelector,
        index: u32,
    ) -> Result<GidEntry, VerbsError> {
        let [device] = devices else {
            return Err(VerbsError::Config(
                "a GID index override needs the RDMA device name".into(),
            ));
        };
        let port = sel.port.unwrap_or(1);
        self.entry(device, port, index)
            .ok_or_else(|| VerbsError::BadGidIndex {
                device: device.clone(),
                port,
                index,
            })
    }
}

fn is_link_local(gid: Gid) -> bool {
    gid.0[0] == 0xfe && gid.0[1] & 0xc0 == 0x80
}

fn no_gid_error(sel: &GidSelector, devices: &[String], seen: &[GidEntry]) -> VerbsError {
    let found = if seen.is_empty() {
        "the GID tables are empty".to_string()
    } else {
        let listed: Vec<String> = seen
            .iter()
            .map(|e| {
                format!(
                    "{}:{}[{}]={} ({:?})",
                    e.device,
                    e.port,
                    e.index,
                    e.gid.to_ip(),
                    e.kind
                )
            })
            .collect();
        format!("found only {}", listed.join(", "))
    };
    let detail = format!("{found} on {}", devices.join(", "));
    match sel.ip {
        Some(ip) => VerbsError::no_gid_for_ip(ip, detail),
        None => VerbsError::NoRoceV2Gid {
            wanted: format!("on {}", devices.join(", ")),
            detail,
        },
    }
}

fn dir_names(dir: &Path) -> Result<Vec<String>, VerbsError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(sysfs_err(dir))? {
        let entry = entry.map_err(sysfs_err(dir))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake `/sys/class/infiniband` tree: (device, port, index, gid, type).
    fn fake_sysfs(slots: &[(&str, u8, u32, &str, Option<&str>)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (dev, port, index, gid, kind) in slots {
            let port_dir = dir.path().join(dev).join("ports").join(port.to_string());
            for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
                fs::create_dir_all(port_dir.join(sub)).unwrap();
            }
            fs::write(
                port_dir.join("gids").join(index.to_string()),
                format!("{gid}\n"),
            )
            .unwrap();
            if let Some(kind) = kind {
                fs::write(
                    port_dir.join("gid_attrs/types").join(index.to_string()),
                    format!("{kind}\n"),
                )
                .unwrap();
                fs::write(
                    port_dir.join("gid_attrs/ndevs").join(index.to_string()),
                    "eth2\n",
                )
                .unwrap();
            }
        }
        dir
    }

    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    const LINK_LOCAL: &str = "fe80:0000:0000:0000:0a00:27ff:fe00:0001";
    const V4_10_0_0_1: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";
    const V4_10_0_1_1: &str = "0000:0000:0000:0000:0000:ffff:0a00:0101";
    const V6_FD00_1: &str = "fd00:0000:0000:0000:0000:0000:0000:0001";

    /// A typical mlx5 port: link-local v1/v2, then the IPv4-mapped v1/v2 pair.
    fn mlx5_like() -> tempfile::TempDir {
        fake_sysfs(&[
            ("mlx5_0", 1, 0, LINK_LOCAL, Some("IB/RoCE v1")),
            ("mlx5_0", 1, 1, LINK_LOCAL, Some("RoCE v2")),
            ("mlx5_0", 1, 2, V4_10_0_0_1, Some("IB/RoCE v1")),
            ("mlx5_0", 1, 3, V4_10_0_0_1, Some("RoCE v2")),
            ("mlx5_0", 1, 4, ZERO, None),
            ("mlx5_1", 1, 0, LINK_LOCAL, Some("IB/RoCE v1")),
            ("mlx5_1", 1, 3, V4_10_0_1_1, Some("RoCE v2")),
            ("mlx5_1", 1, 4, V6_FD00_1, Some("RoCE v2")),
        ])
    }

    #[test]
    fn the_table_lists_populated_slots_with_their_types() {
        let dir = mlx5_like();
        let sys = SysfsGids::new(dir.path());
        assert_eq!(sys.devices().unwrap(), vec!["mlx5_0", "mlx5_1"]);
        assert_eq!(sys.ports("mlx5_0").unwrap(), vec![1]);
        let table = sys.table("mlx5_0", 1).unwrap();
        assert_eq!(
            table.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(table[3].kind, GidKind::RoceV2);
        assert_eq!(table[2].kind, GidKind::IbOrRoceV1);
        assert_eq!(table[3].netdev.as_deref(), Some("eth2"));
        assert_eq!(table[3].gid.to_ip().to_string(), "10.0.0.1");
    }

    #[test]
    fn by_ip_finds_the_roce_v2_slot_on_whichever_device_has_it() {
        let dir = mlx5_like();
        let sys = SysfsGids::new(dir.path());
        let e = sys
            .select(&GidSelector {
                ip: Some("10.0.1.1".parse().unwrap()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!((e.device.as_str(), e.port, e.index), ("mlx5_1", 1, 3));
        let e = sys
            .select(&GidSelector {
                ip: Some("10.0.0.1".parse().unwrap()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            (e.device.as_str(), e.index, e.kind),
            ("mlx5_0", 3, GidKind::RoceV2),
            "v2 slot, not the v1 one at index 2"
        );
        let e = sys
            .select(&GidSelector {
                ip: Some("fd00::1".parse().unwrap()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!((e.device.as_str(), e.index), ("mlx5_1", 4));
    }

    #[test]
    fn by_name_prefers_the_ipv4_mapped_roce_v2_gid() {
        let dir = mlx5_like();
        let sys = SysfsGids::new(dir.path());
        let e = sys
            .select(&GidSelector {
                device: Some("mlx5_0".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(e.index, 3);
        let only_v6 = fake_sysfs(&[
            ("rxe0", 1, 1, LINK_LOCAL, Some("RoCE v2")),
            ("rxe0", 1, 2, V6_FD00_1, Some("RoCE v2")),
        ]);
        let e = SysfsGids::new(only_v6.path())
            .select(&GidSelector {
                device: Some("rxe0".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(e.index, 2, "a global IPv6 GID, not the link-local one");
    }

    #[test]
    fn an_override_index_is_used_as_is_but_must_be_populated() {
        let dir = mlx5_like();
        let sys = SysfsGids::new(dir.path());
        let sel = GidSelector {
            device: Some("mlx5_0".into()),
            gid_index: Some(1),
            ..Default::default()
        };
        assert_eq!(
            sys.select(&sel).unwrap().gid.to_ip().to_string(),
            "fe80::a00:27ff:fe00:1"
        );
        let empty = GidSelector {
            gid_index: Some(4),
            ..sel.clone()
        };
        assert_eq!(
            sys.select(&empty).unwrap_err().to_string(),
            "GID index 4 on mlx5_0 port 1 is empty or unreadable"
        );
        let no_dev = GidSelector {
            device: None,
            ip: Some("10.0.0.1".parse().unwrap()),
            gid_index: Some(3),
            ..Default::default()
        };
        assert!(matches!(sys.select(&no_dev), Err(VerbsError::Config(_))));
    }

    #[test]
    fn missing_things_are_named_in_the_error() {
        let dir = mlx5_like();
        let sys = SysfsGids::new(dir.path());
        let err = sys
            .select(&GidSelector {
                ip: Some("10.9.9.9".parse().unwrap()),
                ..Default::default()
            })
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("no RoCEv2 GID for 10.9.9.9: found only mlx5_0:1[0]=fe80::a00:27ff:fe00:1 (IbOrRoceV1)"),
            "{msg}"
        );
        let err = sys
            .select(&GidSelector {
                device: Some("mlx4_0".into()),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no RDMA device named \"mlx4_0\" (available: mlx5_0, mlx5_1)"
        );
        let v1_only = fake_sysfs(&[("mlx4_0", 1, 0, V4_10_0_0_1, Some("IB/RoCE v1"))]);
        let err = SysfsGids::new(v1_only.path())
            .select(&GidSelector {
                ip: Some("10.0.0.1".parse().unwrap()),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no RoCEv2 GID for 10.0.0.1: found only mlx4_0:1[0]=10.0.0.1 (IbOrRoceV1) on mlx4_0"
        );
        let none = SysfsGids::new(dir.path().join("absent"));
        assert!(
            none.select(&GidSelector {
                ip: Some("10.0.0.1".parse().unwrap()),
                ..Default::default()
            })
            .unwrap_err()
            .to_string()
            .contains("does not exist (no RDMA driver loaded)")
        );
        assert!(matches!(
            sys.select(&GidSelector::default()),
            Err(VerbsError::Config(_))
        ));
    }

    #[test]
    fn garbage_in_sysfs_is_skipped_not_fatal() {
        let dir = fake_sysfs(&[
            ("mlx5_0", 1, 0, "not a gid", Some("RoCE v2")),
            ("mlx5_0", 1, 1, V4_10_0_0_1, Some("RoCE v2")),
        ]);
        fs::write(dir.path().join("mlx5_0/ports/1/gids/junk"), "x").unwrap();
        let sys = SysfsGids::new(dir.path());
        assert_eq!(sys.table("mlx5_0", 1).unwrap().len(), 1);
        assert_eq!(
            sys.select(&GidSelector {
                device: Some("mlx5_0".into()),
                ..Default::default()
            })
            .unwrap()
            .index,
            1
        );
    }
}
