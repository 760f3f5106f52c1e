//! Memory stays bounded whatever the model's size, measured deterministically
//! with a counting global allocator (the tests of this binary take a lock so
//! they never overlap, nor count each other's allocations).
//!
//! Print the measured peaks with `cargo test --test memory bound -- --nocapture`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use safetensors_stream::header::{encode, Order, TensorMeta};
use safetensors_stream::internals::write_shard;
use safetensors_stream::internals::SafetensorsSource;
use safetensors_stream::plan::{plan, Plan, PlanOptions};
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::{Listing, Source, TensorData};
use safetensors_stream::Dtype;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Runs `f` on a current-thread runtime built beforehand, and returns its
/// output and the heap's peak above what was live when `f` started.
fn measure<R>(f: impl FnOnce() -> BoxFuture<'static, R>) -> (R, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (out, peak) = crate::alloc::peak_during(|| rt.block_on(f()));
    drop(rt);
    (out, peak)
}

const MIB: u64 = 1 << 20;
const LIMIT: usize = 16 << 20;

// ---- a generated source: deterministic bytes, made on the fly -------------------

/// Eight tensors of mixed dtypes that together hold `total` bytes; their
/// bytes are generated as they are read, in 1 MiB blocks of one value.
struct Generated(Listing);

const DTYPES: [Dtype; 8] = [
    Dtype::F32,
    Dtype::F16,
    Dtype::U8,
    Dtype::I64,
    Dtype::BF16,
    Dtype::BOOL,
    Dtype::F64,
    Dtype::I32,
];
const BLOCK: u64 = MIB;

impl Generated {
    fn new(total: u64) -> Generated {
        let each = total / DTYPES.len() as u64;
        let tensors = DTYPES
            .iter()
            .enumerate()
            .map(|(k, d)| {
                let width = d.bits() / 8;
                TensorMeta::new(format!("layer.{k}.weight"), *d, [each / width / 1024, 1024])
            })
            .collect();
        Generated(Listing {
            input: "generated".into(),
            tensors,
            metadata: None,
        })
    }
}

/// The byte at `pos` of tensor `k`.
fn value(k: usize, pos: u64) -> u8 {
    (k as u64 * 37 + pos / BLOCK * 11 + 1) as u8
}

struct GenReader {
    k: usize,
    pos: u64,
    len: u64,
}

impl AsyncRead for GenReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let in_block = BLOCK - self.pos % BLOCK;
        let n = (buf.remaining() as u64)
            .min(self.len - self.pos)
            .min(in_block) as usize;
        let v = value(self.k, self.pos);
        buf.initialize_unfilled_to(n)[..n].fill(v);
        buf.advance(n);
        self.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

impl Source for Generated {
    fn listing(&self) -> &Listing {
        &self.0
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        let len = self.0.tensors[k].byte_len().unwrap();
        async move { Ok(TensorData::new(GenReader { k, pos: 0, len })) }.boxed()
    }
}

/// Discards what it is given, but checks it on the way: the header byte for
/// byte, then each tensor's bytes at every write's ends and block starts.
struct Checker {
    header: Vec<u8>,
    /// (source tensor index, byte length) in plan order.
    layout: Vec<(usize, u64)>,
    pos: u64,
    tensor: usize,
    in_tensor: u64,
}

impl Checker {
    fn new(p: &Plan) -> Checker {
        let shard = &p.shards[0];
        let layout = shard
            .refs
            .iter()
            .zip(&shard.header.header().tensors)
            .map(|(r, t)| (r.index(), t.len()))
            .collect();
        Checker {
            header: shard.header.bytes().to_vec(),
            layout,
            pos: 0,
            tensor: 0,
            in_tensor: 0,
        }
    }

    fn check(&mut self, mut buf: &[u8]) {
        while !buf.is_empty() {
            let h = self.header.len() as u64;
            if self.pos < h {
                let n = ((h - self.pos) as usize).min(buf.len());
                assert_eq!(
                    buf[..n],
                    self.header[self.pos as usize..self.pos as usize + n],
                    "header"
                );
                self.pos += n as u64;
                buf = &buf[n..];
                continue;
            }
            while self.layout[self.tensor].1 == self.in_tensor {
                self.tensor += 1;
                self.in_tensor = 0;
            }
            let (k, len) = self.layout[self.tensor];
            let n = ((len - self.in_tensor) as usize).min(buf.len());
            let chunk = &buf[..n];
            let at = |i: usize| (chunk[i], value(k, self.in_tensor + i as u64));
            let (got, want) = at(0);
            assert_eq!(got, want, "tensor {k} at {}", self.in_tensor);
            let (got, want) = at(n - 1);
            assert_eq!(got, want, "tensor {k} at {}", self.in_tensor + n as u64 - 1);
            let mut b = (self.in_tensor / BLOCK + 1) * BLOCK;
            while b < self.in_tensor + n as u64 {
                let i = (b - self.in_tensor) as usize;
                assert_eq!(at(i).0, at(i).1, "tensor {k} at {b}");
                assert_eq!(at(i - 1).0, at(i - 1).1, "tensor {k} at {}", b - 1);
                b += BLOCK;
            }
            self.in_tensor += n as u64;
            self.pos += n as u64;
            buf = &buf[n..];
        }
    }
}

impl AsyncWrite for Checker {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Converts a generated source of `total` bytes into a checking, discarding
/// writer; returns the bytes written and the peak heap above the baseline.
fn generated_peak(total: u64) -> (u64, u64, usize) {
    let (out, peak) = measure(move || {
        async move {
            let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Generated::new(total))];
            let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
            let p = plan(&listings, &PlanOptions::default()).unwrap();
            let checker = Checker::new(&p);
            let done = write_shard(
                checker,
                &p.shards[0],
                &mut sources,
                SinkOptions::default(),
                "-",
            )
            .await
            .unwrap();
            (done.pos, p.file_len())
        }
        .boxed()
    });
    (out.0, out.1, peak)
}

#[test]
fn a_generated_source_streams_in_bounded_memory_whatever_its_size() {
    let _g = crate::alloc::serial();
    let (written, file_len, small) = generated_peak(512 * MIB);
    assert_eq!(written, file_len, "every byte reached the writer");
    assert!(file_len > 512 * MIB - MIB, "the source is {file_len} bytes");
    println!("generated 512 MiB: peak {small} bytes above the baseline");

    let (written, file_len, big) = generated_peak(2048 * MIB);
    assert_eq!(written, file_len);
    assert!(file_len > 2048 * MIB - MIB);
    println!("generated 2 GiB: peak {big} bytes above the baseline");

    assert!(small < LIMIT, "512 MiB peaked at {small} bytes");
    assert!(big < LIMIT, "2 GiB peaked at {big} bytes");
    // 4x the data, the same memory (the header's numbers are a few digits longer).
    assert!(
        big.abs_diff(small) < 64 << 10,
        "512 MiB: {small}, 2 GiB: {big}"
    );
    // The bound is the sink's one buffer, not a multiple of it: into a
    // stream (no output file beside the sink), a chunk of at most 1 MiB.
    let buffer = SinkOptions::default().buffer_size.min(1 << 20);
    assert!(
        small >= buffer,
        "{small} < the sink's buffer: nothing was measured?"
    );
    assert!(small < 2 * buffer, "{small}: more than one buffer's worth");
}

#[test]
fn the_sink_buffer_option_sets_the_bound() {
    let _g = crate::alloc::serial();
    for buffer_size in [64 << 10, 1 << 20] {
        let ((), peak) = measure(move || {
            async move {
                let mut sources: Vec<Box<dyn Source>> = vec![Box::new(Generated::new(64 * MIB))];
                let listings: Vec<Listing> =
                    sources.iter().map(|s| Listing::of(s.as_ref())).collect();
                let p = plan(&listings, &PlanOptions::default()).unwrap();
                write_shard(
                    tokio::io::sink(),
                    &p.shards[0],
                    &mut sources,
                    SinkOptions::default().buffer_size(buffer_size),
                    "-",
                )
                .await
                .unwrap();
            }
            .boxed()
        });
        println!("generated 64 MiB, buffer {buffer_size}: peak {peak} bytes");
        assert!(
            peak >= buffer_size && peak < buffer_size + (256 << 10),
            "buffer {buffer_size}: peak {peak}"
        );
    }
}

// ---- a sparse safetensors file on disk, through convert_sources -----------------

/// A safetensors file of `total` data bytes whose data is a hole.
fn sparse_file(dir: &std::path::Path, total: u64) -> std::path::PathBuf {
    let metas = DTYPES
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let each = total / DTYPES.len() as u64 / (d.bits() / 8);
            TensorMeta::new(format!("t{k}"), *d, [each])
        })
        .collect();
    let enc = encode(metas, None, Order::Canonical).unwrap();
    let path = dir.join(format!("sparse-{total}.safetensors"));
    let f = std::fs::File::create(&path).unwrap();
    std::io::Write::write_all(&mut &f, enc.bytes()).unwrap();
    f.set_len(enc.header().file_len()).unwrap();
    path
}

fn sparse_peak(dir: &std::path::Path, total: u64) -> usize {
    let input = sparse_file(dir, total);
    let ((), peak) = measure(move || {
        async move {
            let mut sources: Vec<Box<dyn Source>> =
                vec![Box::new(SafetensorsSource::open(&input).unwrap())];
            let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
            let p = plan(&listings, &PlanOptions::default()).unwrap();
            assert_eq!(p.data_len(), total);
            write_shard(
                tokio::io::sink(),
                &p.shards[0],
                &mut sources,
                SinkOptions::default(),
                "-",
            )
            .await
            .unwrap();
        }
        .boxed()
    });
    peak
}

#[test]
fn a_sparse_safetensors_file_streams_in_bounded_memory() {
    let _g = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    // Real reads of a real file cost time: 64 MiB and 4x that (the generated
    // source above covers 512 MiB and 2 GiB).
    let small = sparse_peak(dir.path(), 64 * MIB);
    println!("sparse 64 MiB file: peak {small} bytes above the baseline");
    let big = sparse_peak(dir.path(), 256 * MIB);
    println!("sparse 256 MiB file: peak {big} bytes above the baseline");
    assert!(big < LIMIT, "256 MiB peaked at {big} bytes");
    assert!(
        big.abs_diff(small) < 64 << 10,
        "64 MiB: {small}, 256 MiB: {big}"
    );
}

// ---- the streaming Writer -----------------------------------------------------

/// Streams `total` bytes of three tensors through a `Writer` into nothing,
/// in pieces of 1 MiB made one at a time; returns the heap's peak.
fn writer_peak(total: u64) -> usize {
    use safetensors_stream::{Writer, WriterOptions};
    let each = total / 3;
    let tensors: Vec<TensorMeta> = (0..3)
        .map(|k| TensorMeta::new(format!("layer.{k}.weight"), Dtype::F32, [each / 4]))
        .collect();
    let (bytes, peak) = measure(move || {
        async move {
            let mut w = Writer::new(std::io::sink(), tensors, WriterOptions::default()).unwrap();
            let order: Vec<String> = w.order().map(String::from).collect();
            for name in &order {
                let mut left = each;
                while left > 0 {
                    let piece = vec![7u8; left.min(MIB) as usize];
                    w.write(name, &piece).unwrap();
                    left -= piece.len() as u64;
                }
            }
            let written = w.bytes_written();
            w.finish().unwrap();
            written
        }
        .boxed()
    });
    assert!(bytes > total / 3 * 3);
    peak
}

#[test]
fn the_writer_streams_any_size_in_bounded_memory() {
    let _guard = crate::alloc::serial();
    let small = writer_peak(48 * MIB);
    let large = writer_peak(768 * MIB);
    eprintln!("writer heap peak: {small} bytes for 48 MiB, {large} bytes for 768 MiB");
    // Its own buffer (1 MiB) and the caller's 1 MiB piece, whatever the size.
    assert!(large <= 3 << 20, "{large}");
    assert!(
        large <= small + 4096,
        "grows with the data: {small} -> {large}"
    );
}
