//! Offset lookup on clang-generated BTF of the ib_core structs, checked against the C
//! compiler's own offsetof.

mod common;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection};
use rocemesh_ebpf::KernelOffsets;
use rocemesh_ebpf::btf::Btf;

#[test]
fn kernel_offsets_from_clang_btf_match_offsetof() {
    let dir = tempfile::tempdir().unwrap();
    let fx = common::fixtures();
    let obj = dir.path().join("ib_structs.o");
    let obj_s = obj.to_str().unwrap();
    let include = format!("-I{}", fx.display());
    common::run(
        "clang",
        &[
            "-g",
            "-O2",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            &include,
            "-c",
            fx.join("ib_structs_btf.c").to_str().unwrap(),
            "-o",
            obj_s,
        ],
    );
    let data = std::fs::read(&obj).unwrap();
    let elf = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let btf_bytes = elf
        .section_by_name(".BTF")
        .expect(".BTF section")
        .data()
        .unwrap()
        .to_vec();
    let btf = Btf::parse(btf_bytes).unwrap();
    let from_btf = KernelOffsets::from_btf(&btf).unwrap();

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
