//! Faults around a conversion: `kill -9`, SIGINT and SIGTERM in the middle
//! of a run, a full disk (an `AsyncWrite` that says ENOSPC, and a real
//! tmpfs), eight runs at once into one folder, inputs that grow while they
//! are read, and hostile member names with sharding.
//!
//! Runs of the binary are held in the middle of a conversion without any
//! timing: their input comes from standard input or a FIFO that the test
//! feeds, so a run stops wherever its input stops, and the test waits
//! until the temp file shows the run got there before it strikes.

use crate::support;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use safetensors_stream::convert::{
    convert, convert_sources, open_inputs, plan_sources, ConvertOptions, Output,
};
use safetensors_stream::header::{encode, Order, Rules, TensorMeta};
use safetensors_stream::internals::write_shard;
use safetensors_stream::sink::{Sink, SinkOptions};
use safetensors_stream::source::read_file_header;
use safetensors_stream::{Category, Dtype, ErrorKind};
use support::faults::*;
use tokio::io::AsyncWrite;

fn quick() -> ConvertOptions {
    ConvertOptions::default().sync(false)
}

/// Asserts `path` is a valid file by the strict rules and holds `expected`.
fn assert_output(path: &Path, expected: &[u8]) {
    read_file_header(path, Rules::STRICT).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let got = std::fs::read(path).unwrap();
    assert!(
        got == expected,
        "{}: {} bytes, not the {} expected",
        path.display(),
        got.len(),
        expected.len()
    );
}

fn args(items: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<std::ffi::OsString> {
    items.iter().map(|a| a.as_ref().to_os_string()).collect()
}

/// A one-tensor `.npy` streamed on standard input, written in 4 KiB
/// buffers: `convert - --name NAME --buffer-size 4KiB -o OUT`.
struct NpyOnStdin {
    name: String,
    data: Vec<u8>,
    npy: Vec<u8>,
    /// The output the whole input converts to.
    expected: Vec<u8>,
    /// Its header's length: where tensor data starts in the output.
    out_header: u64,
}

impl NpyOnStdin {
    fn new(name: &str, seed: u64, len: usize) -> NpyOnStdin {
        let data = pattern(seed, len);
        NpyOnStdin {
            name: name.to_string(),
            npy: npy_u8(&data),
            expected: safetensors_bytes(&[(name, data.clone())]),
            out_header: one_tensor_header_len(name, len),
            data,
        }
    }

    fn npy_header_len(&self) -> usize {
        self.npy.len() - self.data.len()
    }

    /// Starts the run and feeds it the npy header and `fed` data bytes.
    fn start(&self, out: &Path, fed: usize) -> (Run, Feeder) {
        let a = args(&[
            &"-",
            &"--name",
            &self.name,
            &"--buffer-size",
            &"4KiB",
            &"-o",
            &out,
        ]);
        let mut run = Run::start(&a, &format!("{} -> {}", self.name, out.display()));
        let feeder = run.stdin_feeder();
        feeder.send(&self.npy[..self.npy_header_len() + fed]);
        (run, feeder)
    }

    /// The rest of the input after `fed` data bytes.
    fn rest(&self, fed: usize) -> &[u8] {
        &self.npy[self.npy_header_len() + fed..]
    }
}

/// Waits until a temp file of `target` in `dir` holds at least `min_len`
/// bytes; returns its name.
fn wait_for_temp(run: &mut Run, dir: &Path, target: &str, min_len: u64) -> String {
    let mut found = String::new();
    run.wait_until(
        &format!("a temp file of {target} of {min_len} bytes"),
        || {
            for t in temps_of(dir, target) {
                if file_len(&dir.join(&t)) >= min_len {
                    found = t;
                    return true;
                }
            }
            false
        },
    );
    found
}

// ---- kill -9 -----------------------------------------------------------------------

#[test]
fn kill_9_mid_conversion_leaves_the_output_alone_and_one_recognisable_temp_file() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains(".NAME.XXXXXX.convert-tmp") && readme.contains("kill -9"),
        "the README names the temp files kill -9 may leave"
    );
    let job = NpyOnStdin::new("x", 1, 1 << 20);
    for old in [Some(&b"the old bytes"[..]), None] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        if let Some(old) = old {
            std::fs::write(&out, old).unwrap();
        }
        // A quarter of the data in and written out; the run waits for more.
        let (mut run, feeder) = job.start(&out, 1 << 18);
        let temp = wait_for_temp(
            &mut run,
            dir.path(),
            "out.safetensors",
            job.out_header + (1 << 18),
        );
        run.signal("KILL");
        let ended = run.end();
        drop(feeder);
        assert_eq!(ended.status.signal(), Some(9), "{ended:?}");

        // The output path is untouched; the only leftover is the temp file,
        // recognisable by its name, and it is a prefix of the output.
        match old {
            Some(old) => {
                assert_eq!(std::fs::read(&out).unwrap(), old);
                assert_eq!(listing(dir.path()), [temp.as_str(), "out.safetensors"]);
            }
            None => assert_eq!(listing(dir.path()), [temp.as_str()]),
        }
        assert!(is_temp_of(&temp, "out.safetensors"), "{temp}");
        let partial = std::fs::read(dir.path().join(&temp)).unwrap();
        assert!(partial.len() < job.expected.len());
        assert!(
            job.expected.starts_with(&partial),
            "the temp file is a prefix"
        );

        // The leftover is in nobody's way: the next run succeeds beside it.
        let (run, mut feeder) = job.start(&out, job.data.len());
        feeder.close();
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
        assert_output(&out, &job.expected);
        assert_eq!(listing(dir.path()), [temp.as_str(), "out.safetensors"]);
    }
}

/// Two `.npy` inputs through FIFOs into two shards: shard 1 is tensor `a`,
/// shard 2 tensor `b`. Returns the run held while shard 2 is half written,
/// its feeders, and the two shards' temp file names.
struct ShardedHold {
    run: Run,
    _feed_a: Feeder,
    feed_b: Feeder,
    /// What `b` has not been sent yet.
    b_rest: Vec<u8>,
    temps: Vec<String>,
}

impl ShardedHold {
    /// Lets the run go on to the end of its input.
    fn release(&mut self) {
        self.feed_b.send(&self.b_rest);
        self.feed_b.close();
    }
}

const SHARD_TENSOR: usize = 256 << 10;

fn hold_sharded(dir: &Path, out_dir: &Path) -> ShardedHold {
    let a = pattern(10, SHARD_TENSOR);
    let b = pattern(11, SHARD_TENSOR);
    let (fa, fb) = (dir.join("a.npy"), dir.join("b.npy"));
    mkfifo(&fa);
    mkfifo(&fb);
    let out = out_dir.join("m.safetensors");
    let a_args = args(&[
        &fa,
        &fb,
        &"--max-shard-size",
        &"300000",
        &"--buffer-size",
        &"4KiB",
        &"-o",
        &out,
    ]);
    let mut run = Run::start(&a_args, "sharded from FIFOs");
    let mut feed_a = Feeder::fifo(&fa);
    let feed_b = Feeder::fifo(&fb);
    feed_a.send(&npy_u8(&a));
    // Shard 1 ends when `a` does: the sink reads to the end of each input.
    feed_a.close();
    let npy_b = npy_u8(&b);
    let b_fed = npy_u8_header(b.len()).len() + b.len() / 2;
    feed_b.send(&npy_b[..b_fed]);
    // All that was fed is written: the run is blocked reading `b`.
    let second = one_tensor_header_len("b", b.len()) + (b.len() / 2) as u64;
    let t2 = wait_for_temp(&mut run, out_dir, "m-00002-of-00002.safetensors", second);
    let t1 = temps_of(out_dir, "m-00001-of-00002.safetensors");
    assert_eq!(t1.len(), 1, "shard 1 is staged: {:?}", listing(out_dir));
    ShardedHold {
        run,
        _feed_a: feed_a,
        feed_b,
        b_rest: npy_b[b_fed..].to_vec(),
        temps: vec![t1[0].clone(), t2],
    }
}

#[test]
fn kill_9_mid_sharded_conversion_leaves_only_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    // An older set's first shard and index are there and must survive.
    write(&out_dir, "m-00001-of-00002.safetensors", b"old shard");
    write(&out_dir, "m.safetensors.index.json", b"old index");
    let hold = hold_sharded(dir.path(), &out_dir);
    hold.run.signal("KILL");
    let ended = hold.run.end();
    assert_eq!(ended.status.signal(), Some(9), "{ended:?}");
    let mut want = vec![
        hold.temps[0].clone(),
        hold.temps[1].clone(),
        "m-00001-of-00002.safetensors".to_string(),
        "m.safetensors.index.json".to_string(),
    ];
    want.sort();
    assert_eq!(listing(&out_dir), want);
    assert_eq!(
        std::fs::read(out_dir.join("m-00001-of-00002.safetensors")).unwrap(),
        b"old shard"
    );
    assert_eq!(
        std::fs::read(out_dir.join("m.safetensors.index.json")).unwrap(),
        b"old index"
    );
}

#[test]
fn a_set_whose_last_rename_fails_puts_the_old_set_back() {
    // Held in shard 2, a folder appears at shard 2's name (another program,
    // a racing job): its rename fails after shard 1's succeeded. Shard 1's
    // old bytes must come back, not a hole where the old set was.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    write(&out_dir, "m-00001-of-00002.safetensors", b"old shard");
    write(&out_dir, "m.safetensors.index.json", b"old index");
    let mut hold = hold_sharded(dir.path(), &out_dir);
    let blocker = out_dir.join("m-00002-of-00002.safetensors");
    std::fs::create_dir(&blocker).unwrap();
    write(&blocker, "keep", b"x");
    hold.release();
    let line = hold.run.end().one_line(3);
    assert!(line.contains("m-00002-of-00002.safetensors"), "{line}");
    assert_eq!(
        listing(&out_dir),
        [
            "m-00001-of-00002.safetensors",
            "m-00002-of-00002.safetensors",
            "m.safetensors.index.json"
        ]
    );
    assert_eq!(
        std::fs::read(out_dir.join("m-00001-of-00002.safetensors")).unwrap(),
        b"old shard"
    );
    assert_eq!(
        std::fs::read(out_dir.join("m.safetensors.index.json")).unwrap(),
        b"old index"
    );
    assert_eq!(listing(&blocker), ["keep"]);
}

// ---- SIGINT and SIGTERM ------------------------------------------------------------

/// The signals that end a run cleanly: a closed terminal (HUP), Ctrl-C,
/// a reader gone away (PIPE), `kill`.
const SIGNALS: [(&str, i32, &str); 4] = [
    ("HUP", 129, "SIGHUP"),
    ("INT", 130, "SIGINT"),
    ("PIPE", 141, "SIGPIPE"),
    ("TERM", 143, "SIGTERM"),
];

#[test]
fn sigint_and_sigterm_mid_run_remove_the_temp_file_and_keep_the_old_output() {
    let job = NpyOnStdin::new("x", 2, 1 << 20);
    for (signal, code, name) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let out = write(dir.path(), "out.safetensors", b"the old bytes");
        let (mut run, feeder) = job.start(&out, 1 << 18);
        wait_for_temp(
            &mut run,
            dir.path(),
            "out.safetensors",
            job.out_header + (1 << 18),
        );
        run.signal(signal);
        // The producer stalls with its end of the pipe still open: the run
        // must not wait for it (it did, before run.rs let go of the blocked
        // read after a signal).
        let ended = run.end();
        drop(feeder);
        let line = ended.one_line(code);
        assert_eq!(line, format!("safetensors-convert: interrupted by {name}"));
        assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
        assert_eq!(listing(dir.path()), ["out.safetensors"], "{signal}");
    }
}

#[test]
fn a_signal_mid_run_removes_the_output_folders_the_run_made() {
    let job = NpyOnStdin::new("x", 4, 1 << 20);
    for (signal, code, _) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("new/sub");
        let (mut run, feeder) = job.start(&folder.join("out.safetensors"), 1 << 18);
        run.wait_until("the output folder", || folder.is_dir());
        wait_for_temp(
            &mut run,
            &folder,
            "out.safetensors",
            job.out_header + (1 << 18),
        );
        run.signal(signal);
        let ended = run.end();
        drop(feeder);
        ended.one_line(code);
        assert!(
            listing(dir.path()).is_empty(),
            "{signal}: {:?}",
            tree(dir.path())
        );
    }
}

#[test]
fn sigint_and_sigterm_mid_sharded_run_remove_every_temp_file() {
    for (signal, code, name) in SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        write(&out_dir, "m-00002-of-00002.safetensors", b"old shard");
        let hold = hold_sharded(dir.path(), &out_dir);
        hold.run.signal(signal);
        let ended = hold.run.end();
        let line = ended.one_line(code);
        assert_eq!(line, format!("safetensors-convert: interrupted by {name}"));
        assert_eq!(listing(&out_dir), ["m-00002-of-00002.safetensors"]);
        assert_eq!(
            std::fs::read(out_dir.join("m-00002-of-00002.safetensors")).unwrap(),
            b"old shard"
        );
    }
}

#[test]
fn a_reader_that_goes_away_ends_a_stdout_run_as_sigpipe() {
    // `convert ... -o - | head -c 100`: the write fails with EPIPE (and the
    // signal comes with it); the run ends at once, exit 141, one line.
    let dir = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("big", pattern(5, 8 << 20))]);
    let input = write(dir.path(), "in.safetensors", &bytes);
    let mut child = std::process::Command::new(BIN)
        .args([
            input.as_os_str(),
            "--buffer-size".as_ref(),
            "4KiB".as_ref(),
            "-o".as_ref(),
            "-".as_ref(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 100];
    std::io::Read::read_exact(&mut out, &mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert_eq!(
        err.trim_end(),
        "safetensors-convert: interrupted by SIGPIPE"
    );
    assert_eq!(listing(dir.path()), ["in.safetensors"]);
}

#[test]
fn a_signal_during_the_kernel_copy_either_finishes_or_leaves_nothing() {
    // File to file: the tensor is copied on the blocking pool, where a signal
    // cannot stop it. Wherever the signal lands, the run either completes
    // (exit 0, the new output) or is interrupted (the old output, no temp file).
    let dir = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("big", pattern(3, 16 << 20))]);
    let input = write(dir.path(), "in.safetensors", &bytes);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for (signal, code, name) in SIGNALS {
        let out = write(&out_dir, "out.safetensors", b"the old bytes");
        let mut run = Run::start(&args(&[&input, &"-o", &out]), "kernel copy");
        run.wait_until("the temp file", || {
            !temps_of(&out_dir, "out.safetensors").is_empty()
        });
        run.signal(signal);
        let ended = run.end();
        match ended.code() {
            Some(0) => {
                assert_output(&out, &bytes);
                println!("{name} came too late: the run finished");
            }
            Some(c) if c == code => {
                let line = ended.one_line(code);
                assert_eq!(line, format!("safetensors-convert: interrupted by {name}"));
                assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
                println!("{name} interrupted the run");
            }
            _ => panic!("{ended:?}"),
        }
        assert_eq!(listing(&out_dir), ["out.safetensors"]);
    }
}

#[test]
fn a_signal_while_waiting_for_a_fifo_writer_ends_the_run() {
    // `convert FIFO -o out` waits in open(2) until something opens the FIFO
    // for writing. open_input does that open on the blocking pool, so the
    // signal watcher still hears SIGINT and SIGTERM meanwhile.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.npy");
    mkfifo(&fifo);
    let out = dir.path().join("out.safetensors");
    let mut run = Run::start(&args(&[&fifo, &"-o", &out]), "FIFO without writer");
    let tasks = PathBuf::from(format!("/proc/{}/task", run.pid()));
    run.wait_until("a thread waiting in open(2) for the FIFO's writer", || {
        std::fs::read_dir(&tasks).is_ok_and(|d| {
            d.filter_map(|t| t.ok()).any(|t| {
                std::fs::read_to_string(t.path().join("wchan"))
                    .is_ok_and(|w| w.trim() == "wait_for_partner")
            })
        })
    });
    run.signal("TERM");
    let ended = run.end();
    assert!(
        ended.code() == Some(143) || ended.status.signal() == Some(15),
        "{ended:?}"
    );
    assert_eq!(listing(dir.path()), ["x.npy"]);
}

// ---- disk full: an AsyncWrite that says ENOSPC ---------------------------------------

/// Accepts `left` bytes (and flushes while it has room), then fails every
/// write and flush with ENOSPC.
struct DiskFull {
    left: usize,
}

fn enospc() -> std::io::Error {
    std::io::Error::from_raw_os_error(28)
}

impl AsyncWrite for DiskFull {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.left == 0 {
            return Poll::Ready(Err(enospc()));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.left == 0 {
            return Poll::Ready(Err(enospc()));
        }
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn assert_enospc(e: &safetensors_stream::Error, output: Option<&str>) {
    assert_eq!(e.category(), Category::Io, "{e:?}");
    match e.kind() {
        ErrorKind::Io(io) => assert_eq!(io.raw_os_error(), Some(28), "{e:?}"),
        other => panic!("not an I/O error: {other:?}"),
    }
    assert!(e.to_string().contains("No space left on device"), "{e}");
    assert_eq!(e.output(), output, "{e}");
}

#[test]
fn enospc_from_the_writer_is_an_io_error_naming_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("a", pattern(4, 10_000)), ("b", pattern(5, 30_000))]);
    let input = write(dir.path(), "in.safetensors", &bytes);
    let header = bytes.len() - 40_000;
    // Full at once, inside the header, right after it, inside each tensor,
    // and with every byte written but the final flush refused.
    for room in [0, 5, header, header + 9_999, header + 25_000, bytes.len()] {
        block_on(async {
            let opts = quick();
            let mut sources = open_inputs(std::slice::from_ref(&input), &opts)
                .await
                .unwrap();
            let plan = plan_sources(&sources, &opts).unwrap();
            let w = DiskFull { left: room };
            let sink = SinkOptions::default().buffer_size(4096);
            let r = write_shard(w, &plan.shards[0], &mut sources, sink, "out.safetensors").await;
            let e = r.err().unwrap_or_else(|| panic!("room {room}: no error"));
            assert_enospc(&e, Some("out.safetensors"));
            // The README's table: I/O errors are exit code 3.
            assert_eq!(e.category(), Category::Io);
        });
    }
    // The Sink alone, refused at its header, names nothing it was not told.
    block_on(async {
        let enc = encode(
            vec![TensorMeta::new("x", Dtype::U8, [4])],
            None,
            Order::Canonical,
        )
        .unwrap();
        let w = DiskFull { left: 0 };
        let e = Sink::start(w, &enc, SinkOptions::default())
            .await
            .err()
            .unwrap();
        assert_enospc(&e, None);
        let w = DiskFull {
            left: enc.bytes().len(),
        };
        let mut sink = Sink::start(w, &enc, SinkOptions::default())
            .await
            .unwrap()
            .with_output_name("o");
        let e = sink
            .write_tensor(&mut &[1u8, 2, 3, 4][..])
            .await
            .unwrap_err();
        assert_enospc(&e, Some("o"));
        assert_eq!(e.tensor(), Some("x"));
    });
}

// ---- disk full: a real tmpfs ---------------------------------------------------------

fn four_mib_input(dir: &Path) -> (PathBuf, Vec<u8>) {
    let bytes = safetensors_bytes(&[("x", pattern(6, 4 << 20))]);
    (write(dir, "in.safetensors", &bytes), bytes)
}

fn assert_disk_full(ended: &Ended, out: &Path) {
    let line = ended.one_line(3);
    assert!(line.contains("No space left"), "{line}");
    assert!(line.contains(&out.display().to_string()), "{line}");
}

#[test]
fn a_full_tmpfs_exits_3_and_leaves_nothing_in_it() {
    let root = tempfile::tempdir().unwrap();
    let (input, _) = four_mib_input(root.path());
    let Some(fs) = Tmpfs::mount(&root.path().join("mnt"), "1m", "the 1 MiB tmpfs test") else {
        return;
    };
    let out = fs.dir.join("out.safetensors");
    // The file-to-file fast path, from another filesystem (copy_file_range
    // says EXDEV, the copy goes by hand); then with a checksum, which writes
    // through the async writer instead.
    for extra in [&[][..], &["--checksum", "sha256"][..]] {
        let mut a = args(&[&input, &"-o", &out]);
        a.extend(extra.iter().map(Into::into));
        let ended = Run::start(&a, "into a full tmpfs").end();
        assert_disk_full(&ended, &out);
        assert!(listing(&fs.dir).is_empty(), "{:?}", listing(&fs.dir));
    }
    // Streamed from standard input through the sink.
    let job = NpyOnStdin::new("x", 7, 4 << 20);
    let (run, mut feeder) = job.start(&out, job.data.len());
    feeder.close();
    assert_disk_full(&run.end(), &out);
    assert!(listing(&fs.dir).is_empty(), "{:?}", listing(&fs.dir));
    // The JSON report says the same: category Io, exit code 3.
    let ended = Run::start(
        &args(&[&input, &"--report", &"json", &"-o", &out]),
        "JSON report",
    )
    .end();
    assert_eq!(ended.code(), Some(3), "{ended:?}");
    let v: serde_json::Value = serde_json::from_str(ended.stderr.trim()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["error"]["category"], "Io");
    // A full disk is the output's fault, not the input's.
    assert_eq!(v["error"]["output"], out.display().to_string(), "{v}");
    assert!(v["error"]["input"].is_null(), "{v}");
    assert!(listing(&fs.dir).is_empty());
}

#[test]
fn a_tmpfs_that_fills_during_a_same_filesystem_kernel_copy() {
    // Input and output on one tmpfs: copy_file_range itself copies part of
    // the tensor, then says ENOSPC. An old output there keeps its bytes.
    let root = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&root.path().join("mnt"), "6m", "the same-tmpfs copy test") else {
        return;
    };
    let (input, _) = four_mib_input(&fs.dir);
    let out = write(&fs.dir, "out.safetensors", b"old");
    let ended = Run::start(&args(&[&input, &"-o", &out]), "same tmpfs").end();
    assert_disk_full(&ended, &out);
    assert_eq!(listing(&fs.dir), ["in.safetensors", "out.safetensors"]);
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
}

#[test]
fn a_tmpfs_that_fills_in_the_second_shard_keeps_no_shard() {
    let root = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("a", pattern(8, 2 << 20)), ("b", pattern(9, 2 << 20))]);
    let input = write(root.path(), "in.safetensors", &bytes);
    let Some(fs) = Tmpfs::mount(&root.path().join("mnt"), "3m", "the sharded tmpfs test") else {
        return;
    };
    write(&fs.dir, "m.safetensors.index.json", b"old index");
    let out = fs.dir.join("m.safetensors");
    let ended = Run::start(
        &args(&[&input, &"--max-shard-size", &"3MB", &"-o", &out]),
        "sharded into a small tmpfs",
    )
    .end();
    assert_disk_full(&ended, &fs.dir.join("m-00002-of-00002.safetensors"));
    assert_eq!(listing(&fs.dir), ["m.safetensors.index.json"]);
    assert_eq!(
        std::fs::read(fs.dir.join("m.safetensors.index.json")).unwrap(),
        b"old index"
    );
}

#[test]
fn a_tmpfs_out_of_inodes_fails_at_the_temp_file_it_cannot_create() {
    // No inode for the temp file: refused before any data moves. With
    // inodes for the two shards but not the index, the shards already
    // written go too.
    let root = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("a", pattern(12, 5000)), ("b", pattern(13, 5000))]);
    let input = write(root.path(), "in.safetensors", &bytes);
    for (inodes, sharded) in [("1", false), ("3", true)] {
        let dir = root.path().join(format!("mnt{inodes}"));
        let opts = format!("1m,nr_inodes={inodes}");
        let Some(fs) = Tmpfs::mount(&dir, &opts, "the tmpfs inode test") else {
            return;
        };
        let out = fs.dir.join("m.safetensors");
        let mut a = args(&[&input, &"-o", &out]);
        if sharded {
            a.extend(["--max-shard-size".into(), "5000".into()]);
        }
        let line = Run::start(&a, "no inode").end().one_line(3);
        assert!(line.contains("No space left"), "{line}");
        let failed = if sharded {
            "m.safetensors.index.json"
        } else {
            "m.safetensors"
        };
        assert!(
            line.contains(&format!(
                "{}: cannot create a file",
                fs.dir.join(failed).display()
            )),
            "{line}"
        );
        assert!(listing(&fs.dir).is_empty(), "{:?}", listing(&fs.dir));
    }
}

// ---- eight at once -----------------------------------------------------------------

#[test]
fn eight_runs_held_mid_way_in_one_folder_all_finish_valid() {
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<NpyOnStdin> = (0..8)
        .map(|k| NpyOnStdin::new(&format!("t{k}"), 20 + k, 128 << 10))
        .collect();
    let outs: Vec<PathBuf> = (0..8)
        .map(|k| dir.path().join(format!("out{k}.safetensors")))
        .collect();
    let mut held: Vec<(Run, Feeder)> = jobs
        .iter()
        .zip(&outs)
        .map(|(j, o)| j.start(o, 64 << 10))
        .collect();
    // All eight are writing their temp files at the same time.
    for (k, (run, _)) in held.iter_mut().enumerate() {
        let min = jobs[k].out_header + (16 << 10);
        wait_for_temp(run, dir.path(), &format!("out{k}.safetensors"), min);
    }
    assert_eq!(any_temps(dir.path()).len(), 8, "{:?}", listing(dir.path()));
    for (k, (_, feeder)) in held.iter_mut().enumerate() {
        feeder.send(jobs[k].rest(64 << 10));
        feeder.close();
    }
    for (run, _) in held {
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
    }
    for (job, out) in jobs.iter().zip(&outs) {
        assert_output(out, &job.expected);
    }
    assert_eq!(listing(dir.path()).len(), 8, "{:?}", listing(dir.path()));
}

#[test]
fn eight_runs_held_mid_way_on_one_output_name_never_clash_and_the_last_wins() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let jobs: Vec<NpyOnStdin> = (0..8)
        .map(|k| NpyOnStdin::new("x", 40 + k, 128 << 10))
        .collect();
    let mut held = Vec::new();
    for job in &jobs {
        let before = temps_of(dir.path(), "out.safetensors");
        let (mut run, feeder) = job.start(&out, 64 << 10);
        // Wait for this run's own temp file: one more than before.
        run.wait_until("its own temp file", || {
            temps_of(dir.path(), "out.safetensors")
                .iter()
                .any(|t| !before.contains(t) && file_len(&dir.path().join(t)) > job.out_header)
        });
        held.push((run, feeder));
    }
    // Eight temp files for one name, none shared.
    let temps = temps_of(dir.path(), "out.safetensors");
    assert_eq!(temps.len(), 8, "{temps:?}");
    // Finish them one by one: each finish replaces the output whole.
    let mut left = 8;
    for (job, (run, mut feeder)) in jobs.iter().zip(held) {
        feeder.send(job.rest(64 << 10));
        feeder.close();
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
        assert_output(&out, &job.expected);
        left -= 1;
        assert_eq!(temps_of(dir.path(), "out.safetensors").len(), left);
    }
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn two_runs_racing_for_one_name_leave_one_complete_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let a = NpyOnStdin::new("x", 60, 512 << 10);
    let b = NpyOnStdin::new("x", 61, 512 << 10);
    let (mut ra, mut fa) = a.start(&out, 0);
    let (mut rb, mut fb) = b.start(&out, 0);
    // Both have their temp files and headers out, then go at once.
    for run in [&mut ra, &mut rb] {
        run.wait_until("two temp files", || {
            temps_of(dir.path(), "out.safetensors").len() == 2
        });
    }
    fa.send(a.rest(0));
    fb.send(b.rest(0));
    fa.close();
    fb.close();
    for run in [ra, rb] {
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
    }
    let got = std::fs::read(&out).unwrap();
    assert!(got == a.expected || got == b.expected, "one whole output");
    read_file_header(&out, Rules::STRICT).unwrap();
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

#[test]
fn two_runs_writing_one_sharded_set_never_leave_a_mixed_set() {
    // Same input, same shard names, told apart by their metadata. Started
    // together, round after round: whichever commits last must own every
    // shard (and the index), never the shards of one and of the other.
    let dir = tempfile::tempdir().unwrap();
    let tensors: Vec<(String, Vec<u8>)> = (0..16)
        .map(|k| (format!("t{k:02}"), pattern(70 + k, 1000)))
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    let input = write(dir.path(), "in.safetensors", &safetensors_bytes(&refs));
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("m.safetensors");
    let start = |who: &str| {
        Run::start(
            &args(&[
                &input,
                &"--max-shard-size",
                &"1000",
                &"--no-sync",
                &"--metadata",
                &format!("run={who}"),
                &"-o",
                &out,
            ]),
            who,
        )
    };
    let rounds = 60;
    for round in 0..rounds {
        let (a, b) = (start("a"), start("b"));
        for run in [a, b] {
            let ended = run.end();
            assert_eq!(ended.code(), Some(0), "round {round}: {ended:?}");
        }
        let names = listing(&out_dir);
        assert_eq!(names.len(), 17, "{names:?}");
        let owners: std::collections::BTreeSet<String> = names
            .iter()
            .filter(|n| n.ends_with("-of-00016.safetensors"))
            .map(|n| {
                let h = read_file_header(&out_dir.join(n), Rules::STRICT).unwrap();
                h.metadata.unwrap()["run"].clone()
            })
            .collect();
        assert_eq!(owners.len(), 1, "round {round}: a mixed set: {owners:?}");
    }
}

#[test]
fn eight_file_to_file_runs_at_once_into_one_folder() {
    // The fast path, eight processes started together: different names,
    // then all on one name.
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<(PathBuf, Vec<u8>)> = (0..8)
        .map(|k| {
            let bytes = safetensors_bytes(&[
                ("w", pattern(80 + k, 1 << 20)),
                ("b", pattern(90 + k, 1000)),
            ]);
            (
                write(dir.path(), &format!("in{k}.safetensors"), &bytes),
                bytes,
            )
        })
        .collect();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let runs: Vec<Run> = inputs
        .iter()
        .enumerate()
        .map(|(k, (i, _))| {
            let o = out_dir.join(format!("o{k}.safetensors"));
            Run::start(&args(&[i, &"-o", &o]), &format!("run {k}"))
        })
        .collect();
    for run in runs {
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
    }
    for (k, (_, bytes)) in inputs.iter().enumerate() {
        assert_output(&out_dir.join(format!("o{k}.safetensors")), bytes);
    }
    assert_eq!(listing(&out_dir).len(), 8);

    let same = out_dir.join("same.safetensors");
    let runs: Vec<Run> = inputs
        .iter()
        .map(|(i, _)| Run::start(&args(&[i, &"-o", &same]), "same name"))
        .collect();
    for run in runs {
        let ended = run.end();
        assert_eq!(ended.code(), Some(0), "{ended:?}");
    }
    let got = std::fs::read(&same).unwrap();
    assert!(inputs.iter().any(|(_, b)| *b == got), "one whole output");
    read_file_header(&same, Rules::STRICT).unwrap();
    assert_eq!(listing(&out_dir).len(), 9, "{:?}", listing(&out_dir));
}

#[test]
fn eight_library_conversions_on_threads_into_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<(PathBuf, Vec<u8>)> = (0..8)
        .map(|k| {
            let bytes = safetensors_bytes(&[("t", pattern(70 + k, 300_000))]);
            (
                write(dir.path(), &format!("in{k}.safetensors"), &bytes),
                bytes,
            )
        })
        .collect();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let same = out_dir.join("same.safetensors");
    std::thread::scope(|s| {
        for (k, (input, _)) in inputs.iter().enumerate() {
            let own = out_dir.join(format!("o{k}.safetensors"));
            let same = same.clone();
            s.spawn(move || {
                for out in [own, same] {
                    block_on(convert(
                        std::slice::from_ref(input),
                        &Output::File(out),
                        &quick(),
                    ))
                    .unwrap();
                }
            });
        }
    });
    for (k, (_, bytes)) in inputs.iter().enumerate() {
        assert_output(&out_dir.join(format!("o{k}.safetensors")), bytes);
    }
    let got = std::fs::read(&same).unwrap();
    assert!(inputs.iter().any(|(_, b)| *b == got), "one whole output");
    assert_eq!(listing(&out_dir).len(), 9, "{:?}", listing(&out_dir));
}

// ---- inputs that grow or shrink while read --------------------------------------------

/// The run was refused because the input changed, and left no output.
fn assert_changed(e: &safetensors_stream::Error, input: &Path, out: &Path) {
    assert!(
        matches!(e.kind(), safetensors_stream::ErrorKind::InputChanged { .. }),
        "{e:?}"
    );
    assert_eq!(e.input(), Some(input.display().to_string().as_str()), "{e}");
    assert_eq!(e.category(), Category::BadInput, "{e}");
    assert!(!out.exists(), "a changed input must not be committed");
    let dir = out.parent().unwrap();
    let temps = std::fs::read_dir(dir)
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".convert-tmp")
        })
        .count();
    assert_eq!(temps, 0, "temp files left behind");
}

fn append(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn a_safetensors_input_that_grows_while_converting_is_refused() {
    // Every tensor's range was validated against the file's length when
    // opened; a file that grew since is being rewritten under us: the copy
    // is refused and nothing is committed. (A writer into memory, which has
    // nothing to commit, still gets the ranges as opened.) A new open of the
    // grown file is refused too (longer than its header says).
    let dir = tempfile::tempdir().unwrap();
    let bytes = safetensors_bytes(&[("a", pattern(30, 70_000)), ("b", pattern(31, 5_000))]);
    let input = write(dir.path(), "in.safetensors", &bytes);
    let out = dir.path().join("out.safetensors");
    block_on(async {
        let opts = quick();
        // The fast path into a file.
        let mut sources = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .unwrap();
        append(&input, &pattern(99, 100_000));
        let e = convert_sources(&mut sources, &Output::File(out.clone()), &opts)
            .await
            .unwrap_err();
        assert_changed(&e, &input, &out);
        // The async readers into memory, after more growth.
        append(&input, &pattern(98, 10));
        let plan = plan_sources(&sources, &opts).unwrap();
        let mem = write_shard(Vec::new(), &plan.shards[0], &mut sources, opts.sink, "mem")
            .await
            .unwrap();
        assert!(mem == bytes);
        // The grown file, opened now, is not a valid safetensors file.
        let e = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .err()
            .unwrap();
        assert_eq!(e.category(), Category::BadInput, "{e}");
    });
}

#[test]
fn a_gguf_input_cut_short_while_dequantizing_is_refused_as_changed() {
    // A dequantized tensor is read block by block with positional reads;
    // one past the end of a file that shrank since it was opened is the
    // input's fault, named as such (exit 1), not an I/O error (exit 3).
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.gguf");
    std::fs::copy(support::fixtures().join("gguf/types_le.gguf"), &input).unwrap();
    let out = dir.path().join("out.safetensors");
    block_on(async {
        // The dequantized tensors only: a plain one would be found short
        // by the sink (typed already).
        let mut opts = quick();
        opts.plan.include = vec!["q*".into(), "iq*".into()];
        let mut sources = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&input)
            .unwrap();
        file.set_len(20_000).unwrap();
        let e = convert_sources(&mut sources, &Output::File(out.clone()), &opts)
            .await
            .unwrap_err();
        assert_changed(&e, &input, &out);
        assert!(e.tensor().is_some(), "{e}");
    });
}

#[test]
fn an_npy_input_that_grows_while_converting_is_refused() {
    // Same for .npy: the data length (file length less header) was checked
    // against the shape when opened; appended bytes are past the tensor.
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(32, 50_000);
    let input = write(dir.path(), "x.npy", &npy_u8(&data));
    let expected = safetensors_bytes(&[("x", data)]);
    let out = dir.path().join("out.safetensors");
    block_on(async {
        let opts = quick();
        let mut sources = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .unwrap();
        append(&input, &pattern(97, 4096));
        let e = convert_sources(&mut sources, &Output::File(out.clone()), &opts)
            .await
            .unwrap_err();
        assert_changed(&e, &input, &out);
        let plan = plan_sources(&sources, &opts).unwrap();
        let mem = write_shard(Vec::new(), &plan.shards[0], &mut sources, opts.sink, "mem")
            .await
            .unwrap();
        assert!(mem == expected);
        let e = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .err()
            .unwrap();
        assert_eq!(e.category(), Category::BadInput, "{e}");
        assert!(e.to_string().contains("x.npy"), "{e}");
    });
}

#[test]
fn an_npz_input_that_grows_while_converting_is_refused() {
    // The central directory was read when opened; bytes appended after the
    // end record are outside every member.
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example/model.npz");
    let input = dir.path().join("model.npz");
    std::fs::copy(&example, &input).unwrap();
    let expected = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example/model.safetensors"),
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    block_on(async {
        let opts = quick();
        let mut sources = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .unwrap();
        append(&input, &pattern(96, 100_000));
        let e = convert_sources(&mut sources, &Output::File(out.clone()), &opts)
            .await
            .unwrap_err();
        assert_changed(&e, &input, &out);
        let plan = plan_sources(&sources, &opts).unwrap();
        let mem = write_shard(Vec::new(), &plan.shards[0], &mut sources, opts.sink, "mem")
            .await
            .unwrap();
        assert!(mem == expected);
        // Opened now, the grown archive is refused: its end record is no
        // longer at the end.
        let e = open_inputs(std::slice::from_ref(&input), &opts)
            .await
            .err()
            .unwrap();
        assert_eq!(e.category(), Category::BadInput, "{e}");
    });
}

#[test]
fn a_raw_dump_on_stdin_that_runs_past_its_shape_or_stops_short_fails_mid_run() {
    let len = 64 << 10;
    let data = pattern(33, len + 1000);
    let header = one_tensor_header_len("w", len);
    // (bytes sent first, bytes sent after, tensor bytes written meanwhile, message)
    let cases = [
        // Every tensor byte is in and written; then the stream goes on.
        (
            len,
            1000,
            len,
            format!("data is {} bytes but {len} are expected", len + 1000),
        ),
        // The stream stops a little under half way, once 16 KiB are written.
        (
            30_000,
            0,
            16 << 10,
            format!("data is 30000 bytes but {len} are expected"),
        ),
    ];
    for (fed_first, then, written, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = write(dir.path(), "out.safetensors", b"the old bytes");
        let a = args(&[
            &"-",
            &"--raw-dtype",
            &"U8",
            &"--raw-shape",
            &len.to_string(),
            &"--name",
            &"w",
            &"--buffer-size",
            &"4KiB",
            &"-o",
            &out,
        ]);
        let mut run = Run::start(&a, "raw dump on stdin");
        let mut feeder = run.stdin_feeder();
        feeder.send(&data[..fed_first]);
        let min = header + written as u64;
        wait_for_temp(&mut run, dir.path(), "out.safetensors", min);
        feeder.send(&data[fed_first..fed_first + then]);
        feeder.close();
        let line = run.end().one_line(1);
        assert!(line.contains(&expected), "{line}");
        assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
        assert_eq!(listing(dir.path()), ["out.safetensors"]);
    }
}

#[test]
fn an_npy_on_stdin_that_runs_past_its_shape_fails_after_its_data_is_written() {
    let job = NpyOnStdin::new("x", 34, 64 << 10);
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "out.safetensors", b"the old bytes");
    let (mut run, mut feeder) = job.start(&out, job.data.len());
    wait_for_temp(
        &mut run,
        dir.path(),
        "out.safetensors",
        job.expected.len() as u64,
    );
    feeder.send(&pattern(35, 777));
    feeder.close();
    let line = run.end().one_line(1);
    assert!(line.contains(&(64 << 10).to_string()), "{line}");
    assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
}

// ---- hostile names with sharding -------------------------------------------------------

/// The names in `dir` that start with `stem` (none if it cannot be read).
fn names_in(dir: &str, stem: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(stem))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs `convert INPUT --max-shard-size SIZE [EXTRA] -o OUT_DIR/m.safetensors`
/// and checks that only shards and an index appeared, in OUT_DIR, and that
/// the index maps exactly `tensors` to plain shard file names.
fn shard_hostile(
    root: &Path,
    input: &Path,
    out_dir: &Path,
    size: &str,
    extra: &[&str],
    tensors: &[String],
) {
    let before = tree(root);
    // The absolute member names point here.
    let abs_before = (names_in("/etc", "passwd"), names_in("/tmp", "evil"));
    let mut a = args(&[
        &input,
        &"--max-shard-size",
        &size,
        &"-o",
        &out_dir.join("m.safetensors"),
    ]);
    a.extend(extra.iter().map(Into::into));
    let ended = Run::start(&a, "hostile names").end();
    assert_eq!(ended.code(), Some(0), "{ended:?}");
    // Only the output folder changed, and it holds only the set.
    let after = tree(root);
    let rel = out_dir.strip_prefix(root).unwrap().display().to_string();
    let new: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    assert!(
        new.iter().all(|p| p.starts_with(&format!("{rel}/"))),
        "written outside {rel}: {new:?}"
    );
    assert!(before.iter().all(|p| after.contains(p)));
    let files = listing(out_dir);
    let shards = files.len() - 1;
    assert!(shards > 1, "{files:?}");
    let mut want: Vec<String> = (1..=shards)
        .map(|k| format!("m-{k:05}-of-{shards:05}.safetensors"))
        .collect();
    want.push("m.safetensors.index.json".into());
    want.sort();
    assert_eq!(files, want);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("m.safetensors.index.json")).unwrap())
            .unwrap();
    let map = index["weight_map"].as_object().unwrap();
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let mut want_keys: Vec<&String> = tensors.iter().collect();
    want_keys.sort();
    assert_eq!(keys, want_keys);
    for v in map.values() {
        assert!(want.contains(&v.as_str().unwrap().to_string()), "{v}");
    }
    for f in &want[..shards] {
        read_file_header(&out_dir.join(f), Rules::STRICT).unwrap();
    }
    assert_eq!(
        (names_in("/etc", "passwd"), names_in("/tmp", "evil")),
        abs_before
    );
}

#[test]
fn hostile_member_names_with_sharding_write_only_into_the_output_folder() {
    use support::numpy::{build_zip, ZipMember};
    let names = [
        "../x.npy",
        "../../y.npy",
        "/etc/passwd.npy",
        "a/../../../z.npy",
        "/tmp/evil.npy",
        "..\\w.npy",
    ];
    let members: Vec<ZipMember> = names
        .iter()
        .enumerate()
        .map(|(k, n)| ZipMember::stored(n, npy_u8(&pattern(50 + k as u64, 1000))))
        .collect();
    let (zip, _) = build_zip(&members);
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("a/b");
    std::fs::create_dir_all(&work).unwrap();
    let input = write(&work, "in.npz", &zip);
    let tensors: Vec<String> = names
        .iter()
        .map(|n| n.strip_suffix(".npy").unwrap().to_string())
        .collect();
    // One tensor per shard.
    let out = work.join("out");
    std::fs::create_dir(&out).unwrap();
    shard_hostile(root.path(), &input, &out, "1000", &[], &tensors);
    // Two per shard, with a prefix that climbs further.
    let out2 = work.join("out2");
    std::fs::create_dir(&out2).unwrap();
    let prefixed: Vec<String> = tensors.iter().map(|t| format!("../../{t}")).collect();
    shard_hostile(
        root.path(),
        &input,
        &out2,
        "2000",
        &["--prefix", "../../"],
        &prefixed,
    );
    // A safetensors input whose tensor names are paths, resharded.
    let st = safetensors_bytes(&[
        ("../../etc/cron.d/x", pattern(60, 3000)),
        ("/etc/passwd", pattern(61, 3000)),
        ("../m-00001-of-00002.safetensors", pattern(62, 3000)),
    ]);
    let st_input = write(&work, "paths.safetensors", &st);
    let out3 = work.join("out3");
    std::fs::create_dir(&out3).unwrap();
    let st_names: Vec<String> = [
        "../../etc/cron.d/x",
        "/etc/passwd",
        "../m-00001-of-00002.safetensors",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    shard_hostile(root.path(), &st_input, &out3, "3000", &[], &st_names);
}
