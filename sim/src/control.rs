//! What the simulated agents ask of the server and when, independent of how the requests
//! travel: registrations of new incarnations, pinglist polls at the interval the
//! controller hands out, uploads every upload period (hosts spread over the period, as
//! independently started agents are). [`crate::inproc`] sends them through the real
//! routers in this process, [`crate::http`] over HTTP.

use crate::sim::Sim;
use anyhow::{Context, bail};
use rocemesh_proto::api::{API_PREFIX, Pinglist, RegisterResponse};

/// `POST` path of registrations.
pub const REGISTER_PATH: &str = "/api/v1/agents/register";
/// `POST` path of result batches.
pub const RESULTS_PATH: &str = "/api/v1/results";

/// `GET` path of a host's pinglist, naming its agent's epoch.
pub fn pinglist_path(host_id: u32, epoch: u32) -> String {
    format!("{API_PREFIX}/pinglists/{host_id}?epoch={epoch}")
}

/// One request an agent makes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Register the host's current incarnation.
    Register(u32),
    /// Poll its pinglist.
    Poll(u32),
    /// Upload its results.
    Upload(u32),
}

/// How a pinglist poll ended.
#[derive(Debug)]
pub enum PollAnswer {
    /// A new list.
    Changed(Box<Pinglist>),
    /// 304: the list the agent has.
    Unchanged,
    /// 404/409: the controller does not know this incarnation.
    Reregister,
}

/// Reads the answer to a registration.
pub fn register_answer(status: u16, body: &[u8]) -> anyhow::Result<RegisterResponse> {
    if !(200..300).contains(&status) {
        bail!(
            "registration refused: HTTP {status}: {}",
            String::from_utf8_lossy(body).trim()
        );
    }
    serde_json::from_slice(body).context("bad registration reply")
}

/// Reads the answer to a pinglist poll.
pub fn poll_answer(status: u16, body: &[u8]) -> anyhow::Result<PollAnswer> {
    match status {
        200 => Ok(PollAnswer::Changed(Box::new(
            serde_json::from_slice(body).context("bad pinglist")?,
        ))),
        304 => Ok(PollAnswer::Unchanged),
        404 | 409 => Ok(PollAnswer::Reregister),
        _ => bail!(
            "pinglist poll failed: HTTP {status}: {}",
            String::from_utf8_lossy(body).trim()
        ),
    }
}

/// Per-host due times of polls and uploads.
#[derive(Debug)]
pub struct Schedule {
    upload_ms: Vec<i64>,
    poll_ms: Vec<i64>,
    next_upload: Vec<i64>,
    next_poll: Vec<i64>,
    /// Probe timeout of the latest pinglist (results are final this long after a probe).
    pub timeout_ms: u64,
}

impl Schedule {
    /// Nothing due for `hosts` hosts until they register.
    pub fn new(hosts: u32) -> Self {
        let n = hosts as usize;
        Self {
            upload_ms: vec![5_000; n],
            poll_ms: vec![30_000; n],
            next_upload: vec![i64::MAX; n],
            next_poll: vec![i64::MAX; n],
            timeout_ms: 500,
        }
    }

    /// Everything due at `now_ms`: registrations first, then polls, then uploads.
    pub fn due(&mut self, sim: &mut Sim, now_ms: i64) -> Vec<Action> {
        let mut out: Vec<Action> = sim
            .pending_registrations(now_ms)
            .into_iter()
            .map(Action::Register)
            .collect();
        for (h, next) in self.next_poll.iter_mut().enumerate() {
            if *next <= now_ms {
                *next = now_ms + self.poll_ms[h];
                out.push(Action::Poll(h as u32));
            }
        }
        for (h, next) in self.next_upload.iter_mut().enumerate() {
            if *next <= now_ms {
                *next +=
                    self.upload_ms[h].max(1) * ((now_ms - *next) / self.upload_ms[h].max(1) + 1);
                out.push(Action::Upload(h as u32));
            }
        }
        out
    }

    /// `host` registered at `now_ms`: poll at once, upload at its phase of the period.
    pub fn registered(
        &mut self,
        sim: &mut Sim,
        host: u32,
        resp: &RegisterResponse,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        sim.registered(host, resp)?;
        let h = host as usize;
        self.upload_ms[h] = (resp.upload_period_ms as i64).max(100);
        self.poll_ms[h] = (resp.pinglist_poll_ms as i64).max(100);
        self.next_poll[h] = now_ms;
        let phase = self.upload_ms[h] * i64::from(host) / i64::from(sim.hosts().max(1));
        self.next_upload[h] = now_ms + phase.max(1);
        Ok(())
    }

    /// Applies the answer to `host`'s poll at `now_ms`.
    pub fn polled(&mut self, sim: &mut Sim, host: u32, answer: PollAnswer, now_ms: i64) {
        match answer {
            PollAnswer::Changed(list) => {
                self.timeout_ms = list.timeout_ms;
                sim.apply_pinglist(host, &list, now_ms);
            }
            PollAnswer::Unchanged => {}
            PollAnswer::Reregister => sim.must_register(host),
        }
    }
}
