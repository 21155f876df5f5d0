fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a[0] == "up" { rocemesh_testbed::Fabric::up(&rocemesh_testbed::FabricSpec { prefix: "dbg".into(), ..Default::default() }).unwrap(); }
    else if a[0] == "down" { rocemesh_testbed::Fabric::down("dbg").unwrap(); }
    else { let f = rocemesh_testbed::Fabric::open("dbg").unwrap(); let fault: rocemesh_testbed::Fault = serde_json::from_str(&a[1]).unwrap(); println!("{:?}", f.apply(&fault)); }
}
