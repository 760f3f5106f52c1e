//! The jobs of a shard's next tensors, built in one place: the only
//! caller of the sources' [`Source::file_span`] and
//! [`Source::open_blocking`], and so the one place the copy route of a run
//! of tensors is chosen.

use crate::plan::{ShardPlan, TensorRef};
use crate::sink::fast::SpanJob;
use crate::sink::parallel::ReaderJob;
use crate::source::Source;

/// How the next tensors of a shard are copied.
pub(crate) enum Next {
    /// A run of tensors whose bytes lie in files: the kernel's copy, or
    /// positional reads, straight into the output file.
    Spans(Vec<SpanJob>),
    /// A run of tensors only blocking readers produce (deflated members):
    /// read side by side, each written at its offset in the output file.
    Readers(Vec<ReaderJob>),
    /// One tensor through the async sink.
    Stream,
}

/// The route of the tensors of `shard` from `start`. Into a file
/// (`into_file`): the run of tensors whose bytes lie in files, if the
/// first does; else the run that blocking readers produce, if the first
/// has one; else one tensor through the sink. Into anything else (a
/// stream, an object): always the sink.
pub(crate) fn next_jobs(
    shard: &ShardPlan,
    start: usize,
    sources: &[Box<dyn Source + '_>],
    into_file: bool,
) -> Next {
    if !into_file {
        return Next::Stream;
    }
    let spans = span_jobs(&shard.refs[start..], sources);
    if !spans.is_empty() {
        return Next::Spans(spans);
    }
    let readers = reader_jobs(shard, start, sources);
    if !readers.is_empty() {
        return Next::Readers(readers);
    }
    Next::Stream
}

/// Tensors copied per trip to the blocking pool.
const BATCH: usize = 16384;

/// The run of tensors from the start of `refs` whose bytes lie in files.
fn span_jobs(refs: &[TensorRef], sources: &[Box<dyn Source + '_>]) -> Vec<SpanJob> {
    refs.iter()
        .take(BATCH)
        .map_while(|r| {
            let span = sources[r.source()].file_span(r.index())?;
            Some(SpanJob {
                span,
                cast: r.cast(),
            })
        })
        .collect()
}

/// The run of tensors from `start` that only blocking readers produce
/// (deflated npz members), to read side by side.
fn reader_jobs(
    shard: &ShardPlan,
    start: usize,
    sources: &[Box<dyn Source + '_>],
) -> Vec<ReaderJob> {
    let header = shard.header.header();
    shard.refs[start..]
        .iter()
        .zip(&header.tensors[start..])
        .take(BATCH)
        .map_while(|(r, t)| {
            let open = sources[r.source()].open_blocking(r.index())?;
            Some(ReaderJob {
                open,
                out_len: t.len(),
                at: header.data_start() + t.begin,
                cast: r.cast(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::TensorMeta;
    use crate::plan::{plan, PlanOptions};
    use crate::source::{FileSpan, OpenBlocking, TensorData};
    use crate::transform::Transform;
    use crate::{Dtype, Result};
    use futures::future::BoxFuture;
    use std::sync::Arc;

    /// What each tensor's source offers: a file span, a blocking reader, both or neither.
    #[derive(Clone, Copy)]
    struct Offers {
        span: bool,
        blocking: bool,
    }

    /// A source of 4-byte tensors named `t0`, `t1`, ... that offers what it is told.
    struct Offering {
        tensors: Vec<TensorMeta>,
        offers: Vec<Offers>,
        file: Arc<std::fs::File>,
    }

    impl Source for Offering {
        fn input_name(&self) -> &str {
            "offering"
        }
        fn tensors(&self) -> &[TensorMeta] {
            &self.tensors
        }
        fn open(&mut self, _k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
            Box::pin(async { Ok(TensorData::new(&[0u8; 4][..])) })
        }
        fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
            self.offers[k].blocking.then(|| -> OpenBlocking {
                Box::new(|| Ok((Box::new(&[0u8; 4][..]) as _, Transform::Identity)))
            })
        }
        fn file_span(&self, k: usize) -> Option<FileSpan> {
            self.offers[k].span.then(|| FileSpan {
                file: self.file.clone(),
                offset: 4 * k as u64,
                len: 4,
                transform: Transform::Identity,
                crc: None,
            })
        }
    }

    /// The routes taken, from the first tensor to the last, as (route, tensors).
    fn routes(offers: &[(bool, bool)], into_file: bool) -> Vec<(&'static str, usize)> {
        let source = Offering {
            tensors: (0..offers.len())
                .map(|k| TensorMeta::new(format!("t{k}"), Dtype::U8, [4]))
                .collect(),
            offers: offers
                .iter()
                .map(|&(span, blocking)| Offers { span, blocking })
                .collect(),
            file: Arc::new(tempfile::tempfile().unwrap()),
        };
        let sources: Vec<Box<dyn Source>> = vec![Box::new(source)];
        let plan = plan(&sources, &PlanOptions::default()).unwrap();
        let shard = &plan.shards[0];
        let mut out = Vec::new();
        let mut k = 0;
        while k < shard.refs.len() {
            let (route, n) = match next_jobs(shard, k, &sources, into_file) {
                Next::Spans(jobs) => ("spans", jobs.len()),
                Next::Readers(jobs) => ("readers", jobs.len()),
                Next::Stream => ("stream", 1),
            };
            out.push((route, n));
            k += n;
        }
        out
    }

    #[test]
    fn runs_of_one_kind_take_one_route_into_a_file() {
        const SPAN: (bool, bool) = (true, false);
        const READER: (bool, bool) = (false, true);
        const BOTH: (bool, bool) = (true, true);
        const NEITHER: (bool, bool) = (false, false);
        let offers = [SPAN, SPAN, READER, BOTH, READER, NEITHER, BOTH, SPAN];
        assert_eq!(
            routes(&offers, true),
            [
                ("spans", 2),
                // A tensor that offers both joins the run it meets.
                ("readers", 3),
                ("stream", 1),
                ("spans", 2),
            ]
        );
    }

    #[test]
    fn everything_goes_through_the_sink_into_anything_else() {
        let offers = [(true, false), (false, true), (true, true)];
        assert_eq!(routes(&offers, false), [("stream", 1); 3]);
    }
}
