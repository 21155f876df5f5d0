//! End-to-end inference: validate, extract features, group, order stages,
//! check fidelity, and produce the pinglist.

use crate::{
    Endpoint, Error, Observation,
    endpoint::validate_observations,
    features::{self, FeatureConfig},
    fidelity::{self, FallbackReason, FidelityConfig},
    grouping::{self, GroupingConfig},
    pairs::{Pair, basic_pairs, full_mesh_len},
    skeleton::{Structure, skeleton_pairs},
    stages::{self, StageConfig, circular_mean},
};

/// All tunables of the inference.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InferenceConfig {
    /// STFT parameters.
    pub features: FeatureConfig,
    /// Clustering parameters.
    pub grouping: GroupingConfig,
    /// Stage split parameters.
    pub stages: StageConfig,
    /// Fidelity thresholds.
    pub fidelity: FidelityConfig,
}

impl InferenceConfig {
    /// Checks the thresholds and weights (the STFT parameters are checked
    /// against the series length in [`features::extract`]): all finite, the
    /// ones used as divisors or floors strictly positive.
    pub fn validate(&self) -> Result<(), Error> {
        let g = &self.grouping;
        let s = &self.stages;
        let f = &self.fidelity;
        let positive = [
            g.noise_floor,
            g.unrelated_distance,
            s.phase_floor,
            s.phase_gap,
        ];
        let non_negative = [
            g.phase_weight,
            f.min_periodicity,
            f.min_coherence,
            f.min_separation,
            f.min_stage_separation,
        ];
        let finite_ok = f.min_member_correlation.is_finite();
        if positive.iter().all(|v| v.is_finite() && *v > 0.0)
            && non_negative.iter().all(|v| v.is_finite() && *v >= 0.0)
            && finite_ok
        {
            Ok(())
        } else {
            Err(Error::InvalidParameter(
                "inference weights and thresholds must be finite; floors and gaps > 0, others >= 0"
                    .into(),
            ))
        }
    }
}

/// What the task should be probed with.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The structure explains the traffic: probe only the skeleton.
    Skeleton {
        /// The inferred structure.
        structure: Structure,
        /// Its pairs ([`skeleton_pairs`]).
        pairs: Vec<Pair>,
    },
    /// Keep the basic pinglist, for this reason.
    Fallback {
        /// Why the skeleton was not used.
        reason: FallbackReason,
    },
}

/// Result of inference for one task.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Inference {
    /// Same-rail basic pinglist (always computed; the fallback).
    pub basic: Vec<Pair>,
    /// Size of the full mesh, for reduction figures.
    pub full_mesh_len: usize,
    /// Skeleton or fallback.
    pub outcome: Outcome,
}

impl Inference {
    /// The pairs to probe: the skeleton if accepted, else the basic list.
    pub fn pinglist(&self) -> &[Pair] {
        match &self.outcome {
            Outcome::Skeleton { pairs, .. } => pairs,
            Outcome::Fallback { .. } => &self.basic,
        }
    }

    /// The accepted structure, if any.
    pub fn structure(&self) -> Option<&Structure> {
        match &self.outcome {
            Outcome::Skeleton { structure, .. } => Some(structure),
            Outcome::Fallback { .. } => None,
        }
    }
}

/// Infers a task's traffic skeleton from its RNICs' throughput series.
/// Errors only for unusable input (see [`Error`]); a task without visible
/// training structure gets [`Outcome::Fallback`].
pub fn infer(observations: &[Observation], config: &InferenceConfig) -> Result<Inference, Error> {
    config.validate()?;
    validate_observations(observations)?;
    let endpoints: Vec<Endpoint> = observations.iter().map(|o| o.endpoint).collect();
    grouping::check_size(&endpoints)?;
    let basic = basic_pairs(&endpoints)?;
    let feats = features::extract(observations, &config.features)?;
    let outcome = match structure(observations, &endpoints, &feats, config) {
        Ok(structure) => {
            let pairs = skeleton_pairs(&endpoints, &structure)?;
            Outcome::Skeleton { structure, pairs }
        }
        Err(reason) => Outcome::Fallback { reason },
    };
    Ok(Inference {
        basic,
        full_mesh_len: full_mesh_len(endpoints.len()),
        outcome,
    })
}

fn structure(
    observations: &[Observation],
    endpoints: &[Endpoint],
    feats: &features::TaskFeatures,
    config: &InferenceConfig,
) -> Result<Structure, FallbackReason> {
    fidelity::check_features(feats, &config.fidelity)?;
    let grouping = grouping::group(endpoints, feats, &config.grouping)?;
    fidelity::check_grouping(&grouping, observations, &config.fidelity)?;
    let harmonics = feats.rnics.first().map_or(0, |r| r.phases.len());
    let phases: Vec<Vec<f64>> = grouping
        .groups
        .iter()
        .map(|g| {
            (0..harmonics)
                .map(|h| circular_mean(g.iter().map(|&i| feats.rnics[i].phases[h])))
                .collect()
        })
        .collect();
    let stages = stages::split(&phases, &config.stages);
    fidelity::check_stages(&stages, &config.fidelity)?;
    let positions = grouping.groups.len();
    Ok(Structure {
        groups: grouping
            .groups
            .iter()
            .map(|g| {
                let mut ids: Vec<u32> = g.iter().map(|&i| endpoints[i].id).collect();
                ids.sort_unstable();
                ids
            })
            .collect(),
        stage_of_group: stages.of_group,
        dp: grouping.dp,
        tp: positions / stages.count.max(1),
        pp: stages.count,
        period_samples: feats.period_samples,
        separation: grouping.separation,
    })
}
