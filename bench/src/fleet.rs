//! Synthetic hosts as agents register them: a rail-optimized cluster of 8-RNIC hosts,
//! rail `r` of every block of 32 hosts under its own ToR (32 RNICs per ToR).

use rocemesh_proto::api::{RegisterRequest, RnicRegistration};
use std::net::{IpAddr, Ipv4Addr};

/// RNICs per host (one per rail).
pub(crate) const RNICS_PER_HOST: u32 = 8;
/// Hosts whose rail-`r` RNICs share a ToR.
pub(crate) const HOSTS_PER_TOR: u32 = 32;
/// Most hosts the address plan holds (the host index fills 16 bits of the IP).
pub(crate) const MAX_HOSTS: u32 = 1 << 16;

/// Hosts needed for `rnics` RNICs.
pub(crate) fn hosts_for(rnics: u32) -> u32 {
    rnics.div_ceil(RNICS_PER_HOST)
}

/// The registration host `i` (< [`MAX_HOSTS`]) sends at agent epoch `epoch`.
pub(crate) fn register_request(i: u32, epoch: u32) -> RegisterRequest {
    debug_assert!(i < MAX_HOSTS);
    let block = i / HOSTS_PER_TOR;
    let rnics = (0..RNICS_PER_HOST)
        .map(|rail| RnicRegistration {
            ifname: format!("mlx5_{rail}"),
            ip: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (rail << 16) | i)),
            gid: None,
            qpn: 0x100 + i * RNICS_PER_HOST + rail,
            port: 4791,
            tor: Some(format!("tor-b{block}-r{rail}")),
            rail: Some(rail),
            gateway: None,
        })
        .collect();
    RegisterRequest {
        host: format!("bench-h{i:05}"),
        epoch,
        rnics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn addresses_are_unique_and_tors_hold_32_rnics() {
        let hosts = 2 * HOSTS_PER_TOR;
        let mut ips = HashSet::new();
        let mut per_tor: HashMap<String, u32> = HashMap::new();
        for i in 0..hosts {
            let req = register_request(i, 1);
            assert_eq!(req.rnics.len(), RNICS_PER_HOST as usize);
            for r in req.rnics {
                assert!(ips.insert(r.ip), "duplicate {}", r.ip);
                *per_tor.entry(r.tor.unwrap()).or_default() += 1;
            }
        }
        assert_eq!(per_tor.len(), 2 * RNICS_PER_HOST as usize);
        assert!(per_tor.values().all(|&n| n == HOSTS_PER_TOR));
        assert_eq!(hosts_for(50_000), 6_250);
        assert_eq!(hosts_for(1_001), 126);
    }
}
