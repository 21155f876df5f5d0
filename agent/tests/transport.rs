//! Transport choice at start on this machine (no RDMA device): `verbs` refuses to start
//! with the verbs crate's message, `auto` falls back to udp and says so in the stats.

use rocemesh_agent::{AgentConfig, RnicConfig, ServiceTracing, TransportKind, start};
use std::net::UdpSocket;

fn config(transport: TransportKind, port: u16) -> AgentConfig {
    // Nothing listens on port 9 of 127.0.0.1: registration retries in the background.
    let mut cfg = AgentConfig::new(
        "http://127.0.0.1:9",
        vec![RnicConfig::parse("r0=127.0.0.1").unwrap()],
    );
    cfg.port = port;
    cfg.transport = transport;
    cfg.trace_enabled = false;
    cfg.service_tracing = ServiceTracing::Off;
    cfg
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn verbs_without_a_device_fails_at_start_with_the_verbs_message() {
    if rocemesh_agent::list_rdma_devices().is_ok() {
        println!("skipping: this machine has RDMA devices");
        return;
    }
    let port = free_port();
    let Err(err) = start(config(TransportKind::Verbs, port)) else {
        panic!("verbs must not start without an RDMA device");
    };
    let msg = format!("{err:#}");
    assert!(msg.starts_with("RNIC r0: verbs transport: "), "{msg}");
    assert!(
        msg.contains("RDMA verbs unavailable") || msg.contains("no RDMA devices"),
        "{msg}"
    );
    // Nothing was left bound.
    UdpSocket::bind(("127.0.0.1", port)).expect("port free after the failed start");
}

#[test]
fn auto_falls_back_to_udp_and_reports_it() {
    let agent = start(config(TransportKind::Auto, free_port())).unwrap();
    let stats = agent.stats();
    assert_eq!(
        stats.transports.into_iter().collect::<Vec<_>>(),
        vec![("r0".to_string(), "udp")]
    );
    assert_eq!(stats.service_route, "off");
    agent.shutdown().unwrap();
}
