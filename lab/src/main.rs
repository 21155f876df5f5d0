//! `rocemesh-lab`: the evaluation harness; the subcommand picks the tool.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = rocemesh_lab::cli::Cli::parse();
    rocemesh::logging::init(cli.log_json, "warn");
    match rocemesh_lab::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocemesh-lab: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
