//! Progress on stderr: a bar on a terminal, plain lines when forced elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use safetensors_stream::observe::Progress;
use safetensors_stream::plan::Plan;
use safetensors_stream::units::HumanBytes;

/// An indicatif bar: bytes, throughput, ETA, shard and tensor.
pub(crate) struct Bar(ProgressBar);

impl Bar {
    pub(crate) fn new() -> Self {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{bar:30.cyan/blue} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} ETA {eta:>4} {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        bar.set_style(style);
        Bar(bar)
    }
}

impl Progress for Bar {
    fn start(&self, _plan: &Plan, total: u64) {
        self.0.set_length(total);
    }
    fn tensor(&self, shard: usize, shards: usize, name: &str) {
        let msg = if shards > 1 {
            format!("shard {}/{shards} {name}", shard + 1)
        } else {
            name.to_string()
        };
        self.0.set_message(msg);
    }
    fn bytes(&self, n: u64) {
        self.0.inc(n);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// One line a second, for `--progress` when stderr is not a terminal.
pub(crate) struct Lines {
    total: AtomicU64,
    done: AtomicU64,
    started: Instant,
    last: Mutex<Instant>,
    tensor: Mutex<String>,
}

impl Lines {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Lines {
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
            started: now,
            last: Mutex::new(now),
            tensor: Mutex::new(String::new()),
        }
    }

    fn line(&self) {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed).max(1);
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let tensor = self.tensor.lock().map(|t| t.clone()).unwrap_or_default();
        eprintln!(
            "progress: {} / {} ({:.0}%), {}/s, {tensor}",
            HumanBytes(done),
            HumanBytes(total),
            done as f64 * 100.0 / total as f64,
            HumanBytes((done as f64 / secs) as u64)
        );
    }
}

impl Progress for Lines {
    fn start(&self, _plan: &Plan, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.line();
    }
    fn tensor(&self, shard: usize, shards: usize, name: &str) {
        if let Ok(mut t) = self.tensor.lock() {
            *t = format!("shard {}/{shards} {name}", shard + 1);
        }
    }
    fn bytes(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        let due = self
            .last
            .lock()
            .map(|mut last| {
                let due = last.elapsed() >= Duration::from_secs(1);
                if due {
                    *last = Instant::now();
                }
                due
            })
            .unwrap_or(false);
        if due {
            self.line();
        }
    }
    fn finish(&self) {
        self.line();
    }
}
