//! Versioned ELF symbol resolution for uprobes.
//!
//! libibverbs exports `ibv_modify_qp@IBVERBS_1.0` (compat, hidden) and
//! `ibv_modify_qp@@IBVERBS_1.1` (default). aya resolves a uprobe symbol by name and takes the
//! first match, which can be the compat one that new programs never call. Here `.dynsym` is read
//! with `.gnu.version` / `.gnu.version_d`, the default version is picked, and its address is
//! turned into the file offset the kernel attaches to.

use std::path::{Path, PathBuf};

use object::elf::{PT_LOAD, SHN_UNDEF, SHT_DYNSYM, STT_FUNC, STT_GNU_IFUNC};
use object::read::elf::{FileHeader, ProgramHeader, Sym};
use object::{Endianness, SymbolIndex, elf::FileHeader64};

/// Libraries larger than this are not read (libibverbs is ~100 KiB).
const MAX_LIBRARY_BYTES: u64 = 256 << 20;

/// One exported definition of a function name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedSymbol {
    /// Version name (`IBVERBS_1.1`), `None` for unversioned symbols.
    pub version: Option<String>,
    /// True for the default definition (`@@`), the one the dynamic linker binds new callers to.
    pub is_default: bool,
    /// Symbol value (virtual address).
    pub address: u64,
    /// Offset in the file, what a uprobe attaches to.
    pub file_offset: u64,
}

/// Why a symbol could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The library.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is too large to be a library we trace.
    #[error("{path} is larger than {MAX_LIBRARY_BYTES} bytes")]
    TooLarge {
        /// The library.
        path: PathBuf,
    },
    /// Not a 64-bit ELF file or a malformed one.
    #[error("{path}: malformed or unsupported ELF: {reason}")]
    Elf {
        /// The library.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The name has no defined function in `.dynsym`, or only hidden (compat) versions.
    #[error("{path}: no default-version definition of {name} (found {found} definitions)")]
    NoDefault {
        /// The library.
        path: PathBuf,
        /// The function name.
        name: String,
        /// How many definitions (any version) exist.
        found: usize,
    },
    /// A symbol's address is outside every loadable segment.
    #[error("{path}: {name} at {address:#x} is in no PT_LOAD segment")]
    NotLoaded {
        /// The library.
        path: PathBuf,
        /// The function name.
        name: String,
        /// Its address.
        address: u64,
    },
}

/// All exported definitions of function `name` in the shared object at `path`.
pub fn exported_versions(path: &Path, name: &str) -> Result<Vec<VersionedSymbol>, SymbolError> {
    let read_err = |source| SymbolError::Read {
        path: path.to_owned(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read_err)?.len();
    if len > MAX_LIBRARY_BYTES {
        return Err(SymbolError::TooLarge {
            path: path.to_owned(),
        });
    }
    let data = std::fs::read(path).map_err(read_err)?;
    parse_versions(&data, name).map_err(|e| match e {
        ParseError::Elf(reason) => SymbolError::Elf {
            path: path.to_owned(),
            reason,
        },
        ParseError::NotLoaded(address) => SymbolError::NotLoaded {
            path: path.to_owned(),
            name: name.to_owned(),
            address,
        },
    })
}

/// The default-version (`@@`) definition of function `name`: where new callers land.
pub fn resolve_default(path: &Path, name: &str) -> Result<VersionedSymbol, SymbolError> {
    let all = exported_versions(path, name)?;
    let found = all.len();
    let mut defaults = all.into_iter().filter(|s| s.is_default);
    match (defaults.next(), defaults.next()) {
        (Some(only), None) => Ok(only),
        _ => Err(SymbolError::NoDefault {
            path: path.to_owned(),
            name: name.to_owned(),
            found,
        }),
    }
}

enum ParseError {
    Elf(String),
    NotLoaded(u64),
}

impl From<object::read::Error> for ParseError {
    fn from(e: object::read::Error) -> Self {
        ParseError::Elf(e.to_string())
    }
}

fn parse_versions(data: &[u8], name: &str) -> Result<Vec<VersionedSymbol>, ParseError> {
    let header = FileHeader64::<Endianness>::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    let dynsym = sections.symbols(endian, data, SHT_DYNSYM)?;
    let versions = sections.versions(endian, data)?;
    let segments = header.program_headers(endian, data)?;
    let mut out = Vec::new();
    for (index, sym) in dynsym.enumerate() {
        let is_func = matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC);
        if !is_func
            || sym.st_shndx(endian) == SHN_UNDEF
            || sym.name(endian, dynsym.strings())? != name.as_bytes()
        {
            continue;
        }
        let (version, is_default) = match &versions {
            Some(table) => symbol_version(table, endian, index)?,
            None => (None, true),
        };
        let address = sym.st_value(endian);
        let file_offset = segments
            .iter()
            .filter(|ph| ph.p_type(endian) == PT_LOAD)
            .find_map(|ph| {
                let start = ph.p_vaddr(endian);
                let within = address.checked_sub(start)?;
                (within < ph.p_filesz(endian)).then(|| ph.p_offset(endian) + within)
            })
            .ok_or(ParseError::NotLoaded(address))?;
        out.push(VersionedSymbol {
            version,
            is_default,
            address,
            file_offset,
        });
    }
    Ok(out)
}

fn symbol_version(
    table: &object::read::elf::VersionTable<'_, FileHeader64<Endianness>>,
    endian: Endianness,
    index: SymbolIndex,
) -> Result<(Option<String>, bool), ParseError> {
    let vi = table.version_index(endian, index);
    let name = table
        .version(vi)?
        .map(|v| String::from_utf8_lossy(v.name()).into_owned());
    Ok((name, !vi.is_hidden()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEM_LIBIBVERBS: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

    #[test]
    fn real_libibverbs_default_is_1_1_not_compat_1_0() {
        let path = Path::new(SYSTEM_LIBIBVERBS);
        if !path.exists() {
            eprintln!(
                "skipped: {SYSTEM_LIBIBVERBS} not installed (apt-get install libibverbs-dev)"
            );
            return;
        }
        let all = exported_versions(path, "ibv_modify_qp").unwrap();
        let compat = all
            .iter()
            .find(|s| s.version.as_deref() == Some("IBVERBS_1.0"))
            .unwrap();
        assert!(!compat.is_default);
        let default = resolve_default(path, "ibv_modify_qp").unwrap();
        assert_eq!(default.version.as_deref(), Some("IBVERBS_1.1"));
        assert_ne!(default.file_offset, compat.file_offset);
        assert!(resolve_default(path, "ibv_destroy_qp").unwrap().is_default);
        assert!(matches!(
            resolve_default(path, "no_such_function"),
            Err(SymbolError::NoDefault { found: 0, .. })
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("junk.so");
        for junk in [
            &b""[..],
            b"\x7fELF",
            &[
                0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0,
            ][..],
        ] {
            std::fs::write(&p, junk).unwrap();
            assert!(matches!(
                exported_versions(&p, "f"),
                Err(SymbolError::Elf { .. })
            ));
        }
        assert!(matches!(
            exported_versions(&dir.path().join("missing"), "f"),
            Err(SymbolError::Read { .. })
        ));
    }
}
