//! Endpoints of a training task and the throughput they were observed with.

use std::collections::HashSet;

use crate::Error;

/// One RNIC of a training task: the unit a pinglist pairs up.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Endpoint {
    /// RNIC id, unique within the task (the registry's id).
    pub id: u32,
    /// Host (container host) id; RNICs of one host share NVLink, so the
    /// network never carries their mutual traffic.
    pub host: u32,
    /// Rail index (the RNIC's rank on its host); inter-host traffic stays on
    /// its rail in rail-optimized fabrics.
    pub rail: u16,
}

/// An endpoint with its throughput series (bytes per sampling interval,
/// all series of a task covering the same intervals).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    /// The RNIC the series belongs to.
    pub endpoint: Endpoint,
    /// Bytes (tx + rx) per interval, oldest first.
    pub bytes: Vec<f64>,
}

/// Checks that a task has at least two endpoints with distinct ids.
pub fn validate_endpoints(endpoints: &[Endpoint]) -> Result<(), Error> {
    match endpoints {
        [] => return Err(Error::NoEndpoints),
        [only] => return Err(Error::SingleEndpoint(only.id)),
        _ => {}
    }
    let mut seen = HashSet::with_capacity(endpoints.len());
    for e in endpoints {
        if !seen.insert(e.id) {
            return Err(Error::DuplicateRnic(e.id));
        }
    }
    Ok(())
}

/// Checks endpoints and series: non-empty, finite, non-negative, equal lengths.
/// Returns the common series length.
pub fn validate_observations(observations: &[Observation]) -> Result<usize, Error> {
    let endpoints: Vec<Endpoint> = observations.iter().map(|o| o.endpoint).collect();
    validate_endpoints(&endpoints)?;
    let first = &observations[0];
    let expected = first.bytes.len();
    for o in observations {
        let rnic = o.endpoint.id;
        if o.bytes.is_empty() {
            return Err(Error::EmptySeries(rnic));
        }
        if o.bytes.len() != expected {
            return Err(Error::LengthMismatch {
                rnic,
                len: o.bytes.len(),
                first: first.endpoint.id,
                expected,
            });
        }
        if let Some((index, &value)) = o
            .bytes
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(Error::InvalidSample { rnic, index, value });
        }
    }
    Ok(expected)
}
