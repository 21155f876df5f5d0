//! flow_label_to_udp_sport agrees with rdma-core's ibv_flow_label_to_udp_sport.

mod common;

use rocemesh_ebpf::flow_label_to_udp_sport;

#[test]
fn matches_real_verbs_header() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("sport");
    common::run(
        "cc",
        &[
            common::fixtures().join("sport.c").to_str().unwrap(),
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    let mut labels: Vec<u32> = vec![
        0, 1, 0x3FFF, 0x4000, 0xC000, 0xFC000, 0xFFFFF, 0xABCDE, 0x12345,
    ];
    labels.extend((0..200u32).map(|i| i.wrapping_mul(0x9E37_79B9) & 0xF_FFFF));
    let args: Vec<String> = labels.iter().map(u32::to_string).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::run(exe.to_str().unwrap(), &args);
    let mut checked = 0;
    for line in out.lines() {
        let (fl, sport) = line.split_once(' ').unwrap();
        assert_eq!(
            u32::from(flow_label_to_udp_sport(fl.parse().unwrap())),
            sport.parse::<u32>().unwrap(),
            "flow label {fl}"
        );
        checked += 1;
    }
    assert_eq!(checked, labels.len());
}
