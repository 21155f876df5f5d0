//! The facts of watched objects by namespace/name, kept from a kube-runtime watcher's
//! events: a re-list (after a watch expired with 410 Gone, or a reconnect) replaces the
//! whole set at once when it completes, so objects deleted meanwhile go and none doubles.

use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// Facts by `namespace/name` (`name` for cluster objects).
#[derive(Debug)]
pub(crate) struct Mirror<F> {
    live: BTreeMap<String, F>,
    /// The list under way since the last `Init`.
    listing: Option<BTreeMap<String, F>>,
    /// A first list completed: `live` is the cluster's state, not a prefix of it.
    synced: bool,
}

impl<F> Default for Mirror<F> {
    fn default() -> Self {
        Self {
            live: BTreeMap::new(),
            listing: None,
            synced: false,
        }
    }
}

fn key<K: Resource>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

impl<F> Mirror<F> {
    /// Applies one event; `extract` gives the facts of an object (`None`: not of
    /// interest). Returns whether `live` may have changed.
    pub(crate) fn apply<K: Resource>(
        &mut self,
        event: Event<K>,
        extract: impl Fn(&K) -> Option<F>,
    ) -> bool {
        match event {
            Event::Apply(obj) => {
                match extract(&obj) {
                    Some(f) => self.live.insert(key(&obj), f),
                    None => self.live.remove(&key(&obj)),
                };
                true
            }
            Event::Delete(obj) => self.live.remove(&key(&obj)).is_some(),
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Event::InitApply(obj) => {
                if let (Some(listing), Some(f)) = (self.listing.as_mut(), extract(&obj)) {
                    listing.insert(key(&obj), f);
                }
                false
            }
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.live = listing;
                }
                self.synced = true;
                true
            }
        }
    }

    /// A first list completed.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// Replaces the facts of an object already mirrored (a write's answer, ahead of its
    /// watch event).
    pub(crate) fn set(&mut self, key: &str, facts: F) {
        if let Some(f) = self.live.get_mut(key) {
            *f = facts;
        }
    }

    /// The facts by key.
    pub(crate) fn live(&self) -> &BTreeMap<String, F> {
        &self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_relist_replaces_the_set_only_when_complete() {
        let mut m = Mirror::default();
        let name = |c: &ConfigMap| c.metadata.name.clone();
        m.apply(Event::Init, name);
        m.apply(Event::InitApply(cm("a")), name);
        assert!(!m.synced());
        m.apply(Event::InitDone, name);
        m.apply(Event::Apply(cm("b")), name);
        assert_eq!(m.live().keys().collect::<Vec<_>>(), ["ns/a", "ns/b"]);
        // Re-list after an expired watch: "a" was deleted meanwhile, "c" created.
        m.apply(Event::Init, name);
        m.apply(Event::InitApply(cm("b")), name);
        assert_eq!(
            m.live().len(),
            2,
            "the old set stays until the list completes"
        );
        m.apply(Event::InitApply(cm("c")), name);
        m.apply(Event::InitDone, name);
        assert_eq!(m.live().keys().collect::<Vec<_>>(), ["ns/b", "ns/c"]);
        m.apply(Event::Delete(cm("b")), name);
        assert_eq!(m.live().keys().collect::<Vec<_>>(), ["ns/c"]);
        // An object that stops being of interest leaves.
        m.apply(Event::Apply(cm("c")), |_: &ConfigMap| None::<String>);
        assert!(m.live().is_empty());
    }
}
