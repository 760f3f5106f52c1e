//! Replays every input kept in `fixtures/fuzz-regressions/TARGET/` through
//! the fuzz harness (`fuzz/src/lib.rs`: the very calls the cargo-fuzz
//! targets make, with the same invariants), and checks that nothing panics,
//! on any thread, and that each step ends as recorded in the input's
//! `.expected` file: `ok`, or the kind of the typed error it was refused with.
//!
//! A crash found by fuzzing becomes a regression by copying its minimised
//! input into the target's folder and recording its outcome:
//!
//! ```text
//! UPDATE_FUZZ_REGRESSIONS=1 cargo test --test fuzz_regressions
//! ```
//!
//! which writes the missing (or changed) `.expected` files; review them.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod harness;

use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use harness::{Harness, Outcomes};
use safetensors_stream::ErrorKind;

const TARGETS: [&str; 13] = [
    "safetensors_header",
    "npy_header",
    "zip_directory",
    "detect",
    "convert_bytes",
    "pickle",
    "bnb_record",
    "gguf_header",
    "onnx_model",
    "msgpack_file",
    "hdf5_file",
    "dcp",
    "quantized_record",
];

/// Panics seen on any thread: tokio turns a panic in a blocking read into
/// an error, so catching the unwind on this thread alone would miss it.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    let default = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default(info);
    }));
}

/// `HeaderJson("...")` -> `HeaderJson`: the variant, not its message (a
/// header's, an index's, a pickle's, a PyTorch or a distributed
/// checkpoint's or a zip's own, not the
/// `Header`/`Index`/`Pickle`/`PyTorch`/`Dcp`/`Zip` that groups it).
fn variant(kind: &ErrorKind) -> String {
    let debug = match kind {
        ErrorKind::Header(e) => format!("{e:?}"),
        ErrorKind::Index(e) => format!("{e:?}"),
        ErrorKind::Pickle(e) => format!("{e:?}"),
        ErrorKind::PyTorch(e) => format!("{e:?}"),
        ErrorKind::Dcp(e) => format!("{e:?}"),
        ErrorKind::Zip(e) => format!("{e:?}"),
        kind => format!("{kind:?}"),
    };
    let end = debug
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(debug.len());
    debug[..end].to_string()
}

fn describe(outcomes: &Outcomes) -> String {
    let mut out = String::new();
    for (step, result) in outcomes {
        match result {
            Ok(()) => writeln!(out, "{step}: ok"),
            Err(e) => writeln!(out, "{step}: {}", variant(e.kind())),
        }
        .expect("writing to a String");
    }
    out
}

fn run(harness: &Harness, target: &str, data: &[u8]) -> String {
    match target {
        "safetensors_header" => describe(&harness::safetensors_header(data)),
        "npy_header" => describe(&harness::npy_header(data)),
        "zip_directory" => describe(&harness.zip_directory(data)),
        "detect" => format!("detect: {:?}\n", harness::detect_bytes(data)),
        "convert_bytes" => describe(&harness.convert_bytes(data)),
        "pickle" => describe(&harness::pickle(data)),
        "bnb_record" => format!("bnb_record: {:?}\n", harness::bnb_record(data)),
        "gguf_header" => describe(&harness::gguf_header(data)),
        "onnx_model" => describe(&harness.onnx_model(data)),
        "msgpack_file" => describe(&harness::msgpack_file(data)),
        "hdf5_file" => describe(&harness::hdf5_file(data)),
        "dcp" => describe(&harness.dcp(data)),
        "quantized_record" => describe(&harness.quantized_record(data)),
        other => panic!("unknown fuzz target folder {other:?}"),
    }
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.expect("a folder entry").path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.is_file() && p.extension().is_none_or(|e| e != "expected"));
    files.sort();
    files
}

#[test]
fn fuzz_regressions_replay_clean() {
    count_panics();
    let update = std::env::var_os("UPDATE_FUZZ_REGRESSIONS").is_some();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz-regressions");
    let harness = Harness::new();
    let mut failures = Vec::new();
    let mut replayed = 0;
    for target in TARGETS {
        for input in inputs(&root.join(target)) {
            let data = std::fs::read(&input).expect("reading a regression input");
            let shown = input.strip_prefix(&root).unwrap_or(&input).display();
            let before = PANICS.load(Ordering::SeqCst);
            let got = panic::catch_unwind(AssertUnwindSafe(|| run(&harness, target, &data)));
            replayed += 1;
            let got = match got {
                Ok(got) if PANICS.load(Ordering::SeqCst) == before => got,
                _ => {
                    failures.push(format!("{shown}: panicked (see the message above)"));
                    continue;
                }
            };
            let expected_path = input.with_extension(match input.extension() {
                Some(e) => format!("{}.expected", e.to_string_lossy()),
                None => "expected".to_string(),
            });
            let expected = std::fs::read_to_string(&expected_path).ok();
            if expected.as_deref() == Some(got.as_str()) {
                continue;
            }
            if update {
                std::fs::write(&expected_path, &got).expect("writing an .expected file");
                eprintln!("updated {}", expected_path.display());
            } else {
                failures.push(format!(
                    "{shown}: outcome differs from {}\n--- expected\n{}--- got\n{got}",
                    expected_path.display(),
                    expected.as_deref().unwrap_or("(no .expected file)\n"),
                ));
            }
        }
    }
    assert!(replayed > 0, "no inputs under {}", root.display());
    assert!(
        failures.is_empty(),
        "{} of {replayed} fuzz regression inputs failed \
         (UPDATE_FUZZ_REGRESSIONS=1 records new outcomes):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
