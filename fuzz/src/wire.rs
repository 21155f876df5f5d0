//! Binary wire formats: what a probe socket, the analyzer's upload endpoint and the BPF
//! ring buffer hand the decoders. Besides "never panics", every accepted input must
//! re-encode to the same bytes, so a decoder cannot accept something the encoder would
//! write differently (two readings of one packet).

use rocemesh_ebpf::{FlowTable, decode_event, event::EVENT_SIZE};
use rocemesh_proto::Packet;
use rocemesh_proto::batch::{BatchEncoder, FLAG_PATHS, HEADER_LEN, decode_batch};
use rocemesh_proto::packet::{PACKET_LEN, PROBE_LEN, SENT_AT, VERSION};
use rocemesh_proto::path::{decode_paths, encode_paths};
use rocemesh_proto::probe_auth::{Flow, KEY_LEN, Keyring};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

/// Flow-table size for [`ebpf_events`]: small, so inputs reach the "table full" branch.
const FLOW_TABLE_CAPACITY: usize = 4;

/// The keyring [`packet`] checks tags with: signs with key 1, also accepts key 2.
fn keyring() -> &'static Keyring {
    static K: OnceLock<Keyring> = OnceLock::new();
    K.get_or_init(|| Keyring::new(1, &[(1, [7; KEY_LEN]), (2, [9; KEY_LEN])]).expect("valid keys"))
}

/// The flow [`packet`] checks tags on.
fn flow() -> Flow {
    Flow {
        src: Ipv4Addr::new(10, 0, 0, 1).into(),
        src_port: 50_000,
        dst: Ipv4Addr::new(10, 0, 1, 2).into(),
        dst_port: 4791,
    }
}

/// A UDP/UD probe payload: [`Packet::decode`] and the tag check a responder runs first
/// (at the PROBE's own send time, so the window never hides a tag bug). A tagged packet
/// that verifies must be exactly what sealing its decoded form gives, and flipping any
/// one bit of it must break the tag.
pub fn packet(data: &[u8]) {
    let decoded = Packet::decode(data);
    match &decoded {
        Ok(p) => {
            let again = p.encode();
            assert_eq!(again[..2], data[..2]);
            assert_eq!(
                again[3..48],
                data[3..48],
                "accepted packet re-encodes differently"
            );
            if data[2] == VERSION {
                assert_eq!(again[48..], data[48..PACKET_LEN]);
                assert!(data[PACKET_LEN..].iter().all(|&b| b == 0), "padding not zero");
            }
        }
        Err(e) => assert!(!e.reason().is_empty() && !e.to_string().is_empty()),
    }
    let now = if data.len() == PROBE_LEN {
        let mut sent = [0u8; 8];
        sent.copy_from_slice(&data[SENT_AT..SENT_AT + 8]);
        u64::from_be_bytes(sent)
    } else {
        0
    };
    let Err(e) = keyring().verify(data, &flow(), now) else {
        if let Ok(p) = decoded
            && data[48] == keyring().sign_id()
        {
            assert_eq!(
                keyring().seal(&p, &flow(), now).as_bytes(),
                data,
                "verified packet seals differently"
            );
        }
        let mut forged = data.to_vec();
        let at = usize::from(data[8]) % data.len();
        forged[at] ^= 1 << (data[9] % 8);
        assert!(
            keyring().verify(&forged, &flow(), now).is_err(),
            "a flipped bit at {at} kept the tag valid"
        );
        return;
    };
    assert!(!e.reason().is_empty());
}

/// A result batch body as `POST /api/v1/results` receives it ([`decode_batch`]), with
/// its records and path section.
pub fn batch(data: &[u8]) {
    let Ok(b) = decode_batch(data) else { return };
    let mut enc = BatchEncoder::new(b.header, b.len());
    for r in b.records() {
        enc.push(&r);
    }
    let again = enc.finish_with_paths(&b.paths);
    let flags = u32::from_le_bytes([data[20], data[21], data[22], data[23]]);
    if flags == FLAG_PATHS && b.paths.is_empty() {
        // An empty path section is legal but not what the encoder writes: it omits it.
        assert_eq!(again.len() + 4, data.len(), "empty path section");
        assert_eq!(again[..20], data[..20]);
        assert_eq!(again[24..], data[24..data.len() - 4]);
    } else {
        assert_eq!(again, data, "accepted batch re-encodes differently");
    }
    assert!(data.len() >= HEADER_LEN);
}

/// A path section on its own ([`decode_paths`]).
pub fn paths(data: &[u8]) {
    let Ok(paths) = decode_paths(data) else {
        return;
    };
    let mut again = Vec::new();
    encode_paths(&mut again, &paths);
    assert_eq!(again, data, "accepted path section re-encodes differently");
}

/// A run of BPF ring-buffer records ([`decode_event`]), applied to a small flow table as
/// the agent's tracer loop does.
pub fn ebpf_events(data: &[u8]) {
    let mut table = FlowTable::new(FLOW_TABLE_CAPACITY);
    for record in data.chunks(EVENT_SIZE) {
        let Ok(ev) = decode_event(record) else {
            continue;
        };
        assert!(ev.flow_label <= 0xF_FFFF && ev.comm.len() <= 3 * 16);
        table.apply(&ev);
        assert!(table.len() <= FLOW_TABLE_CAPACITY);
    }
    table.remove_dead_processes(|pid| pid % 2 == 0);
    assert!(table.flows().all(|f| f.pid % 2 == 0));
}
