//! Result batches: the compact binary body an agent POSTs to the analyzer.
//!
//! A batch is a 40-byte header followed by `count` fixed 48-byte records, all
//! little-endian (both ends are x86/arm hosts; decoding is a bounds-checked copy).
//!
//! ```text
//! header
//!  0  4  magic        "RMB1"
//!  4  2  version      1
//!  6  2  record_len   48
//!  8  4  count        number of records
//! 12  4  host_id      controller-assigned host id of the uploading agent
//! 16  4  epoch        agent epoch (new at every agent start)
//! 20  4  flags        bit0: a path section (see `path`) follows the records; others zero
//! 24  8  batch_seq    per-epoch sequence; a retried batch keeps its number
//! 32  8  dropped      records the agent dropped so far (buffer overflow), cumulative
//! record
//!  0  4  prober_rnic
//!  4  4  target_rnic
//!  8  4  seq
//! 12  4  target_qpn        the QPN the probe named
//! 16  8  send_unix_ns      prober wall clock at ① (bucketing into periods)
//! 24  4  network_rtt_ns    (⑤−②)−(④−③); 0 unless status = ok
//! 28  4  prober_delay_ns   (⑥−①)−(⑤−②)
//! 32  4  responder_delay_ns ④−③ from ACK2
//! 36  4  app_rtt_ns        ⑥−①
//! 40  2  src_port          UDP source port of the probe (ECMP entropy)
//! 42  2  dst_port
//! 44  1  class             ProbeClass
//! 45  1  status            ProbeStatus
//! 46  1  ts_source         TimestampSource of the network RTT
//! 47  1  reserved          must be zero
//! ```
//!
//! With flag bit 0 the records are followed by a path section (`crate::path`).
//!
//! Decoding is all-or-nothing: any inconsistency rejects the whole batch, so a
//! malformed upload stores nothing.

use crate::packet::{ProbeClass, TimestampSource};
use crate::path::{TracedPath, decode_paths, encode_paths};
use thiserror::Error;

/// Batch header length in bytes.
pub const HEADER_LEN: usize = 40;
/// Record length in bytes.
pub const RECORD_LEN: usize = 48;
/// Batch magic.
pub const BATCH_MAGIC: [u8; 4] = *b"RMB1";
/// Batch format version.
pub const BATCH_VERSION: u16 = 1;
/// Most records one batch may carry (≈ 12 MiB); larger uploads are refused.
pub const MAX_RECORDS: u32 = 262_144;
/// Largest well-formed batch body (most records and the largest path section), for HTTP
/// body limits.
pub const MAX_BATCH_BYTES: usize =
    HEADER_LEN + RECORD_LEN * MAX_RECORDS as usize + crate::path::MAX_PATH_SECTION_BYTES;
/// Header flag: a path section follows the records.
pub const FLAG_PATHS: u32 = 1;
/// MIME type of a batch body.
pub const CONTENT_TYPE: &str = "application/vnd.rocemesh.results.v1";

/// Outcome of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeStatus {
    /// Both ACKs arrived within the timeout.
    Ok = 0,
    /// No ACK arrived within the timeout.
    Timeout = 1,
    /// ACK1 arrived but ACK2 did not: still a timeout (R-Pingmesh requires both).
    Ack2Lost = 2,
}

impl ProbeStatus {
    /// Decodes the wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Ok),
            1 => Some(Self::Timeout),
            2 => Some(Self::Ack2Lost),
            _ => None,
        }
    }

    /// True for every status that counts as a timeout.
    pub fn is_timeout(self) -> bool {
        !matches!(self, Self::Ok)
    }
}

/// One probe result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeResult {
    /// Probing RNIC id.
    pub prober_rnic: u32,
    /// Target RNIC id.
    pub target_rnic: u32,
    /// Prober sequence number.
    pub seq: u32,
    /// QPN the probe named (compared against the registry to spot QPN resets).
    pub target_qpn: u32,
    /// Prober wall clock at ①, ns since the Unix epoch.
    pub send_unix_ns: u64,
    /// Network RTT in ns (0 unless `status` is ok).
    pub network_rtt_ns: u32,
    /// Prober processing delay in ns.
    pub prober_delay_ns: u32,
    /// Responder processing delay in ns.
    pub responder_delay_ns: u32,
    /// Application-level RTT ⑥−① in ns.
    pub app_rtt_ns: u32,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Pinglist class.
    pub class: ProbeClass,
    /// Outcome.
    pub status: ProbeStatus,
    /// How the network RTT was timestamped.
    pub ts_source: TimestampSource,
}

/// Header fields of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Uploading host.
    pub host_id: u32,
    /// Agent epoch.
    pub epoch: u32,
    /// Per-epoch batch sequence number (for de-duplicating retries).
    pub batch_seq: u64,
    /// Cumulative records dropped by the agent's bounded buffer.
    pub dropped: u64,
}

/// Why a batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// Body shorter than a header.
    #[error("batch truncated: {0} bytes, header needs {HEADER_LEN}")]
    Truncated(usize),
    /// Wrong magic.
    #[error("not a rocemesh result batch (bad magic)")]
    Magic,
    /// Unsupported version or record length.
    #[error("unsupported batch version {version} / record length {record_len}")]
    Version {
        /// Version found.
        version: u16,
        /// Record length found.
        record_len: u16,
    },
    /// `count` disagrees with the body length or exceeds the limit.
    #[error("batch length mismatch: header says {count} records, body has {body} bytes")]
    Length {
        /// Count in the header.
        count: u32,
        /// Body length.
        body: usize,
    },
    /// Unknown flags.
    #[error("batch flags {0:#x} not understood")]
    Flags(u32),
    /// The path section is malformed.
    #[error("path section: {0}")]
    Paths(String),
    /// A record field is out of range.
    #[error("record {index}: {what}")]
    Record {
        /// Record index.
        index: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// Appends records to a batch body without intermediate allocations.
#[derive(Debug)]
pub struct BatchEncoder {
    buf: Vec<u8>,
    count: u32,
}

impl BatchEncoder {
    /// Starts a batch with room for `capacity` records.
    pub fn new(header: BatchHeader, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER_LEN + capacity * RECORD_LEN);
        buf.extend_from_slice(&BATCH_MAGIC);
        buf.extend_from_slice(&BATCH_VERSION.to_le_bytes());
        buf.extend_from_slice(&(RECORD_LEN as u16).to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&header.host_id.to_le_bytes());
        buf.extend_from_slice(&header.epoch.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&header.batch_seq.to_le_bytes());
        buf.extend_from_slice(&header.dropped.to_le_bytes());
        Self { buf, count: 0 }
    }

    /// Appends one record.
    pub fn push(&mut self, r: &ProbeResult) {
        let b = &mut self.buf;
        b.extend_from_slice(&r.prober_rnic.to_le_bytes());
        b.extend_from_slice(&r.target_rnic.to_le_bytes());
        b.extend_from_slice(&r.seq.to_le_bytes());
        b.extend_from_slice(&r.target_qpn.to_le_bytes());
        b.extend_from_slice(&r.send_unix_ns.to_le_bytes());
        b.extend_from_slice(&r.network_rtt_ns.to_le_bytes());
        b.extend_from_slice(&r.prober_delay_ns.to_le_bytes());
        b.extend_from_slice(&r.responder_delay_ns.to_le_bytes());
        b.extend_from_slice(&r.app_rtt_ns.to_le_bytes());
        b.extend_from_slice(&r.src_port.to_le_bytes());
        b.extend_from_slice(&r.dst_port.to_le_bytes());
        b.extend_from_slice(&[r.class as u8, r.status as u8, r.ts_source as u8, 0]);
        self.count += 1;
    }

    /// Number of records so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Finishes the body.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf[8..12].copy_from_slice(&self.count.to_le_bytes());
        self.buf
    }

    /// Finishes the body with a path section (omitted when `paths` is empty).
    pub fn finish_with_paths(self, paths: &[TracedPath]) -> Vec<u8> {
        let mut buf = self.finish();
        if !paths.is_empty() {
            buf[20..24].copy_from_slice(&FLAG_PATHS.to_le_bytes());
            encode_paths(&mut buf, paths);
        }
        buf
    }
}

/// Encodes a whole batch.
pub fn encode_batch(header: BatchHeader, records: &[ProbeResult]) -> Vec<u8> {
    let mut e = BatchEncoder::new(header, records.len());
    for r in records {
        e.push(r);
    }
    e.finish()
}

/// A validated batch; records are decoded lazily and cannot fail any more.
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    /// Header fields.
    pub header: BatchHeader,
    records: &'a [u8],
    /// Traced paths carried by the batch (empty without a path section).
    pub paths: Vec<TracedPath>,
}

impl<'a> Batch<'a> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len() / RECORD_LEN
    }

    /// True for a heartbeat-only batch.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Iterates the records.
    pub fn records(&self) -> impl ExactSizeIterator<Item = ProbeResult> + 'a {
        self.records
            .chunks_exact(RECORD_LEN)
            .map(|c| decode_record(c).expect("validated in decode_batch"))
    }
}

fn le_u16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le_u32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn le_u64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn decode_record(c: &[u8]) -> Result<ProbeResult, &'static str> {
    let class = ProbeClass::from_u8(c[44]).ok_or("unknown probe class")?;
    let status = ProbeStatus::from_u8(c[45]).ok_or("unknown status")?;
    let ts_source = TimestampSource::from_u8(c[46]).ok_or("unknown timestamp source")?;
    if c[47] != 0 {
        return Err("reserved byte not zero");
    }
    let r = ProbeResult {
        prober_rnic: le_u32(c, 0),
        target_rnic: le_u32(c, 4),
        seq: le_u32(c, 8),
        target_qpn: le_u32(c, 12),
        send_unix_ns: le_u64(c, 16),
        network_rtt_ns: le_u32(c, 24),
        prober_delay_ns: le_u32(c, 28),
        responder_delay_ns: le_u32(c, 32),
        app_rtt_ns: le_u32(c, 36),
        src_port: le_u16(c, 40),
        dst_port: le_u16(c, 42),
        class,
        status,
        ts_source,
    };
    if status != ProbeStatus::Ok && r.network_rtt_ns != 0 {
        return Err("timed-out probe carries an RTT");
    }
    Ok(r)
}

/// The host id a body's header names, when it has a batch header at all (checked before
/// the whole body is decoded).
pub fn peek_host_id(body: &[u8]) -> Option<u32> {
    if body.len() < HEADER_LEN || body[..4] != BATCH_MAGIC {
        return None;
    }
    Some(u32::from_le_bytes(body[12..16].try_into().ok()?))
}

/// Validates a whole batch body; on error nothing of it may be used.
pub fn decode_batch(body: &[u8]) -> Result<Batch<'_>, BatchError> {
    if body.len() < HEADER_LEN {
        if body.len() >= 4 && body[0..4] != BATCH_MAGIC {
            return Err(BatchError::Magic);
        }
        return Err(BatchError::Truncated(body.len()));
    }
    if body[0..4] != BATCH_MAGIC {
        return Err(BatchError::Magic);
    }
    let version = le_u16(body, 4);
    let record_len = le_u16(body, 6);
    if version != BATCH_VERSION || record_len as usize != RECORD_LEN {
        return Err(BatchError::Version {
            version,
            record_len,
        });
    }
    let count = le_u32(body, 8);
    let flags = le_u32(body, 20);
    if flags & !FLAG_PATHS != 0 {
        return Err(BatchError::Flags(flags));
    }
    let rest = body.len() - HEADER_LEN;
    let records_len = count as usize * RECORD_LEN;
    let has_paths = flags & FLAG_PATHS != 0;
    if count > MAX_RECORDS || rest < records_len || (!has_paths && rest != records_len) {
        return Err(BatchError::Length {
            count,
            body: body.len(),
        });
    }
    let records = &body[HEADER_LEN..HEADER_LEN + records_len];
    let paths = if has_paths {
        decode_paths(&body[HEADER_LEN + records_len..]).map_err(BatchError::Paths)?
    } else {
        Vec::new()
    };
    for (index, c) in records.chunks_exact(RECORD_LEN).enumerate() {
        decode_record(c).map_err(|what| BatchError::Record { index, what })?;
    }
    Ok(Batch {
        header: BatchHeader {
            host_id: le_u32(body, 12),
            epoch: le_u32(body, 16),
            batch_seq: le_u64(body, 24),
            dropped: le_u64(body, 32),
        },
        records,
        paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> ProbeResult {
        ProbeResult {
            prober_rnic: i,
            target_rnic: i + 1,
            seq: i * 3,
            target_qpn: 0x00ab_cdef,
            send_unix_ns: 1_700_000_000_000_000_000 + i as u64,
            network_rtt_ns: 33_000 + i,
            prober_delay_ns: 40_000,
            responder_delay_ns: 20_000,
            app_rtt_ns: 109_000,
            src_port: 49_152 + i as u16,
            dst_port: 4792,
            class: ProbeClass::TorMesh,
            status: ProbeStatus::Ok,
            ts_source: TimestampSource::Software,
        }
    }

    fn header() -> BatchHeader {
        BatchHeader {
            host_id: 3,
            epoch: 99,
            batch_seq: 12,
            dropped: 5,
        }
    }

    #[test]
    fn the_largest_batch_with_the_largest_path_section_fits_the_body_limit() {
        let recs: Vec<_> = (0..MAX_RECORDS).map(|i| rec(i % 1000)).collect();
        let hop = Some(std::net::IpAddr::from([10, 0, 0, 1]));
        let paths: Vec<TracedPath> = (0..crate::path::MAX_PATHS)
            .map(|i| TracedPath {
                src: std::net::IpAddr::from([10, 0, 0, 2]),
                dst: std::net::IpAddr::from([10, 0, 1, 2]),
                src_port: i as u16,
                dst_port: 4791,
                traced_at_unix_ns: 1,
                reached: true,
                ack_direction: false,
                hops: vec![hop; crate::path::MAX_HOPS],
            })
            .collect();
        let mut enc = BatchEncoder::new(header(), recs.len());
        recs.iter().for_each(|r| enc.push(r));
        let body = enc.finish_with_paths(&paths);
        assert_eq!(body.len(), MAX_BATCH_BYTES);
        let b = decode_batch(&body).unwrap();
        assert_eq!((b.len(), b.paths.len()), (recs.len(), paths.len()));
    }

    #[test]
    fn round_trip() {
        let recs: Vec<_> = (0..100).map(rec).collect();
        let body = encode_batch(header(), &recs);
        assert_eq!(body.len(), HEADER_LEN + 100 * RECORD_LEN);
        let b = decode_batch(&body).unwrap();
        assert_eq!(b.header, header());
        assert_eq!(b.records().collect::<Vec<_>>(), recs);
    }

    #[test]
    fn paths_ride_after_the_records() {
        let path = TracedPath {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port: 50_001,
            dst_port: 4792,
            traced_at_unix_ns: 7,
            reached: true,
            ack_direction: false,
            hops: vec![
                Some("198.18.0.0".parse().unwrap()),
                None,
                Some("198.19.0.3".parse().unwrap()),
            ],
        };
        let mut e = BatchEncoder::new(header(), 2);
        e.push(&rec(1));
        e.push(&rec(2));
        let body = e.finish_with_paths(std::slice::from_ref(&path));
        let b = decode_batch(&body).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b.paths, vec![path]);
        assert_eq!(b.records().nth(1), Some(rec(2)));
        // Without paths, the flag stays clear and the body is the plain v1 layout.
        let plain = BatchEncoder::new(header(), 0).finish_with_paths(&[]);
        assert_eq!(&plain[20..24], &[0, 0, 0, 0]);
    }

    #[test]
    fn empty_batch_is_a_heartbeat() {
        let body = encode_batch(header(), &[]);
        let b = decode_batch(&body).unwrap();
        assert!(b.is_empty());
    }

    #[test]
    fn malformed_batches_are_refused_whole() {
        let body = encode_batch(header(), &[rec(1), rec(2)]);
        assert_eq!(
            decode_batch(&body[..10]).unwrap_err(),
            BatchError::Truncated(10)
        );
        assert_eq!(
            decode_batch(b"{\"json\": true}").unwrap_err(),
            BatchError::Magic
        );
        assert_eq!(decode_batch(b"RMB").unwrap_err(), BatchError::Truncated(3));
        assert_eq!(decode_batch(&[b'x'; 100]).unwrap_err(), BatchError::Magic);
        assert!(matches!(
            decode_batch(&body[..body.len() - 1]),
            Err(BatchError::Length { .. })
        ));
        let mut long = body.clone();
        long.extend_from_slice(&[0; RECORD_LEN]);
        assert!(matches!(
            decode_batch(&long),
            Err(BatchError::Length { .. })
        ));
        let mut v = body.clone();
        v[4] = 2;
        assert!(matches!(decode_batch(&v), Err(BatchError::Version { .. })));
        let mut f = body.clone();
        f[20] = 2;
        assert_eq!(decode_batch(&f).unwrap_err(), BatchError::Flags(2));
        let mut p = body.clone();
        p[20] = 1; // claims a path section that is not there
        assert!(matches!(decode_batch(&p), Err(BatchError::Paths(_))));
        // Second record with an unknown status: the whole batch goes.
        let mut s = body.clone();
        s[HEADER_LEN + RECORD_LEN + 45] = 7;
        assert_eq!(
            decode_batch(&s).unwrap_err(),
            BatchError::Record {
                index: 1,
                what: "unknown status"
            }
        );
        let mut t = body.clone();
        t[HEADER_LEN + 45] = ProbeStatus::Timeout as u8;
        assert!(matches!(
            decode_batch(&t),
            Err(BatchError::Record { index: 0, .. })
        ));
        let mut huge = body;
        huge[8..12].copy_from_slice(&(MAX_RECORDS + 1).to_le_bytes());
        assert!(matches!(
            decode_batch(&huge),
            Err(BatchError::Length { .. })
        ));
    }
}
