//! The command line, declared with clap. Nothing here does work.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Parser, Subcommand};
use safetensors_stream::source::Names;
use safetensors_stream::{Dtype, Limits};

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 bad input (the input is not what it claims), 2 usage error,
3 I/O or environment error (disk full, permission), 129/130/141/143 interrupted by
SIGHUP/SIGINT/SIGPIPE/SIGTERM.
On any failure the output path is left untouched: no partial file, an old file keeps its bytes.

Examples:
  safetensors-convert weights.npz -o model.safetensors
  safetensors-convert layer.0.npy.gz -o layer.safetensors
  curl -s https://host/model.npz | safetensors-convert - -o model.safetensors
  safetensors-convert model.safetensors -o copy.safetensors
  safetensors-convert model.safetensors --cast-all BF16 -o model-bf16.safetensors
  safetensors-convert model.safetensors --cast-all BF16 --overwrite-input -o model.safetensors
  safetensors-convert dump.bin --raw-dtype F32 --raw-shape 4,256 --name w -o w.safetensors
  safetensors-convert a.safetensors b.safetensors -o merged.safetensors
  safetensors-convert model.safetensors --max-shard-size 5GB -o out/model.safetensors
  safetensors-convert model.safetensors --max-shard-size 5GB --shard 2 -o out/model.safetensors
  safetensors-convert model.safetensors --max-shard-size 5GB --index-only -o out/model.safetensors
  safetensors-convert model.safetensors.index.json -o single.safetensors
  safetensors-convert pytorch_model.bin --dedupe-tied -o model.safetensors
  safetensors-convert model.safetensors --exclude 'optimizer.*' --prefix model. -o out.safetensors
  safetensors-convert model.safetensors -o - | ssh host 'cat > model.safetensors'
  safetensors-convert model.safetensors --cast-all BF16 -o s3://bucket/model-bf16.safetensors
  safetensors-convert s3://bucket/model.safetensors.index.json -o model.safetensors   (AWS_* from the environment)
  safetensors-convert weights.npz --dry-run --json -o out.safetensors
  producer | safetensors-convert - --report json -o - | consumer    (a pipeline stage)
  safetensors-convert validate model.safetensors
  safetensors-convert validate --reference model.safetensors.index.json
  safetensors-convert inspect --json model.safetensors";

/// Stream tensors from NumPy, PyTorch, GGUF, quantized safetensors (FP8, GPTQ, AWQ,
/// bitsandbytes: dequantized) and raw dumps into safetensors files; check and inspect them.
#[derive(Debug, Parser)]
#[command(
    name = "safetensors-convert",
    version,
    about,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    // `-o` is required but for --dry-run, which clap's generated usage cannot say.
    override_usage = "safetensors-convert [OPTIONS] <INPUT>... -o <OUT>\n       safetensors-convert [OPTIONS] <INPUT>... --dry-run\n       safetensors-convert <COMMAND>",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub convert: ConvertArgs,
}

/// Converting (the default command).
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Inputs: .npy, .npz, .safetensors, a sharded checkpoint's .safetensors.index.json, PyTorch
    /// checkpoints (.bin, .pt, .pth, pytorch_model.bin.index.json), GGUF (.gguf, dequantized),
    /// quantized safetensors (FP8, GPTQ, AWQ, bitsandbytes: see --dequantize), any of them
    /// gzip/zstd/xz/bzip2-compressed; `-` for standard input; a folder holding one checkpoint
    /// (its index, else its single model file); s3://, gs://, az:// or https:// URLs (credentials
    /// from the environment). Recognised by content.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// How the inputs are read (names, raw dumps).
    #[command(flatten)]
    pub input: InputArgs,
    /// Cast tensors of dtype FROM to TO while streaming (repeatable): F32=BF16, F32=F16,
    /// F64=F32, F64=BF16, F64=F16, F16=F32, BF16=F32, and lossless integer widenings.
    #[arg(long, value_name = "FROM=TO", value_parser = parse_cast, help_heading = "Casting")]
    pub cast: Vec<(Dtype, Dtype)>,
    /// Cast every floating tensor (F64, F32, F16, BF16) to TO; --cast takes precedence.
    /// Dtypes are spelled as in safetensors (BF16, any case), numpy (bfloat16, float32)
    /// or torch (torch.float16, fp16).
    #[arg(long, value_name = "TO", value_parser = parse_dtype, help_heading = "Casting")]
    pub cast_all: Option<Dtype>,
    /// Output file, `-` for standard output, or an s3://, gs:// or az:// URL (a multipart
    /// upload, aborted on failure). With --max-shard-size, the shards' base name.
    /// Optional with --dry-run (the plan then uses the first input's name, as NAME.safetensors).
    #[arg(short, long, required_unless_present = "dry_run", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Keep only tensors whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Drop tensors whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Rename tensor FROM (its input name) to TO (repeatable; after --include/--exclude).
    /// The name given is final: --strip-prefix and --rename-regex skip it.
    #[arg(long, value_name = "FROM=TO", value_parser = parse_pair)]
    pub rename: Vec<(String, String)>,
    /// Remove P from the start of every name that has it (after --rename).
    #[arg(long, value_name = "P")]
    pub strip_prefix: Option<String>,
    /// Replace every match of the regex PATTERN by REPLACEMENT (`$1`, `${name}`) in each
    /// name (repeatable, applied in order, after --strip-prefix). Split at the first `=`.
    #[arg(long, value_name = "PATTERN=REPLACEMENT", value_parser = parse_pair)]
    pub rename_regex: Vec<(String, String)>,
    /// Prepend P to every tensor name (last, after every rename).
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
    /// Write a file with no tensors when the filters (or the inputs) leave none, instead of failing.
    #[arg(long)]
    pub allow_empty: bool,
    /// Set a metadata entry, overriding the inputs' (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_pair)]
    pub metadata: Vec<(String, String)>,
    /// Tensor order: `canonical` (the reference writer's bytes) or `input`.
    #[arg(long, value_enum, default_value_t = OrderArg::Canonical)]
    pub order: OrderArg,
    /// Split into shards of at most SIZE tensor bytes (5GB = 5e9, 5GiB = 5*2^30) plus an index.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub max_shard_size: Option<u64>,
    /// Write only shard K (1-based, the K of -0000K-of-0000N) of the plan the full run
    /// makes, byte-identical to it, and no index: one worker of a fan-out.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Many machines")]
    pub shard: Option<u64>,
    /// With --shard K: write shards K, K+N, K+2N, ... in this one process, which plans
    /// once for all of them: worker K of N when a fan-out has fewer workers than shards.
    #[arg(long, value_name = "N", requires = "shard", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Many machines")]
    pub shard_stride: Option<u64>,
    /// Write only the index, after checking that every planned shard is there at its
    /// planned length: the commit point of a fan-out.
    #[arg(long, conflicts_with = "shard", help_heading = "Many machines")]
    pub index_only: bool,
    /// Refuse to run, writing nothing, unless this run's plan id (`plan_id` in
    /// `--dry-run --json`) is ID: every worker of a fan-out then writes the same version of
    /// the inputs, and the index is committed only over that version.
    #[arg(long, value_name = "ID", help_heading = "Many machines")]
    pub expect_plan: Option<String>,
    /// Allow the output to replace an input (the same file: links count); refused otherwise.
    #[arg(long)]
    pub overwrite_input: bool,
    /// Skip the fsyncs (faster; a crash may then lose the output, never corrupt it silently).
    #[arg(long)]
    pub no_sync: bool,
    /// Bytes moved per read and write.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg, default_value = "4MiB")]
    pub buffer_size: u64,
    /// Print nothing but errors.
    #[arg(short, long, conflicts_with = "progress")]
    pub quiet: bool,
    /// Show progress even when stderr is not a terminal (shown by default on a terminal).
    #[arg(long)]
    pub progress: bool,
    /// Show the plan (tensors, dtypes, shapes, offsets, header sizes, shards, casts); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print the plan as JSON on stdout.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// Print a machine-readable report on stderr at the end (or a JSON error), and nothing else.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub report: Option<ReportFormat>,
    /// Compute a checksum of each output file while streaming (in the report and the summary).
    #[arg(long, value_enum, value_name = "ALGO")]
    pub checksum: Option<ChecksumAlgo>,
}

/// How inputs are read: shared by converting and `inspect`, so that inspect
/// opens an input exactly as a conversion would.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Tensor name for a single-array input (.npy); default: the file name without extensions.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Skip npz members that are not .npy arrays, instead of refusing the archive.
    #[arg(long)]
    pub skip_non_npy: bool,
    /// Read .npy/.npz void elements (`<V2`, `|V1`: ml_dtypes' types saved by np.save) as this
    /// dtype (BF16, F8_E4M3, F8_E5M2, ...); its width must be the void's. Never guessed.
    #[arg(long, value_name = "DTYPE", value_parser = parse_dtype)]
    pub npy_void_as: Option<Dtype>,
    /// How tensors are named: `stored` (an HDF5 dataset's path, Flax's keys joined with `.`), or
    /// `hf`: a transformers TensorFlow (tf_model.h5) or Flax (flax_model.msgpack) checkpoint
    /// named, transposed and shaped as the PyTorch model's state dict, as transformers 4.x's
    /// cross-loading did.
    #[arg(long, value_name = "stored|hf", value_parser = parse_names, default_value = "stored")]
    pub names: Names,
    /// PyTorch checkpoints: write one tensor of each group of identical (tied) views and
    /// record the dropped names in __metadata__, as the Hugging Face script does. The first
    /// selected name in the checkpoint's order is kept (the input embedding, as transformers
    /// keeps it); groups are formed after --include/--exclude and renames.
    #[arg(long, help_heading = "PyTorch checkpoints")]
    pub dedupe_tied: bool,
    /// PyTorch checkpoints: convert only the value under KEY (dotted for nested dicts),
    /// named without it; by default a top-level `state_dict` is not part of the names.
    #[arg(long, value_name = "KEY", help_heading = "PyTorch checkpoints")]
    pub pt_root: Option<String>,
    /// PyTorch checkpoints: write stride-0 expansions past the default bounds (a view of more
    /// than 16x its storage's bytes, or tensors adding up to more than 16x all storages).
    #[arg(long, help_heading = "PyTorch checkpoints")]
    pub allow_expanded_views: bool,
    /// Dequantize quantized weights (GGUF blocks, FP8, GPTQ, AWQ, bitsandbytes, NVFP4) to full
    /// precision, BF16 unless --dequantize-to says otherwise. GGUF inputs always are.
    #[arg(long, help_heading = "Quantized inputs")]
    pub dequantize: bool,
    /// The dtype dequantized weights are written in: F32, F16 or BF16 (default BF16); implies
    /// --dequantize.
    #[arg(long, value_name = "DTYPE", value_parser = parse_dequantize_to, help_heading = "Quantized inputs")]
    pub dequantize_to: Option<Dtype>,
    /// GGUF inputs: copy the scalar metadata keys (general.name, llama.context_length, ...)
    /// into __metadata__ as strings; arrays (the tokenizer's vocabulary) are skipped and counted.
    #[arg(long, help_heading = "Quantized inputs")]
    pub gguf_metadata: bool,
    /// Read the inputs as raw dumps of this dtype (F32, BF16, I64, F4, ...).
    #[arg(long, value_name = "DTYPE", value_parser = parse_dtype, requires = "raw_shape", help_heading = "Raw dumps")]
    pub raw_dtype: Option<Dtype>,
    /// Shape of a raw dump: `4,256`; `scalar` or an empty string for 0-d.
    #[arg(
        long,
        value_name = "SHAPE",
        requires = "raw_dtype",
        help_heading = "Raw dumps"
    )]
    pub raw_shape: Option<String>,
    /// Skip this many bytes at the start of a raw dump.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 0,
        help_heading = "Raw dumps"
    )]
    pub raw_offset: u64,
    /// Byte order of a raw dump.
    #[arg(long, value_enum, default_value_t = ByteOrder::Little, help_heading = "Raw dumps")]
    pub raw_byte_order: ByteOrder,
    /// Several tensors in one dump: a JSON list of {"name", "dtype", "shape", "offset"}.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "raw_dtype",
        help_heading = "Raw dumps"
    )]
    pub raw_manifest: Option<PathBuf>,
    /// Accept bytes after the last tensor of a raw dump.
    #[arg(long, help_heading = "Raw dumps")]
    pub raw_allow_trailing: bool,
    /// Set a limit on what an input may make us build or write (repeatable).
    #[arg(
        long = "limit",
        value_name = "NAME=VALUE",
        value_parser = parse_limit,
        help = limits_help(),
        help_heading = "Limits"
    )]
    pub limits: Vec<String>,
}

/// `--limit`'s help: the limits, their defaults and what each bounds.
fn limits_help() -> String {
    let list = Limits::help()
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "Set a limit on what an input may make us build or write (repeatable): NAME=VALUE, \
         sizes as 4096, 64MiB or 100MB. Raising a memory limit lets an input take that much \
         more memory; header-bytes is the format's own and can only be lowered. \
         The limits and their defaults:\n{list}"
    )
}

/// One `--limit NAME=VALUE`, checked as it is parsed.
fn parse_limit(s: &str) -> Result<String, String> {
    Limits::default()
        .set_text(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One JSON object.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChecksumAlgo {
    /// SHA-256, hex.
    Sha256,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByteOrder {
    /// Least significant byte first.
    Little,
    /// Most significant byte first; swapped while streaming.
    Big,
}

/// The library's spellings (`BF16`, `bf16`, `bfloat16`, `torch.bfloat16`, ...),
/// shared with Rust callers and the Python package.
fn parse_names(s: &str) -> Result<Names, String> {
    match s {
        "stored" => Ok(Names::Stored),
        "hf" => Ok(Names::Hf),
        _ => Err(format!("{s:?} is not a naming: stored or hf")),
    }
}

fn parse_dtype(s: &str) -> Result<Dtype, String> {
    s.parse::<Dtype>().map_err(|e| e.to_string())
}

fn parse_dequantize_to(s: &str) -> Result<Dtype, String> {
    match parse_dtype(s)? {
        d @ (Dtype::F32 | Dtype::F16 | Dtype::BF16) => Ok(d),
        d => Err(format!("dequantized weights are F32, F16 or BF16, not {d}")),
    }
}

fn parse_cast(s: &str) -> Result<(Dtype, Dtype), String> {
    // `--cast BF16`: a single dtype is what --cast-all takes.
    if let (None, Ok(to)) = (s.split_once('='), parse_dtype(s)) {
        return Err(format!(
            "expected FROM=TO (F32=BF16: the F32 tensors to BF16), got {s:?}; \
             to cast every floating tensor to {to}, use --cast-all {to}"
        ));
    }
    let (from, to) = parse_pair(s)?;
    Ok((parse_dtype(&from)?, parse_dtype(&to)?))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OrderArg {
    /// dtype descending, then name: byte-identical to the reference writer.
    Canonical,
    /// The inputs' own order.
    Input,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    safetensors_stream::units::parse_size(s).map_err(|e| e.to_string())
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check safetensors files (or a sharded checkpoint's index) against every rule of the format.
    Validate(ValidateArgs),
    /// Show the tensors, sizes and metadata of any input convert reads (safetensors, an index,
    /// .npy, .npz, PyTorch checkpoints, raw dumps with the --raw flags, compressed), from headers only.
    Inspect(InspectArgs),
    /// List the multipart uploads left open under an s3:// prefix (by killed runs), and with
    /// --abort abort them: `safetensors-convert uploads --abort s3://bucket/models/`.
    Uploads(UploadsArgs),
    /// Print a shell completion script: `safetensors-convert completions bash > /etc/bash_completion.d/safetensors-convert`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct UploadsArgs {
    /// s3://BUCKET/PREFIX: a key, a folder ending in `/`, or s3://BUCKET/ for the whole bucket.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Abort every upload listed (an upload still being written by a live run fails it).
    #[arg(long)]
    pub abort: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Files to check: *.safetensors, or *.safetensors.index.json with all its shards; PyTorch
    /// checkpoints (.bin, .pt, or their index) are checked as convert reads them.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Accept exactly what the reference reader accepts, instead of the format's strict rules.
    #[arg(long)]
    pub reference: bool,
    /// Print nothing for valid files.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print one JSON object on stdout: each file's outcome (tensors and data bytes, or the
    /// error's kind, tensor, offset and message), and whether all are valid.
    #[arg(long, conflicts_with = "quiet")]
    pub json: bool,
}

// Inspect shows what an input holds: dropping tied names is a conversion's choice.
#[derive(Debug, Args)]
#[command(mut_arg("dedupe_tied", |a| a.hide(true)))]
pub struct InspectArgs {
    /// Any inputs convert reads: *.safetensors, *.safetensors.index.json, .npy, .npz, PyTorch,
    /// GGUF, a raw dump (with --raw-dtype/--raw-shape or --raw-manifest), compressed; `-` for
    /// standard input. Each is shown in turn (with --json, an array of them for several).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// How the input is read.
    #[command(flatten)]
    pub input: InputArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Read the header as the reference reader would, instead of strictly.
    #[arg(long)]
    pub reference: bool,
}

/// The subcommands' names, for a mistyped one.
const SUBCOMMANDS: [&str; 4] = ["validate", "inspect", "uploads", "completions"];

/// A first argument that reads as a mistyped subcommand (`valdate`) and is
/// no file: clap would take it for an input and ask for `-o`. Returns the
/// usage error that says so. A word that is a file stays an input.
pub fn mistyped_subcommand(first: &OsStr) -> Option<clap::Error> {
    let word = first.to_str()?;
    let plain_word = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphabetic());
    if !plain_word || SUBCOMMANDS.contains(&word) || Path::new(word).exists() {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    let near = SUBCOMMANDS
        .into_iter()
        .map(|s| (edit_distance(&lower, s), s))
        .filter(|&(d, s)| d <= 2 || (lower.len() >= 3 && s.starts_with(&lower)))
        .min()?;
    Some(Cli::command().error(
        clap::error::ErrorKind::InvalidSubcommand,
        format!(
            "unrecognized subcommand '{word}', and no file of that name: did you mean '{}'?",
            near.1
        ),
    ))
}

/// Levenshtein distance between two ASCII words.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python package's option table (python/src/options.rs), checked
    /// here against clap's flags so that neither side drifts.
    #[allow(dead_code)]
    mod python_options {
        include!("../../../python/src/options.rs");
    }

    #[test]
    fn every_flag_of_convert_is_a_python_keyword_or_says_why_not() {
        use python_options::{Kind, CONVERT_OPTIONS};
        let cli = Cli::command();
        let flags: Vec<(String, bool)> = cli
            .get_arguments()
            .filter_map(|a| {
                let long = a.get_long()?;
                let switch = matches!(a.get_action(), clap::ArgAction::SetTrue);
                Some((long.to_string(), switch))
            })
            .filter(|(long, _)| long != "help" && long != "version")
            .collect();
        for (flag, switch) in &flags {
            let row = CONVERT_OPTIONS
                .iter()
                .find(|o| o.flag == flag)
                .unwrap_or_else(|| panic!("--{flag} is not in python/src/options.rs"));
            if let Kind::Switch | Kind::Negated = row.kind {
                assert!(
                    switch,
                    "--{flag} takes a value but the table says it is a switch"
                );
            } else if !matches!(row.kind, Kind::CliOnly(_)) {
                assert!(
                    !switch,
                    "--{flag} is a switch but the table says it takes a value"
                );
            }
            let keyword = flag.replace('-', "_");
            if row.kind == Kind::Switch || matches!(row.kind, Kind::Text | Kind::Number) {
                assert_eq!(row.keyword, keyword, "--{flag}");
            }
            // A repeated flag may be a plural keyword: --limit is limits={...}.
            if row.kind == Kind::Pairs {
                let plural = format!("{keyword}s");
                assert!(row.keyword == keyword || row.keyword == plural, "--{flag}");
            }
        }
        for row in CONVERT_OPTIONS {
            assert!(
                flags.iter().any(|(f, _)| f == row.flag),
                "the table's --{} is no flag of convert",
                row.flag
            );
        }
        assert_eq!(flags.len(), CONVERT_OPTIONS.len());
    }

    #[test]
    fn near_words_are_subcommands_and_far_ones_inputs() {
        assert_eq!(edit_distance("valdate", "validate"), 1);
        assert_eq!(edit_distance("", "inspect"), 7);
        for (typed, meant) in [
            ("valdate", "validate"),
            ("insepct", "inspect"),
            ("Inspect", "inspect"),
            ("upload", "uploads"),
            ("compl", "completions"),
        ] {
            let e = mistyped_subcommand(OsStr::new(typed))
                .expect(typed)
                .to_string();
            assert!(e.contains(&format!("did you mean '{meant}'")), "{e}");
        }
        for input in ["validate", "model", "x.npz", "-", "--dry-run", "weights"] {
            assert!(mistyped_subcommand(OsStr::new(input)).is_none(), "{input}");
        }
    }
}
