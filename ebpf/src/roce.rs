//! RoCEv2 details needed to probe a service flow on its own ECMP path.

/// RoCEv2 UDP source port the RNIC uses for a QP with this GRH flow label
/// (rdma-core `ibv_flow_label_to_udp_sport`); probing with it follows the service's path.
pub fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    let low = flow_label & 0x3FFF;
    let high = (flow_label & 0xF_C000) >> 14;
    (0xC000 | (low ^ high)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(flow_label_to_udp_sport(0), 0xC000);
        assert_eq!(flow_label_to_udp_sport(1), 0xC001);
        assert_eq!(flow_label_to_udp_sport(0x4000), 0xC001);
        assert_eq!(flow_label_to_udp_sport(0x4001), 0xC000);
        assert_eq!(flow_label_to_udp_sport(0xF_FFFF), 0xC000 | (0x3FFF ^ 0x3F));
        // Bits above the 20-bit flow label are ignored.
        assert_eq!(flow_label_to_udp_sport(0xFFF0_0000), 0xC000);
    }
}
