//! RoCEv2 UDP source port <-> IPv6/GRH flow label.
//!
//! RoCEv2 NICs derive the outer UDP source port (the ECMP entropy) from the AH's flow
//! label exactly as rdma-core's `ibv_flow_label_to_udp_sport` does: the 20-bit label is
//! folded into 14 bits (`low14 ^ high6`) and ORed into `0xC000`. Probing the exact
//! 5-tuple of a traced service flow therefore means choosing a flow label that folds to
//! that flow's source port: [`sport_to_flow_label`].

/// Lowest RoCEv2 UDP source port a flow label can produce (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
pub const ROCE_SPORT_MIN: u16 = 0xC000;
/// Highest RoCEv2 UDP source port (`IB_ROCE_UDP_ENCAP_VALID_PORT_MAX`).
pub const ROCE_SPORT_MAX: u16 = 0xFFFF;
/// The flow label is a 20-bit field.
pub const FLOW_LABEL_MASK: u32 = 0xF_FFFF;

const LOW_BITS: u32 = 0x3FFF;
const HIGH_BITS: u32 = 0xF_C000;

/// The UDP source port a RoCEv2 NIC uses for `flow_label` (rdma-core
/// `ibv_flow_label_to_udp_sport`, bit for bit; bits above the 20-bit field are ignored).
pub fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    let fl_high = flow_label & HIGH_BITS;
    let fl_low = (flow_label & LOW_BITS) ^ (fl_high >> 14);
    (fl_low as u16) | ROCE_SPORT_MIN
}

/// A non-zero flow label whose RoCEv2 source port is `sport`; `None` when `sport` lies
/// outside `0xC000..=0xFFFF` (no flow label produces it).
///
/// Zero is never returned: a zero flow label tells the kernel to pick its own source
/// port from a QPN hash, which would lose the chosen 5-tuple. `0xC000` is therefore
/// reached with the high part set (`0x4001`).
pub fn sport_to_flow_label(sport: u16) -> Option<u32> {
    if sport < ROCE_SPORT_MIN {
        return None;
    }
    let low = u32::from(sport) & LOW_BITS;
    Some(if low == 0 { (1 << 14) | 1 } else { low })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_roce_port_round_trips_through_a_nonzero_label() {
        for sport in ROCE_SPORT_MIN..=ROCE_SPORT_MAX {
            let fl = sport_to_flow_label(sport).unwrap();
            assert_ne!(fl, 0);
            assert_eq!(fl & !FLOW_LABEL_MASK, 0);
            assert_eq!(
                flow_label_to_udp_sport(fl),
                sport,
                "sport {sport:#x} via fl {fl:#x}"
            );
        }
    }

    #[test]
    fn ports_below_the_roce_range_have_no_label() {
        assert_eq!(sport_to_flow_label(0), None);
        assert_eq!(sport_to_flow_label(4791), None);
        assert_eq!(sport_to_flow_label(0xBFFF), None);
    }

    #[test]
    fn folding_matches_hand_computed_values() {
        assert_eq!(flow_label_to_udp_sport(0), 0xC000);
        assert_eq!(flow_label_to_udp_sport(0x3FFF), 0xFFFF);
        // high 6 bits 0b111111 fold onto the low bits: 0x3F ^ 0x3F = 0.
        assert_eq!(flow_label_to_udp_sport(0xFC03F), 0xC000);
        assert_eq!(flow_label_to_udp_sport(0x4001), 0xC000);
        // bits above the 20-bit field do not matter.
        assert_eq!(flow_label_to_udp_sport(0xFFF0_1234), 0xD234);
    }
}
