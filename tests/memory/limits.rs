//! The caller's limits (issue 41): lowering one makes a valid input be
//! refused naming it, raising one admits an input refused by default;
//! through the binary (`--limit NAME=VALUE`) and the library
//! (`SourceOptions::limits`).

use crate::hostile::{convert, floats, one_view, output_tensors, refused, write};
use safetensors_stream::limits::{Limit, Limits};
use safetensors_stream::source::{open_input, Source};
use safetensors_stream::{ErrorKind, SourceOptions};

#[test]
fn a_lowered_limit_refuses_a_valid_checkpoint_naming_the_limit() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // 4 KiB of position ids from one float: written by default.
    let input = one_view(tmp.path(), "ids.pt", &[1, 1024], &[0, 0], floats(1));
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::remove_file(tmp.path().join("out.safetensors")).unwrap();
    let lowered = ["--limit", "expanded-view-bytes=1KiB"];
    let msg = refused(tmp.path(), &input, &lowered, "expanded_view");
    assert!(msg.contains("(expanded-view-bytes)"), "{msg}");
    assert!(msg.contains("--limit expanded-view-bytes=4096"), "{msg}");
    // Its data.pkl is far more than 64 bytes.
    let msg = refused(
        tmp.path(),
        &input,
        &["--limit", "pickle-bytes=64"],
        "pickle_bytes",
    );
    assert!(
        msg.contains("over the limit pickle-bytes=64")
            && msg.contains("raise it with --limit pickle-bytes=128"),
        "{msg}"
    );
    // No room at all beyond twice the pickle's bytes: its values need more.
    let msg = refused(
        tmp.path(),
        &input,
        &["--limit", "pickle-budget=0"],
        "pickle_budget",
    );
    assert!(msg.contains("--limit pickle-budget="), "{msg}");
}

#[test]
fn a_raised_limit_admits_a_view_refused_by_default() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // One row past the 4 MiB a view may have whatever its factor.
    let rows = (4 << 20) / 8 + 1;
    let input = one_view(tmp.path(), "past.pt", &[rows, 2], &[0, 1], floats(2));
    refused(tmp.path(), &input, &[], "expanded_view");
    let raised = [
        "--limit",
        "expanded-view-bytes=8MiB",
        "-o",
        "out.safetensors",
    ];
    let r = convert(tmp.path(), &[&[input.as_str()][..], &raised[..]].concat());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = output_tensors(&tmp.path().join("out.safetensors"));
    assert_eq!(t[0].1, vec![rows as u64, 2]);
}

#[test]
fn limits_are_listed_in_help_and_bad_ones_are_usage_errors() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let help = convert(tmp.path(), &["--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    for limit in Limit::ALL {
        let shown = format!("{}={}", limit.name(), limit.show(limit.default_value()));
        assert!(text.contains(&shown), "{shown} not in --help:\n{text}");
    }
    for (bad, says) in [
        ("header-bytes=200MB", "cannot be raised"),
        ("no-such=1", "no such limit"),
        ("pickle-bytes=lots", "expected a size"),
    ] {
        let r = convert(tmp.path(), &["x.pt", "--limit", bad, "-o", "o.safetensors"]);
        assert_eq!(r.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(stderr.contains(says), "{bad}: {stderr}");
    }
}

#[test]
fn the_library_takes_limits_in_its_source_options() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // A safetensors file of one tensor: an 80-odd byte header.
    let header = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&floats(1));
    let path = tmp.path().join(write(tmp.path(), "one.safetensors", &file));
    assert!(open_under(&path, Limits::default()).is_ok());
    let lowered = Limits::default().with(Limit::HeaderBytes, 16).unwrap();
    let e = open_under(&path, lowered).err().expect("refused");
    let ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!((refusal.limit, refusal.value), ("header-bytes", 16));
    assert_eq!(refusal.raise.as_deref(), Some("--limit header-bytes=32"));
    assert_eq!(e.kind().name(), "header_bytes");
    assert!(e.to_string().contains("one.safetensors"), "{e}");
    // The binary's --limit reaches the same check.
    let lowered = ["--limit", "header-bytes=16"];
    let msg = refused(tmp.path(), "one.safetensors", &lowered, "header_bytes");
    assert!(msg.contains("--limit header-bytes=32"), "{msg}");
}

/// The PyTorch limits, each through the binary and the library, on fixture
/// `tied.pt` (tensors viewing one storage: 72 bytes written of 24 stored).
/// Each set of limits that refuses it comes with a set beside it that does
/// not, so that the refusal is the named limit's: the expansion limits act
/// in pairs (a view, and a checkpoint, is refused past its ratio AND its
/// bytes).
#[test]
fn every_pytorch_limit_is_the_binarys_and_the_librarys() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/ok");
    std::fs::copy(fixture.join("tied.pt"), tmp.path().join("tied.pt")).unwrap();
    let path = tmp.path().join("tied.pt");
    // (limits refusing it, the refusal's kind, limits letting it through)
    let cases: [(&[&str], &str, &[&str]); 5] = [
        (&["pickle-bytes=64"], "pickle_bytes", &["pickle-bytes=1MiB"]),
        (
            &["pickle-budget=0"],
            "pickle_budget",
            &["pickle-budget=8MiB"],
        ),
        (
            &["expansion-ratio=2", "expanded-file-bytes=0"],
            "py_torch",
            &["expansion-ratio=3", "expanded-file-bytes=0"],
        ),
        (
            &["expansion-ratio=1", "expanded-file-bytes=0"],
            "py_torch",
            &["expansion-ratio=1"],
        ),
        (
            &["expansion-ratio=0", "expanded-view-bytes=0"],
            "expanded_view",
            &["expansion-ratio=0"],
        ),
    ];
    let flags = |set: &[&str]| -> Vec<String> {
        set.iter()
            .flat_map(|s| ["--limit".to_string(), s.to_string()])
            .collect()
    };
    let limits = |set: &[&str]| {
        set.iter().fold(Limits::default(), |mut limits, s| {
            limits.set_text(s).unwrap();
            limits
        })
    };
    for (low, kind, through) in cases {
        let low_flags = flags(low);
        let low_flags: Vec<&str> = low_flags.iter().map(String::as_str).collect();
        let msg = refused(tmp.path(), "tied.pt", &low_flags, kind);
        assert!(msg.contains("tied.pt"), "{low:?}: {msg}");
        let e = open_under(&path, limits(low)).err().expect("refused");
        assert_eq!(e.kind().name(), kind, "{low:?}: {e}");
        if let Err(e) = open_under(&path, limits(through)) {
            panic!("{through:?}: {e}");
        }
        let mut args = vec!["tied.pt".to_string(), "-o".into(), "out.safetensors".into()];
        args.extend(flags(through));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = convert(tmp.path(), &args);
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "{through:?}: {stderr}");
        std::fs::remove_file(tmp.path().join("out.safetensors")).unwrap();
    }
}

/// Opens the input at `path` through the library under `limits`.
fn open_under(
    path: &std::path::Path,
    limits: Limits,
) -> safetensors_stream::Result<Box<dyn Source>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let options = SourceOptions::default().limits(limits);
    rt.block_on(open_input(path, &options, &|_| {}))
}

/// Copies fixture checkpoint `fsdp2` (its `.metadata` 8,598 bytes) into `dir`.
fn dcp_checkpoint(dir: &std::path::Path) -> std::path::PathBuf {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/dcp/fsdp2");
    let to = dir.join("ckpt");
    std::fs::create_dir(&to).unwrap();
    for name in [".metadata", "__0_0.distcp", "__1_0.distcp"] {
        std::fs::copy(from.join(name), to.join(name)).unwrap();
    }
    to
}

#[test]
fn a_distributed_checkpoint_metadata_limit_is_the_callers() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = dcp_checkpoint(tmp.path());
    assert!(open_under(&ckpt, Limits::default()).is_ok());
    let lowered = Limits::default()
        .with(Limit::DcpMetadataBytes, 4096)
        .unwrap();
    let e = open_under(&ckpt, lowered).err().expect("refused");
    let ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!((refusal.limit, refusal.value), ("dcp-metadata-bytes", 4096));
    assert_eq!(
        refusal.raise.as_deref(),
        Some("--limit dcp-metadata-bytes=8KiB")
    );
    assert!(e.to_string().contains(".metadata is 8598 bytes"), "{e}");
    // Through the binary: refused below its size, converted at it.
    let msg = refused(
        tmp.path(),
        "ckpt",
        &["--limit", "dcp-metadata-bytes=8KiB"],
        "dcp_metadata_bytes",
    );
    assert!(msg.contains("--limit dcp-metadata-bytes=16KiB"), "{msg}");
    let r = convert(
        tmp.path(),
        &[
            "ckpt",
            "--limit",
            "dcp-metadata-bytes=8598",
            "-o",
            "out.safetensors",
        ],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}
