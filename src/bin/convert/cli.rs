//! The command line, declared with clap. Nothing here does work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 bad input, 2 usage error, 3 I/O or environment error.

Examples:
  convert validate model.safetensors
  convert validate --reference model.safetensors.index.json
  convert inspect --json model.safetensors";

/// Stream tensors into safetensors files, and check and inspect them.
#[derive(Debug, Parser)]
#[command(name = "convert", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check safetensors files (or a sharded checkpoint's index) against every rule of the format.
    Validate(ValidateArgs),
    /// Show a safetensors file's (or sharded checkpoint's) tensors, sizes and metadata.
    Inspect(InspectArgs),
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Files to check: *.safetensors, or *.safetensors.index.json with all its shards.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Accept exactly what the reference reader accepts, instead of the format's strict rules.
    #[arg(long)]
    pub reference: bool,
    /// Print nothing for valid files.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A *.safetensors file, or a *.safetensors.index.json.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Read the header as the reference reader would, instead of strictly.
    #[arg(long)]
    pub reference: bool,
}
