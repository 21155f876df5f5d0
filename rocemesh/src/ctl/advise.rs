//! `ctl advise`: source ports for an RNIC pair whose traced paths avoid every open problem.

use super::resolve::{self, rnic_name};
use super::table::Table;
use super::{Client, json_out, time};
use anyhow::Result;
use clap::Args;
use rocemesh_analyzer::PortAdvice;

/// `ctl advise` options.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// Source RNIC: id, `host/ifname` or IP address.
    pub src: String,
    /// Destination RNIC: id, `host/ifname` or IP address.
    pub dst: String,
}

/// Runs `ctl advise`.
pub(super) fn run(client: &Client, args: &AdviseArgs, json: bool) -> Result<String> {
    let all = resolve::rnics(client)?;
    let src = resolve::rnic(&all, &args.src)?;
    let dst = resolve::rnic(&all, &args.dst)?;
    let advice: PortAdvice = client.get(&format!("/paths/advice?src={}&dst={}", src.id, dst.id))?;
    if json {
        return json_out(&advice);
    }
    Ok(render(&advice, &rnic_name(src), &rnic_name(dst)))
}

fn render(a: &PortAdvice, src: &str, dst: &str) -> String {
    let mut out = format!("{src} -> {dst}\n");
    if a.ports.is_empty() {
        out.push_str(if a.catalog.is_empty() {
            "no advice: no path of this pair is traced yet (the pair is probed by no pinglist)\n"
        } else {
            "no advice: every traced port crosses an open problem\n"
        });
    } else {
        let ports: Vec<String> = a.ports.iter().map(u16::to_string).collect();
        out.push_str(&format!(
            "advised source ports: {} (spines {})\n",
            ports.join(" "),
            a.spines.join(", ")
        ));
    }
    if !a.endpoint_problems.is_empty() {
        out.push_str(&format!(
            "open problems on the pair's own RNICs or hosts (no port avoids them): {}\n",
            a.endpoint_problems.join(", ")
        ));
    }
    if a.catalog.is_empty() {
        return out;
    }
    out.push('\n');
    let mut t = Table::new(&[
        "SPORT", "ADVISED", "REACHED", "TRACED", "PATH", "ACK PATH", "CROSSES",
    ]);
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    for c in &a.catalog {
        t.row(vec![
            c.src_port.to_string(),
            yes(c.advised),
            yes(c.reached),
            time(c.traced_at_ms),
            c.path.join(" > "),
            c.ack_path.as_ref().map_or("-".into(), |p| p.join(" > ")),
            if c.crosses.is_empty() {
                "-".into()
            } else {
                c.crosses.join(", ")
            },
        ]);
    }
    out.push_str(&t.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_analyzer::CatalogPath;

    #[test]
    fn renders_advice_and_says_why_there_is_none() {
        let path = |port, spine: &str, advised| CatalogPath {
            src_port: port,
            path: vec!["t0".into(), spine.into(), "t1".into()],
            ack_path: None,
            reached: true,
            traced_at_ms: 0,
            crosses: if advised {
                vec![]
            } else {
                vec!["t0-s1".into()]
            },
            advised,
        };
        let mut a = PortAdvice {
            src: "h0/r0".into(),
            dst: "h2/r0".into(),
            ports: vec![49152],
            spines: vec!["s0".into()],
            catalog: vec![path(49152, "s0", true), path(49153, "s1", false)],
            endpoint_problems: vec![],
        };
        let out = render(&a, "h0/r0", "h2/r0");
        assert!(
            out.contains("advised source ports: 49152 (spines s0)"),
            "{out}"
        );
        assert!(out.contains("49153  no") && out.contains("t0-s1"), "{out}");
        a.ports.clear();
        a.endpoint_problems = vec!["h2/r0".into()];
        let out = render(&a, "h0/r0", "h2/r0");
        assert!(
            out.contains("every traced port crosses an open problem"),
            "{out}"
        );
        assert!(out.contains("no port avoids them): h2/r0"), "{out}");
        a.catalog.clear();
        assert!(render(&a, "h0/r0", "h2/r0").contains("no path of this pair is traced yet"));
    }
}
