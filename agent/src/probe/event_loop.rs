//! The thread driving RNIC engines. Transports that expose a pollable fd (UDP) share one
//! thread and one epoll: timer work is done on a tick (probes due within a tick go out in
//! one wake-up; kernel TX/RX stamps make that harmless to accuracy), and what the RNICs
//! of one host send each other is handled in the same wake-up. A transport that can only
//! block in its own `wait` (verbs) gets a thread of its own.

use super::engine::{EngineHandle, EngineIdentity, build};
use crate::stats::Counters;
use crate::sys::{self, Epoll};
use crate::transport::Transport;
use crate::upload::buffer::ResultBuffer;
use std::io;
use std::os::fd::RawFd;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Grid of the timer wake-ups of a shared loop (10 ms: 3.5 % of a core in the load
/// example against 4 % at 5 ms; 20 ms gains nothing measurable). Below the schedule's
/// catch-up window, so no probe slot is skipped.
pub(crate) const TICK: Duration = Duration::from_millis(10);
/// Timer slack of loop threads: how late the kernel may wake us to batch wake-ups.
const TIMER_SLACK_NS: u64 = 2_000_000;
/// epoll events fetched per wait.
const MAX_READY: usize = 64;

/// What a loop needs from an engine (object-safe, so engines of any transport mix).
pub(super) trait Driven: Send {
    /// The engine's handle asked it to stop.
    fn stopped(&self) -> bool;
    /// Timer work at `now`.
    fn on_wake(&mut self, now: Instant);
    /// Handles the events its transport has, without blocking.
    fn drain(&mut self);
    /// Blocks in the transport up to `timeout` (zero: only fetches what is ready).
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;
    /// Its transport's [`Self::wait_fd`] reported `events` (0: poll it anyway).
    fn ready(&mut self, events: u32) -> io::Result<()>;
    /// Its transport must be polled soon even without events.
    fn needs_poll(&self) -> bool;
    /// When it next has timer work.
    fn next_wake(&self, now: Instant) -> Instant;
    /// Its transport's pollable fd, if any.
    fn wait_fd(&self) -> Option<RawFd>;
    /// Hands pending results to the shared buffer.
    fn flush(&mut self);
}

/// The join handle of a loop thread, shared by the handles of its engines.
#[derive(Debug, Default)]
pub(crate) struct LoopThread(Mutex<Option<JoinHandle<()>>>);

impl LoopThread {
    /// Joins the thread (once); a panic is an error.
    pub(crate) fn join(self) -> anyhow::Result<()> {
        match self.0.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("engine thread panicked")),
            None => Ok(()),
        }
    }
}

/// An engine on a loop, with the sender telling its handle it is gone.
struct Slot {
    engine: Box<dyn Driven>,
    done: SyncSender<()>,
    /// epoll key (unique per loop).
    key: u64,
}

/// Engines gathered before their thread starts.
pub struct EventLoop {
    name: String,
    slots: Vec<Slot>,
    thread: Arc<LoopThread>,
}

impl EventLoop {
    /// An empty loop whose thread will be called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            slots: Vec::new(),
            thread: Arc::new(LoopThread::default()),
        }
    }

    /// Adds an engine over `transport`; it runs once [`Self::spawn`] is called.
    pub fn add<T: Transport + 'static>(
        &mut self,
        id: EngineIdentity,
        transport: T,
        counters: Arc<Counters>,
        results: Arc<ResultBuffer>,
    ) -> EngineHandle {
        let (engine, handle, done) = build(id, transport, counters, results, self.thread.clone());
        let key = self.slots.len() as u64;
        self.slots.push(Slot { engine, done, key });
        handle
    }

    /// Engines added so far.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no engine was added.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Starts the thread. Several engines need pollable transports (a clear error otherwise).
    pub fn spawn(self) -> io::Result<()> {
        let shared = self.slots.iter().all(|s| s.engine.wait_fd().is_some());
        let run: Box<dyn FnOnce() + Send> = match (shared, self.slots.len()) {
            (true, _) => {
                let epoll = new_epoll(&self.slots)?;
                let slots = self.slots;
                Box::new(move || run_shared(slots, &epoll))
            }
            (false, 1) => {
                let slots = self.slots;
                Box::new(move || run_alone(slots))
            }
            (false, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "engines sharing a loop need pollable transports",
                ));
            }
        };
        let t = std::thread::Builder::new().name(self.name).spawn(move || {
            // Send times need no µs precision (② comes from the kernel): let the kernel
            // coalesce our timer wake-ups with others'.
            sys::set_timer_slack(TIMER_SLACK_NS);
            run();
        })?;
        *self.thread.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(())
    }
}

fn new_epoll(slots: &[Slot]) -> io::Result<Epoll> {
    let epoll = Epoll::new()?;
    for s in slots {
        if let Some(fd) = s.engine.wait_fd() {
            epoll.add(fd, s.key)?;
        }
    }
    Ok(epoll)
}

/// Flushes and drops the engines whose handle asked them to stop (or whose transport
/// failed), telling their handles.
fn retire(slots: &mut Vec<Slot>, failed: &[u64]) {
    slots.retain_mut(|s| {
        if !s.engine.stopped() && !failed.contains(&s.key) {
            return true;
        }
        s.engine.flush();
        let _ = s.done.try_send(());
        false
    });
}

/// The next point of the tick grid at or after `t`.
fn on_tick(origin: Instant, t: Instant) -> Instant {
    let tick = TICK.as_nanos();
    let since = t.saturating_duration_since(origin).as_nanos();
    let ticks = since.div_ceil(tick);
    origin + Duration::from_nanos((ticks * tick).min(u64::MAX as u128) as u64)
}

fn run_shared(mut slots: Vec<Slot>, epoll: &Epoll) {
    let origin = Instant::now();
    let mut ready = [libc::epoll_event { events: 0, u64: 0 }; MAX_READY];
    let mut n = 0usize;
    let mut failed = Vec::new();
    loop {
        retire(&mut slots, &failed);
        failed.clear();
        if slots.is_empty() {
            return;
        }
        // Transports that became ready (what our own RNICs just sent each other included),
        // and those with something to poll for.
        for s in &mut slots {
            let events = ready[..n]
                .iter()
                .find(|ev| ev.u64 == s.key)
                .map(|ev| ev.events);
            if events.is_none() && !s.engine.needs_poll() {
                continue;
            }
            match s.engine.ready(events.unwrap_or(0)) {
                Ok(()) => s.engine.drain(),
                Err(e) => {
                    tracing::error!(error = %e, "transport failed; engine stops");
                    failed.push(s.key);
                }
            }
        }
        let now = Instant::now();
        for s in &mut slots {
            s.engine.on_wake(now);
            // Sends may have queued their TX stamps already.
            s.engine.drain();
            s.engine.flush();
        }
        let now = Instant::now();
        let next = slots
            .iter()
            .map(|s| s.engine.next_wake(now))
            .min()
            .unwrap_or(now);
        let timeout = on_tick(origin, next).saturating_duration_since(now);
        n = match epoll.wait(&mut ready, timeout) {
            Ok(n) => n,
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "epoll_wait failed; engines stop");
                    failed.extend(slots.iter().map(|s| s.key));
                }
                0
            }
        };
    }
}

/// One engine whose transport blocks in its own `wait`.
fn run_alone(mut slots: Vec<Slot>) {
    let mut failed = Vec::new();
    loop {
        retire(&mut slots, &failed);
        let Some(s) = slots.first_mut() else {
            return;
        };
        let now = Instant::now();
        s.engine.on_wake(now);
        s.engine.flush();
        let now = Instant::now();
        let timeout = s.engine.next_wake(now).saturating_duration_since(now);
        match s.engine.wait(timeout) {
            Ok(()) => s.engine.drain(),
            Err(e) => {
                tracing::error!(error = %e, "transport wait failed; engine stops");
                failed.push(s.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_fall_on_the_tick_grid() {
        let o = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(on_tick(o, o), o);
        assert_eq!(on_tick(o, o + ms(1)), o + TICK);
        assert_eq!(on_tick(o, o + TICK), o + TICK);
        assert_eq!(on_tick(o, o + TICK + ms(1)), o + 2 * TICK);
        // Before the origin (cannot happen, but never panics): the origin.
        assert_eq!(on_tick(o + ms(3), o), o + ms(3));
    }
}
