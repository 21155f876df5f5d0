//! Fault helper process of the rocemesh-lab testbed (NFQUEUE delay/corruption, background
//! traffic); started by `Fabric::apply` inside a fabric namespace.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = rocemesh_testbed::helper::run(&args) {
        eprintln!("rocemesh-testbed-helper: {e:#}");
        std::process::exit(1);
    }
}
