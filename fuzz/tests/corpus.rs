//! Replays every committed input of every target (`corpus/<target>/*`: the seeds, plus the
//! inputs of fixed findings) through the target body, as a plain test on any toolchain.

use std::path::Path;

#[test]
fn every_target_replays_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for &(name, body) in rocemesh_fuzz::TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{name}: no corpus in {}", dir.display());
        for input in &inputs {
            let data = std::fs::read(input).expect("corpus file");
            eprintln!("{name}: {}", input.display());
            body(&data);
        }
        eprintln!("{name}: {} inputs replayed", inputs.len());
    }
}
