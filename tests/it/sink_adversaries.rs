//! The sink against hostile writers and lying sources, the sink's own API
//! contract, and the atomic file output's clean-up when a run fails.

use crate::support;

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use safetensors_stream::convert::{convert, convert_sources, ConvertOptions, Output};
use safetensors_stream::header::{encode, Order, TensorMeta};
use safetensors_stream::internals::write_shard;
use safetensors_stream::internals::SafetensorsSource;
use safetensors_stream::plan::{plan, PlanOptions, ShardPlan};
use safetensors_stream::sink::{Sink, SinkOptions};
use safetensors_stream::source::MemorySource;
use safetensors_stream::source::{Listing, Source, TensorData};
use safetensors_stream::{Category, Dtype, Error, ErrorKind};
use support::pipeline::*;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

// ---- hostile writers -----------------------------------------------------------

/// Accepts at most one byte per call.
#[derive(Debug, Default)]
struct OneByte(Vec<u8>);

impl AsyncWrite for OneByte {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match buf.first() {
            Some(&b) => {
                self.0.push(b);
                Poll::Ready(Ok(1))
            }
            None => Poll::Ready(Ok(0)),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Returns Pending (after waking itself) before every write and flush it
/// accepts, and takes at most 7 bytes at a time.
#[derive(Debug, Default)]
struct Stalling {
    out: Vec<u8>,
    ready: bool,
    pendings: usize,
    flushed: bool,
}

impl Stalling {
    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        if self.ready {
            self.ready = false;
            false
        } else {
            self.ready = true;
            self.pendings += 1;
            cx.waker().wake_by_ref();
            true
        }
    }
}

impl AsyncWrite for Stalling {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let n = buf.len().min(7);
        self.out.extend_from_slice(&buf[..n]);
        self.flushed = false;
        Poll::Ready(Ok(n))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        self.flushed = true;
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Accepts `left` bytes, then fails every call.
#[derive(Debug)]
struct FailAfter {
    out: Vec<u8>,
    left: usize,
}

impl AsyncWrite for FailAfter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.left == 0 {
            return Poll::Ready(Err(io::Error::other("disk on fire")));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        self.out.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.left == 0 {
            return Poll::Ready(Err(io::Error::other("disk on fire")));
        }
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn open_input(path: &Path) -> safetensors_stream::Result<Box<dyn Source>> {
    Ok(Box::new(SafetensorsSource::open(path)?))
}

/// The fixture's sources and its one-shard plan.
fn fixture_job(name: &str) -> (Vec<Box<dyn Source>>, ShardPlan, Vec<u8>) {
    let path = fixtures().join("reference").join(name);
    let sources = vec![open_input(&path).unwrap()];
    let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
    // spec_empty.safetensors holds no tensor.
    let allow_empty = PlanOptions::default().allow_empty(true);
    let mut p = plan(&listings, &allow_empty).unwrap();
    assert_eq!(p.shards.len(), 1);
    (sources, p.shards.remove(0), std::fs::read(path).unwrap())
}

const FIXTURES: [&str; 5] = [
    "all_dtypes.safetensors",
    "mixed.safetensors",
    "empty_tensors.safetensors",
    "metadata_unicode.safetensors",
    "spec_empty.safetensors",
];

#[test]
fn one_byte_and_stalling_writers_give_the_same_bytes_as_a_vec() {
    for name in FIXTURES {
        for buffer_size in [1, 3, 8, 4 << 20] {
            let opts = SinkOptions::default().buffer_size(buffer_size);
            let (mut s, shard, original) = fixture_job(name);
            let plain = block_on(write_shard(Vec::new(), &shard, &mut s, opts, "vec")).unwrap();
            assert!(plain == original, "{name}: Vec writer");

            let (mut s, shard, _) = fixture_job(name);
            let one =
                block_on(write_shard(OneByte::default(), &shard, &mut s, opts, "one")).unwrap();
            assert!(one.0 == plain, "{name}/{buffer_size}: one byte per call");

            let (mut s, shard, _) = fixture_job(name);
            let st = block_on(write_shard(
                Stalling::default(),
                &shard,
                &mut s,
                opts,
                "stall",
            ))
            .unwrap();
            assert!(
                st.out == plain,
                "{name}/{buffer_size}: pending between calls"
            );
            assert!(
                st.pendings > 0 && st.flushed,
                "{name}: the writer stalled and was flushed last"
            );
        }
    }
}

#[test]
fn a_writer_that_fails_after_n_bytes_gives_an_io_error_naming_the_output() {
    let (_, _, original) = fixture_job("mixed.safetensors");
    let len = original.len();
    let header_len = len - 102; // mixed holds 102 data bytes
    for n in [
        0,
        1,
        7,
        8,
        header_len - 1,
        header_len,
        header_len + 1,
        len - 1,
        len,
    ] {
        let (mut s, shard, _) = fixture_job("mixed.safetensors");
        let w = FailAfter {
            out: Vec::new(),
            left: n,
        };
        let opts = SinkOptions::default().buffer_size(16);
        let e = block_on(write_shard(w, &shard, &mut s, opts, "out.safetensors")).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Io(_)), "after {n}: {e:?}");
        assert_eq!(e.category(), Category::Io);
        assert_eq!(
            e.output(),
            Some("out.safetensors"),
            "after {n}: names the output"
        );
        assert!(e.to_string().contains("disk on fire"), "{e}");
    }
}

// ---- file output: a failure leaves nothing --------------------------------------

/// A source of `tensors` whose reader for tensor `fail_tensor` fails with an
/// I/O error after `fail_after` bytes; every other tensor is delivered whole.
struct Failing {
    listing: Listing,
    data: Vec<Vec<u8>>,
    fail_tensor: usize,
    fail_after: usize,
}

struct FailingReader<'a> {
    data: &'a [u8],
    pos: usize,
    fail_at: Option<usize>,
}

impl AsyncRead for FailingReader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.fail_at == Some(self.pos) {
            return Poll::Ready(Err(io::Error::other("input vanished")));
        }
        let end = self.fail_at.unwrap_or(self.data.len()).min(self.data.len());
        let n = buf.remaining().min(end - self.pos);
        buf.put_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl Source for Failing {
    fn listing(&self) -> &Listing {
        &self.listing
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        let fail_at = (k == self.fail_tensor).then_some(self.fail_after);
        let data = &self.data[k];
        async move {
            Ok(TensorData::new(FailingReader {
                data,
                pos: 0,
                fail_at,
            }))
        }
        .boxed()
    }
}

fn failing(fail_tensor: usize, fail_after: usize) -> Failing {
    let ts: Vec<T> = (0..4)
        .map(|i| T::new(&format!("t{i}"), Dtype::U8, &[1000]))
        .collect();
    Failing {
        listing: Listing {
            input: "failing-input".into(),
            tensors: ts
                .iter()
                .map(|t| TensorMeta::new(t.name.clone(), t.dtype, t.shape.clone()))
                .collect(),
            metadata: None,
        },
        data: ts.into_iter().map(|t| t.data).collect(),
        fail_tensor,
        fail_after,
    }
}

fn quick(plan: PlanOptions) -> ConvertOptions {
    ConvertOptions::default()
        .plan(plan)
        .sink(SinkOptions::default().buffer_size(64))
        .sync(false)
}

#[test]
fn a_failed_file_output_leaves_no_file_and_no_temp_file() {
    for (tensor, after) in [(0, 0), (0, 500), (2, 999), (3, 0), (3, 999)] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        let mut sources: Vec<Box<dyn Source>> = vec![Box::new(failing(tensor, after))];
        let e = block_on(convert_sources(
            &mut sources,
            &Output::File(out.clone()),
            &quick(PlanOptions::default()),
        ))
        .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Io(_)), "{e:?}");
        assert_eq!(e.input(), Some("failing-input"));
        assert_eq!(e.tensor(), Some(format!("t{tensor}").as_str()));
        assert!(
            listing(dir.path()).is_empty(),
            "left behind: {:?}",
            listing(dir.path())
        );
    }
}

#[test]
fn a_failed_run_keeps_an_existing_output_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "out.safetensors", b"precious old bytes");
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(failing(1, 10))];
    block_on(convert_sources(
        &mut sources,
        &Output::File(out.clone()),
        &quick(PlanOptions::default()),
    ))
    .unwrap_err();
    assert_eq!(std::fs::read(&out).unwrap(), b"precious old bytes");
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn a_sharded_output_that_fails_in_a_later_shard_leaves_no_shard() {
    // 4 tensors of 1000 bytes, one per shard; the last one fails.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    // An old index and shard from an earlier run keep their bytes.
    let old_index = write(
        dir.path(),
        "model.safetensors.index.json",
        b"{\"old\": true}",
    );
    let old_shard = write(dir.path(), "model-00001-of-00004.safetensors", b"old shard");
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(failing(3, 999))];
    let o = quick(PlanOptions::default().max_shard_size(Some(1000)));
    let e = block_on(convert_sources(&mut sources, &Output::File(out), &o)).unwrap_err();
    assert_eq!(e.tensor(), Some("t3"));
    assert_eq!(
        listing(dir.path()),
        [
            "model-00001-of-00004.safetensors",
            "model.safetensors.index.json"
        ]
    );
    assert_eq!(std::fs::read(old_index).unwrap(), b"{\"old\": true}");
    assert_eq!(std::fs::read(old_shard).unwrap(), b"old shard");
}

#[test]
fn an_input_truncated_after_opening_fails_without_leaving_a_file() {
    // The safetensors source validated the file on open; then it shrinks.
    let dir = tempfile::tempdir().unwrap();
    let ts = vec![
        T::new("a", Dtype::F32, &[64]),
        T::new("b", Dtype::U8, &[100]),
    ];
    let bytes = ref_serialize(&ts, None);
    let input = write(dir.path(), "in.safetensors", &bytes);
    let mut sources = vec![open_input(&input).unwrap()];
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap()
        .set_len(bytes.len() as u64 - 10)
        .unwrap();
    let out = dir.path().join("out.safetensors");
    let e = block_on(convert_sources(
        &mut sources,
        &Output::File(out.clone()),
        &quick(PlanOptions::default()),
    ))
    .unwrap_err();
    // Canonical order: a (F32) first, then b, which is 10 bytes short.
    assert!(
        matches!(
            e.kind(),
            ErrorKind::TensorTooShort {
                expected: 100,
                actual: 90
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.tensor(), Some("b"));
    assert_eq!(e.input(), Some(input.display().to_string().as_str()));
    assert_eq!(e.category(), Category::BadInput);
    assert_eq!(listing(dir.path()), ["in.safetensors"]);
}

// ---- lying sources ---------------------------------------------------------------

/// Claims `claim` bytes of U8 for tensor "liar" but delivers `give`.
struct Liar {
    listing: Listing,
    honest: Vec<u8>,
    lie: Vec<u8>,
}

impl Liar {
    fn new(claim: u64, give: usize) -> Liar {
        Liar {
            listing: Listing {
                input: "liar.bin".into(),
                tensors: vec![
                    TensorMeta::new("honest", Dtype::F32, [4]),
                    TensorMeta::new("liar", Dtype::U8, [claim]),
                ],
                metadata: None,
            },
            honest: vec![1; 16],
            lie: vec![7; give],
        }
    }
}

impl Source for Liar {
    fn listing(&self) -> &Listing {
        &self.listing
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        let bytes: &[u8] = if k == 0 { &self.honest } else { &self.lie };
        async move { Ok(TensorData::new(bytes)) }.boxed()
    }
}

fn run_liar(claim: u64, give: usize, buffer_size: usize) -> Result<Vec<u8>, Error> {
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Liar::new(claim, give))];
    let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
    let p = plan(&listings, &PlanOptions::default()).unwrap();
    block_on(write_shard(
        Vec::new(),
        &p.shards[0],
        &mut sources,
        SinkOptions::default().buffer_size(buffer_size),
        "out",
    ))
}

#[test]
fn a_source_that_yields_fewer_bytes_is_an_error_naming_the_tensor() {
    for buffer_size in [1, 4, 10, 4096] {
        for (claim, give) in [(10, 9), (10, 0), (100, 50), (1, 0)] {
            let e = run_liar(claim, give, buffer_size).unwrap_err();
            match e.kind() {
                ErrorKind::TensorTooShort { expected, actual } => {
                    assert_eq!((*expected, *actual), (claim, give as u64), "{e}");
                }
                k => panic!("expected TensorTooShort, got {k:?}"),
            }
            assert_eq!(e.tensor(), Some("liar"));
            assert_eq!(e.input(), Some("liar.bin"));
            assert_eq!(e.category(), Category::BadInput);
            let msg = e.to_string();
            assert!(
                msg.starts_with("liar.bin: ") && msg.contains("\"liar\""),
                "{msg}"
            );
        }
    }
}

#[test]
fn a_source_that_yields_more_bytes_is_an_error_naming_the_tensor() {
    for buffer_size in [1, 4, 10, 4096] {
        for (claim, give) in [(10, 11), (0, 1), (3, 4096)] {
            let e = run_liar(claim, give, buffer_size).unwrap_err();
            assert!(
                matches!(e.kind(), ErrorKind::TensorTooLong { expected } if *expected == claim),
                "{claim}/{give}: {e:?}"
            );
            assert_eq!(e.tensor(), Some("liar"));
            assert_eq!(e.input(), Some("liar.bin"));
        }
    }
    // The honest case passes, so the errors above are about the lie.
    let good = run_liar(10, 10, 4).unwrap();
    assert_eq!(&good[good.len() - 10..], &[7; 10]);
}

#[test]
fn a_lying_source_into_a_file_leaves_nothing() {
    for give in [5, 15] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Liar::new(10, give))];
        let e = block_on(convert_sources(
            &mut sources,
            &Output::File(out),
            &quick(PlanOptions::default()),
        ))
        .unwrap_err();
        assert_eq!(e.tensor(), Some("liar"));
        assert!(listing(dir.path()).is_empty());
    }
}

#[test]
fn a_renamed_lying_tensor_is_still_named() {
    // With --rename and --prefix the error should still say which tensor.
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Liar::new(10, 3))];
    let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
    let o = PlanOptions::default()
        .renames(vec![("liar".into(), "renamed".into())])
        .prefix(Some("p.".into()));
    let p = plan(&listings, &o).unwrap();
    let e = block_on(write_shard(
        Vec::new(),
        &p.shards[0],
        &mut sources,
        SinkOptions::default(),
        "out",
    ))
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorTooShort { .. }));
    assert_eq!(e.input(), Some("liar.bin"));
    println!("renamed liar: {e}");
    let t = e.tensor().expect("a tensor is named");
    assert_eq!(t, "liar (written as p.renamed)");
}

// ---- the Sink API ---------------------------------------------------------------

fn two_tensor_header() -> (safetensors_stream::header::EncodedHeader, Vec<u8>, Vec<u8>) {
    let enc = encode(
        vec![
            TensorMeta::new("big", Dtype::F64, [3]),
            TensorMeta::new("small", Dtype::U8, [5]),
        ],
        None,
        Order::Canonical,
    )
    .unwrap();
    (enc, pattern(1, 24), pattern(2, 5))
}

#[test]
fn finish_before_every_tensor_is_unfinished() {
    let (enc, big, _) = two_tensor_header();
    block_on(async {
        let sink = Sink::start(Vec::new(), &enc, SinkOptions::default())
            .await
            .unwrap();
        assert_eq!(sink.remaining(), 2);
        assert_eq!(sink.next_tensor(), Some("big"));
        let e = sink.finish().await.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Unfinished { missing: 2 }),
            "{e:?}"
        );
        assert_eq!(e.tensor(), Some("big"));

        let mut sink = Sink::start(Vec::new(), &enc, SinkOptions::default())
            .await
            .unwrap();
        sink.write_tensor(&mut &big[..]).await.unwrap();
        assert_eq!(sink.next_tensor(), Some("small"));
        let e = sink.finish().await.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Unfinished { missing: 1 }),
            "{e:?}"
        );
        assert_eq!(e.tensor(), Some("small"));
    });
}

#[test]
fn a_tensor_after_the_last_is_past_plan() {
    let (enc, big, small) = two_tensor_header();
    block_on(async {
        let mut sink = Sink::start(Vec::new(), &enc, SinkOptions::default())
            .await
            .unwrap();
        assert_eq!(sink.write_tensor(&mut &big[..]).await.unwrap(), 24);
        assert_eq!(sink.write_tensor(&mut &small[..]).await.unwrap(), 5);
        assert_eq!(sink.remaining(), 0);
        assert_eq!(sink.next_tensor(), None);
        let before = sink.bytes_written();
        let e = sink.write_tensor(&mut &[1u8][..]).await.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::PastPlan), "{e:?}");
        // Nothing was written for it, and the file still finishes.
        assert_eq!(sink.bytes_written(), before);
        let file = sink.finish().await.unwrap();
        assert_eq!(file.len() as u64, enc.header().file_len());
    });
}

#[test]
fn bytes_written_tracks_the_file_and_equals_its_length_at_the_end() {
    let (enc, big, small) = two_tensor_header();
    let header_len = enc.bytes().len() as u64;
    block_on(async {
        let mut sink = Sink::start(
            Stalling::default(),
            &enc,
            SinkOptions::default().buffer_size(5),
        )
        .await
        .unwrap();
        assert_eq!(sink.bytes_written(), header_len);
        sink.write_tensor(&mut &big[..]).await.unwrap();
        assert_eq!(sink.bytes_written(), header_len + 24);
        sink.write_tensor(&mut &small[..]).await.unwrap();
        let written = sink.bytes_written();
        let w = sink.finish().await.unwrap();
        assert_eq!(written, enc.header().file_len());
        assert_eq!(written, w.out.len() as u64);
        assert!(w.flushed);
        let mut expected = enc.bytes().to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(&small);
        assert_eq!(w.out, expected);
    });
    // And through a real file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.safetensors");
    let written = block_on(async {
        let f = tokio::fs::File::create(&path).await.unwrap();
        let mut sink = Sink::start(f, &enc, SinkOptions::default().buffer_size(7))
            .await
            .unwrap();
        sink.write_tensor(&mut &big[..]).await.unwrap();
        sink.write_tensor(&mut &small[..]).await.unwrap();
        let n = sink.bytes_written();
        let f = sink.finish().await.unwrap();
        f.sync_all().await.unwrap();
        n
    });
    assert_eq!(written, std::fs::metadata(&path).unwrap().len());
    ref_read(&std::fs::read(&path).unwrap(), "the sink's file");
}

#[test]
fn a_short_tensor_written_directly_names_it_and_counts_what_was_written() {
    let (enc, big, _) = two_tensor_header();
    block_on(async {
        let mut sink = Sink::start(Vec::new(), &enc, SinkOptions::default().buffer_size(8))
            .await
            .unwrap();
        let e = sink.write_tensor(&mut &big[..20]).await.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                ErrorKind::TensorTooShort {
                    expected: 24,
                    actual: 20
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.tensor(), Some("big"));
        let w = sink.abort();
        assert_eq!(w.len(), enc.bytes().len() + 20);
    });
}

#[test]
fn abort_returns_the_writer_as_it_is() {
    let (enc, big, _) = two_tensor_header();
    block_on(async {
        let mut sink = Sink::start(Vec::new(), &enc, SinkOptions::default())
            .await
            .unwrap();
        sink.write_tensor(&mut &big[..]).await.unwrap();
        let w: Vec<u8> = sink.abort();
        let mut expected = enc.bytes().to_vec();
        expected.extend_from_slice(&big);
        assert_eq!(w, expected);
        // A writer that was never flushed is handed back unflushed.
        let mut sink = Sink::start(Stalling::default(), &enc, SinkOptions::default())
            .await
            .unwrap();
        sink.write_tensor(&mut &big[..]).await.unwrap();
        let w = sink.abort();
        assert!(!w.flushed);
        assert_eq!(w.out, expected);
    });
}

#[test]
fn a_failing_writer_fails_start() {
    let (enc, _, _) = two_tensor_header();
    let e = block_on(Sink::start(
        FailAfter {
            out: Vec::new(),
            left: 3,
        },
        &enc,
        SinkOptions::default(),
    ))
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io(_)), "{e:?}");
}

// ---- slow and stingy readers -------------------------------------------------------

/// Delivers one byte per read, and Pending (after waking itself) between reads.
struct Trickle<'a> {
    data: &'a [u8],
    pos: usize,
    ready: bool,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.ready {
            self.ready = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = false;
        if self.pos < self.data.len() && buf.remaining() > 0 {
            buf.put_slice(&self.data[self.pos..self.pos + 1]);
            self.pos += 1;
        }
        Poll::Ready(Ok(()))
    }
}

struct TrickleSource(MemorySource, Vec<Vec<u8>>);

impl Source for TrickleSource {
    fn listing(&self) -> &Listing {
        self.0.listing()
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        let data = &self.1[k];
        async move {
            Ok(TensorData::new(Trickle {
                data,
                pos: 0,
                ready: false,
            }))
        }
        .boxed()
    }
}

#[test]
fn a_source_that_trickles_one_byte_at_a_time_gives_identical_bytes() {
    let ts = vec![
        T::new("w", Dtype::F32, &[5, 3]),
        T::new("b", Dtype::F16, &[7]),
        T::new("e", Dtype::I64, &[0]),
        T::new("m", Dtype::U8, &[9]),
    ];
    let mut mem = MemorySource::new("trickle");
    for t in &ts {
        mem.push(t.name.clone(), t.dtype, t.shape.clone(), t.data.clone())
            .unwrap();
    }
    let data = ts.iter().map(|t| t.data.clone()).collect();
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(TrickleSource(mem, data))];
    let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
    let p = plan(&listings, &PlanOptions::default()).unwrap();
    let got = block_on(write_shard(
        Stalling::default(),
        &p.shards[0],
        &mut sources,
        SinkOptions::default().buffer_size(4),
        "-",
    ))
    .unwrap();
    assert!(got.out == ref_serialize(&ts, None));
}

// ---- Send ------------------------------------------------------------------------

fn assert_send<T: Send>(_: &T) {}

#[test]
fn the_library_futures_are_send() {
    // Only constructed, never polled: the check is at compile time.
    let inputs: Vec<PathBuf> = vec![];
    let output = Output::File(Path::new("x").to_path_buf());
    let options = ConvertOptions::default();
    let fut = convert(&inputs, &output, &options);
    assert_send(&fut);
    drop(fut);

    let mut sources: Vec<Box<dyn Source>> = vec![];
    let fut = convert_sources(&mut sources, &output, &options);
    assert_send(&fut);
    drop(fut);

    let (mut sources, shard, _) = fixture_job("spec_a.safetensors");
    let fut = write_shard(
        Vec::new(),
        &shard,
        &mut sources,
        SinkOptions::default(),
        "-",
    );
    assert_send(&fut);
    drop(fut);
    let fut = write_shard(
        tokio::io::sink(),
        &shard,
        &mut sources,
        SinkOptions::default(),
        "-",
    );
    assert_send(&fut);
    drop(fut);

    let (enc, big, _) = two_tensor_header();
    let fut = Sink::start(Vec::new(), &enc, SinkOptions::default());
    assert_send(&fut);
    let mut sink = block_on(fut).unwrap();
    let mut r = &big[..];
    let fut = sink.write_tensor(&mut r);
    assert_send(&fut);
    drop(fut);
    let fut = sink.finish();
    assert_send(&fut);
}

// ---- an output that names a folder ------------------------------------------------

/// Counts the tensors it was asked for.
struct Counted(MemorySource, std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Source for Counted {
    fn listing(&self) -> &Listing {
        self.0.listing()
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0.open(k)
    }
}

#[test]
fn an_output_that_is_a_folder_fails_before_any_tensor_is_read_unless_named_with_a_slash() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let mut with_slash = dir.path().join("not-yet").into_os_string();
    with_slash.push("/");
    let convert_into = |target: &PathBuf| {
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut mem = MemorySource::new("mem");
        mem.push("x", Dtype::U8, [4], vec![1, 2, 3, 4]).unwrap();
        let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Counted(mem, opened.clone()))];
        let done = block_on(convert_sources(
            &mut sources,
            &Output::File(target.clone()),
            &quick(PlanOptions::default()),
        ));
        (done, opened.load(std::sync::atomic::Ordering::SeqCst))
    };
    // A folder named as a file is a mistake of usage, found before a read.
    let (done, opened) = convert_into(&folder);
    let e = done.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutputName(_)), "{e:?}");
    assert_eq!(e.category(), Category::Usage);
    assert_eq!(e.output(), Some(folder.display().to_string().as_str()));
    assert_eq!(opened, 0, "a tensor was read");
    assert_eq!(listing(dir.path()), ["folder"]);
    assert!(listing(&folder).is_empty());
    // Named with a slash, it is made and written into.
    let (done, _) = convert_into(&PathBuf::from(with_slash));
    done.unwrap();
    let made = dir.path().join("not-yet");
    assert_eq!(listing(&made), ["model.safetensors"]);
}
