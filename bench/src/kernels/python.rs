//! The Python reference stack: a venv under `target/bench-venv` with the pinned
//! numpy / scipy / scikit-learn of `bench/python/requirements.txt` from PyPI, made on
//! first use (and again when the pins change), and the script that runs the references.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The bench crate's directory (holds `python/`); its parent is the repository.
const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The venv's Python, creating or refreshing the venv when its recorded pins differ.
pub(super) fn venv_python() -> Result<PathBuf> {
    let crate_dir = Path::new(CRATE_DIR);
    let requirements = crate_dir.join("python/requirements.txt");
    let pins = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let venv = crate_dir.join("../target/bench-venv");
    let marker = venv.join(".requirements");
    let python = venv.join("bin/python");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(pins.as_str()) && python.exists() {
        return Ok(python);
    }
    eprintln!(
        "kernels: installing {} into {}",
        pins.split_whitespace().collect::<Vec<_>>().join(" "),
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv (Debian: apt-get install python3-venv)",
    )?;
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
        "pip install of the pinned numpy/scipy/scikit-learn from PyPI",
    )?;
    std::fs::write(&marker, pins).context("recording the venv's pins")?;
    Ok(python)
}

/// Runs `bench/python/kernels.py` on the inputs and manifest in `dir`; it leaves its
/// results and timings there. One thread for OpenMP / BLAS, like the Rust kernels: a
/// per-core comparison, and on a busy machine scikit-learn's OpenMP pool otherwise
/// spins tens of milliseconds per tiny `kneighbors` call.
pub(super) fn run_reference(python: &Path, dir: &Path) -> Result<()> {
    let script = Path::new(CRATE_DIR).join("python/kernels.py");
    let mut command = Command::new(python);
    for var in ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"] {
        command.env(var, "1");
    }
    run(
        command.arg(script).arg(dir),
        "the Python reference kernels (bench/python/kernels.py)",
    )
}

/// Runs `command`, failing with `what` and the exit status when it does not succeed.
fn run(command: &mut Command, what: &str) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!(
            "{what} failed ({status}); the kernels section needs it and reports no numbers without it"
        );
    }
    Ok(())
}
