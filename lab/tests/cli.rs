//! `rocemesh-lab --help` lists the lab's tools, each with a one-line description.

mod support;

#[test]
fn help_lists_every_tool_on_one_line() {
    let o = support::bin()
        .arg("--help")
        .output()
        .expect("run rocemesh-lab --help");
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    let section = help
        .split("Commands:\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_else(|| panic!("no Commands section in {help}"));
    let listed: Vec<&str> = section
        .lines()
        .filter_map(|l| {
            let (name, about) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
            assert!(
                name == "help" || about.trim().len() >= 10,
                "{name} has no description"
            );
            (name != "help").then_some(name)
        })
        .collect();
    assert_eq!(listed, ["demo", "testbed", "eval", "sim"], "{help}");
}
