//! Which transport each RNIC uses: `udp`, `verbs`, or `auto` (verbs when an RDMA device
//! carries the RNIC's IP as a RoCEv2 GID, else udp).
//!
//! The decision is a pure function of the configuration and a device listing, so it is
//! tested with made-up listings; [`list_rdma_devices`] is the real listing (libibverbs
//! device list + sysfs GID tables). A forced `verbs` never consults the listing: opening
//! the UD QP fails with the verbs crate's own message when there is no device.

use crate::config::{RnicConfig, TransportKind};
use rocemesh_verbs::gid_table::SysfsGids;
use rocemesh_verbs::{GidKind, VerbsError, rdma_device_names};
use std::net::IpAddr;

/// An RDMA device and the addresses of its RoCEv2 GIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// Device name (e.g. `mlx5_0`).
    pub name: String,
    /// IPs of its RoCEv2 GID table entries, all ports.
    pub roce_ips: Vec<IpAddr>,
}

/// The transport chosen for one RNIC, with the reason when it is not verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// UDP sockets.
    Udp {
        /// Why (configured, or why auto found no RDMA device for the RNIC).
        reason: String,
    },
    /// A UD QP on `device` (`None`: the verbs crate finds the device from the IP).
    Verbs {
        /// RDMA device name.
        device: Option<String>,
    },
}

impl Choice {
    /// `"udp"` or `"verbs"`, as logged and reported in the stats.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Choice::Udp { .. } => "udp",
            Choice::Verbs { .. } => "verbs",
        }
    }
}

/// Lists RDMA devices through libibverbs, with the RoCEv2 GIDs sysfs shows for each.
/// Fails with the verbs crate's reason when there are none (no library, no subsystem...).
pub fn list_rdma_devices() -> Result<Vec<RdmaDevice>, VerbsError> {
    let names = rdma_device_names()?;
    let sysfs = SysfsGids::default();
    Ok(names
        .into_iter()
        .map(|name| {
            let roce_ips = sysfs
                .ports(&name)
                .unwrap_or_default()
                .into_iter()
                .flat_map(|port| sysfs.table(&name, port).unwrap_or_default())
                .filter(|e| e.kind == GidKind::RoceV2 && !e.gid.is_zero())
                .map(|e| e.gid.to_ip())
                .collect();
            RdmaDevice { name, roce_ips }
        })
        .collect())
}

/// Chooses the transport of `rnic` (address `ip`). `devices` is the listing (or why there
/// is none); it is only looked at for `auto`.
pub(crate) fn choose(
    kind: TransportKind,
    rnic: &RnicConfig,
    ip: IpAddr,
    devices: &Result<Vec<RdmaDevice>, String>,
) -> Choice {
    match kind {
        TransportKind::Udp => Choice::Udp {
            reason: "configured".into(),
        },
        TransportKind::Verbs => Choice::Verbs {
            device: rnic.rdma_device.clone(),
        },
        TransportKind::Auto => {
            let devices = match devices {
                Ok(d) => d,
                Err(e) => {
                    return Choice::Udp { reason: e.clone() };
                }
            };
            let found = match &rnic.rdma_device {
                Some(name) => devices.iter().find(|d| &d.name == name),
                None => devices.iter().find(|d| d.roce_ips.contains(&ip)),
            };
            match found {
                Some(d) => Choice::Verbs {
                    device: Some(d.name.clone()),
                },
                None => Choice::Udp {
                    reason: match &rnic.rdma_device {
                        Some(name) => format!("no RDMA device named {name}"),
                        None => format!(
                            "no RDMA device has a RoCEv2 GID for {ip} (devices: {})",
                            devices
                                .iter()
                                .map(|d| d.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    },
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnic(device: Option<&str>) -> RnicConfig {
        RnicConfig {
            rdma_device: device.map(str::to_string),
            ..RnicConfig::parse("r0=10.0.0.1").unwrap()
        }
    }

    fn listing() -> Result<Vec<RdmaDevice>, String> {
        Ok(vec![
            RdmaDevice {
                name: "mlx5_0".into(),
                roce_ips: vec!["fe80::1".parse().unwrap(), "10.0.0.1".parse().unwrap()],
            },
            RdmaDevice {
                name: "mlx5_1".into(),
                roce_ips: vec!["10.0.1.1".parse().unwrap()],
            },
        ])
    }

    #[test]
    fn auto_picks_the_device_carrying_the_ip() {
        let ip = "10.0.0.1".parse().unwrap();
        assert_eq!(
            choose(TransportKind::Auto, &rnic(None), ip, &listing()),
            Choice::Verbs {
                device: Some("mlx5_0".into())
            }
        );
        let other = "10.0.1.1".parse().unwrap();
        assert_eq!(
            choose(TransportKind::Auto, &rnic(None), other, &listing()),
            Choice::Verbs {
                device: Some("mlx5_1".into())
            }
        );
        // A named device wins over the IP match.
        assert_eq!(
            choose(TransportKind::Auto, &rnic(Some("mlx5_1")), ip, &listing()).name(),
            "verbs"
        );
    }

    #[test]
    fn auto_falls_back_to_udp_and_says_why() {
        let ip: IpAddr = "10.9.9.9".parse().unwrap();
        let Choice::Udp { reason } = choose(TransportKind::Auto, &rnic(None), ip, &listing())
        else {
            panic!("no device carries {ip}")
        };
        assert!(
            reason.contains("10.9.9.9") && reason.contains("mlx5_0, mlx5_1"),
            "{reason}"
        );
        let Choice::Udp { reason } =
            choose(TransportKind::Auto, &rnic(Some("mlx5_9")), ip, &listing())
        else {
            panic!("no such device")
        };
        assert!(reason.contains("mlx5_9"), "{reason}");
        let none = Err("no RDMA devices: ENOSYS".to_string());
        assert_eq!(
            choose(TransportKind::Auto, &rnic(None), ip, &none),
            Choice::Udp {
                reason: "no RDMA devices: ENOSYS".into()
            }
        );
    }

    #[test]
    fn forced_kinds_ignore_the_listing() {
        let ip = "10.0.0.1".parse().unwrap();
        let none = Err("nothing".to_string());
        assert_eq!(
            choose(TransportKind::Verbs, &rnic(Some("mlx5_0")), ip, &none),
            Choice::Verbs {
                device: Some("mlx5_0".into())
            }
        );
        assert_eq!(
            choose(TransportKind::Udp, &rnic(None), ip, &listing()).name(),
            "udp"
        );
    }

    /// This machine has no RDMA devices: the real listing fails with the verbs crate's
    /// reason, and auto therefore means udp.
    #[test]
    fn real_listing_here_has_no_device() {
        let listed = list_rdma_devices().map_err(|e| e.to_string());
        match &listed {
            Ok(devices) if !devices.is_empty() => {
                println!("skipping: this machine has RDMA devices {devices:?}");
            }
            _ => {
                let err = listed.clone().unwrap_err();
                assert!(
                    err.contains("RDMA verbs unavailable") || err.contains("no RDMA devices"),
                    "{err}"
                );
                let ip = "10.0.0.1".parse().unwrap();
                assert_eq!(
                    choose(TransportKind::Auto, &rnic(None), ip, &listed).name(),
                    "udp"
                );
            }
        }
    }
}
