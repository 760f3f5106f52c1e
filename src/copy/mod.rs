//! The copy engine: a planned shard's tensors from their sources into one
//! writer. The route of each run of tensors is chosen in one place
//! ([`job::next_jobs`]): kernel copies and positional reads for bytes that
//! lie in files ([`crate::sink::fast`]), blocking readers side by side
//! ([`crate::sink::parallel`]), else the async [`Sink`], one tensor at a
//! time. Every route ends in the one element pipeline.

pub(crate) mod job;

use std::sync::{Arc, Mutex};

use tokio::io::AsyncWrite;

use crate::header::TensorEntry;
use crate::observe::Progress;
use crate::plan::{ShardPlan, TensorRef};
use crate::sink::fast::{copy_spans, SpanJob};
use crate::sink::parallel::{write_parallel, ReaderJob};
use crate::sink::{Sink, SinkOptions};
use crate::source::{Source, TensorData};
use crate::{Error, Result};
use job::{next_jobs, Next};

/// Writes one planned file to any `AsyncWrite`, pulling each tensor from its source.
pub async fn write_shard<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    sink_options: SinkOptions,
    output_name: &str,
) -> Result<W> {
    copy_shard(
        writer,
        shard,
        sources,
        sink_options,
        output_name,
        &Watch::default(),
        None,
        None,
    )
    .await
}

/// Who is told of the copy's progress, and which shard this is.
#[derive(Clone, Default)]
pub(crate) struct Watch {
    pub(crate) progress: Option<Arc<dyn Progress>>,
    /// This shard's index and the count of shards.
    pub(crate) shard: (usize, usize),
}

impl Watch {
    /// Tells progress that tensor `name` begins.
    fn tensor(&self, name: &str) {
        if let Some(p) = &self.progress {
            p.tensor(self.shard.0, self.shard.1, name);
        }
    }

    /// Watches a run of tensors copied in one go (merged kernel copies,
    /// gathered batches): `entries`, in the order they lie in the file.
    fn run(&self, entries: &[TensorEntry]) -> RunWatch {
        let first = entries.first().map_or(0, |t| t.begin);
        let mut run = RunWatch {
            watch: self.clone(),
            names: entries.iter().map(|t| t.meta.name.clone()).collect(),
            starts: entries.iter().map(|t| t.begin - first).collect(),
            next: 0,
            landed: 0,
        };
        run.announce();
        run
    }
}

/// A run's tensors, each named once the bytes before it have landed: the
/// route copies the run as it sees fit, yet every tensor is named, in order.
struct RunWatch {
    watch: Watch,
    names: Vec<String>,
    /// Where each tensor starts, from the run's start.
    starts: Vec<u64>,
    /// The next tensor to name.
    next: usize,
    landed: u64,
}

impl RunWatch {
    /// `n` more bytes of the run landed, in order.
    fn landed(&mut self, n: u64) {
        self.landed += n;
        self.announce();
    }

    fn announce(&mut self) {
        while self.next < self.names.len() && self.starts[self.next] <= self.landed {
            self.watch.tensor(&self.names[self.next]);
            self.next += 1;
        }
    }
}

/// The output file itself, for tensors copied without the async writer.
pub(crate) struct Direct {
    pub(crate) out: Arc<std::fs::File>,
    pub(crate) name: String,
    /// Writeback started as bytes land, when the file is to be fsync'd.
    pub(crate) writeback: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl Direct {
    /// What to call as bytes land in the file: progress, and writeback.
    fn on_landed(&self, watch: &Watch) -> impl Fn(u64) + Send + Sync + 'static {
        let (progress, writeback) = (watch.progress.clone(), self.writeback.clone());
        move |n| {
            if let Some(p) = &progress {
                p.bytes(n);
            }
            if let Some(w) = &writeback {
                w(n);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn copy_shard<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    sink_options: SinkOptions,
    output_name: &str,
    watch: &Watch,
    direct: Option<Direct>,
    overflows: Option<&Mutex<Vec<String>>>,
) -> Result<W> {
    let overflowed = |k: usize, count: u64| {
        if let (Some(list), Some(c)) = (overflows, shard.refs[k].cast()) {
            let name = &shard.header.header().tensors[k].meta.name;
            let msg = overflow_warning(name, c, count);
            list.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
        }
    };
    let sink = Sink::start(writer, &shard.header, sink_options)
        .await
        .map_err(|e| e.with_output(output_name))?;
    let mut sink = sink.with_output_name(output_name);
    let tensors = &shard.header.header().tensors;
    let mut ahead: Option<(usize, Result<TensorData<'static>>)> = None;
    let mut k = 0;
    while k < shard.refs.len() {
        if let Some(d) = &direct {
            // Tensors whose bytes lie in files, or else deflated members
            // (read side by side): straight into the file.
            let size = sink_options.buffer_size;
            let copied = match next_jobs(shard, k, sources, true) {
                Next::Spans(spans) => {
                    let run = watch.run(&tensors[k..k + spans.len()]);
                    let n = spans.len();
                    Some((n, copy_direct(&mut sink, d, watch, run, spans, size).await))
                }
                Next::Readers(readers) => {
                    let n = readers.len();
                    let written = write_readers(&mut sink, d, watch, shard, k, readers, size);
                    Some((n, written.await))
                }
                Next::Stream => None,
            };
            if let Some((n, copied)) = copied {
                let over = copied.map_err(|(i, e)| {
                    name_error(e, sources, &shard.refs[k + i], &tensors[k + i].meta.name)
                })?;
                over.into_iter().for_each(|(i, n)| overflowed(k + i, n));
                k += n;
                continue;
            }
        }
        let (r, t) = (&shard.refs[k], &tensors[k]);
        watch.tensor(&t.meta.name);
        // Start the next tensor now, if its source can: it then reads (an
        // npz member inflates) on another core while this one is written.
        // (Into a file, such tensors are read side by side instead, above.)
        let prefetched = match ahead.take() {
            Some((at, data)) if at == k => Some(data),
            _ => None,
        };
        if let (Some(next), None) = (shard.refs.get(k + 1), &direct) {
            if let Some(data) = sources[next.source()].open_ahead(next.index()) {
                ahead = Some((k + 1, data));
            }
        }
        let written: Result<u64> = {
            let source = &mut sources[r.source()];
            let opened = match prefetched {
                Some(data) => data,
                None => source.open(r.index()).await,
            };
            match opened {
                Ok(data) => sink.write_tensor_data(data, r.cast()).await,
                Err(e) => Err(e),
            }
        };
        if let Err(e) = written {
            return Err(name_error(e, sources, r, &t.meta.name));
        }
        match sink.take_overflowed() {
            0 => {}
            n => overflowed(k, n),
        }
        k += 1;
    }
    sink.finish().await
}

/// A cast's overflows to infinity, as a report's warning.
fn overflow_warning(tensor: &str, cast: crate::cast::Cast, count: u64) -> String {
    let values = if count == 1 { "value" } else { "values" };
    format!(
        "tensor {tensor:?}: {count} finite {values} overflowed to infinity casting {} to {}",
        cast.from(),
        cast.to()
    )
}

/// Names the input, and the tensor as the input knows it (and as it is
/// written, if renamed).
fn name_error(e: Error, sources: &[Box<dyn Source + '_>], r: &TensorRef, out_name: &str) -> Error {
    let Some(source) = sources.get(r.source()) else {
        return e.set_tensor(out_name);
    };
    let in_name = &source.tensors()[r.index()].name;
    let tensor = if in_name == out_name {
        in_name.clone()
    } else {
        format!("{in_name} (written as {out_name})")
    };
    e.with_input(source.input_name()).set_tensor(tensor)
}

/// Copies a batch of file-backed tensors straight into the output file, on
/// the blocking pool, after what the sink has written. Returns the casts'
/// overflows to infinity as (index in the batch, elements).
async fn copy_direct<W: AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    d: &Direct,
    watch: &Watch,
    mut run: RunWatch,
    jobs: Vec<SpanJob>,
    buffer_size: usize,
) -> std::result::Result<Vec<(usize, u64)>, (usize, Error)> {
    sink.flush().await.map_err(|e| (0, e))?;
    let out = d.out.clone();
    let out_name = d.name.clone();
    let landed = d.on_landed(watch);
    let count = jobs.len();
    let copied = tokio::task::spawn_blocking(move || {
        copy_spans(&out, &out_name, &jobs, buffer_size, |n| {
            landed(n);
            run.landed(n);
        })
    })
    .await
    .map_err(|e| (0, Error::io(std::io::Error::other(e))))??;
    let (copied, overflows) = copied;
    sink.record_external(count, copied).map_err(|e| (0, e))?;
    Ok(overflows)
}

/// Writes a run of tensors from blocking readers straight into the output
/// file, several at once, each at its planned offset (on the blocking
/// pool, after what the sink has written); then moves the file's offset
/// past them, where the sink goes on. Returns the casts' overflows to
/// infinity as (index in the run, elements).
async fn write_readers<W: AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    d: &Direct,
    watch: &Watch,
    shard: &ShardPlan,
    start: usize,
    jobs: Vec<ReaderJob>,
    buffer_size: usize,
) -> std::result::Result<Vec<(usize, u64)>, (usize, Error)> {
    sink.flush().await.map_err(|e| (0, e))?;
    let count = jobs.len();
    let header = shard.header.header();
    let entries = &header.tensors[start..start + count];
    let bytes: u64 = entries.iter().map(|t| t.len()).sum();
    let end = header.data_start() + entries.last().map_or(0, |t| t.end);
    let names: Vec<String> = entries.iter().map(|t| t.meta.name.clone()).collect();
    let out = d.out.clone();
    let out_name = d.name.clone();
    let landed = d.on_landed(watch);
    let watch = watch.clone();
    let written = tokio::task::spawn_blocking(move || {
        let started = |i: usize| watch.tensor(&names[i]);
        let over = write_parallel(&out, &out_name, jobs, buffer_size, &started, &landed)?;
        // The sink writes at the file's offset: past these tensors.
        std::io::Seek::seek(&mut &*out, std::io::SeekFrom::Start(end))
            .map_err(|e| (count - 1, Error::io(e).with_output(&out_name)))?;
        Ok(over)
    })
    .await
    .map_err(|e| (0, Error::io(std::io::Error::other(e))))?;
    let overflows = written?;
    sink.record_external(count, bytes).map_err(|e| (0, e))?;
    Ok(overflows)
}
