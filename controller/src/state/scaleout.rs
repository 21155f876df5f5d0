//! The controller state's side of scale-out ([`crate::leader`]): the lease loop, the
//! registry reload of a new leader, and which analyzer each agent is told to use.

use super::ControllerState;
use crate::leader::Round;
use crate::registry::{self, Registry};
use crate::tasks::TaskBook;
use rocemesh_proto::api::RnicInfo;
use tokio_util::sync::CancellationToken;

impl ControllerState {
    /// Runs the scale-out rounds until `cancel` (returns at once when scale-out is off),
    /// then leaves (the leader lease goes at once).
    pub async fn run_scaleout_loop(self, cancel: CancellationToken) {
        let Some(l) = &self.inner.leadership else {
            return;
        };
        loop {
            match l.round(&self.inner.db, rocemesh_proto::now_unix_ms()).await {
                Ok(Round::BecameLeader) => {
                    if let Err(e) = self.reload().await {
                        tracing::warn!("new leader cannot reload the registry: {e:#}");
                    }
                }
                Ok(Round::Steady) => {}
                Err(e) => tracing::warn!("controller lease round failed: {e:#}"),
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(l.renew_every()) => {}
            }
        }
        if let Err(e) = l.leave(&self.inner.db).await {
            tracing::warn!("leaving the controller lease failed: {e:#}");
        }
    }

    /// Re-reads hosts, RNICs and tasks from the database (registrations the previous
    /// leader made); whatever was derived from the old registry is rebuilt.
    async fn reload(&self) -> anyhow::Result<()> {
        let _writer = self.inner.writer.lock().await;
        let (hosts, rnics) = {
            let topology = self.topology_read().clone();
            registry::load(&self.inner.db, &topology).await?
        };
        let tasks = crate::tasks::load(&self.inner.db).await?;
        let mut reg = self.write();
        let old = reg.generation();
        *reg = Registry::from_records(hosts, rnics).after(old);
        *self.inner.tasks.write().unwrap_or_else(|p| p.into_inner()) =
            TaskBook::from_records(tasks);
        tracing::info!(
            rnics = reg.rnics().count(),
            "registry reloaded by the new leader"
        );
        Ok(())
    }

    /// The leader's URL when scale-out is on and another instance leads: registrations
    /// and pinglist polls go there.
    pub(crate) fn forward_to(&self) -> Option<String> {
        self.inner
            .leadership
            .as_ref()
            .and_then(|l| l.forward_to(rocemesh_proto::now_unix_ms()))
    }

    /// The analyzer owning the shard of the home ToR (the ToR of its lowest-id RNIC) of
    /// a host with `rnics`, under scale-out.
    pub(crate) fn home_analyzer(&self, rnics: &[RnicInfo]) -> Option<String> {
        let l = self.inner.leadership.as_ref()?;
        l.analyzer_for(&rnics.iter().min_by_key(|r| r.id)?.tor)
    }

    /// [`Self::home_analyzer`] of a registered host.
    pub(crate) fn analyzer_of_host(&self, host_id: u32) -> Option<String> {
        let l = self.inner.leadership.as_ref()?;
        let reg = self.read();
        let home = reg
            .rnics()
            .filter(|r| r.host_id == host_id)
            .min_by_key(|r| r.id)?;
        l.analyzer_for(&home.tor)
    }
}
