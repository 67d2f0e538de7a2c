//! Prints the scheduler benchmark as one JSON object.
//!
//! ```text
//! cargo run --release -p mindfleet-actors --example scheduler_bench -- --backlog 100000 --samples 1000
//! ```
//!
//! Exit codes: 0 done, 2 bad arguments.

use std::process::ExitCode;

const USAGE: &str = "usage: scheduler_bench [--backlog N] [--samples N]";

fn main() -> ExitCode {
    let (mut backlog, mut samples) = (100_000, 1000);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let target = match arg.as_str() {
            "--backlog" => &mut backlog,
            "--samples" => &mut samples,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        match args.next().map(|v| v.parse::<usize>()) {
            Some(Ok(n)) if n > 0 => *target = n,
            _ => {
                eprintln!("{arg} needs a positive number\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let figures = rt.block_on(mindfleet_actors::scheduler::bench::bench(backlog, samples));
    println!("{}", serde_json::to_string_pretty(&figures).expect("JSON"));
    ExitCode::SUCCESS
}
