//! The `.npy` files the kernels section exchanges with the Python reference: C-order
//! little-endian `f64` arrays only (what `numpy.load` / `numpy.save` need), so no crate.

use anyhow::{Context, Result, bail, ensure};
use std::path::Path;

/// Largest header `read` accepts (numpy writes 128 bytes for arrays like ours).
const MAX_HEADER: usize = 4096;

/// An `f64` array: its shape and its values in C order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Array {
    /// Length of each axis.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` values, last axis fastest.
    pub data: Vec<f64>,
}

/// Writes `data` with `shape` as a version 1.0 `.npy` file.
pub(super) fn write(path: &Path, shape: &[usize], data: &[f64]) -> Result<()> {
    ensure!(
        shape.iter().product::<usize>() == data.len(),
        "shape {shape:?} does not hold {} values",
        data.len()
    );
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let tuple = if dims.len() == 1 {
        format!("{},", dims[0])
    } else {
        dims.join(", ")
    };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({tuple}), }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.extend(std::iter::repeat_n(' ', pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 8);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(
        &u16::try_from(header.len())
            .context("npy header too long")?
            .to_le_bytes(),
    );
    out.extend_from_slice(header.as_bytes());
    data.iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Reads a `.npy` file holding a C-order little-endian `f64` array.
pub(super) fn read(path: &Path) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| format!("parsing {}", path.display()))
}

/// Parses the bytes of a `.npy` file (versions 1.0 to 3.0).
fn parse(bytes: &[u8]) -> Result<Array> {
    ensure!(
        bytes.len() >= 10 && bytes.starts_with(b"\x93NUMPY"),
        "not an npy file"
    );
    let (len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => bail!("unsupported npy version {v}"),
    };
    ensure!(
        len <= MAX_HEADER && bytes.len() >= start + len,
        "truncated npy header"
    );
    let header =
        std::str::from_utf8(&bytes[start..start + len]).context("npy header is not text")?;
    ensure!(
        header.contains("'descr': '<f8'"),
        "npy dtype is not little-endian f64: {header}"
    );
    ensure!(
        header.contains("'fortran_order': False"),
        "npy array is not C order: {header}"
    );
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .with_context(|| format!("npy header without shape: {header}"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .with_context(|| format!("bad npy dimension {s:?}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .context("npy shape overflows")?;
    let body = &bytes[start + len..];
    ensure!(
        body.len() == count.saturating_mul(8),
        "npy body holds {} bytes, shape {shape:?} needs {}",
        body.len(),
        count * 8
    );
    let data = body
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    Ok(Array { shape, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_bad_files() {
        let dir = std::env::temp_dir().join(format!("rocemesh-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("a.npy");
        write(&path, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, -6.5]).expect("write");
        let bytes = std::fs::read(&path).expect("read back");
        assert_eq!((bytes.len() - 48) % 64, 0, "header aligned to 64 bytes");
        let a = read(&path).expect("parse");
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data[5], -6.5);
        write(&path, &[4], &[0.0; 4]).expect("write 1-d");
        assert_eq!(read(&path).expect("parse 1-d").shape, vec![4]);
        assert!(parse(&bytes[..bytes.len() - 8]).is_err(), "truncated body");
        assert!(
            parse(b"\x93NUMPY\x01\x00\xff\xff").is_err(),
            "truncated header"
        );
        assert!(parse(b"PK\x03\x04 not npy").is_err());
        assert!(write(&path, &[3], &[0.0; 4]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
