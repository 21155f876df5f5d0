//! Offset lookup on clang-generated BTF of the ib_core structs, checked against the C
//! compiler's own offsetof.

mod common;

use rocemesh_ebpf::KernelOffsets;

#[test]
fn kernel_offsets_from_clang_btf_match_offsetof() {
    let dir = tempfile::tempdir().unwrap();
    let btf = common::fixture_btf(dir.path());
    let from_btf = KernelOffsets::from_btf(&btf).unwrap();
    let fx = common::fixtures();
    let include = format!("-I{}", fx.display());

    let exe = dir.path().join("offsets");
    common::run(
        "cc",
        &[
            &include,
            fx.join("ib_structs_offsets.c").to_str().unwrap(),
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    let expected = common::parse_pairs(&common::run(exe.to_str().unwrap(), &[]));
    let field = |k: &str| u32::try_from(expected[k]).unwrap();
    assert_eq!(
        from_btf,
        KernelOffsets {
            qp_num: field("qp_num"),
            qp_state: field("qp_state"),
            dest_qp_num: field("dest_qp_num"),
            dgid: field("dgid"),
            flow_label: field("flow_label"),
        }
    );
    // Not trivially zero: the lookup really walked ah_attr -> grh -> dgid.
    assert!(from_btf.dgid > from_btf.dest_qp_num && from_btf.qp_num > 100);
}
