//! A small, bounds-checked BTF reader: enough to find byte offsets of (nested) struct members
//! by name, in plain BTF and in split (kernel module) BTF layered on `vmlinux`.
//!
//! aya 0.14 does not relocate against module BTF, so the kernel route reads the `ib_core`
//! struct layouts here at start-up and hands the offsets to the BPF program.

use std::path::{Path, PathBuf};

const BTF_MAGIC: u16 = 0xEB9F;
const HEADER_MIN_LEN: usize = 24;
const TYPE_HEADER_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Qualifier chains longer than this are treated as malformed (real ones are 2-3 deep).
const MAX_TYPE_CHAIN: usize = 32;
/// Anonymous struct/union nesting deeper than this is treated as malformed.
const MAX_ANON_DEPTH: usize = 8;

/// Why BTF could not be read or a member not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    /// The blob is not valid BTF.
    #[error("malformed BTF: {0}")]
    Malformed(String),
    /// No struct/union of that name.
    #[error("no struct or union named {0} in BTF")]
    NoSuchType(String),
    /// The struct has no member of that name (also searched in anonymous members).
    #[error("{ty} has no member {member}")]
    NoSuchMember {
        /// The struct or union searched.
        ty: String,
        /// The member that was missing.
        member: String,
    },
    /// A member on the path is not a struct/union, or is a bitfield.
    #[error("{0}")]
    Unsupported(String),
}

fn malformed(what: impl Into<String>) -> BtfError {
    BtfError::Malformed(what.into())
}

/// A parsed BTF blob (optionally split on top of a base blob).
#[derive(Debug)]
pub struct Btf {
    data: Vec<u8>,
    strings: std::ops::Range<usize>,
    /// Absolute byte offset of each type's header; `type_at[i]` is type id `first_id + i`.
    type_at: Vec<usize>,
    first_id: u32,
    base: Option<Box<Btf>>,
}

#[derive(Clone, Copy)]
struct TypeHeader {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    size_or_type: u32,
    at: usize,
}

fn read_u32(data: &[u8], at: usize) -> Result<u32, BtfError> {
    let bytes = at
        .checked_add(4)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| malformed(format!("read past end at {at}")))?;
    let mut v = [0u8; 4];
    v.copy_from_slice(bytes);
    Ok(u32::from_le_bytes(v))
}

fn kind_extra_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        0 | 2 | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | 12 | 16
        | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

impl Btf {
    /// Parses a standalone BTF blob (`/sys/kernel/btf/vmlinux`, a `.BTF` section).
    pub fn parse(data: Vec<u8>) -> Result<Btf, BtfError> {
        Self::parse_inner(data, None)
    }

    /// Parses split BTF (`/sys/kernel/btf/<module>`): type ids and string offsets continue
    /// those of `base`.
    pub fn parse_split(data: Vec<u8>, base: Btf) -> Result<Btf, BtfError> {
        Self::parse_inner(data, Some(Box::new(base)))
    }

    /// Reads `dir/vmlinux` and, with `module`, `dir/<module>` split on it.
    pub fn from_sys_fs(dir: &Path, module: Option<&str>) -> Result<Btf, BtfLoadError> {
        let read = |path: PathBuf| {
            std::fs::read(&path).map_err(|source| BtfLoadError::Read { path, source })
        };
        // The module's BTF first: without it (no ib_core here) the 5 MB vmlinux is not parsed.
        let module_data = module.map(|m| read(dir.join(m))).transpose()?;
        let vmlinux = Btf::parse(read(dir.join("vmlinux"))?).map_err(|e| BtfLoadError::Parse {
            path: dir.join("vmlinux"),
            source: e,
        })?;
        match (module, module_data) {
            (Some(m), Some(data)) => {
                Btf::parse_split(data, vmlinux).map_err(|e| BtfLoadError::Parse {
                    path: dir.join(m),
                    source: e,
                })
            }
            _ => Ok(vmlinux),
        }
    }

    fn parse_inner(data: Vec<u8>, base: Option<Box<Btf>>) -> Result<Btf, BtfError> {
        let magic = data
            .get(0..2)
            .ok_or_else(|| malformed("shorter than a header"))?;
        if u16::from_le_bytes([magic[0], magic[1]]) != BTF_MAGIC {
            return Err(malformed("bad magic (big-endian BTF is not supported)"));
        }
        let hdr_len = read_u32(&data, 4)? as usize;
        if hdr_len < HEADER_MIN_LEN {
            return Err(malformed(format!("header length {hdr_len}")));
        }
        let section = |off_at: usize| -> Result<std::ops::Range<usize>, BtfError> {
            let off = read_u32(&data, off_at)? as usize;
            let len = read_u32(&data, off_at + 4)? as usize;
            let start = hdr_len
                .checked_add(off)
                .ok_or_else(|| malformed("section offset"))?;
            let end = start
                .checked_add(len)
                .ok_or_else(|| malformed("section length"))?;
            if end > data.len() {
                return Err(malformed(format!(
                    "section {start}..{end} past end {}",
                    data.len()
                )));
            }
            Ok(start..end)
        };
        let types = section(8)?;
        let strings = section(16)?;
        let first_id = match &base {
            None => 1,
            Some(b) => b.next_id(),
        };
        let mut type_at = Vec::new();
        let mut at = types.start;
        while at < types.end {
            let info = read_u32(&data, at + 4)?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let extra = kind_extra_len(kind, vlen)
                .ok_or_else(|| malformed(format!("unknown kind {kind}")))?;
            type_at.push(at);
            at += TYPE_HEADER_LEN + extra;
        }
        if at != types.end {
            return Err(malformed("last type overruns the type section"));
        }
        Ok(Btf {
            data,
            strings,
            type_at,
            first_id,
            base,
        })
    }

    fn next_id(&self) -> u32 {
        self.first_id + self.type_at.len() as u32
    }

    fn base_strings_len(&self) -> usize {
        self.base
            .as_ref()
            .map_or(0, |b| b.base_strings_len() + b.strings.len())
    }

    fn name(&self, off: u32) -> Result<&str, BtfError> {
        let off = off as usize;
        let base_len = self.base_strings_len();
        if off < base_len {
            return self
                .base
                .as_ref()
                .ok_or_else(|| malformed("string offset"))?
                .name(off as u32);
        }
        let start = self.strings.start + (off - base_len);
        let tail = self
            .data
            .get(start..self.strings.end)
            .ok_or_else(|| malformed("string offset"))?;
        let len = tail
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| malformed("unterminated string"))?;
        std::str::from_utf8(&tail[..len]).map_err(|_| malformed("non-UTF-8 name"))
    }

    /// Finds the BTF that holds type `id` (self or a base) and its header.
    fn type_by_id(&self, id: u32) -> Result<(&Btf, TypeHeader), BtfError> {
        if id < self.first_id {
            return self
                .base
                .as_ref()
                .ok_or_else(|| malformed(format!("type id {id}")))?
                .type_by_id(id);
        }
        let at = *self
            .type_at
            .get((id - self.first_id) as usize)
            .ok_or_else(|| malformed(format!("type id {id} out of range")))?;
        Ok((self, self.header_at(at)?))
    }

    fn header_at(&self, at: usize) -> Result<TypeHeader, BtfError> {
        let info = read_u32(&self.data, at + 4)?;
        Ok(TypeHeader {
            name_off: read_u32(&self.data, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: read_u32(&self.data, at + 8)?,
            at,
        })
    }

    /// First struct or union called `name`, searching this blob before its base.
    fn find_composite(&self, name: &str) -> Result<Option<(&Btf, TypeHeader)>, BtfError> {
        for &at in &self.type_at {
            let h = self.header_at(at)?;
            if matches!(h.kind, KIND_STRUCT | KIND_UNION)
                && h.vlen > 0
                && self.name(h.name_off)? == name
            {
                return Ok(Some((self, h)));
            }
        }
        match &self.base {
            Some(b) => b.find_composite(name),
            None => Ok(None),
        }
    }

    /// Byte offset of `path` (e.g. `["ah_attr", "grh", "dgid"]`) inside struct/union `ty`;
    /// members of anonymous structs/unions are found as the C compiler would.
    pub fn member_offset(&self, ty: &str, path: &[&str]) -> Result<u32, BtfError> {
        let (mut btf, mut h) = self
            .find_composite(ty)?
            .ok_or_else(|| BtfError::NoSuchType(ty.into()))?;
        let mut total_bits: u64 = 0;
        let mut current = ty.to_owned();
        for (i, member) in path.iter().enumerate() {
            let (bits, member_type) =
                btf.find_member(h, member, 0)?
                    .ok_or_else(|| BtfError::NoSuchMember {
                        ty: current.clone(),
                        member: (*member).into(),
                    })?;
            total_bits += bits;
            current = format!("{current}.{member}");
            if i + 1 < path.len() {
                (btf, h) = self.resolve_composite(member_type, &current)?;
            }
        }
        if !total_bits.is_multiple_of(8) {
            return Err(BtfError::Unsupported(format!("{current} is a bitfield")));
        }
        u32::try_from(total_bits / 8).map_err(|_| malformed("offset overflow"))
    }

    /// Follows typedef/const/volatile/restrict/type-tag to a struct or union.
    fn resolve_composite(&self, mut id: u32, what: &str) -> Result<(&Btf, TypeHeader), BtfError> {
        for _ in 0..MAX_TYPE_CHAIN {
            let (btf, h) = self.type_by_id(id)?;
            match h.kind {
                KIND_STRUCT | KIND_UNION => return Ok((btf, h)),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = h.size_or_type
                }
                _ => {
                    return Err(BtfError::Unsupported(format!(
                        "{what} is not a struct or union"
                    )));
                }
            }
        }
        Err(malformed(format!("type chain of {what} too long")))
    }

    /// Bit offset and type id of member `name` in composite `h`, descending into anonymous
    /// members.
    fn find_member(
        &self,
        h: TypeHeader,
        name: &str,
        depth: usize,
    ) -> Result<Option<(u64, u32)>, BtfError> {
        if depth > MAX_ANON_DEPTH {
            return Err(malformed("anonymous members nested too deep"));
        }
        for i in 0..h.vlen {
            let at = h.at + TYPE_HEADER_LEN + 12 * i;
            let name_off = read_u32(&self.data, at)?;
            let member_type = read_u32(&self.data, at + 4)?;
            let raw_offset = read_u32(&self.data, at + 8)?;
            let (bit_offset, bitfield) = if h.kind_flag {
                (u64::from(raw_offset & 0xff_ffff), raw_offset >> 24 != 0)
            } else {
                (u64::from(raw_offset), false)
            };
            let member_name = self.name(name_off)?;
            if member_name == name {
                if bitfield {
                    return Err(BtfError::Unsupported(format!(
                        "member {name} is a bitfield"
                    )));
                }
                return Ok(Some((bit_offset, member_type)));
            }
            if member_name.is_empty()
                && let Ok((btf, inner)) = self.resolve_composite(member_type, "anonymous member")
                && let Some((bits, ty)) = btf.find_member(inner, name, depth + 1)?
            {
                return Ok(Some((bit_offset + bits, ty)));
            }
        }
        Ok(None)
    }
}

/// Why BTF could not be loaded from sysfs.
#[derive(Debug, thiserror::Error)]
pub enum BtfLoadError {
    /// The file is missing or unreadable (e.g. module not loaded, kernel without BTF).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not valid BTF.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: BtfError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes BTF blobs by hand (type ids and string offsets continue `base` when split).
    struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        str_base: u32,
    }

    impl Blob {
        fn new(str_base: u32) -> Self {
            Blob {
                types: Vec::new(),
                strings: vec![0],
                str_base,
            }
        }
        fn s(&mut self, s: &str) -> u32 {
            let off = self.str_base + self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }
        fn u32s(&mut self, v: &[u32]) {
            v.iter()
                .for_each(|x| self.types.extend_from_slice(&x.to_le_bytes()));
        }
        fn ty(&mut self, name: u32, kind: u32, vlen: u32, size_or_type: u32) {
            self.u32s(&[name, (kind << 24) | vlen, size_or_type]);
        }
        fn bytes(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
            b.extend_from_slice(&[1, 0]);
            for v in [
                24,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&self.types);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    /// base: 1 = int u32, 2 = struct inner { u32 a; u32 b; }
    fn base_blob() -> Blob {
        let mut b = Blob::new(0);
        let u32_name = b.s("u32");
        b.ty(u32_name, KIND_INT, 0, 4);
        b.u32s(&[32]);
        let (inner, a, bb) = (b.s("inner"), b.s("a"), b.s("b"));
        b.ty(inner, KIND_STRUCT, 2, 8);
        b.u32s(&[a, 1, 0, bb, 1, 32]);
        b
    }

    /// split on base: 3 = typedef inner_t -> 2, 4 = const -> 3,
    /// 5 = union (anonymous) { u32 x; }, 6 = struct outer { u32 pad; const inner_t in; union {x}; bitfield }
    fn split_blob(base_strings: u32, base_a: u32) -> Vec<u8> {
        let mut s = Blob::new(base_strings);
        let inner_t = s.s("inner_t");
        s.ty(inner_t, KIND_TYPEDEF, 0, 2);
        s.ty(0, KIND_CONST, 0, 3);
        let x = s.s("x");
        s.ty(0, KIND_UNION, 1, 4);
        s.u32s(&[x, 1, 0]);
        let (outer, pad, inn, bits) = (s.s("outer"), s.s("pad"), s.s("in"), s.s("bits"));
        // kind_flag set: member offsets carry bitfield sizes in the top byte.
        s.types.extend_from_slice(&outer.to_le_bytes());
        s.types
            .extend_from_slice(&((1u32 << 31) | (KIND_STRUCT << 24) | 5).to_le_bytes());
        s.types.extend_from_slice(&24u32.to_le_bytes());
        s.u32s(&[
            pad,
            1,
            0,
            inn,
            4,
            32,
            0,
            5,
            96,
            bits,
            1,
            (3 << 24) | 128,
            base_a,
            1,
            160,
        ]);
        s.bytes()
    }

    fn parsed() -> Btf {
        let base = base_blob();
        let base_strings = base.strings.len() as u32;
        // "a" is the base's 2nd name after "u32" and "inner": offset 1 + 4 + 6.
        let split = split_blob(base_strings, 11);
        Btf::parse_split(split, Btf::parse(base.bytes()).unwrap()).unwrap()
    }

    #[test]
    fn offsets_through_split_typedef_const_and_anonymous_members() {
        let btf = parsed();
        assert_eq!(btf.member_offset("inner", &["b"]), Ok(4));
        assert_eq!(btf.member_offset("outer", &["pad"]), Ok(0));
        assert_eq!(btf.member_offset("outer", &["in", "b"]), Ok(8));
        assert_eq!(btf.member_offset("outer", &["x"]), Ok(12));
        // Member named by a base string.
        assert_eq!(btf.member_offset("outer", &["a"]), Ok(20));
    }

    #[test]
    fn clear_errors_for_missing_or_unsupported_members() {
        let btf = parsed();
        assert_eq!(
            btf.member_offset("nope", &["a"]),
            Err(BtfError::NoSuchType("nope".into()))
        );
        assert_eq!(
            btf.member_offset("outer", &["in", "zz"]),
            Err(BtfError::NoSuchMember {
                ty: "outer.in".into(),
                member: "zz".into()
            })
        );
        assert!(matches!(
            btf.member_offset("outer", &["bits"]),
            Err(BtfError::Unsupported(_))
        ));
        assert!(matches!(
            btf.member_offset("outer", &["pad", "a"]),
            Err(BtfError::Unsupported(_))
        ));
    }

    #[test]
    fn truncated_or_corrupted_blobs_never_panic() {
        let base = base_blob().bytes();
        let split = split_blob(base_blob().strings.len() as u32, 11);
        for cut in 0..split.len() {
            let base = Btf::parse(base.clone()).unwrap();
            if let Ok(btf) = Btf::parse_split(split[..cut].to_vec(), base) {
                let _ = btf.member_offset("outer", &["in", "b"]);
            }
        }
        for i in 0..split.len() {
            for v in [0u8, 0xff, 0x7f] {
                let mut bad = split.clone();
                bad[i] = v;
                if let Ok(btf) = Btf::parse_split(bad, Btf::parse(base.clone()).unwrap()) {
                    let _ = btf.member_offset("outer", &["in", "b"]);
                    let _ = btf.member_offset("outer", &["x"]);
                }
            }
        }
        assert!(matches!(
            Btf::parse(vec![0x9f, 0xeb]),
            Err(BtfError::Malformed(_))
        ));
    }

    #[test]
    fn parses_this_kernels_vmlinux() {
        let path = Path::new("/sys/kernel/btf");
        if !path.join("vmlinux").exists() {
            eprintln!("skipped: kernel without BTF");
            return;
        }
        let btf = Btf::from_sys_fs(path, None).unwrap();
        assert_eq!(btf.member_offset("list_head", &["prev"]), Ok(8));
        assert!(matches!(
            Btf::from_sys_fs(path, Some("no_such_module")),
            Err(BtfLoadError::Read { .. })
        ));
    }
}
