//! The per-tick summary one analyzer instance publishes for the others (through
//! [`coord::publish_summary`]): its agents' upload liveness and its loss observations, compacted
//! to one observation per distinct path with summed counts.

use crate::diagnosis::intake::Liveness;
use crate::diagnosis::tomography::FlowObs;
use rocemesh_store::{Db, coord};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What one instance tells the others each tick.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// Loss observations of its probers (tomography inputs).
    pub loss: Vec<FlowObs>,
    /// Upload liveness of its agents.
    pub hosts: Vec<(u32, Liveness)>,
}

/// Merges observations of identical paths (same failed and ok elements, same break):
/// counts add up, the first hop list stays as evidence. Tomography gives the same
/// result on the compacted list, which is orders of magnitude smaller (one entry per
/// path, not per flow).
pub(crate) fn compact(obs: Vec<FlowObs>) -> Vec<FlowObs> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<FlowObs> = Vec::new();
    for o in obs {
        let key = format!(
            "{:?}|{:?}|{}|{:?}|{}",
            o.fail_elems, o.ok_elems, o.located, o.break_device, o.untraced
        );
        match index.get(&key) {
            Some(&i) => {
                out[i].ok += o.ok;
                out[i].fail += o.fail;
                if out[i].text.is_empty() {
                    out[i].text = o.text;
                }
            }
            None => {
                index.insert(key, out.len());
                out.push(o);
            }
        }
    }
    out
}

/// Stores `summary` as instance `holder`'s newest, made at `tick_ms`.
pub(crate) async fn publish(
    db: &Db,
    holder: &str,
    tick_ms: i64,
    summary: &Summary,
) -> anyhow::Result<()> {
    coord::publish_summary(db, holder, tick_ms, &serde_json::to_string(summary)?).await
}

/// Another instance's summary as read back.
#[derive(Debug)]
pub(crate) struct Published {
    /// What it said.
    pub summary: Summary,
    /// When it was made.
    pub tick_ms: i64,
    /// Whether its maker held a shard lease when it was read: only then do its loss
    /// observations count (a dead instance's last ones are never merged twice with its
    /// successor's), while its liveness stays good evidence for moving agents.
    pub live: bool,
}

/// The summaries other than `me`'s made since `since_ms`, `live` as of `now_ms`; a
/// summary that does not parse is skipped with a warning.
pub(crate) async fn others(
    db: &Db,
    me: &str,
    since_ms: i64,
    now_ms: i64,
) -> anyhow::Result<Vec<Published>> {
    Ok(coord::summaries(db, me, since_ms, now_ms)
        .await?
        .into_iter()
        .filter_map(|s| match serde_json::from_str(&s.body) {
            Ok(summary) => Some(Published {
                summary,
                tick_ms: s.tick_ms,
                live: s.live,
            }),
            Err(e) => {
                tracing::warn!(holder = %s.holder, "flow summary skipped: {e}");
                None
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::paths::Element;

    fn obs(link: &str, ok: f64, fail: f64) -> FlowObs {
        FlowObs {
            ok,
            fail,
            ok_elems: vec![(Element::Link(link.into()), 1.0)],
            fail_elems: vec![(Element::Link(link.into()), 1.0)],
            ..FlowObs::default()
        }
    }

    #[test]
    fn identical_paths_merge_and_counts_add_up() {
        let c = compact(vec![
            obs("a", 3.0, 1.0),
            obs("b", 5.0, 0.0),
            obs("a", 2.0, 4.0),
        ]);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].ok, c[0].fail), (5.0, 5.0));
        assert_eq!((c[1].ok, c[1].fail), (5.0, 0.0));
    }
}
