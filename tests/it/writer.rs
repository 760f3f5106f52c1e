//! The streaming `Writer` as a user meets it: atomic file output, every
//! count checked, nothing left behind on failure, and the async twin.

use crate::support;

use support::listing;

use safetensors_stream::header::{parse_file_bytes, Order, Rules};
use safetensors_stream::{
    AsyncWriter, Dtype, ErrorKind, HeaderError, TensorMeta, Writer, WriterOptions,
};

fn two() -> Vec<TensorMeta> {
    vec![
        TensorMeta::new("b", Dtype::U8, [3]),
        TensorMeta::new("a", Dtype::F32, [2]),
    ]
}

fn quick() -> WriterOptions {
    WriterOptions::default().sync(false)
}

#[test]
fn a_finished_file_appears_whole_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let mut w = Writer::create(&path, two(), quick().metadata([("k", "v")])).unwrap();
    // Canonical order: F32 sorts before U8.
    assert_eq!(w.order().collect::<Vec<_>>(), ["a", "b"]);
    w.write("a", &1f32.to_le_bytes()).unwrap();
    assert!(!path.exists());
    w.write("a", &2f32.to_le_bytes()).unwrap();
    w.write("b", &[7, 8]).unwrap();
    w.write("b", &[9]).unwrap();
    w.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let header = parse_file_bytes(&bytes, Rules::STRICT).unwrap();
    assert_eq!(header.metadata.unwrap()["k"], "v");
    assert_eq!(&bytes[bytes.len() - 3..], &[7, 8, 9]);
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn dropping_an_unfinished_writer_leaves_nothing_and_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    std::fs::write(&path, b"old bytes").unwrap();
    let mut w = Writer::create(&path, two(), quick()).unwrap();
    w.write("a", &[0; 8]).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), b"old bytes");
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn a_short_tensor_fails_finish_naming_it_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let mut w = Writer::create(&path, two(), quick()).unwrap();
    w.write("a", &[0; 8]).unwrap();
    w.write("b", &[1]).unwrap();
    let e = w.finish().unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::TensorTooShort {
            expected: 3,
            actual: 1
        }
    ));
    assert_eq!(e.tensor(), Some("b"));
    assert_eq!(e.output(), Some(path.display().to_string().as_str()));
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn wrong_names_orders_and_counts_are_refused_without_counting() {
    let mut w = Writer::new(Vec::new(), two(), quick()).unwrap();
    let e = w.write("nope", &[1]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorNotFound(n) if n == "nope"));
    let e = w.write("b", &[1]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::WriteOrder { .. }));
    let e = w.write("a", &[0; 9]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorTooLong { expected: 8 }));
    // The refused writes counted nothing: the tensors still take their bytes.
    w.write("a", &[0; 8]).unwrap();
    w.write("b", &[1, 2, 3]).unwrap();
    let bytes = w.finish().unwrap();
    assert!(parse_file_bytes(&bytes, Rules::STRICT).is_ok());
}

#[test]
fn tensors_as_declared_and_empty_ones_need_no_bytes() {
    let tensors = vec![
        TensorMeta::new("z", Dtype::U8, [2]),
        TensorMeta::new("empty", Dtype::F64, [0, 5]),
        TensorMeta::new("a", Dtype::U8, [1]),
    ];
    let mut w = Writer::new(Vec::new(), tensors, quick().order(Order::AsGiven)).unwrap();
    assert_eq!(w.order().collect::<Vec<_>>(), ["z", "empty", "a"]);
    w.write("z", &[1, 2]).unwrap();
    w.write("a", &[3]).unwrap();
    let bytes = w.finish().unwrap();
    assert_eq!(&bytes[bytes.len() - 3..], &[1, 2, 3]);
}

#[test]
fn a_declaration_the_format_refuses_is_an_error_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let dup = vec![
        TensorMeta::new("a", Dtype::U8, [1]),
        TensorMeta::new("a", Dtype::U8, [1]),
    ];
    let e = Writer::create(&path, dup, quick()).unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Header(HeaderError::DuplicateTensor { .. })
    ));
    let e = Writer::create(
        &path,
        [TensorMeta::new("__metadata__", Dtype::U8, [1])],
        quick(),
    )
    .unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Header(HeaderError::ReservedName)
    ));
    assert!(listing(dir.path()).is_empty());
}

#[tokio::test]
async fn the_async_writer_writes_the_same_bytes() {
    let fill = |name: &str| -> Vec<u8> { name.bytes().cycle().take(8).collect() };
    let mut sync = Writer::new(Vec::new(), two(), quick()).unwrap();
    let mut not_sync = AsyncWriter::new(Vec::new(), two(), quick()).await.unwrap();
    for (name, len) in [("a", 8), ("b", 3)] {
        sync.write(name, &fill(name)[..len]).unwrap();
        not_sync.write(name, &fill(name)[..len]).await.unwrap();
    }
    assert_eq!(sync.finish().unwrap(), not_sync.finish().await.unwrap());
}

#[tokio::test]
async fn the_async_writer_to_a_path_is_atomic_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let mut w = AsyncWriter::create(&path, two(), quick()).await.unwrap();
    w.write("a", &[0; 8]).await.unwrap();
    drop(w);
    assert!(listing(dir.path()).is_empty());
    let mut w = AsyncWriter::create(&path, two(), quick()).await.unwrap();
    w.write("a", &[0; 8]).await.unwrap();
    w.write("b", &[0; 3]).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn the_stream_own_tensors_example_writes_what_it_promises() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("own.safetensors");
    let status = std::process::Command::new(example("stream_own_tensors"))
        .arg(&out)
        .arg("1")
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&out).unwrap();
    let header = parse_file_bytes(&bytes, Rules::STRICT).unwrap();
    let start = header.data_start() as usize;
    for t in &header.tensors {
        assert_eq!(t.meta.shape, [1024, 256]);
        let k: u64 = t.meta.name["layer.".len()..]
            .split('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let data = &bytes[start + t.begin as usize..start + t.end as usize];
        for (i, v) in data.chunks_exact(4).enumerate().step_by(997) {
            let v = f32::from_le_bytes(v.try_into().unwrap());
            assert_eq!(
                v,
                ((i as u64 % 1000) * (k + 1)) as f32,
                "{} [{i}]",
                t.meta.name
            );
        }
    }
}

/// An example program: `cargo test` builds the examples beside the test
/// binaries (`target/debug/examples/`).
fn example(name: &str) -> std::path::PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} not built: run through `cargo test`",
        path.display()
    );
    path
}

#[test]
fn the_convert_sync_example_converts_from_plain_main() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let status = std::process::Command::new(example("convert_sync"))
        .arg("fixtures/example/model.npz")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let expected = std::fs::read("fixtures/example/model.safetensors").unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), expected);
}

#[test]
fn convert_blocking_refuses_inside_a_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = rt.block_on(async {
        let out = safetensors_stream::Output::File("never.safetensors".into());
        let options = safetensors_stream::ConvertOptions::default();
        safetensors_stream::convert_blocking(&["x".into()], &out, &options).unwrap_err()
    });
    assert!(matches!(e.kind(), ErrorKind::BlockingInRuntime(_)));
}
