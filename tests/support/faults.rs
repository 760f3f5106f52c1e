//! Helpers for `tests/it/faults.rs`: inputs built in memory, child runs of the
//! `convert` binary held in the middle of a conversion by inputs that the
//! test feeds (standard input, FIFOs), temp-file recognition, and a tmpfs
//! mount that skips where the machine does not allow one.

pub use super::{block_on, fixtures, listing, pattern, write, SplitMix, BIN};

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use safetensors_stream::header::{encode, Order, TensorMeta};
use safetensors_stream::Dtype;

/// How long a child may take to reach a state before the test gives up on
/// it. Not a timing assertion: a guard so that a hang fails instead of
/// blocking the suite. Normal runs reach every state in milliseconds.
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// The tempfile crate's random part of a temp name is this long.
const RANDOM_LEN: usize = 6;

// ---- inputs ----------------------------------------------------------------------

/// A safetensors file of U8 tensors, laid out as the reference writer lays
/// it out (so converting it gives the same bytes back).
pub fn safetensors_bytes(tensors: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let metas = tensors
        .iter()
        .map(|(n, d)| TensorMeta::new(*n, Dtype::U8, [d.len() as u64]))
        .collect();
    let (header, mut file) = encode(metas, None, Order::Canonical)
        .expect("encode")
        .into_parts();
    let start = file.len();
    assert_eq!(start as u64, header.data_start());
    file.resize(header.file_len() as usize, 0);
    for t in &header.tensors {
        let (_, data) = tensors.iter().find(|(n, _)| *n == t.meta.name).unwrap();
        file[start + t.begin as usize..start + t.end as usize].copy_from_slice(data);
    }
    file
}

/// The header of a version 1.0 `.npy` holding `len` bytes of `|u1`.
pub fn npy_u8_header(len: usize) -> Vec<u8> {
    let dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': ({len},), }}");
    let mut text = dict.into_bytes();
    let total = (10 + text.len() + 1).div_ceil(64) * 64;
    text.resize(total - 11, b' ');
    text.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(&text);
    out
}

/// A whole `.npy` of `data` as `|u1`.
pub fn npy_u8(data: &[u8]) -> Vec<u8> {
    let mut out = npy_u8_header(data.len());
    out.extend_from_slice(data);
    out
}

/// The length of the header (length prefix included) of the one-U8-tensor
/// file that `name` with `len` bytes converts to.
pub fn one_tensor_header_len(name: &str, len: usize) -> u64 {
    let meta = TensorMeta::new(name, Dtype::U8, [len as u64]);
    encode(vec![meta], None, Order::Canonical)
        .unwrap()
        .header()
        .data_start()
}

/// Every path under `root`, relative, sorted (folders end in `/`).
pub fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &e.path(), out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// True if `name` is a temp file of the output named `target`:
/// `.TARGET.XXXXXX.convert-tmp`, as the README describes.
pub fn is_temp_of(name: &str, target: &str) -> bool {
    let Some(rest) = name.strip_prefix(&format!(".{target}.")) else {
        return false;
    };
    let Some(random) = rest.strip_suffix(".convert-tmp") else {
        return false;
    };
    random.len() == RANDOM_LEN && random.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The names in `dir` that are temp files of `target`.
pub fn temps_of(dir: &Path, target: &str) -> Vec<String> {
    listing(dir)
        .into_iter()
        .filter(|n| is_temp_of(n, target))
        .collect()
}

/// The names in `dir` that end in `.convert-tmp`.
pub fn any_temps(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_iter()
        .filter(|n| n.ends_with(".convert-tmp"))
        .collect()
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

// ---- feeding a child -------------------------------------------------------------

enum Feed {
    Bytes(Vec<u8>),
}

/// A thread that writes what it is given into one input of a child (its
/// standard input, or a FIFO it opens): the test decides how far the child
/// gets. Dropping it closes the input.
pub struct Feeder {
    tx: Option<mpsc::Sender<Feed>>,
}

impl Feeder {
    fn spawn(open: impl FnOnce() -> Option<Box<dyn Write + Send>> + Send + 'static) -> Feeder {
        let (tx, rx) = mpsc::channel::<Feed>();
        std::thread::spawn(move || {
            let Some(mut w) = open() else { return };
            for Feed::Bytes(b) in rx {
                // A child that died or refused its input: stop quietly, the
                // test looks at the child.
                if w.write_all(&b).and_then(|()| w.flush()).is_err() {
                    return;
                }
            }
        });
        Feeder { tx: Some(tx) }
    }

    /// Feeds a child's standard input.
    pub fn stdin(stdin: ChildStdin) -> Feeder {
        Feeder::spawn(move || Some(Box::new(stdin) as Box<dyn Write + Send>))
    }

    /// Feeds a FIFO: opens it for writing (which waits for the reader).
    pub fn fifo(path: &Path) -> Feeder {
        let path = path.to_path_buf();
        Feeder::spawn(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .ok()
                .map(|f| Box::new(f) as Box<dyn Write + Send>)
        })
    }

    pub fn send(&self, bytes: &[u8]) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Feed::Bytes(bytes.to_vec()));
        }
    }

    /// Closes the input once everything sent is written.
    pub fn close(&mut self) {
        self.tx = None;
    }
}

pub fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

// ---- a child run -------------------------------------------------------------------

/// A run of the binary whose stderr is collected when it ends.
pub struct Run {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    label: String,
}

/// How a run ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    pub stderr: String,
}

impl Ended {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The lines of stderr.
    pub fn lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    /// Asserts exit `code` and exactly one line on stderr starting `convert: `; returns it.
    pub fn one_line(&self, code: i32) -> String {
        assert_eq!(self.code(), Some(code), "{self:?}");
        let lines = self.lines();
        assert_eq!(lines.len(), 1, "one line on stderr: {:?}", self.stderr);
        assert!(
            lines[0].starts_with("safetensors-convert: "),
            "{:?}",
            self.stderr
        );
        lines[0].to_string()
    }
}

impl Run {
    /// Starts `convert ARGS` with standard input piped (kept in `stdin`).
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: &[S], label: &str) -> Run {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        Run {
            child,
            stdin,
            label: label.to_string(),
        }
    }

    /// A feeder for the child's standard input.
    pub fn stdin_feeder(&mut self) -> Feeder {
        Feeder::stdin(self.stdin.take().expect("stdin not yet taken"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `cond` holds while the child is still running. A child that
    /// ends first fails the test with its stderr.
    pub fn wait_until(&mut self, what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        loop {
            if cond() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                let stderr = self.read_stderr();
                panic!(
                    "{}: ended ({status}) before {what}; stderr: {stderr}",
                    self.label
                );
            }
            if start.elapsed() > HANG_GUARD {
                let _ = self.child.kill();
                panic!("{}: never got to {what}", self.label);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn read_stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// Waits for the child to end (a hang is killed and fails the test).
    pub fn end(mut self) -> Ended {
        self.stdin = None;
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > HANG_GUARD {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self.read_stderr();
                panic!(
                    "{}: still running after {HANG_GUARD:?}; stderr: {stderr}",
                    self.label
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ended {
            status,
            stderr: self.read_stderr(),
        }
    }

    /// Sends `signal` (`INT`, `TERM`, `KILL`) to the child.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("sh")
            .args(["-c", "kill -s \"$1\" \"$2\"", "sh", signal])
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -s {signal} {}", self.pid());
    }
}

// ---- tmpfs -------------------------------------------------------------------------

/// A tmpfs mounted on a folder, unmounted when dropped.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`1m`) on a new folder `dir`; `None`, with a
    /// message saying the test is skipped, where mounting is not allowed.
    pub fn mount(dir: &Path, size: &str, test: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs {
                dir: dir.to_path_buf(),
            }),
            Ok(o) => {
                println!(
                    "skipped {test}: cannot mount a tmpfs here ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                println!("skipped {test}: cannot run mount ({e})");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds it (a child killed by a failing test):
            // detach it now; the kernel frees it when the last user goes.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
