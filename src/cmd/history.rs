//! `mindfleet history export|import`: a data dir's recorded history as one file (JSON lines,
//! each commit with the journal rows it wrote, each line chained to the one before), to attach
//! to a bug report and replay on another machine (`mindfleet replay`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use mindfleet_replay::HistoryReader;
use mindfleet_store::history;

use super::fail;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: HistoryCmd,
}

#[derive(Subcommand)]
enum HistoryCmd {
    /// Write the recorded history of DATA_DIR to a file (the data dir is only read).
    Export {
        data_dir: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Only this persona's history.
        #[arg(long)]
        persona: Option<String>,
    },
    /// Read an exported history into an empty data dir, to replay it there.
    Import {
        file: PathBuf,
        /// The data dir to create (it must not hold a fleet database yet).
        #[arg(long)]
        data: PathBuf,
    },
}

pub fn run(Args { cmd }: Args) -> ExitCode {
    match cmd {
        HistoryCmd::Export { data_dir, out, persona } => {
            let reader = match HistoryReader::open(&data_dir) {
                Ok(r) => r,
                Err(e) => return fail(2, e),
            };
            let file = match std::fs::File::create(&out) {
                Ok(f) => f,
                Err(e) => return fail(1, format!("{}: {e}", out.display())),
            };
            let mut w = std::io::BufWriter::new(file);
            let written = reader.export(&mut w, persona.as_deref(), mindfleet_replay::to_json).and_then(|c| {
                use std::io::Write;
                w.flush().map(|_| c).map_err(|source| mindfleet_store::StorageError::Io { path: out.clone(), source })
            });
            match written {
                Ok(c) if c.personas == 0 => fail(2, format!("{}: no recorded history to export", data_dir.display())),
                Ok(c) => {
                    println!(
                        "{}: {} rows of {} personas, {} journal rows",
                        out.display(),
                        c.rows,
                        c.personas,
                        c.journal_rows
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, e),
            }
        }
        HistoryCmd::Import { file, data } => match history::import(&file, &data) {
            Ok(c) => {
                println!(
                    "{}: {} rows of {} personas, {} journal rows; replay it with `mindfleet replay {}`",
                    data.display(),
                    c.rows,
                    c.personas,
                    c.journal_rows,
                    data.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(2, e),
        },
    }
}
