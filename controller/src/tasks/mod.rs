//! Training tasks (SkeletonHunter §5.1): the in-memory book of tasks mirroring the database,
//! and their pinglist lifecycle. Preload: the same-rail basic list is known as soon as a task
//! is submitted; a pair is probed only once both its endpoints registered themselves ready
//! (incremental activation); at runtime the inferred traffic skeleton replaces the basic
//! list when it passes the fidelity check.

mod db;
pub(crate) mod inference;
pub(crate) mod resolve;
pub(crate) mod service;
pub(crate) mod validate;

use resolve::{Derived, Pair};
use rocemesh_proto::api::{SkeletonInfo, TaskEndpoint, TaskInfo, TaskPhase};
use std::collections::{BTreeMap, HashMap};

pub(crate) use db::load;

/// Pinglist state of a task beyond its spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Runtime {
    /// Basic list, no inference accepted yet.
    Preload,
    /// The skeleton drives the list; `pairs` are endpoint-index pairs.
    Skeleton {
        info: SkeletonInfo,
        pairs: Vec<Pair>,
    },
    /// The skeleton failed the fidelity check (reason in `info`): the basic list stays.
    Fallback { info: SkeletonInfo },
}

impl Runtime {
    pub(crate) fn phase(&self) -> TaskPhase {
        match self {
            Self::Preload => TaskPhase::Preload,
            Self::Skeleton { .. } => TaskPhase::Skeleton,
            Self::Fallback { .. } => TaskPhase::BasicFallback,
        }
    }

    fn info(&self) -> Option<&SkeletonInfo> {
        match self {
            Self::Preload => None,
            Self::Skeleton { info, .. } | Self::Fallback { info } => Some(info),
        }
    }
}

/// A task as recorded.
#[derive(Debug, Clone)]
pub(crate) struct TaskRecord {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) endpoints: Vec<TaskEndpoint>,
    /// Changes whenever the endpoints are replaced, so an inference started on the old
    /// endpoints is not applied to the new ones.
    pub(crate) spec_version: u64,
    pub(crate) runtime: Runtime,
}

/// Tasks by id, with a name index and a change counter for derived data.
#[derive(Debug, Default)]
pub(crate) struct TaskBook {
    tasks: BTreeMap<u32, TaskRecord>,
    by_name: HashMap<String, u32>,
    generation: u64,
}

impl TaskBook {
    /// Builds the book from loaded tasks (all in preload: skeletons are not persisted).
    pub(crate) fn from_records(tasks: Vec<TaskRecord>) -> Self {
        let mut book = Self::default();
        for t in tasks {
            book.insert(t);
        }
        book
    }

    /// Change counter: bumped by every change that can alter a pinglist or a `TaskInfo`.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// All tasks by id.
    pub(crate) fn tasks(&self) -> impl Iterator<Item = &TaskRecord> {
        self.tasks.values()
    }

    /// One task.
    pub(crate) fn get(&self, id: u32) -> Option<&TaskRecord> {
        self.tasks.get(&id)
    }

    /// The id of the task with this name.
    pub(crate) fn id_by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// Adds (or overwrites) a task the database holds.
    pub(crate) fn insert(&mut self, task: TaskRecord) {
        if let Some(old) = self.tasks.get(&task.id) {
            self.by_name.remove(&old.name);
        }
        self.by_name.insert(task.name.clone(), task.id);
        self.tasks.insert(task.id, task);
        self.generation += 1;
    }

    /// Replaces a task's name and endpoints: back to preload with a new spec version.
    pub(crate) fn replace(&mut self, id: u32, name: String, endpoints: Vec<TaskEndpoint>) {
        if let Some(old) = self.tasks.get(&id) {
            let task = TaskRecord {
                id,
                name,
                endpoints,
                spec_version: old.spec_version + 1,
                runtime: Runtime::Preload,
            };
            self.insert(task);
        }
    }

    /// Marks endpoint `index` ready or not ready.
    pub(crate) fn set_ready(&mut self, id: u32, index: usize, ready: bool) {
        if let Some(e) = self
            .tasks
            .get_mut(&id)
            .and_then(|t| t.endpoints.get_mut(index))
        {
            e.ready = ready;
            self.generation += 1;
        }
    }

    /// Forgets a task.
    pub(crate) fn remove(&mut self, id: u32) {
        if let Some(t) = self.tasks.remove(&id) {
            self.by_name.remove(&t.name);
            self.generation += 1;
        }
    }

    /// Applies an inference result if the task still has the endpoints it was run on.
    pub(crate) fn set_runtime(&mut self, id: u32, spec_version: u64, runtime: Runtime) -> bool {
        match self.tasks.get_mut(&id) {
            Some(t) if t.spec_version == spec_version => {
                if t.runtime != runtime {
                    t.runtime = runtime;
                    self.generation += 1;
                }
                true
            }
            _ => false,
        }
    }
}

/// The API view of a task, with pair counts from the derived data.
pub(crate) fn task_info(task: &TaskRecord, derived: &Derived) -> TaskInfo {
    let d = derived.task(task.id);
    let rnic_of = |i: usize| d.and_then(|d| d.resolved.rnic.get(i).copied().flatten());
    TaskInfo {
        id: task.id,
        name: task.name.clone(),
        endpoints: task
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (e.clone(), rnic_of(i)))
            .collect(),
        phase: task.runtime.phase(),
        full_mesh_pairs: rocemesh_skeleton::full_mesh_len(task.endpoints.len()),
        basic_pairs: d.map_or(0, |d| d.resolved.basic.len()),
        active_pairs: d.map_or(0, |d| d.active.len()),
        skeleton: task.runtime.info().cloned(),
    }
}
