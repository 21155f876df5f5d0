//! `rocemesh`: one binary, one container image; the subcommand picks the role.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = rocemesh::cli::Cli::parse();
    rocemesh::logging::init(cli.log_json, cli.command.default_log_level());
    match rocemesh::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocemesh: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
