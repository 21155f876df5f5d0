//! Where the impact loop reads the paths flows take: the analyzer's traces and fabric map,
//! behind the one narrow view it needs.

use rocemesh_analyzer::Analyzer;
use rocemesh_analyzer::FabricMap;
use rocemesh_proto::path::TracedPath;
use std::sync::Arc;

/// Traced paths and the fabric map, as service networks need them.
pub trait PathSource: Send + Sync {
    /// The newest traced paths (each 5-tuple's latest and complete trace) of at most
    /// `limit` 5-tuples that `keep` accepts.
    fn traces(&self, keep: &dyn Fn(&TracedPath) -> bool, limit: usize) -> Vec<TracedPath>;
    /// The fabric map that names hop addresses and links.
    fn map(&self) -> &FabricMap;
}

impl PathSource for Analyzer {
    fn traces(&self, keep: &dyn Fn(&TracedPath) -> bool, limit: usize) -> Vec<TracedPath> {
        self.diagnosis()
            .traces(keep, limit)
            .into_iter()
            .flat_map(|t| std::iter::once(t.latest).chain(t.complete))
            .map(Arc::unwrap_or_clone)
            .collect()
    }

    fn map(&self) -> &FabricMap {
        self.diagnosis().map()
    }
}
