//! Checks on a registration request before anything is written: every reason is a
//! sentence an operator can act on, returned as a 400.

use rocemesh_proto::api::{MAX_NAME_LEN, MAX_RNICS_PER_HOST, RegisterRequest, RnicRegistration};
use std::collections::HashSet;
use std::net::IpAddr;

/// Largest QPN: QPNs are 24-bit.
const MAX_QPN: u32 = 0xFF_FFFF;

/// Invisible formatting characters (Unicode category Cf): bidi overrides and isolates,
/// zero-width spaces and joiners, the BOM, tag characters. In a name they make two
/// different names look alike, or one look like another, on every screen.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
        | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}' | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// A name (host, interface, ToR, GID) is non-empty, at most `MAX_NAME_LEN` bytes and
/// free of control characters, invisible formatting characters (bidi, zero-width) and
/// surrounding whitespace.
pub(crate) fn name(what: &str, s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(format!("{what} is longer than {MAX_NAME_LEN} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{what} contains control characters"));
    }
    if let Some(c) = s.chars().find(|c| is_invisible_format(*c)) {
        return Err(format!(
            "{what} contains the invisible character U+{:04X} (bidi or zero-width)",
            u32::from(c)
        ));
    }
    if s.trim() != s {
        return Err(format!("{what} {s:?} has leading or trailing whitespace"));
    }
    Ok(())
}

/// Host and interface names also may not contain `/`, the topology file's separator.
fn path_name(what: &str, s: &str) -> Result<(), String> {
    name(what, s)?;
    if s.contains('/') {
        return Err(format!("{what} {s:?} contains '/'"));
    }
    Ok(())
}

/// An address another RNIC can send to.
fn unicast(what: &str, ip: IpAddr) -> Result<(), String> {
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    if ip.is_unspecified() || ip.is_multicast() || broadcast {
        return Err(format!("{what} {ip} is not a unicast address"));
    }
    Ok(())
}

/// Structural checks of the whole request (ownership of IPs needs the registry).
pub(crate) fn request(req: &RegisterRequest) -> Result<(), String> {
    path_name("host name", &req.host)?;
    if req.rnics.is_empty() || req.rnics.len() > MAX_RNICS_PER_HOST {
        return Err(format!(
            "a host registers 1..={MAX_RNICS_PER_HOST} RNICs, got {}",
            req.rnics.len()
        ));
    }
    let mut ifnames = HashSet::new();
    let mut ips = HashSet::new();
    for (i, rnic) in req.rnics.iter().enumerate() {
        rnic_fields(rnic).map_err(|e| format!("rnics[{i}]: {e}"))?;
        if !ifnames.insert(rnic.ifname.as_str()) {
            return Err(format!("rnics[{i}]: duplicate ifname {:?}", rnic.ifname));
        }
        if !ips.insert(rnic.ip) {
            return Err(format!("rnics[{i}]: duplicate ip {}", rnic.ip));
        }
    }
    Ok(())
}

fn rnic_fields(rnic: &RnicRegistration) -> Result<(), String> {
    path_name("ifname", &rnic.ifname)?;
    unicast("ip", rnic.ip)?;
    if rnic.qpn > MAX_QPN {
        return Err(format!("qpn {:#x} exceeds 24 bits", rnic.qpn));
    }
    if rnic.port == 0 {
        return Err("port 0 is not a responder port".to_string());
    }
    if let Some(gid) = &rnic.gid {
        name("gid", gid)?;
    }
    if let Some(tor) = &rnic.tor {
        name("tor", tor)?;
    }
    if let Some(gw) = rnic.gateway {
        unicast("gateway", gw)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnic(ifname: &str, ip: &str) -> RnicRegistration {
        RnicRegistration {
            ifname: ifname.into(),
            ip: ip.parse().unwrap(),
            gid: None,
            qpn: 1,
            port: 4791,
            tor: None,
            rail: None,
            gateway: None,
        }
    }

    fn req(host: &str, rnics: Vec<RnicRegistration>) -> RegisterRequest {
        RegisterRequest {
            host: host.into(),
            epoch: 1,
            rnics,
        }
    }

    #[test]
    fn accepts_a_normal_host() {
        request(&req(
            "node-1.cluster",
            vec![rnic("mlx5_0", "10.0.0.1"), rnic("mlx5_1", "127.0.0.1")],
        ))
        .unwrap();
    }

    #[test]
    fn refuses_each_bad_field_with_a_reason() {
        let long = "h".repeat(MAX_NAME_LEN + 1);
        let mut big_qpn = rnic("e", "10.0.0.1");
        big_qpn.qpn = 0x100_0000;
        let mut port0 = rnic("e", "10.0.0.1");
        port0.port = 0;
        let mut bad_gw = rnic("e", "10.0.0.1");
        bad_gw.gateway = Some("224.0.0.1".parse().unwrap());
        let mut bad_tor = rnic("e", "10.0.0.1");
        bad_tor.tor = Some(String::new());
        let cases = [
            (req("", vec![rnic("e", "10.0.0.1")]), "host name is empty"),
            (req(&long, vec![rnic("e", "10.0.0.1")]), "longer"),
            (req("a\nb", vec![rnic("e", "10.0.0.1")]), "control"),
            (req("a/b", vec![rnic("e", "10.0.0.1")]), "'/'"),
            (req(" a", vec![rnic("e", "10.0.0.1")]), "whitespace"),
            (req("node\u{202E}1", vec![rnic("e", "10.0.0.1")]), "U+202E"),
            (req("no\u{200B}de", vec![rnic("e", "10.0.0.1")]), "U+200B"),
            (req("h", vec![rnic("eth\u{2067}0", "10.0.0.1")]), "U+2067"),
            (req("\u{FEFF}h", vec![rnic("e", "10.0.0.1")]), "U+FEFF"),
            (req("h", vec![]), "1..="),
            (
                req(
                    "h",
                    (0..=MAX_RNICS_PER_HOST)
                        .map(|i| {
                            rnic(
                                &format!("e{i}"),
                                &format!("10.0.{}.{}", i / 200, i % 200 + 1),
                            )
                        })
                        .collect(),
                ),
                "1..=",
            ),
            (
                req("h", vec![rnic("e", "10.0.0.1"), rnic("e", "10.0.0.2")]),
                "duplicate ifname",
            ),
            (
                req("h", vec![rnic("e", "10.0.0.1"), rnic("f", "10.0.0.1")]),
                "duplicate ip",
            ),
            (req("h", vec![rnic("e", "0.0.0.0")]), "unicast"),
            (req("h", vec![rnic("e", "ff02::1")]), "unicast"),
            (req("h", vec![rnic("e", "255.255.255.255")]), "unicast"),
            (req("h", vec![big_qpn]), "24 bits"),
            (req("h", vec![port0]), "port 0"),
            (req("h", vec![bad_gw]), "gateway"),
            (req("h", vec![bad_tor]), "tor is empty"),
        ];
        for (r, why) in cases {
            let err = request(&r).unwrap_err();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
