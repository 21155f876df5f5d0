//! Database access shared by the components: one sqlx pool over SQLite or PostgreSQL,
//! with the embedded migrations of the chosen dialect already applied.
//!
//! Every table several components use has one typed repository here, the only code with
//! SQL for it: [`Problems`] (`db.problems()`), [`Inventory`] (hosts, RNICs, tasks), [`Sla`]
//! (SLA periods), [`TaskPairs`] (probe outcomes of task RNIC pairs per period) and
//! [`coord`] (instances, leases, flow summaries). A table only one component uses stays
//! with that component. `tests/sql_ownership.rs` holds the map and fails on SQL naming a
//! table outside its owner.
//!
//! Queries go through `sqlx::Any`, so they use `$1, $2` placeholders and only the types
//! Any supports (integers, f64, bool, text, bytes): times are `i64` unix ms, ids `i64`.

pub mod coord;
mod repo;
mod unavailable;
mod url;

#[cfg(feature = "testing")]
mod testing;
#[cfg(feature = "testing")]
pub use testing::test_databases;

use anyhow::Context;
use sqlx::any::AnyPoolOptions;
use std::time::Duration;

pub use repo::inventory::{
    EndpointLabelRow, EndpointRow, HostRecord, Inventory, RegisteredRnic, RegistrationPlan,
    RnicRecord, StoredTask, TaskMember,
};
pub use repo::problems::{ActiveCount, AssessInput, Assessment, Problems, StateFilter};
pub use repo::sla::{Sla, SlaFilter};
pub use repo::task_pairs::{CellFilter, TaskPairCell, TaskPairRow, TaskPairs};
pub use unavailable::is_unavailable;
pub use url::redact_url;

/// Pool size: the controller and analyzer do short transactions; more buys nothing.
const MAX_CONNECTIONS: u32 = 8;
/// How long a request may wait for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which database engine a [`Db`] talks to, for the few queries whose SQL differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file (the zero-setup default).
    Sqlite,
    /// A PostgreSQL server (production).
    Postgres,
}

/// A migrated connection pool; cheap to clone (the pool is reference-counted).
#[derive(Clone)]
pub struct Db {
    pool: sqlx::AnyPool,
    backend: Backend,
    /// Keeps a test database's temporary directory alive as long as any clone of the pool.
    #[cfg(feature = "testing")]
    _temp_dir: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Makes the SQLite file (and its `-wal` and `-shm` companions, which SQLite creates with
/// the file's mode) readable and writable by the owner only.
fn restrict_sqlite_files(sqlx_url: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use std::str::FromStr;
    let opts = sqlx::sqlite::SqliteConnectOptions::from_str(sqlx_url)?;
    let file = opts.get_filename();
    for suffix in ["", "-wal", "-shm"] {
        let mut path = file.as_os_str().to_owned();
        path.push(suffix);
        let path = std::path::Path::new(&path);
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            // In-memory databases and companions not created yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

impl Db {
    /// Opens (and for SQLite creates) the database at `url` and brings its schema up to
    /// date. Accepts `sqlite://path`, `sqlite:path`, a bare file path (SQLite) and
    /// `postgres://` / `postgresql://` URLs. Errors name the URL without its password.
    pub async fn connect(url: &str) -> anyhow::Result<Db> {
        let target = url::parse(url)?;
        let shown = redact_url(url);
        sqlx::any::install_default_drivers();
        let backend = target.backend;
        // sqlx's SQLite driver already gives every connection a 5 s busy timeout and
        // `foreign_keys = ON` (RNIC rows cascade with their host); the tests pin both.
        let sqlite = backend == Backend::Sqlite;
        let pool = AnyPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // In WAL mode, NORMAL syncs the log at checkpoints instead of every commit: the
            // database stays consistent, and a power cut may lose only the last commits
            // (what any agent re-sends or the next tick rewrites). FULL made every
            // registration wait for an fsync, which bounded a registration storm.
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        sqlx::Executor::execute(conn, "PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect(&target.sqlx_url)
            .await
            .with_context(|| format!("cannot open database {shown}"))?;
        if backend == Backend::Sqlite {
            // Probe keys and webhook secrets live here: owner only, before any is written.
            restrict_sqlite_files(&target.sqlx_url)
                .with_context(|| format!("cannot restrict the permissions of {shown}"))?;
            // WAL is a property of the file: set once, every later connection sees it.
            sqlx::raw_sql("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await
                .with_context(|| format!("cannot switch {shown} to WAL mode"))?;
        }
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATOR,
            Backend::Postgres => &POSTGRES_MIGRATOR,
        };
        migrator
            .run(&pool)
            .await
            .with_context(|| format!("cannot migrate database {shown}"))?;
        tracing::info!(database = %shown, ?backend, "database ready");
        Ok(Db {
            pool,
            backend,
            #[cfg(feature = "testing")]
            _temp_dir: None,
        })
    }

    /// The pool, for running queries.
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.pool
    }

    /// The engine behind the pool.
    pub fn backend(&self) -> Backend {
        self.backend
    }
}
