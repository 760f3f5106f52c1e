//! The jobs of a shard's tensors, built in one place: the only caller of
//! the sources' [`Source::file_span`] and [`Source::open_blocking`]. A job
//! says how a tensor's bytes can be had; [`super::route`] chooses how each
//! is copied.

use super::policy::Way;
use crate::cast::Cast;
use crate::plan::ShardPlan;
use crate::source::{BlockingPart, FileSpan, OpenBlocking, Source};
use crate::Error;

/// How one tensor's bytes can be had, best first.
pub(crate) enum Job {
    /// They lie in a file: the kernel's copy, or positional reads.
    Span(SpanJob),
    /// Only a blocking reader produces them (a deflated member, quantized
    /// blocks, a PyTorch view gathered or checked first): the work is the
    /// reading, done on the worker pool.
    Reader(ReaderJob),
    /// Only the source's async reader produces them.
    Stream,
}

impl Job {
    /// The tensor's bytes in a file, which a run of spans has.
    pub(crate) fn span(&self) -> &SpanJob {
        match self {
            Job::Span(s) => s,
            _ => unreachable!("a run of spans"),
        }
    }
}

/// A tensor whose bytes lie in a file, and the cast to apply.
#[derive(Debug, Clone)]
pub(crate) struct SpanJob {
    pub(crate) span: FileSpan,
    pub(crate) cast: Option<Cast>,
}

impl SpanJob {
    pub(crate) fn out_len(&self) -> u64 {
        match self.cast {
            Some(c) => self.span.len / c.in_width() as u64 * c.out_width() as u64,
            None => self.span.len,
        }
    }
}

/// A tensor from blocking readers: how to open its parts (one, or a large
/// tensor's consecutive parts, read side by side) with each one's output
/// length, its planned offset in the output file, and the cast to apply.
pub(crate) struct ReaderJob {
    pub(crate) parts: Vec<BlockingPart>,
    pub(crate) at: u64,
    pub(crate) cast: Option<Cast>,
}

impl ReaderJob {
    /// A tensor read whole by one reader, `out_len` bytes written at `at`.
    pub(crate) fn whole(open: OpenBlocking, out_len: u64, at: u64, cast: Option<Cast>) -> Self {
        let parts = vec![BlockingPart { len: out_len, open }];
        ReaderJob { parts, at, cast }
    }
}

/// Output bytes per part of a large tensor read side by side: enough to
/// amortise a part's opening (its scales, its first read), small enough that
/// a tensor of a few tens of MiB already keeps every core busy. Memory does
/// not grow with it: a part is read piece by piece, [`super::pool::READERS`]
/// parts at a time.
pub(crate) const PART_BYTES: u64 = 8 << 20;

/// A failure, and which job (or batch, or task) of a run it was in: the
/// caller names the tensor from it.
#[derive(Debug)]
pub(crate) struct Failed<E = Error> {
    pub(crate) job: usize,
    pub(crate) error: E,
}

/// A job's failure.
pub(crate) type JobError = Failed<Error>;

impl<E> Failed<E> {
    pub(crate) fn new(job: usize, error: E) -> Self {
        Failed { job, error }
    }
}

/// What a run of jobs wrote: its bytes, and the casts' overflows to
/// infinity; and the way a trial among them found faster.
#[derive(Debug, Default)]
pub(crate) struct Copied {
    pub(crate) bytes: u64,
    pub(crate) overflows: Vec<Overflow>,
    pub(crate) chose: Option<Way>,
}

/// A cast's finite values that overflowed to infinity in one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Overflow {
    pub(crate) job: usize,
    pub(crate) count: u64,
}

/// Tensors whose jobs are built at once: a model of a million small tensors
/// is routed and copied in windows, each in one trip to the blocking pool.
/// A job holds its tensor's reader, opened, so a window bounds the peak
/// heap and still makes few trips (benches/scale/README.md, session 7).
const WINDOW: usize = 2048;

/// Tensors whose reads a source is told of at once ([`tell_order`]): more
/// than a window, so that an object's GETs run ahead across the windows'
/// edges (the order costs a few words a tensor).
const ORDER_WINDOW: usize = 16384;

/// The jobs of the tensors of `shard` from `start`, up to [`WINDOW`].
/// The sources must have been told their order ([`tell_order`]).
pub(crate) fn jobs(shard: &ShardPlan, start: usize, sources: &[Box<dyn Source + '_>]) -> Vec<Job> {
    let data_start = shard.header.header.data_start();
    shard
        .planned(start)
        .take(WINDOW)
        .map(|p| {
            let (source, cast, t) = (&sources[p.source], p.cast, p.entry);
            if let Some(span) = source.file_span(p.index) {
                return Job::Span(SpanJob { span, cast });
            }
            let at = data_start + t.begin;
            // A large tensor's parts, without a cast: each part's bytes are its output's.
            let parts = cast
                .is_none()
                .then(|| source.open_blocking_parts(p.index, PART_BYTES))
                .flatten()
                .filter(|parts| parts.iter().map(|p| p.len).sum::<u64>() == t.len());
            if let Some(parts) = parts {
                return Job::Reader(ReaderJob { parts, at, cast });
            }
            match source.open_blocking(p.index) {
                Some(open) => Job::Reader(ReaderJob::whole(open, t.len(), at, cast)),
                None => Job::Stream,
            }
        })
        .collect()
}

/// Tells each source which of its tensors the shard reads from `start`,
/// up to [`ORDER_WINDOW`], in order ([`Source::will_read`]): an object's
/// then come by few GETs. Where the shard ends within them, the `next`
/// shard's first tensors follow: their GETs are on their way while this
/// shard's last reads are used and its upload is sealed, not sent after
/// the next shard starts (benches/scale/README.md, session 12). Returns
/// where the order told ends.
pub(crate) fn tell_order(
    shard: &ShardPlan,
    start: usize,
    sources: &[Box<dyn Source + '_>],
    next: Option<&ShardPlan>,
) -> usize {
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); sources.len()];
    let this = shard.planned(start).take(ORDER_WINDOW);
    let left = ORDER_WINDOW.saturating_sub(shard.refs.len().saturating_sub(start));
    let then = next.into_iter().flat_map(|n| n.planned(0).take(left));
    for p in this.chain(then) {
        order[p.source].push(p.index);
    }
    for (source, order) in sources.iter().zip(order) {
        if !order.is_empty() {
            source.will_read(&order);
        }
    }
    start + ORDER_WINDOW
}

/// Files for the copy routes' tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::copy::job::SpanJob;
    use crate::source::{CrcCheck, FileSpan};
    use crate::transform::Transform;
    use std::fs::File;
    use std::io::{Read, Seek, Write};
    use std::sync::Arc;

    /// An archive of checksummed members of `sizes` bytes, each after a
    /// 7-byte header its CRC covers; `bad` ones get a wrong CRC; the file
    /// is cut to `cut` bytes. Returns the jobs and each member's bytes, in
    /// file order.
    pub(crate) fn archive(
        sizes: &[usize],
        bad: &[usize],
        cut: Option<u64>,
    ) -> (Vec<SpanJob>, Vec<Vec<u8>>) {
        let (mut bytes, mut spans, mut data) = (Vec::new(), Vec::new(), Vec::new());
        for (k, &size) in sizes.iter().enumerate() {
            let from = bytes.len() as u64;
            bytes.extend_from_slice(b"header:");
            let member: Vec<u8> = (0..size).map(|i| (i * 7 + k * 13) as u8).collect();
            let offset = bytes.len() as u64;
            bytes.extend_from_slice(&member);
            let crc = crc32fast::hash(&bytes[from as usize..]) ^ u32::from(bad.contains(&k));
            spans.push((from, offset, crc));
            data.push(member);
        }
        bytes.truncate(cut.map_or(bytes.len(), |c| c as usize));
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        let file = Arc::new(file);
        let job = |(&(from, offset, expected), member): (_, &Vec<u8>)| SpanJob {
            span: FileSpan {
                file: file.clone(),
                offset,
                len: member.len() as u64,
                transform: Transform::Identity,
                crc: Some(CrcCheck { expected, from }),
            },
            cast: None,
        };
        (spans.iter().zip(&data).map(job).collect(), data)
    }

    /// A file of `len` bytes of a pattern that repeats only every 251
    /// bytes, and those bytes.
    pub(crate) fn source(len: usize) -> (File, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        (f, bytes)
    }

    /// Everything `file` holds.
    pub(crate) fn contents(mut file: &File) -> Vec<u8> {
        let mut bytes = Vec::new();
        file.rewind().unwrap();
        file.read_to_end(&mut bytes).unwrap();
        bytes
    }
}
