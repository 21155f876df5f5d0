//! Scale-out over one PostgreSQL: 2 controller and 2 analyzer processes, a simulated
//! 2,000-RNIC leaf-spine fabric driven over HTTP (rocemesh-sim), a link going down
//! localized once across shards, then the analyzer running the cross-shard tomography
//! killed (SIGKILL): its shards are taken over within one analysis period and the link
//! fault stays one active problem; then the leading controller is killed and the follower
//! the agents talk to takes the lead and answers their polls. Needs `ROCEMESH_TEST_PG_URL` (an admin URL allowed
//! to create databases); skipped with a note when it is unset.

mod support;

use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind};
use rocemesh_sim::http::HttpDriver;
use rocemesh_sim::{FaultSpec, Shape, Sim, SimConfig};
use rocemesh_store::Db;
use rocemesh_store::coord;
use sqlx::Connection;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Proc, bin, scratch_dir, spawn_listening, wait_for};

/// Shards of the deployment (analyzers and controllers agree).
const SHARDS: u32 = 16;
/// Analysis period: the takeover must happen within one.
const PERIOD_MS: u64 = 10_000;
/// The link the fault takes down.
const LINK: &str = "t3-s1";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Prints every process log of the test's directory when the test fails: what each
/// analyzer's scope was and when it found or resolved a problem.
struct LogsOnFailure(std::path::PathBuf);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(dir) = std::fs::read_dir(&self.0) else {
            return;
        };
        for path in dir.filter_map(Result::ok).map(|e| e.path()) {
            if path.extension().is_some_and(|x| x == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                eprintln!("===== {} =====\n{text}", path.display());
            }
        }
    }
}

/// Starts `rocemesh <role>` on a fresh port with scale-out on, logging scope changes and
/// problems to `<role>-<port>.log` in `dir`; returns it and its URL.
fn start(role: &str, dir: &std::path::Path, db: &str, map: &std::path::Path) -> (Proc, String) {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let scaleout = format!(
        "enabled = true\nadvertise_url = \"{url}\"\nshards = {SHARDS}\nlease = \"3s\"\nrenew = \"1s\"\n"
    );
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\ndatabase = \"{db}\"\n\
         [controller]\nupload_period = \"1s\"\npinglist_poll = \"5s\"\n\
         [controller.scaleout]\n{scaleout}\
         [analyzer]\nperiod = \"{PERIOD_MS}ms\"\ngrace = \"2s\"\nfabric_map = \"{}\"\n\
         [analyzer.scaleout]\n{scaleout}",
        map.display()
    );
    let path = dir.join(format!("{role}-{port}.toml"));
    std::fs::write(&path, config).expect("write config");
    let log = std::fs::File::create(dir.join(format!("{role}-{port}.log"))).expect("log file");
    let mut cmd = bin();
    cmd.env("RUST_LOG", "warn,rocemesh_analyzer=info")
        .stderr(log)
        .arg(role)
        .arg("--config")
        .arg(&path);
    let (p, _) = spawn_listening(cmd);
    (p, url)
}

/// A fresh database on the server of `admin_url`; returns its URL.
async fn create_database(admin_url: &str) -> String {
    let name = format!(
        "rm_scaleout_{}_{}",
        std::process::id(),
        rocemesh_proto::now_unix_ms() % 1_000_000_000
    );
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .expect("connect to ROCEMESH_TEST_PG_URL");
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create database");
    let (base, query) = admin_url.split_once('?').unwrap_or((admin_url, ""));
    let server = &base[..base
        .rfind('/')
        .filter(|&i| i > "postgres://".len())
        .unwrap_or(base.len())];
    if query.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{query}")
    }
}

/// Active link faults as analyzer `url` lists them (every instance lists them all).
fn active_link_faults(url: &str) -> Vec<Problem> {
    let all: Vec<Problem> =
        support::get_json(&format!("{url}/api/v1/problems?state=active&limit=10000"));
    all.into_iter()
        .filter(|p| p.kind == ProblemKind::LinkFault || p.component_kind == ComponentKind::Switch)
        .collect()
}

/// Who holds which shard now (by instance URL), and who runs the tomography.
async fn owners(db: &Db) -> (std::collections::HashMap<u32, String>, Option<String>) {
    let now = rocemesh_proto::now_unix_ms();
    let shards = coord::shard_owners(db, now).await.unwrap();
    let tomo = match coord::holder(db, "analyzer/tomography", now).await.unwrap() {
        Some(h) => coord::instance_url(db, &h).await.unwrap(),
        None => None,
    };
    (shards, tomo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_analyzers_two_controllers_one_fault_reported_once_across_a_failover() {
    let Ok(admin) = std::env::var("ROCEMESH_TEST_PG_URL") else {
        eprintln!("skipping scale-out test: ROCEMESH_TEST_PG_URL is not set (PostgreSQL needed)");
        return;
    };
    let db_url = create_database(&admin).await;
    let db = Db::connect(&db_url)
        .await
        .expect("migrate the test database");
    let shape = Shape::LeafSpine {
        tors: 25,
        spines: 4,
        hosts_per_tor: 10,
        rnics_per_host: 8,
    };
    let sim = Sim::new(SimConfig::new(shape, 5)).unwrap();
    let dir = scratch_dir("scaleout");
    let _logs = LogsOnFailure(dir.clone());
    let map = dir.join("map.toml");
    std::fs::write(&map, sim.fabric_map_toml().unwrap()).unwrap();

    let (mut leader_proc, c1) = start("controller", &dir, &db_url, &map);
    let mut analyzers = vec![
        start("analyzer", &dir, &db_url, &map),
        start("analyzer", &dir, &db_url, &map),
    ];
    // The first controller leads; the second forwards registrations and polls to it.
    wait_for("a controller leader", Duration::from_secs(10), || {
        futures_lite_block(coord::holder(
            &db,
            "controller/leader",
            rocemesh_proto::now_unix_ms(),
        ))
        .unwrap()
    });
    let (_c2, c2) = start("controller", &dir, &db_url, &map);
    let t0 = Instant::now();
    // Both analyzers hold their fair share (8 of 16 shards each).
    let split = loop {
        let (s, tomo) = owners(&db).await;
        let per: BTreeSet<usize> = analyzers
            .iter()
            .map(|(_, u)| s.values().filter(|o| *o == u).count())
            .collect();
        if let Some(tomo) =
            tomo.filter(|_| s.len() == SHARDS as usize && per == BTreeSet::from([8]))
        {
            break (s, tomo);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "shards never split: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "shards split after {:?}; tomography at {}",
        t0.elapsed(),
        split.1
    );
    assert_ne!(c1, c2);

    // The simulated agents talk to the non-leading controller only.
    let mut driver = HttpDriver::new(sim, &c2, None).unwrap();
    tokio::task::block_in_place(|| driver.register_all())
        .expect("register 2,000 RNICs via the follower");
    // The leader's view of the shard owners is at most one lease round old: agents
    // registered just before it caught up move on their next poll (x-rocemesh-analyzer).
    let hosts = driver.sim().hosts();
    let analyzers_used = |d: &HttpDriver| -> BTreeSet<String> {
        (0..hosts).map(|h| d.analyzer_of(h).to_string()).collect()
    };
    let both = BTreeSet::from([analyzers[0].1.clone(), analyzers[1].1.clone()]);
    let t_reg = Instant::now();
    while analyzers_used(&driver) != both {
        assert!(
            t_reg.elapsed() < Duration::from_secs(15),
            "agents go to both analyzers: {:?}",
            analyzers_used(&driver)
        );
        tokio::task::block_in_place(|| driver.run_for(Duration::from_millis(500))).unwrap();
    }
    let driver = Arc::new(Mutex::new(driver));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pump = {
        let (d, stop) = (driver.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                d.lock().unwrap().step(rocemesh_proto::now_unix_ms());
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (a1, a2) = (analyzers[0].1.clone(), analyzers[1].1.clone());
    assert!(
        active_link_faults(&a1).is_empty(),
        "fault-free start: {:?}",
        active_link_faults(&a1)
    );

    // A link down: seen by probers of many shards, reported once, by the tomography holder.
    let onset = rocemesh_proto::now_unix_ms();
    driver
        .lock()
        .unwrap()
        .sim_mut()
        .inject(
            FaultSpec::LinkDown {
                link: LINK.into(),
                at: None,
            },
            onset,
            None,
        )
        .unwrap();
    let first = wait_for("the link fault", Duration::from_secs(45), || {
        let f = active_link_faults(&a1);
        (!f.is_empty()).then_some(f)
    });
    eprintln!(
        "seen {} ms after the onset, listed after {} ms: {first:?}",
        first[0].first_seen_ms - onset,
        rocemesh_proto::now_unix_ms() - onset
    );
    assert_eq!(first.len(), 1, "exactly one fabric problem: {first:?}");
    assert_eq!(first[0].component, LINK);
    let id = first[0].id;
    assert_eq!(
        active_link_faults(&a2)
            .iter()
            .map(|p| p.id)
            .collect::<Vec<_>>(),
        vec![id],
        "both analyzers list it"
    );

    // Kill the analyzer running the tomography, as a crash would (no lease released).
    let victim = analyzers
        .iter()
        .position(|(_, u)| *u == split.1)
        .expect("tomography holder is an analyzer");
    let (mut dead, dead_url) = analyzers.remove(victim);
    let survivor = analyzers[0].1.clone();
    dead.kill();
    let killed = Instant::now();
    let takeover = loop {
        let (s, tomo) = owners(&db).await;
        if s.len() == SHARDS as usize
            && s.values().all(|u| *u == survivor)
            && tomo.as_deref() == Some(&survivor)
        {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no takeover: {s:?} {tomo:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("survivor holds every shard and the tomography {takeover:?} after the kill");
    assert!(
        takeover <= Duration::from_millis(PERIOD_MS),
        "takeover took {takeover:?}"
    );

    // Kill the leading controller too: the follower the agents talk to takes the lead,
    // reloads the registry and serves their polls itself.
    assert_eq!(leader_url(&db).await.as_deref(), Some(c1.as_str()));
    leader_proc.kill();
    let killed = Instant::now();
    while leader_url(&db).await.as_deref() != Some(c2.as_str()) {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the follower never took the lead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lead_taken = killed.elapsed();
    let polls_then = driver.lock().unwrap().stats().polls;
    eprintln!("follower controller leads {lead_taken:?} after the leader's kill");
    assert!(
        lead_taken <= Duration::from_millis(PERIOD_MS),
        "controller takeover took {lead_taken:?}"
    );

    // The agents of the dead analyzer move; the fault stays one problem, the same one.
    tokio::time::sleep(Duration::from_secs(15)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pump.join().unwrap();
    let d = driver.lock().unwrap();
    // 15 s at one poll per host per 5 s: every host polled the new leader at least once.
    let polls = d.stats().polls - polls_then;
    assert!(
        polls >= u64::from(hosts),
        "{polls} polls answered after the controller takeover ({:?})",
        d.last_error()
    );
    let moved: BTreeSet<&str> = (0..hosts).map(|h| d.analyzer_of(h)).collect();
    assert_eq!(
        moved,
        BTreeSet::from([survivor.as_str()]),
        "every agent uploads to the survivor"
    );
    let after = active_link_faults(&survivor);
    assert_eq!(
        after
            .iter()
            .map(|p| (p.id, p.component.as_str()))
            .collect::<Vec<_>>(),
        vec![(id, LINK)],
        "{after:?}"
    );
    let all: Vec<Problem> =
        support::get_json(&format!("{survivor}/api/v1/problems?state=all&limit=10000"));
    let episodes = all.iter().filter(|p| p.component == LINK).count();
    assert_eq!(
        episodes, 1,
        "one problem for the link, never filed twice: {all:?}"
    );
    let down: Vec<&Problem> = all
        .iter()
        .filter(|p| p.kind == ProblemKind::HostDown)
        .collect();
    assert!(
        down.is_empty(),
        "moving agents are not hosts down: {down:?}"
    );
    assert_ne!(dead_url, survivor);
}

/// URL of the controller holding the leader lease now.
async fn leader_url(db: &Db) -> Option<String> {
    let now = rocemesh_proto::now_unix_ms();
    let holder = coord::holder(db, "controller/leader", now).await.unwrap()?;
    coord::instance_url(db, &holder).await.unwrap()
}

/// Runs a future to completion from a synchronous closure inside the test runtime.
fn futures_lite_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}
