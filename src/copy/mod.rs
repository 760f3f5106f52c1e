//! The copy engine: a planned shard's tensors from their sources into one
//! writer. What each tensor's source offers is asked in one place
//! ([`job::jobs`]); how each is copied is chosen in one place, without I/O
//! ([`route::routes`]); the runners below only carry routes out: kernel
//! copies and positional reads of bytes that lie in files ([`spans`],
//! [`gather`]), blocking readers side by side ([`pool`]), and the async
//! [`Sink`], one tensor at a time. Every route ends in the one element
//! pipeline.

mod gather;
pub(crate) mod job;
#[allow(unsafe_code)]
mod mapped;
mod pipelined;
pub(crate) mod policy;
mod pool;
mod positional;
mod relay;
pub(crate) mod route;
mod spans;
mod verbatim;

use std::fs::File;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWrite;

use crate::header::TensorEntry;
use crate::observe::Progress;
use crate::plan::{ShardPlan, TensorRef};
use crate::sink::{Sink, SinkOptions};
use crate::source::{Source, TensorData};
use crate::{Error, Result, Warning};
use job::{jobs, tell_order, Copied, Job, JobError, Overflow, ReaderJob, SpanJob};
use policy::CopyPolicy;
use policy::Way;
use pool::write_parallel;
use relay::{Relay, Relayed};
use route::{routes, Route};
use spans::copy_spans;

/// Writes one planned file to any `AsyncWrite`, pulling each tensor from its source.
#[cfg(any(test, feature = "internals"))]
pub async fn write_shard<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    sink_options: SinkOptions,
    output_name: &str,
) -> Result<W> {
    let to = Shard {
        name: output_name,
        sink_options,
        watch: &Watch::default(),
        direct: None,
        overflows: None,
        next: None,
    };
    let mut policy = CopyPolicy::SINK_ONLY;
    copy_shard(writer, shard, sources, to, &mut policy).await
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
        run.landed(0); // the first tensor begins at once
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
        while self.next < self.names.len() && self.starts[self.next] <= self.landed {
            self.watch.tensor(&self.names[self.next]);
            self.next += 1;
        }
    }
}

/// The output file itself, for tensors copied without the async writer.
pub(crate) struct Direct {
    pub(crate) out: Arc<File>,
    /// Writeback started as bytes land, when the file is to be fsync'd.
    pub(crate) writeback: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

/// Where one shard goes, and who hears of it.
pub(crate) struct Shard<'a> {
    /// The output's name, in errors.
    pub(crate) name: &'a str,
    pub(crate) sink_options: SinkOptions,
    pub(crate) watch: &'a Watch,
    /// The output file, when tensors may be copied straight into it.
    pub(crate) direct: Option<Direct>,
    /// Where casts' overflows to infinity are told, as warnings.
    pub(crate) overflows: Option<&'a Mutex<Vec<Warning>>>,
    /// The shard this run copies after this one, if any: its first reads
    /// are told to the sources with this one's last ([`tell_order`]).
    pub(crate) next: Option<&'a ShardPlan>,
}

/// Copies a shard's tensors into `writer` (and, with `to.direct`, straight
/// into its file), window by window of jobs, each window's routes chosen by
/// [`routes`] under the conversion's `policy`, which keeps what a trial
/// among them chooses.
pub(crate) async fn copy_shard<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    to: Shard<'_>,
    policy: &mut CopyPolicy,
) -> Result<W> {
    // Into an upload or a stream, the sink's chunks go into buffers of
    // their own (an upload's part), so larger chunks than the relay's
    // pieces only hold memory: 4 MiB of a 92k-tensor S3 -> S3 run's peak.
    let sink_options = match to.direct {
        Some(_) => to.sink_options,
        None => {
            let size = to.sink_options.buffer_size.min(relay::PIECE);
            to.sink_options.buffer_size(size)
        }
    };
    let sink = Sink::start_named(writer, &shard.header, sink_options, to.name).await?;
    let mut copy = Copy {
        sink,
        shard,
        to: &to,
        ahead: None,
        chose: None,
    };
    // Without the file itself, every tensor goes through the sink.
    let mut sink_only = CopyPolicy::SINK_ONLY;
    let policy = if to.direct.is_some() {
        policy
    } else {
        &mut sink_only
    };
    let (mut k, mut told) = (0, 0);
    while k < shard.refs.len() {
        if k >= told {
            told = tell_order(shard, k, sources, to.next);
        }
        let window = jobs(shard, k, sources);
        let routes = routes(&window, policy);
        // Routes end early after a trial: the rest are routed by its choice.
        let n = routes.last().map_or(window.len(), |r| r.jobs().end);
        copy.window(k, window, &routes, sources).await?;
        if let Some(way) = copy.chose.take() {
            policy.chose(way);
        }
        k += n;
    }
    copy.sink.finish().await
}

/// What work beside the sink gives: bytes copied, or the job that failed.
type Beside = std::result::Result<Copied, JobError>;

/// A shard being copied.
struct Copy<'a, W> {
    sink: Sink<W>,
    shard: &'a ShardPlan,
    to: &'a Shard<'a>,
    /// The next tensor, opened ahead (see [`Copy::stream`]).
    ahead: Option<(usize, Result<TensorData<'static>>)>,
    /// The way a trial beside the sink found faster.
    chose: Option<Way>,
}

impl<W: AsyncWrite + Unpin> Copy<'_, W> {
    /// Carries out the routes of a window of jobs starting at tensor `start`.
    async fn window(
        &mut self,
        start: usize,
        jobs: Vec<Job>,
        routes: &[Route],
        sources: &mut [Box<dyn Source + '_>],
    ) -> Result<()> {
        let mut jobs: Vec<Option<Job>> = jobs.into_iter().map(Some).collect();
        let mut r = 0;
        while r < routes.len() {
            // Into the sink, tensors from blocking readers go as one run.
            let relayed = routes[r..]
                .iter()
                .take_while(|x| matches!(x, Route::Stream { job, .. } if matches!(jobs[*job], Some(Job::Reader(_)))))
                .count();
            // Routes of bytes in files go in one trip to the blocking pool.
            let group = match relayed {
                0 => routes[r..]
                    .iter()
                    .take_while(|x| x.in_files())
                    .count()
                    .max(1),
                n => n,
            };
            let group = &routes[r..r + group];
            r += group.len();
            let first = group[0].jobs().start;
            let done = match &group[0] {
                Route::Stream { .. } if relayed > 0 => {
                    let readers = (first..first + relayed)
                        .map(|i| match jobs[i].take() {
                            Some(Job::Reader(r)) => r,
                            _ => unreachable!("a run of readers, each routed once"),
                        })
                        .collect();
                    self.relay(start + first, readers).await
                }
                Route::Stream { job, ahead } => self.stream(start + job, *ahead, sources).await,
                // A run of tensors from blocking readers straight into the
                // output file, several at once, each at its planned offset;
                // then the file's offset moves past them, where the sink goes on.
                Route::Blocking(run) => {
                    let readers: Vec<ReaderJob> = run
                        .clone()
                        .map(|i| match jobs[i].take() {
                            Some(Job::Reader(r)) => r,
                            _ => unreachable!("each job is routed once, by its kind"),
                        })
                        .collect();
                    let (count, header) = (readers.len(), &*self.shard.header.header);
                    let entries = &header.tensors[start + run.start..start + run.end];
                    let bytes: u64 = entries.iter().map(|t| t.len()).sum();
                    let end = header.data_start() + entries.last().map_or(0, |t| t.end);
                    let names: Vec<String> = entries.iter().map(|t| t.meta.name.clone()).collect();
                    let watch = self.to.watch.clone();
                    self.beside_the_sink(count, move |out, name, landed, size| {
                        let started = |i: usize| watch.tensor(&names[i]);
                        let overflows = write_parallel(out, name, readers, size, &started, landed)?;
                        // The sink writes at the file's offset: past these tensors.
                        std::io::Seek::seek(&mut &*out, std::io::SeekFrom::Start(end)).map_err(
                            |e| JobError::new(count - 1, Error::io(e).with_output(name)),
                        )?;
                        Ok(Copied {
                            bytes,
                            overflows,
                            chose: None,
                        })
                    })
                    .await
                }
                // A run of tensors whose bytes lie in files, straight into
                // the output file by their routes.
                _ => {
                    let end = group[group.len() - 1].jobs().end;
                    let spans: Vec<SpanJob> = (first..end)
                        .map(|i| match jobs[i].take() {
                            Some(Job::Span(s)) => s,
                            _ => unreachable!("each job is routed once, by its kind"),
                        })
                        .collect();
                    let routes: Vec<Route> = group.iter().map(|x| x.counted_from(first)).collect();
                    let tensors = &self.shard.header.header.tensors[start + first..start + end];
                    let mut run = self.to.watch.run(tensors);
                    self.beside_the_sink(spans.len(), move |out, name, landed, size| {
                        copy_spans(out, name, &spans, &routes, size, |n| {
                            landed(n);
                            run.landed(n);
                        })
                    })
                    .await
                }
            };
            let at = start + first;
            let over = done.map_err(|f| self.name_error(at + f.job, f.error, sources))?;
            over.into_iter()
                .for_each(|o| self.overflowed(at + o.job, o.count));
        }
        Ok(())
    }

    /// One tensor through the sink. With `ahead`, the next tensor is opened
    /// now if its source can: it then reads (an npz member inflates) on
    /// another core while this one is written. (Into a file, such tensors
    /// are read side by side instead.)
    async fn stream(
        &mut self,
        k: usize,
        ahead: bool,
        sources: &mut [Box<dyn Source + '_>],
    ) -> std::result::Result<Vec<Overflow>, JobError> {
        let (shard, r) = (self.shard, &self.shard.refs[k]);
        self.to
            .watch
            .tensor(&shard.header.header.tensors[k].meta.name);
        let prefetched = self.ahead.take().filter(|(at, _)| *at == k);
        if let (Some(next), true) = (shard.refs.get(k + 1), ahead) {
            if let Some(data) = sources[next.source()].open_ahead(next.index()) {
                self.ahead = Some((k + 1, data));
            }
        }
        let opened = match prefetched {
            Some((_, data)) => data,
            None => sources[r.source()].open(r.index()).await,
        };
        let at_job = |e| JobError::new(0, e);
        let written = self
            .sink
            .write_tensor_data(opened.map_err(at_job)?, r.cast());
        written.await.map_err(at_job)?;
        let count = self.sink.take_overflowed();
        Ok(Vec::from_iter(
            (count > 0).then_some(Overflow { job: 0, count }),
        ))
    }

    /// Tensors `k..` from blocking readers, through the sink: read on one
    /// thread of the blocking pool, their bytes written as they come, in
    /// pieces of many tensors ([`relay`]).
    async fn relay(
        &mut self,
        k: usize,
        readers: Vec<ReaderJob>,
    ) -> std::result::Result<Vec<Overflow>, JobError> {
        let count = readers.len();
        let (header, watch) = (self.shard.header.header.clone(), self.to.watch.clone());
        let started = move |i: usize| watch.tensor(&header.tensors[k + i].meta.name);
        let mut relay = Relay::start(readers, self.to.sink_options.buffer_size, started);
        let mut bytes = 0u64;
        loop {
            match relay.next().await {
                Some(Relayed::Piece { bytes: piece, job }) => {
                    let wrote = self.sink.write_external(&piece).await;
                    wrote.map_err(|e| JobError::new(job, e))?;
                    bytes += piece.len() as u64;
                    relay.give_back(piece);
                }
                Some(Relayed::Done(done)) => {
                    let overflows = done?;
                    let recorded = self.sink.record_external(count, bytes);
                    recorded.map_err(|e| JobError::new(0, e))?;
                    return Ok(overflows);
                }
                None => {
                    let lost = std::io::Error::other("a blocking reader stopped without its end");
                    return Err(JobError::new(0, Error::io(lost)));
                }
            }
        }
    }

    /// Runs `work` on the blocking pool, where it writes the next `count`
    /// tensors straight into the output file (with its name, what to call
    /// as bytes land, and the buffer size), after what the sink has written
    /// (flushed first); then tells the sink they are there.
    async fn beside_the_sink(
        &mut self,
        count: usize,
        work: impl FnOnce(&File, &str, &(dyn Fn(u64) + Sync), usize) -> Beside + Send + 'static,
    ) -> std::result::Result<Vec<Overflow>, JobError> {
        // Routes other than the stream's are chosen only with the output file.
        let d = self
            .to
            .direct
            .as_ref()
            .expect("routes beside the sink only into a file");
        let (out, name) = (d.out.clone(), self.to.name.to_string());
        let size = self.to.sink_options.buffer_size;
        // Bytes landing: progress, and writeback.
        let (progress, writeback) = (self.to.watch.progress.clone(), d.writeback.clone());
        let landed = move |n| {
            if let Some(p) = &progress {
                p.bytes(n);
            }
            if let Some(w) = &writeback {
                w(n);
            }
        };
        let at_start = |e: Error| JobError::new(0, e);
        self.sink.flush().await.map_err(at_start)?;
        let copied = tokio::task::spawn_blocking(move || work(&out, &name, &landed, size))
            .await
            .map_err(|e| at_start(Error::io(std::io::Error::other(e))))??;
        self.sink
            .record_external(count, copied.bytes)
            .map_err(at_start)?;
        self.chose = self.chose.or(copied.chose);
        Ok(copied.overflows)
    }

    /// Tells of tensor `k`'s cast overflowing `count` values to infinity.
    fn overflowed(&self, k: usize, count: u64) {
        if let (Some(list), Some(c)) = (self.to.overflows, self.shard.refs[k].cast()) {
            let tensor = self.shard.header.header.tensors[k].meta.name.clone();
            let (from, to) = (c.from(), c.to());
            let overflow = Warning::Overflow {
                tensor,
                count,
                from,
                to,
            };
            list.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(overflow);
        }
    }

    /// The `error` of tensor `k` of the shard, naming its input and the
    /// tensor as the input knows it (and as it is written, if renamed).
    fn name_error(&self, k: usize, error: Error, sources: &[Box<dyn Source + '_>]) -> Error {
        let r: &TensorRef = &self.shard.refs[k];
        let out_name = &self.shard.header.header.tensors[k].meta.name;
        let Some(source) = sources.get(r.source()) else {
            return error.set_tensor(out_name);
        };
        let in_name = &source.tensors()[r.index()].name;
        let tensor = if in_name == out_name {
            in_name.clone()
        } else {
            format!("{in_name} (written as {out_name})")
        };
        error.with_input(source.input_name()).set_tensor(tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::job::testing::contents;
    use crate::copy::policy::Routes;
    use crate::plan::{plan, PlanOptions};
    use crate::source::safetensors::SafetensorsSource;
    use std::io::Write;
    use tokio::io::AsyncWriteExt;

    /// A safetensors file of one tensor, long enough for a trial; and its bytes.
    fn checkpoint() -> (tempfile::NamedTempFile, Vec<u8>) {
        let len = verbatim::TRIAL_MIN + 4096;
        let json = format!(r#"{{"t":{{"dtype":"U8","shape":[{len}],"data_offsets":[0,{len}]}}}}"#);
        let json = format!("{json:<width$}", width = json.len().next_multiple_of(8));
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
        file.write_all(json.as_bytes()).unwrap();
        file.write_all(&data).unwrap();
        (file, data)
    }

    /// The checkpoint's shard copied into a file by `policy`; the file's bytes.
    async fn copied(path: &std::path::Path, policy: &mut CopyPolicy) -> Vec<u8> {
        let source = SafetensorsSource::open(path).unwrap();
        let mut sources: Vec<Box<dyn Source>> = vec![Box::new(source)];
        let plan = plan(&sources, &PlanOptions::default()).unwrap();
        let out = Arc::new(tempfile::tempfile().unwrap());
        let to = Shard {
            name: "out",
            sink_options: SinkOptions::default(),
            watch: &Watch::default(),
            direct: Some(Direct {
                out: out.clone(),
                writeback: None,
            }),
            overflows: None,
            next: None,
        };
        let writer = tokio::fs::File::from_std(out.try_clone().unwrap());
        let shard = &plan.shards[0];
        let mut writer = copy_shard(writer, shard, &mut sources, to, policy)
            .await
            .unwrap();
        writer.flush().await.unwrap();
        contents(&out)
    }

    /// The way verbatim bytes are copied is each conversion's own: each
    /// starts with none chosen and times both on its first long copy,
    /// whatever another conversion of the process chose; a forced way is
    /// kept, untimed. Every way writes the same bytes.
    #[tokio::test]
    async fn each_conversion_chooses_its_own_way_of_copying() {
        let (input, data) = checkpoint();
        let fresh = || CopyPolicy::new(Routes::default(), false);
        let mut outputs = Vec::new();
        for _ in 0..2 {
            let mut policy = fresh();
            assert_eq!(policy.way(), None, "nothing chosen before the conversion");
            outputs.push(copied(input.path(), &mut policy).await);
            assert!(policy.way().is_some(), "its first long copy chose");
        }
        for way in [Way::Mapped, Way::Read] {
            let mut policy = CopyPolicy::new(Routes::default().way(Some(way)), false);
            outputs.push(copied(input.path(), &mut policy).await);
            assert_eq!(policy.way(), Some(way), "a forced way is kept");
        }
        assert!(outputs[0].ends_with(&data));
        assert!(outputs.iter().all(|o| *o == outputs[0]));
    }

    /// A source that records each order it is told.
    struct Told {
        inner: SafetensorsSource,
        told: Arc<Mutex<Vec<Vec<usize>>>>,
    }

    impl Source for Told {
        fn listing(&self) -> &crate::source::Listing {
            self.inner.listing()
        }
        fn open(
            &mut self,
            k: usize,
        ) -> futures::future::BoxFuture<'_, Result<crate::source::TensorData<'_>>> {
            self.inner.open(k)
        }
        fn will_read(&self, order: &[usize]) {
            self.told.lock().unwrap().push(order.to_vec());
        }
    }

    /// Where a shard's tensors end within the order told, the next shard's
    /// first ones follow, so that their reads are sent for before it starts.
    #[test]
    fn the_next_shards_first_reads_are_told_with_this_ones_last() {
        // Four tensors of 64 bytes, two a shard, read in the order t3, t2, t1, t0.
        let names = ["t3", "t2", "t1", "t0"];
        let entries: Vec<String> = (0..4)
            .map(|i| {
                let (a, b) = (i * 64, i * 64 + 64);
                format!(
                    r#""{}":{{"dtype":"U8","shape":[64],"data_offsets":[{a},{b}]}}"#,
                    names[i]
                )
            })
            .collect();
        let json = format!("{{{}}}", entries.join(","));
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&(json.len() as u64).to_le_bytes()).unwrap();
        file.write_all(json.as_bytes()).unwrap();
        file.write_all(&[7u8; 256]).unwrap();
        let told = Arc::new(Mutex::default());
        let source = Told {
            inner: SafetensorsSource::open(file.path()).unwrap(),
            told: told.clone(),
        };
        let sources: Vec<Box<dyn Source>> = vec![Box::new(source)];
        let options = PlanOptions::default().max_shard_size(Some(128));
        let plan = plan(&sources, &options).unwrap();
        assert_eq!(plan.shards.len(), 2);
        let (first, second) = (&plan.shards[0], &plan.shards[1]);
        let indices = |s: &ShardPlan| s.refs.iter().map(|r| r.index()).collect::<Vec<_>>();
        let orders = [indices(first), indices(second)].concat();
        assert_eq!(orders, [3, 2, 1, 0], "in name order");
        job::tell_order(first, 0, &sources, Some(second));
        job::tell_order(first, 1, &sources, None);
        job::tell_order(second, 0, &sources, None);
        let got = told.lock().unwrap().clone();
        assert_eq!(got, [vec![3, 2, 1, 0], vec![2], vec![1, 0]]);
    }
}
