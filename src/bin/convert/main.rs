//! `convert`: the command-line face of safetensors-stream. Thin over the library.

mod cli;
mod progress;
mod run;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use safetensors_stream::header::{Mode, Rules, HUB_HEADER_LIMIT};
use safetensors_stream::index::{is_index_path, Checkpoint};
use safetensors_stream::location::Location;
use safetensors_stream::source::gguf::GgufSource;
use safetensors_stream::source::open_location;
use safetensors_stream::source::{detect_file, Format};
use safetensors_stream::source::{
    passed_over_notice, resolve_folder, FreedMemoryHook, Listing, SourceOptions,
};
use safetensors_stream::units::{Counted, HumanBytes};
use safetensors_stream::{inspect, Category, Error, ErrorKind, Note};

use cli::{Cli, Command, InspectArgs, UploadsArgs, ValidateArgs};

// A header of a million tensors is millions of small allocations (names,
// shapes): mimalloc's size classes hold them without glibc's 16-byte chunk
// header and 32-byte minimum, a third less memory for the same header.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands memory freed so far back to the system now: this binary's answer
/// to a source's [`FreedMemoryHook`] (a large checkpoint freeing its
/// pickle between the phases of its opening, a large input's opening or
/// planning: [`FreedMemoryHook::after_phase`]). Called now rather than
/// after mimalloc's purge delay: the next phase often allocates on another
/// thread, whose heap would not reuse those pages in time (the peak then
/// varied from run to run; benches/README.md, "Copy path", the
/// small-members paragraph, for why not for small headers).
pub(crate) fn collect_freed_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any
    // thread at any time; `true` also purges memory other threads freed.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    };
}

/// mimalloc's `mi_option_purge_delay` (its `mimalloc.h`; the Rust crate
/// names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory freed is handed back to the system at once rather than after
/// mimalloc's default second, for object storage only: its short-lived
/// buffers (read windows, upload parts) are freed on other threads than
/// those that made them, and a second of them stayed committed; a local
/// dequantization reuses its pages at once and is slower purged
/// (benches/README.md, "Figures behind the comments").
/// `MIMALLOC_PURGE_DELAY` still sets it. Called before any thread starts.
pub(crate) fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set takes no pointers; it is called before any
        // other thread is started.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0)
        };
    }
}

pub(crate) fn main() -> ExitCode {
    raise_open_file_limit();
    if let Some(e) = std::env::args_os()
        .nth(1)
        .and_then(|a| cli::mistyped_subcommand(&a))
    {
        return usage_failure(e);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_failure(e),
    };
    let result = match cli.command {
        Some(Command::Validate(args)) => validate(&args),
        Some(Command::Inspect(args)) => run_inspect(&args),
        Some(Command::Uploads(args)) => uploads(&args),
        Some(Command::Completions { shell }) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(
                shell,
                &mut cmd,
                "safetensors-convert",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        None => run::convert(&cli.convert),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            exit_code(e.category())
        }
    }
}

/// The runtime a subcommand's async calls run on: one thread, this one.
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    rt.map_err(Error::io)
}

/// `convert uploads [--abort] URL`: the open uploads under a prefix, one a
/// line (key, upload id, when started), or as JSON.
fn uploads(args: &UploadsArgs) -> Result<ExitCode, Error> {
    let rt = runtime()?;
    let open = rt.block_on(safetensors_stream::convert::open_uploads(
        &args.url, args.abort,
    ))?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let v = serde_json::json!({"url": args.url, "aborted": args.abort, "uploads": open});
        writeln!(out, "{v}")
    } else {
        let verb = if args.abort { "aborted" } else { "open" };
        open.iter()
            .try_for_each(|u| writeln!(out, "{}\t{}\t{}", u.key, u.upload_id, u.initiated))
            .and_then(|()| writeln!(out, "{} uploads {verb} under {}", open.len(), args.url))
    };
    written.map_err(Error::io)?;
    Ok(ExitCode::SUCCESS)
}

/// Raises the soft limit on open files to the hard one, as Go's runtime
/// does: a sharded output keeps every shard's temp file open until the set
/// commits at once, so 1,200 shards would fail at the usual soft limit of
/// 1,024. Best effort: where the limit cannot be raised, a run with more
/// shards than descriptors fails with "Too many open files", writing nothing.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}

/// A command line clap refused. With `--report json` the failure is one
/// JSON object like any other; help and version are not failures.
fn usage_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Clap;
    let failure = !matches!(
        e.kind(),
        Clap::DisplayHelp | Clap::DisplayVersion | Clap::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !(failure && wants_json_report(std::env::args_os().skip(1))) {
        e.exit();
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first).to_string();
    let err = Error::new(ErrorKind::Usage(message));
    eprintln!(
        "{}",
        run::error_json(&err, code_number(err.category()), &[])
    );
    exit_code(err.category())
}

/// Whether the raw arguments ask for `--report json` (read by hand, since
/// clap could not parse them).
fn wants_json_report(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<_> = args.take_while(|a| a != "--").collect();
    args.iter().enumerate().any(|(i, a)| {
        a == "--report=json" || (a == "--report" && args.get(i + 1).is_some_and(|v| v == "json"))
    })
}

fn rules(reference: bool) -> Rules {
    Rules::of(if reference {
        Mode::Reference
    } else {
        Mode::Strict
    })
}

pub(crate) fn report(e: &Error) {
    eprintln!("{}: {e}", name());
}

/// The exit code of each error class, as `--help` and the README give them.
pub(crate) fn code_number(c: Category) -> u8 {
    match c {
        Category::BadInput => 1,
        Category::Usage => 2,
        Category::Io => 3,
    }
}

pub(crate) fn exit_code(c: Category) -> ExitCode {
    ExitCode::from(code_number(c))
}

/// The name this program was run by, which its messages start with:
/// `safetensors-convert` as installed beside ImageMagick's `convert`, or
/// `convert` (the binary's name in this repository, and any other).
pub(crate) fn name() -> &'static str {
    static NAME: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let run_as = std::env::args_os().next().unwrap_or_default();
        let file = Path::new(&run_as).file_name().unwrap_or_default();
        if file == "safetensors-convert" {
            "safetensors-convert"
        } else {
            "convert"
        }
    })
}

fn warn_hub_limit(cp: &Checkpoint) {
    for (path, h) in &cp.files {
        if h.header_len > HUB_HEADER_LIMIT {
            eprintln!(
                "{}: warning: {}: header is {} bytes; the Hugging Face Hub refuses headers over {}",
                name(),
                path,
                h.header_len,
                HUB_HEADER_LIMIT
            );
        }
    }
}

/// Checks every file; one line per file (or, with `--json`, one JSON object
/// on stdout naming each file's outcome); the worst failure sets the exit code.
fn validate(args: &ValidateArgs) -> Result<ExitCode, Error> {
    let mut worst: Option<Category> = None;
    let mut results = Vec::with_capacity(args.files.len());
    for given in &args.files {
        let (shown, opened) = match checkpoint_location(given) {
            Ok(location) => {
                let opened = validate_one(&location, args.reference);
                (location.to_string(), opened)
            }
            Err(e) => (given.display().to_string(), Err(e)),
        };
        match opened {
            Ok((tensors, bytes)) if args.json => results.push(serde_json::json!({
                "path": shown, "valid": true, "tensors": tensors, "data_bytes": bytes,
            })),
            Ok((tensors, bytes)) => {
                if !args.quiet {
                    println!(
                        "{shown}: valid ({}, {bytes} data bytes, {})",
                        Counted(tensors, "tensor"),
                        HumanBytes(bytes)
                    );
                }
            }
            Err(e) => {
                let category = e.category();
                let e = e.with_input(&shown);
                if args.json {
                    results.push(serde_json::json!({
                        "path": shown,
                        "valid": false,
                        "error": {
                            "kind": e.kind().name(),
                            "category": format!("{category:?}"),
                            "tensor": e.tensor(),
                            "offset": e.offset(),
                            "message": e.to_string(),
                        },
                    }));
                } else {
                    report(&e);
                }
                worst = Some(worst.map_or(category, |w| worse(w, category)));
            }
        }
    }
    if args.json {
        let v = serde_json::json!({
            "valid": worst.is_none(),
            "exit_code": worst.map_or(0, code_number),
            "files": results,
        });
        let _ = writeln!(std::io::stdout().lock(), "{v}");
    }
    Ok(worst.map_or(ExitCode::SUCCESS, exit_code))
}

/// What `given` names, parsed once: a checkpoint folder stands for its
/// index or its one model file, as for convert.
fn checkpoint_location(given: &Path) -> Result<Location, Error> {
    Ok(match Location::parse(given)? {
        // A folder a format reads whole (a distributed checkpoint) stays one.
        Location::Folder(dir) => match resolve_said(&dir)? {
            file if file != dir => Location::File(file),
            _ => Location::Folder(dir),
        },
        other => other,
    })
}

/// Whether `location` is a local PyTorch index.
fn is_pytorch_index(location: &Location) -> bool {
    location.path().is_some_and(inspect::is_pytorch_index)
}

/// Tensors and data bytes of one input: a safetensors file or index under
/// the chosen rules; a PyTorch checkpoint (one file, or an index and its
/// shards) or a distributed checkpoint's folder opened by the code a
/// conversion opens it with (every shard parsed, every tensor in the shard
/// the `weight_map` says, every view within its storage), so that validate
/// takes what a folder of them resolves to and the file itself alike, as
/// inspect does.
fn validate_one(location: &Location, reference: bool) -> Result<(usize, u64), Error> {
    if is_pytorch_index(location) || matches!(location, Location::Folder(_)) {
        return validate_as_converted(location);
    }
    match open_checkpoint(location, rules(reference)) {
        Ok(cp) => {
            warn_hub_limit(&cp);
            Ok((cp.tensor_count(), cp.data_len()))
        }
        Err(e) if is_pytorch_checkpoint(&e) => validate_as_converted(location),
        Err(e) => Err(e),
    }
}

/// Whether reading `path` as safetensors failed because it is a PyTorch
/// checkpoint (the reader says what an input is when it knows).
fn is_pytorch_checkpoint(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::NotSafetensors { what } if what.starts_with("a PyTorch checkpoint"))
}

fn validate_as_converted(location: &Location) -> Result<(usize, u64), Error> {
    let rt = runtime()?;
    let notice = |note: &Note| eprintln!("{}: {note}", name());
    let options = SourceOptions::default().freed_memory(FreedMemoryHook::new(collect_freed_memory));
    let source = rt.block_on(open_location(location, &options, &notice))?;
    let mut bytes = 0u64;
    for t in source.tensors() {
        let n = t.byte_len().map_err(|e| e.with_tensor(t.name.clone()))?;
        bytes = bytes.checked_add(n).ok_or_else(|| {
            Error::new(ErrorKind::Usage("the tensors' bytes overflow u64".into()))
        })?;
    }
    Ok((source.tensors().len(), bytes))
}

/// Environment failures outrank bad input, which outranks usage.
fn worse(a: Category, b: Category) -> Category {
    let rank = |c| match c {
        Category::Usage => 0,
        Category::BadInput => 1,
        Category::Io => 2,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// Shows each file in turn (a blank line between tables; with `--json`,
/// one file's object, or an array of them for several); a file that fails
/// is reported and the others still shown; the worst failure sets the exit code.
fn run_inspect(args: &InspectArgs) -> Result<ExitCode, Error> {
    let mut worst: Option<Category> = None;
    let mut texts = Vec::with_capacity(args.files.len());
    let mut objects = Vec::with_capacity(args.files.len());
    for given in &args.files {
        match inspect_one(given, args) {
            Ok(Shown::Text(text)) => texts.push(text),
            Ok(Shown::Json(v)) => objects.push(v),
            Err(e) => {
                report(&e);
                worst = Some(worst.map_or(e.category(), |w| worse(w, e.category())));
            }
        }
    }
    let text = match (args.json, args.files.len()) {
        (false, _) => texts.join("\n"),
        (true, 1) => objects.first().map(pretty).unwrap_or_default(),
        (true, _) => pretty(&serde_json::Value::Array(objects)),
    };
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(worst.map_or(ExitCode::SUCCESS, exit_code))
}

/// What inspect shows of one file.
enum Shown {
    Text(String),
    Json(serde_json::Value),
}

fn inspect_one(given: &Path, args: &InspectArgs) -> Result<Shown, Error> {
    // A GGUF's metadata is listed whether or not --gguf-metadata is given;
    // headers only: `cat x.safetensors | convert inspect -` is not spooled.
    let mut options = run::source_options(&args.input)?.listing_only(true);
    options.gguf.metadata = true;
    // A checkpoint folder stands for its index or its one model file, as for convert.
    let file = checkpoint_location(given)?;
    if options.raw.is_none() && reads_as_checkpoint(&file)? {
        inspect_checkpoint(&file, args)
    } else if let Some(path) = file.path().filter(|p| options.raw.is_none() && is_gguf(p)) {
        inspect_gguf(path, args, &options)
    } else {
        inspect_source(&file, args, &options)
    }
}

/// The input a folder stands for, saying on stderr when a folder's safetensors form was
/// chosen over another (`pytorch_model.bin` beside `model.safetensors`).
fn resolve_said(given: &Path) -> Result<std::path::PathBuf, Error> {
    let resolved = resolve_folder(given)?;
    if let Some(said) = passed_over_notice(given, &resolved) {
        eprintln!("{}: {said}", name());
    }
    Ok(resolved.path)
}

/// A local GGUF file (a compressed or piped one is listed as any input).
fn is_gguf(path: &Path) -> bool {
    path.as_os_str() != "-"
        && matches!(detect_file(path), Ok(Some(Format::Row(row))) if row.name() == "gguf")
}

/// A GGUF file with each tensor's stored type and every metadata key.
fn inspect_gguf(file: &Path, args: &InspectArgs, options: &SourceOptions) -> Result<Shown, Error> {
    let shown = file.display().to_string();
    let input = |e: Error| e.with_input(&shown);
    let f = std::fs::File::open(file).map_err(|e| input(Error::io(e)))?;
    let len = f.metadata().map_err(|e| input(Error::io(e)))?.len();
    let src = GgufSource::open(f, len, &shown, options)?;
    Ok(if args.json {
        Shown::Json(inspect::gguf_to_json(&src).map_err(input)?)
    } else {
        Shown::Text(inspect::render_gguf(&src).map_err(input)?)
    })
}

/// An index, or a file that is not another format convert reads: shown
/// with its offsets, under the chosen rules (and their errors).
fn reads_as_checkpoint(location: &Location) -> Result<bool, Error> {
    let path = match location {
        Location::File(path) => path,
        Location::Stdio | Location::Folder(_) => return Ok(false),
        Location::Object(url) => {
            let name = url.name();
            return Ok(is_index_path(Path::new(name)) || name.ends_with(".safetensors"));
        }
    };
    if is_index_path(path) {
        return Ok(true);
    }
    if inspect::is_pytorch_index(path) {
        return Ok(false);
    }
    let format = detect_file(path).map_err(|e| Error::io(e).with_input(path.display()))?;
    // An unknown file is shown with the header rules' precise error only when
    // named .safetensors; any other is "unknown input format", as converting says.
    let named_safetensors = path.extension().is_some_and(|e| e == "safetensors");
    Ok(match format {
        Some(f) if f == Format::SAFETENSORS => true,
        Some(Format::Unknown) => named_safetensors,
        _ => false,
    })
}

fn inspect_checkpoint(file: &Location, args: &InspectArgs) -> Result<Shown, Error> {
    let cp = open_checkpoint(file, rules(args.reference))?;
    warn_hub_limit(&cp);
    Ok(if args.json {
        Shown::Json(inspect::to_json(&cp))
    } else {
        Shown::Text(inspect::render_table(&cp))
    })
}

/// A local file or index, or an object (`s3://`, `https://`, ...) read by ranges.
fn open_checkpoint(location: &Location, rules: Rules) -> Result<Checkpoint, Error> {
    let path = match location {
        Location::File(path) | Location::Folder(path) => path.as_path(),
        Location::Stdio => Path::new("-"),
        Location::Object(url) => return open_object_checkpoint(url, rules),
    };
    Checkpoint::open(path, rules)
}

/// An object's checkpoint: the object, or the shards its index names.
fn open_object_checkpoint(
    url: &safetensors_stream::store::ObjectUrl,
    rules: Rules,
) -> Result<Checkpoint, Error> {
    runtime()?.block_on(safetensors_stream::source::object::open_checkpoint(
        url, rules,
    ))
}

/// Any other input, opened by the very code a conversion opens it with.
fn inspect_source(
    file: &Location,
    args: &InspectArgs,
    options: &SourceOptions,
) -> Result<Shown, Error> {
    let rt = runtime()?;
    let notice = |note: &Note| eprintln!("{}: {note}", name());
    let source = rt.block_on(open_location(file, options, &notice))?;
    let listing = Listing::of(source.as_ref());
    let pieces = inspect::pieces_of(source.as_ref());
    let input = |e: Error| e.with_input(&listing.input);
    Ok(if args.json {
        let mut v = inspect::listing_to_json(&listing).map_err(input)?;
        inspect::add_pieces_json(&mut v, &listing, &pieces);
        Shown::Json(v)
    } else {
        let text = inspect::render_listing(&listing).map_err(input)?;
        Shown::Text(text + &inspect::render_pieces(&listing, &pieces))
    })
}

fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("JSON of a Value");
    s.push('\n');
    s
}
