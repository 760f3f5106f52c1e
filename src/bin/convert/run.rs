//! The default command: convert inputs to an output, with signals handled.

use std::process::ExitCode;

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use safetensors_stream::convert::{
    convert_sources, dry_run, open_locations, ConvertOptions, Output, Part, Report,
};
use safetensors_stream::header::Order;
use safetensors_stream::location::Location;
use safetensors_stream::observe::Progress;
use safetensors_stream::source::{FreedMemoryHook, SourceOptions};
use safetensors_stream::units::HumanBytes;
use safetensors_stream::{Dtype, Error, ErrorKind, Limits, Note, Warning};
use serde_json::json;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

use super::cli::{ByteOrder, ConvertArgs, InputArgs, OrderArg, ReportFormat};
use super::progress::{Bar, Lines};
use safetensors_stream::source::{RawSpec, RawTensor};

/// The raw-dump reading of the inputs, if the flags ask for one.
fn raw_spec(args: &InputArgs, limits: &Limits) -> Result<Option<RawSpec>, Error> {
    let mut spec = if let Some(manifest) = &args.raw_manifest {
        RawSpec::from_manifest_file_within(manifest, limits)?
    } else if let (Some(dtype), Some(shape)) = (args.raw_dtype, &args.raw_shape) {
        RawSpec {
            tensors: vec![RawTensor {
                name: args.name.clone().unwrap_or_default(),
                dtype,
                shape: RawSpec::parse_shape(shape)?,
                offset: args.raw_offset,
            }],
            ..RawSpec::default()
        }
    } else {
        return Ok(None);
    };
    spec.big_endian = args.raw_byte_order == ByteOrder::Big;
    spec.allow_trailing = args.raw_allow_trailing;
    Ok(Some(spec))
}

/// The progress display: a bar on a terminal (also returned as such, to
/// clear it on an interruption), lines when forced elsewhere, or none.
fn progress(args: &ConvertArgs) -> (Option<Arc<dyn Progress>>, Option<Arc<Bar>>) {
    let terminal = std::io::stderr().is_terminal();
    let wanted = args.progress || (!args.quiet && args.report.is_none() && !args.dry_run);
    match (wanted, terminal, args.progress) {
        (true, true, _) => {
            let bar = Arc::new(Bar::new());
            (Some(bar.clone()), Some(bar))
        }
        (true, false, true) => (Some(Arc::new(Lines::new())), None),
        _ => (None, None),
    }
}

fn options(
    args: &ConvertArgs,
    notes: Notes,
    progress: Option<Arc<dyn Progress>>,
) -> Result<ConvertOptions, Error> {
    // Fields are set in place: the options are `#[non_exhaustive]`, so
    // no struct literal, and the setters are for chained use.
    let mut options = ConvertOptions::default();
    let plan = &mut options.plan;
    plan.include = args.include.clone();
    plan.exclude = args.exclude.clone();
    plan.renames = args.rename.clone();
    plan.strip_prefix = args.strip_prefix.clone();
    plan.rename_regex = args.rename_regex.clone();
    plan.prefix = args.prefix.clone();
    plan.allow_empty = args.allow_empty;
    plan.metadata = args.metadata.clone();
    plan.order = match args.order {
        OrderArg::Canonical => Order::Canonical,
        OrderArg::Input => Order::AsGiven,
    };
    plan.max_shard_size = args.max_shard_size;
    plan.casts = args.cast.clone();
    plan.cast_all = args.cast_all;
    plan.expect_plan = args.expect_plan.clone();
    set_source_options(&mut options.source, &args.input)?;
    options.notice = Some(Arc::new(move |note: &Note| notes.say(note)));
    options.sink.buffer_size = usize::try_from(args.buffer_size).unwrap_or(usize::MAX);
    options.sync = !args.no_sync;
    options.progress = progress;
    options.checksum = args.checksum.is_some();
    options.overwrite_input = args.overwrite_input;
    let index = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    options.part = match (args.shard, args.index_only) {
        (Some(k), _) => match args.shard_stride {
            Some(n) => Part::Stride {
                first: index(k),
                step: index(n),
            },
            None => Part::Shard(index(k)),
        },
        (None, true) => Part::IndexOnly,
        (None, false) => Part::All,
    };
    Ok(options)
}

/// How inputs are opened, from the shared input flags.
/// `--dequantize-to X` is X; `--dequantize` alone is BF16 (the fastest
/// peer's choice, and what transformers trains in).
fn dequantize_to(args: &InputArgs) -> Option<Dtype> {
    args.dequantize_to
        .or(args.dequantize.then_some(Dtype::BF16))
}

pub(crate) fn source_options(args: &InputArgs) -> Result<SourceOptions, Error> {
    let mut options = SourceOptions::default();
    set_source_options(&mut options, args)?;
    Ok(options)
}

/// The binary's hook: memory freed between phases goes back to the system
/// at once ([`super::collect_freed_memory`]).
const HAND_BACK_FREED_MEMORY: FreedMemoryHook = FreedMemoryHook::new(super::collect_freed_memory);

/// Sets `options` as the input flags say (`--limit`s over the defaults).
fn set_source_options(options: &mut SourceOptions, args: &InputArgs) -> Result<(), Error> {
    for text in &args.limits {
        let set = options.limits.set_text(text);
        set.map_err(|e| Error::new(ErrorKind::Usage(e.to_string())))?;
    }
    options.name = args.name.clone();
    options.raw = raw_spec(args, &options.limits)?;
    options.npy.skip_non_npy = args.skip_non_npy;
    options.npy.void_as = args.npy_void_as;
    options.torch.dedupe_tied = args.dedupe_tied;
    options.torch.root = args.pt_root.clone();
    options.torch.allow_expanded_views = args.allow_expanded_views;
    options.dequantize = dequantize_to(args);
    options.gguf.metadata = args.gguf_metadata;
    options.freed_memory = HAND_BACK_FREED_MEMORY;
    options.names = args.names;
    Ok(())
}

/// Notes go to stderr as lines, or into the JSON report when there is one.
#[derive(Clone)]
struct Notes {
    quiet: bool,
    collected: Option<Arc<Mutex<Vec<Note>>>>,
}

impl Notes {
    fn say(&self, note: &Note) {
        match &self.collected {
            Some(c) => c.lock().expect("notes lock").push(note.clone()),
            None if !self.quiet => eprintln!("{}: {note}", super::name()),
            None => {}
        }
    }

    /// The notes collected for the JSON report (none without one).
    fn collected(&self) -> Vec<Note> {
        self.collected
            .as_ref()
            .map(|c| c.lock().expect("notes lock").clone())
            .unwrap_or_default()
    }
}

/// Runs the conversion; on SIGHUP, SIGINT, SIGPIPE or SIGTERM the
/// conversion is dropped, which deletes its temp files, and the exit code
/// is 128 + the signal.
pub(crate) fn convert(args: &ConvertArgs) -> Result<ExitCode, Error> {
    let json = args.report == Some(ReportFormat::Json);
    let notes = Notes {
        quiet: args.quiet,
        collected: json.then(|| Arc::new(Mutex::new(Vec::new()))),
    };
    let result = run(args, notes.clone());
    if !json {
        return result;
    }
    let collected = notes.collected();
    Ok(match result {
        Ok(code) => code,
        Err(e) => {
            let code = super::exit_code(e.category());
            eprintln!(
                "{}",
                error_json(&e, super::code_number(e.category()), &collected)
            );
            code
        }
    })
}

fn run(args: &ConvertArgs, notes: Notes) -> Result<ExitCode, Error> {
    let output = match args.output.as_deref() {
        Some(p) => Output::parse(p)?,
        // clap requires --output unless this is a dry run.
        None => {
            let name = default_output(args);
            notes.say(&Note::Info(format!(
                "no -o given: planning for {} (pass -o to choose)",
                name.display()
            )));
            Output::File(name)
        }
    };
    // Each input parsed once, here: a file, a folder, `-`, or an object URL.
    let inputs = Location::parse_all(&args.inputs)?;
    let objects = inputs.iter().any(|l| matches!(l, Location::Object(_)));
    if objects || matches!(output, Output::Object(_)) {
        super::purge_freed_memory_at_once();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (shown, bar) = progress(args);
    let opts = options(args, notes.clone(), shown)?;
    let outcome = rt.block_on(async {
        let mut hup = signal(SignalKind::hangup())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut pipe = signal(SignalKind::pipe())?;
        let mut term = signal(SignalKind::terminate())?;
        let outcome = tokio::select! {
            r = job(args, &inputs, &output, &opts, &notes) => r.map_err(broken_pipe),
            _ = hup.recv() => Err(Interrupt::Signal("SIGHUP", 129)),
            _ = int.recv() => Err(Interrupt::Signal("SIGINT", 130)),
            _ = pipe.recv() => Err(Interrupt::Signal("SIGPIPE", 141)),
            _ = term.recv() => Err(Interrupt::Signal("SIGTERM", 143)),
        };
        // The job is dropped: multipart uploads it left open are aborted
        // now, so that no part of them lingers in the bucket.
        if outcome.is_err() {
            if let Err(e) = opts.uploads.abort_all().await {
                notes.say(&Note::Warning(Warning::Cleanup(e.to_string())));
            }
        }
        outcome
    });
    // The job is dropped by now (its temp files deleted), but a read of
    // standard input or a FIFO may still block a thread of the runtime's
    // blocking pool, and such a read cannot be cancelled: dropping the
    // runtime would wait for it, for ever if the producer stalls. Leave it.
    if matches!(outcome, Err(Interrupt::Signal(..))) {
        rt.shutdown_background();
    }
    match outcome {
        Ok(Outcome::Planned(text)) => {
            // A closed pipe (`| head`) is not an error worth a message.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            Ok(ExitCode::SUCCESS)
        }
        Ok(Outcome::Done(report)) => {
            if args.report == Some(ReportFormat::Json) {
                eprintln!("{}", report.to_json(&notes.collected()));
            } else if !args.quiet {
                summarize(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(Interrupt::No(e)) => Err(e),
        Err(Interrupt::Signal(name, code)) => {
            let e = Error::new(ErrorKind::Interrupted(name));
            // The terminal has echoed `^C` after whatever was on the line.
            let json = args.report == Some(ReportFormat::Json);
            match &bar {
                Some(bar) => bar.interrupted(),
                None if !json && std::io::stderr().is_terminal() => eprintln!(),
                None => {}
            }
            if json {
                eprintln!("{}", error_json(&e, code, &notes.collected()));
            } else {
                super::report(&e);
            }
            Ok(ExitCode::from(code))
        }
    }
}

enum Outcome {
    /// A dry run's plan as text, or as its one JSON line (`--json`, or
    /// `--report json`, which also puts the notices in it).
    Planned(String),
    Done(Report),
}

/// Opens, plans, and either shows the plan or writes it.
async fn job(
    args: &ConvertArgs,
    inputs: &[Location],
    output: &Output,
    opts: &ConvertOptions,
    notes: &Notes,
) -> Result<Outcome, Error> {
    let mut sources = open_locations(inputs, opts).await?;
    let tensors = sources.iter().map(|s| s.tensors().len()).sum();
    opts.source.freed_memory.after_phase(tensors);
    if args.dry_run {
        let planned = dry_run(&sources, output, opts)?;
        opts.source.freed_memory.after_phase(tensors);
        if args.json || args.report == Some(ReportFormat::Json) {
            let mut line = planned.to_json(&notes.collected());
            line.push('\n');
            return Ok(Outcome::Planned(line));
        }
        for w in planned.warnings() {
            notes.say(&Note::Warning(w.clone()));
        }
        return Ok(Outcome::Planned(planned.render()));
    }
    // Planned, and the memory planning freed handed back when the plan is
    // large (the sources' FreedMemoryHook), then written.
    let report = convert_sources(&mut sources, output, opts).await?;
    Ok(Outcome::Done(report))
}

/// The output a dry run without `-o` plans for: the first input's file name
/// up to its first dot, as `NAME.safetensors` in the current folder, or
/// `NAME.converted.safetensors` when that exists (it may be the input: a
/// plan must not read as if it would replace it).
fn default_output(args: &ConvertArgs) -> std::path::PathBuf {
    let stem = args
        .inputs
        .first()
        .filter(|p| p.as_os_str() != "-")
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .and_then(|n| n.split('.').next().map(str::to_string))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "model".to_string());
    let plain = std::path::PathBuf::from(format!("{stem}.safetensors"));
    match plain.exists() {
        false => plain,
        true => format!("{stem}.converted.safetensors").into(),
    }
}

/// A failure as the JSON report's one object.
pub(crate) fn error_json(e: &Error, exit_code: u8, notes: &[Note]) -> String {
    json!({
        "ok": false,
        "exit_code": exit_code,
        "error": {
            "kind": e.kind().name(),
            "category": format!("{:?}", e.category()),
            "input": e.input(),
            "output": e.output(),
            "tensor": e.tensor(),
            "offset": e.offset(),
            "message": e.to_string(),
        },
        "warnings": notes.iter().map(Note::to_string).collect::<Vec<_>>(),
    })
    .to_string()
}

enum Interrupt {
    No(Error),
    Signal(&'static str, u8),
}

/// A stream output whose reader went away (`convert ... -o - | head -c 1`):
/// the write fails with EPIPE, usually before the SIGPIPE that came with
/// it is heard. Either way it ends as SIGPIPE does, exit 141.
fn broken_pipe(e: Error) -> Interrupt {
    let epipe =
        matches!(e.kind(), ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe);
    if e.output().is_some() && epipe {
        Interrupt::Signal("SIGPIPE", 141)
    } else {
        Interrupt::No(e)
    }
}

impl From<std::io::Error> for Interrupt {
    fn from(e: std::io::Error) -> Self {
        Interrupt::No(Error::io(e))
    }
}

fn summarize(report: &Report) {
    for f in &report.outputs {
        if f.path != "-" {
            let sum = f
                .sha256
                .as_deref()
                .map(|h| format!(", sha256 {h}"))
                .unwrap_or_default();
            eprintln!(
                "wrote {}: {}{sum}",
                f.path,
                safetensors_stream::units::ByteCount(f.bytes)
            );
        } else if let Some(h) = &f.sha256 {
            eprintln!("stdout sha256 {h}");
        }
    }
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    eprintln!(
        "{}, {} of tensor data, from {} in {:.2} s{}",
        plural(report.tensors, "tensor"),
        HumanBytes(report.data_bytes),
        plural(report.inputs.len(), "input"),
        report.seconds,
        if report.casts.is_empty() {
            String::new()
        } else {
            format!(", {} cast", plural(report.casts.len(), "tensor"))
        }
    );
}
