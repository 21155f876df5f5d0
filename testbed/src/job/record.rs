//! What the ranks of a ring job ([`super::Collective::Ring`]) record of their own iterations:
//! when each all-reduce began and ended, by the rank's clock. It is the job's own truth of
//! which iterations were slow, as a training framework's step times are, for scoring what
//! the analyzer inferred from counters. One file per job and host, one line per rank and
//! iteration (`rank iteration start_unix_ms end_unix_ms`, about 30 bytes), appended with one
//! write each so ranks sharing a host never interleave.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::state::log_path;

/// One all-reduce of one rank of a ring job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RingIteration {
    /// Global rank.
    pub rank: usize,
    /// Iteration number, counted by the rank from 0.
    pub iteration: u64,
    /// Unix ms the rank finished computing and began the all-reduce.
    pub start_unix_ms: i64,
    /// Unix ms its last step completed.
    pub end_unix_ms: i64,
}

/// The record of job `job`'s ranks on host `host` of fabric `prefix`.
pub(crate) fn path(prefix: &str, job: &str, host: &str) -> PathBuf {
    log_path(prefix, &format!("job-{job}-{host}-iterations"))
}

/// Appends iterations to one host's record (shared by its ranks' threads).
#[derive(Debug)]
pub(crate) struct Recorder {
    file: File,
}

impl Recorder {
    /// Starts the record at `path` afresh.
    pub(crate) fn create(path: &Path) -> Result<Recorder> {
        File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Recorder { file })
    }

    /// Appends `it` in one write.
    pub(crate) fn record(&self, it: &RingIteration) -> Result<()> {
        let line = format!(
            "{} {} {} {}\n",
            it.rank, it.iteration, it.start_unix_ms, it.end_unix_ms
        );
        (&self.file)
            .write_all(line.as_bytes())
            .context("recording an iteration")
    }
}

/// Reads the record at `path`; a last line cut short (a rank killed mid-write) is dropped,
/// any other malformed line is an error.
pub(crate) fn read(path: &Path) -> Result<Vec<RingIteration>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .enumerate()
        .map(|(i, line)| {
            parse(line).with_context(|| format!("{} line {}: {line:?}", path.display(), i + 1))
        })
        .collect()
}

fn parse(line: &str) -> Result<RingIteration> {
    let f: Vec<&str> = line.split(' ').collect();
    let [rank, iteration, start, end] = f[..] else {
        bail!("expected `rank iteration start_unix_ms end_unix_ms`");
    };
    let it = RingIteration {
        rank: rank.parse().context("rank")?,
        iteration: iteration.parse().context("iteration")?,
        start_unix_ms: start.parse().context("start")?,
        end_unix_ms: end.parse().context("end")?,
    };
    if it.end_unix_ms < it.start_unix_ms {
        bail!("ends before it starts");
    }
    Ok(it)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_was_appended_and_drops_a_cut_last_line() {
        let p = std::env::temp_dir().join(format!("rmtb-record-{}", std::process::id()));
        let r = Recorder::create(&p).unwrap();
        let its: Vec<RingIteration> = (0..3)
            .map(|i| RingIteration {
                rank: i as usize % 2,
                iteration: i,
                start_unix_ms: 1_000 * i as i64,
                end_unix_ms: 1_000 * i as i64 + 380,
            })
            .collect();
        for it in &its {
            r.record(it).unwrap();
        }
        assert_eq!(read(&p).unwrap(), its);
        (&r.file).write_all(b"1 3 30").unwrap();
        assert_eq!(read(&p).unwrap(), its, "a cut last line is dropped");
        drop(r);
        // Created afresh: the old lines are gone.
        Recorder::create(&p).unwrap();
        assert!(read(&p).unwrap().is_empty());
        std::fs::write(&p, "0 1 2\n").unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("line 1"));
        std::fs::write(&p, "0 1 500 400\n").unwrap();
        assert!(format!("{:#}", read(&p).unwrap_err()).contains("ends before"));
        let _ = std::fs::remove_file(&p);
    }
}
