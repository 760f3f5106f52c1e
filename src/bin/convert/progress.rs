//! Progress on stderr: a bar on a terminal, plain lines when forced elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use safetensors_stream::observe::Progress;
use safetensors_stream::plan::Plan;
use safetensors_stream::units::HumanBytes;

/// An indicatif bar: bytes, throughput, ETA, shard and tensor.
pub(crate) struct Bar(ProgressBar);

/// The bar's line. Its fixed fields take at most 70 columns (bytes and
/// rates as `1023.99 MiB`, the ETA as `59m59s`); the shard and tensor
/// (`wide_msg`) get what is left of the terminal's width and are cut to it,
/// so the line never wraps (a wrapped line is redrawn as a new one) on an
/// 80-column terminal, nor on a narrower one but for the fixed fields.
const BAR_TEMPLATE: &str =
    "{bar:20.cyan/blue} {bytes:>11}/{total_bytes:<11} {bytes_per_sec:>13} ETA {eta:>6} {wide_msg}";

impl Bar {
    pub(crate) fn new() -> Self {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(BAR_TEMPLATE)
            .expect("a valid template")
            .with_key(
                "eta",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let eta = eta_text(state.pos(), state.per_sec(), state.elapsed(), || {
                        state.eta()
                    });
                    let _ = w.write_str(&eta);
                },
            )
            .progress_chars("=> ");
        bar.set_style(style);
        Bar(bar)
    }

    /// Clears the bar, so that the message of an interruption (after the
    /// terminal's `^C`) starts on a fresh line.
    pub(crate) fn interrupted(&self) {
        self.0.finish_and_clear();
    }
}

/// Before any byte has moved, or in the first second, there is no rate to
/// go by: indicatif would show an ETA of 0s then. Show `--` instead.
/// Otherwise at most six columns: `45s`, `12m05s`, `3h07m`, `>99h`.
fn eta_text(pos: u64, per_sec: f64, elapsed: Duration, eta: impl FnOnce() -> Duration) -> String {
    if pos == 0 || per_sec.is_nan() || per_sec <= 0.0 || elapsed < Duration::from_secs(1) {
        return "--".to_string();
    }
    let secs = eta().as_secs();
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h @ 1..=99, m, _) => format!("{h}h{m:02}m"),
        _ => ">99h".to_string(),
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
        let elapsed = self.started.elapsed();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let per_sec = done as f64 / secs;
        let tensor = self.tensor.lock().map(|t| t.clone()).unwrap_or_default();
        let rate = match per_sec > 0.0 {
            true => format!("{}/s", HumanBytes(per_sec as u64)),
            false => "--/s".to_string(),
        };
        let eta = eta_text(done, per_sec, elapsed, || {
            Duration::from_secs_f64(total.saturating_sub(done) as f64 / per_sec)
        });
        eprintln!(
            "progress: {} / {} ({:.0}%), {rate}, ETA {eta}, {tensor}",
            HumanBytes(done),
            HumanBytes(total),
            done as f64 * 100.0 / total as f64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_eta_until_a_rate_is_known() {
        let eta = || Duration::from_secs(90);
        assert_eq!(eta_text(0, 0.0, Duration::from_secs(5), eta), "--");
        assert_eq!(eta_text(10, 0.0, Duration::from_secs(5), eta), "--");
        assert_eq!(eta_text(10, 5.0, Duration::from_millis(200), eta), "--");
        assert_eq!(eta_text(10, 5.0, Duration::from_secs(2), eta), "1m30s");
        let at = |secs| {
            eta_text(10, 5.0, Duration::from_secs(2), || {
                Duration::from_secs(secs)
            })
        };
        assert_eq!(at(45), "45s");
        assert_eq!(at(3599), "59m59s");
        assert_eq!(at(3600 * 3 + 7 * 60 + 59), "3h07m");
        assert_eq!(at(100 * 3600), ">99h");
    }
}
