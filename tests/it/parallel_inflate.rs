//! Deflated npz members into a file: read side by side (two inflating at
//! once), each written at its planned offset, with the same bytes, the same
//! errors and the same progress as one member after another (the fast path
//! off, through the async sink).

use crate::support;

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use safetensors_stream::convert::{convert_sources, ConvertOptions, Output};
use safetensors_stream::observe::Progress;
use safetensors_stream::plan::Plan;
use safetensors_stream::source::{
    BlockingRead, Listing, OpenBlocking, Source, TensorData, Transform,
};
use safetensors_stream::{convert_blocking, Dtype, Error, PlanOptions, SinkOptions, TensorMeta};
use support::numpy::{build_zip, npy, tensors_of, ZipMember};
use support::{block_on, pattern};

/// Float32 data that deflates (small integers), `n` elements, seeded.
fn compressible(seed: u64, n: usize) -> Vec<u8> {
    pattern(seed, n)
        .iter()
        .flat_map(|b| f32::from(*b % 17).to_le_bytes())
        .collect()
}

/// An npz of deflated members `layers.{i}` (canonical order differs from
/// the archive's), one stored, one big-endian; `bad` members get a wrong CRC.
fn archive(dir: &Path, name: &str, bad: &[usize], sizes: &[usize]) -> PathBuf {
    let members: Vec<ZipMember> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let file = format!("layers.{i}.npy");
            let data = compressible(i as u64 + 1, n);
            let mut m = match i {
                3 => ZipMember::stored(&file, npy("<f4", false, &[n as u64], &data)),
                5 => {
                    let be: Vec<u8> = data
                        .chunks(4)
                        .flat_map(|c| [c[3], c[2], c[1], c[0]])
                        .collect();
                    ZipMember::deflated(&file, npy(">f4", false, &[n as u64], &be))
                }
                _ => ZipMember::deflated(&file, npy("<f4", false, &[n as u64], &data)),
            };
            if bad.contains(&i) {
                m.crc = Some(crc32fast::hash(&m.data) ^ 0x5a5a);
            }
            m
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, build_zip(&members).0).unwrap();
    path
}

const SIZES: &[usize] = &[
    70_000, 5, 300_000, 20_000, 0, 90_000, 150_001, 1, 64_000, 33_333, 250_000,
];

fn convert(input: &Path, options: &ConvertOptions) -> (Result<Vec<u8>, Error>, bool) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let result = convert_blocking(&[input.to_path_buf()], &Output::File(out.clone()), options);
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    match result {
        Ok(_) => (Ok(std::fs::read(&out).unwrap()), left == 1),
        Err(e) => (Err(e), left == 0),
    }
}

#[test]
fn deflated_members_give_the_same_bytes_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let input = archive(dir.path(), "m.npz", &[], SIZES);
    let plans = [
        PlanOptions::default(),
        PlanOptions::default().cast_all(Some(Dtype::BF16)),
        PlanOptions::default().cast_all(Some(Dtype::F64)),
    ];
    for plan in plans {
        for buffer in [4096, 1 << 20, 4 << 20] {
            let options = ConvertOptions::default()
                .sync(false)
                .plan(plan.clone())
                .sink(SinkOptions::default().buffer_size(buffer));
            let (fast, clean) = convert(&input, &options);
            assert!(clean);
            let (slow, _) = convert(&input, &options.clone().fast_path(false));
            let (fast, slow) = (fast.unwrap(), slow.unwrap());
            assert!(fast == slow, "{plan:?} buffer {buffer}: outputs differ");
            if plan.cast_all.is_none() {
                let got = tensors_of(&fast);
                for (i, &n) in SIZES.iter().enumerate() {
                    let t = &got[&format!("layers.{i}")];
                    assert_eq!(t.data, compressible(i as u64 + 1, n), "layers.{i}");
                }
            }
        }
    }
}

#[test]
fn the_first_broken_member_in_order_is_the_error() {
    let dir = tempfile::tempdir().unwrap();
    // Canonical order: layers.0, layers.1, layers.10, layers.2, ... A big
    // broken member before a small one: the small one fails first in time.
    for (k, bad) in [vec![10, 2], vec![0, 8], vec![6, 7], vec![9]]
        .into_iter()
        .enumerate()
    {
        let input = archive(dir.path(), &format!("bad{k}.npz"), &bad, SIZES);
        let options = ConvertOptions::default().sync(false);
        let (fast, clean) = convert(&input, &options);
        assert!(clean, "{bad:?}: something left at the output");
        let (slow, _) = convert(&input, &options.clone().fast_path(false));
        let (fast, slow) = (fast.unwrap_err(), slow.unwrap_err());
        let facts = |e: &Error| {
            (
                format!("{:?}", e.kind()),
                e.tensor().map(str::to_string),
                e.offset(),
            )
        };
        assert_eq!(facts(&fast), facts(&slow), "{bad:?}: {fast} / {slow}");
        assert_eq!(fast.to_string(), slow.to_string());
        let first = bad.iter().map(|i| format!("layers.{i}")).min().unwrap();
        assert_eq!(fast.tensor(), Some(first.as_str()), "{bad:?}: {fast}");
    }
}

/// Counts what progress is told.
#[derive(Default)]
struct Count {
    total: AtomicU64,
    bytes: AtomicU64,
    tensors: Mutex<Vec<String>>,
    finished: AtomicUsize,
}

impl Progress for Count {
    fn start(&self, _plan: &Plan, total: u64) {
        self.total.store(total, Ordering::SeqCst);
    }
    fn tensor(&self, _shard: usize, _shards: usize, name: &str) {
        self.tensors.lock().unwrap().push(name.to_string());
    }
    fn bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::SeqCst);
    }
    fn finish(&self) {
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn progress_adds_up_and_names_every_deflated_member() {
    let dir = tempfile::tempdir().unwrap();
    let input = archive(dir.path(), "m.npz", &[], SIZES);
    let count = Arc::new(Count::default());
    let options = ConvertOptions::default()
        .sync(false)
        .progress(Some(count.clone() as Arc<dyn Progress>));
    let (out, _) = convert(&input, &options);
    let out = out.unwrap();
    assert_eq!(count.bytes.load(Ordering::SeqCst), out.len() as u64);
    assert_eq!(count.total.load(Ordering::SeqCst), out.len() as u64);
    assert_eq!(count.finished.load(Ordering::SeqCst), 1);
    let mut named = count.tensors.lock().unwrap().clone();
    named.sort();
    named.dedup();
    // Every deflated member is named as it begins (the stored one may be
    // named as the start of its batch only).
    for i in (0..SIZES.len()).filter(|&i| i != 3) {
        assert!(
            named.contains(&format!("layers.{i}")),
            "layers.{i}: {named:?}"
        );
    }
}

/// How many of the source's blocking readers are in flight, and the most at once.
#[derive(Default)]
struct Flight {
    now_and_most: Mutex<(usize, usize)>,
    changed: Condvar,
    /// Whether each reader waits for another to be in flight.
    meet: bool,
}

/// A source whose tensors only a blocking reader gives, each of which
/// waits (up to a minute) at its first read for another to be in flight.
struct Rendezvous {
    listing: Listing,
    data: Vec<Arc<Vec<u8>>>,
    flight: Arc<Flight>,
}

struct Gate {
    data: Cursor<Vec<u8>>,
    flight: Arc<Flight>,
    arrived: bool,
    left: bool,
}

impl Read for Gate {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.arrived {
            self.arrived = true;
            let meet = self.flight.meet;
            let mut g = self.flight.now_and_most.lock().unwrap();
            g.0 += 1;
            g.1 = g.1.max(g.0);
            self.flight.changed.notify_all();
            let timeout = Duration::from_secs(60);
            drop(
                self.flight
                    .changed
                    .wait_timeout_while(g, timeout, |g| meet && g.1 < 2)
                    .unwrap(),
            );
        }
        let n = self.data.read(buf)?;
        if n == 0 && !self.left {
            self.left = true;
            self.flight.now_and_most.lock().unwrap().0 -= 1;
        }
        Ok(n)
    }
}

impl Source for Rendezvous {
    fn listing(&self) -> &Listing {
        &self.listing
    }
    fn open(&mut self, k: usize) -> BoxFuture<'_, safetensors_stream::Result<TensorData<'_>>> {
        let data = self.data[k].as_ref().clone();
        Box::pin(async move { Ok(TensorData::new(Cursor::new(data))) })
    }
    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        let (data, flight) = (self.data[k].clone(), self.flight.clone());
        Some(Box::new(move || {
            let gate = Gate {
                data: Cursor::new(data.as_ref().clone()),
                flight,
                arrived: false,
                left: false,
            };
            Ok((Box::new(gate) as BlockingRead, Transform::Identity))
        }))
    }
}

fn rendezvous() -> (Box<dyn Source>, Arc<Flight>) {
    rendezvous_if(true)
}

/// The same source, its readers waiting for another only if `meet`.
fn rendezvous_if(meet: bool) -> (Box<dyn Source>, Arc<Flight>) {
    let flight = Arc::new(Flight {
        meet,
        ..Flight::default()
    });
    let n = [100_000, 3, 250_000, 77];
    let source = Rendezvous {
        listing: Listing {
            input: "rendezvous".into(),
            tensors: (0..4)
                .map(|i| TensorMeta::new(format!("t{i}"), Dtype::F32, [n[i] as u64]))
                .collect(),
            metadata: None,
        },
        data: (0..4)
            .map(|i| Arc::new(compressible(i as u64, n[i])))
            .collect(),
        flight: flight.clone(),
    };
    (Box::new(source), flight)
}

fn convert_source(source: Box<dyn Source>, fast_path: bool) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let options = ConvertOptions::default().sync(false).fast_path(fast_path);
    block_on(convert_sources(
        &mut [source],
        &Output::File(out.clone()),
        &options,
    ))
    .unwrap();
    std::fs::read(out).unwrap()
}

#[test]
fn two_members_are_in_flight_at_once() {
    let (source, flight) = rendezvous();
    let fast = convert_source(source, true);
    let most = flight.now_and_most.lock().unwrap().1;
    assert_eq!(most, 2, "blocking readers in flight at once");
    let (source, _) = rendezvous_if(false);
    assert!(fast == convert_source(source, false), "outputs differ");
}

#[test]
fn streams_keep_the_ordered_path() {
    // To a pipe there is no offset to write at: the blocking readers are
    // read one at a time, in order, on one thread (`copy::relay`).
    let (source, flight) = rendezvous_if(false);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let options = ConvertOptions::default().sync(false);
    block_on(convert_sources(
        &mut [source],
        &Output::File(fifo),
        &options,
    ))
    .unwrap();
    let streamed = reader.join().unwrap();
    assert_eq!(flight.now_and_most.lock().unwrap().1, 1);
    let (source, _) = rendezvous_if(false);
    assert!(streamed == convert_source(source, false));
}
