//! A full tensor read in row-major order from its chunks, as a blocking
//! reader: run after run (see [`super::layout`]), each from the stream of
//! its chunk's local tensor. A chunk's item is opened when its first run
//! is wanted and dropped after its last, its end read (which checks its
//! storage's CRC-32). Runs of a few KiB or more (a tensor cut on a later
//! dimension: tensor parallelism) are read straight into the caller's
//! buffer; chunks that give shorter runs are read through a buffer each,
//! their sum bounded.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::sync::Arc;

use super::item::{self, Form, Item};
use super::layout::{band, Chunk};
use crate::io_util::PositionalReader;
use crate::source::pytorch::model;
use crate::source::BlockingRead;
use crate::{Dtype, Error, Result};

/// The buffers of one band's chunks hold at most about this much in all.
const BAND_BUFFERS: u64 = 8 << 20;
/// Each chunk's buffer holds between these.
const BUFFER_MIN: u64 = 64 << 10;
const BUFFER_MAX: u64 = 1 << 20;
/// Runs at least this long are read straight into the caller's buffer: a
/// positional read each costs less than copying them through a buffer.
const DIRECT_RUN: u64 = 8 << 10;

/// One non-empty chunk: where its item is, and its stream once opened.
pub(crate) struct Piece {
    /// Its place in the global tensor.
    pub(crate) chunk: Chunk,
    pub(crate) item: Item,
    pub(crate) file: Arc<File>,
}

/// What an [`Assembly`] reads: the tensor, its non-empty chunks and the
/// dimension they are cut at ([`super::layout::cut_axis`]).
pub(crate) struct Plan {
    /// The tensor's name, for messages.
    pub(crate) name: String,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
    /// Its non-empty chunks, tiling it.
    pub(crate) pieces: Vec<Piece>,
    /// The cut axis; `None` for one chunk that is all of it.
    pub(crate) axis: Option<usize>,
}

/// The reader.
pub(crate) struct Assembly {
    plan: Plan,
    chunks: Vec<Chunk>,
    /// Bytes of one index on the cut axis (every element after it).
    row: u64,
    /// Each chunk's stream while it is being read.
    open: Vec<Option<BlockingRead>>,
    /// Each chunk's bytes not yet read.
    unread: Vec<u64>,
    /// The indices before the cut axis; `None` before the first band.
    prefix: Option<Vec<u64>>,
    /// The chunks of the current prefix, in order, and the next one's place.
    band: Vec<usize>,
    next: usize,
    /// The chunk of the current run, and the run's bytes left.
    current: usize,
    left: u64,
    /// Each chunk's buffer, when its runs are short.
    buffer: Option<usize>,
    done: bool,
}

impl Assembly {
    /// The reader of `plan`'s tensor.
    pub(crate) fn new(plan: Plan) -> Assembly {
        let width = model::width(plan.dtype);
        let axis = plan.axis.unwrap_or(0);
        let row = plan.shape.iter().skip(axis + 1).product::<u64>() * width;
        let chunks: Vec<Chunk> = plan.pieces.iter().map(|p| p.chunk.clone()).collect();
        let unread = chunks.iter().map(|c| c.numel() * width).collect();
        // Runs shorter than a direct read is worth are read through a buffer.
        let short = plan.axis.is_some_and(|a| {
            chunks
                .iter()
                .any(|c| c.sizes[a].saturating_mul(row) < DIRECT_RUN)
        });
        let buffer = short.then(|| {
            let across = distinct_starts(&chunks, axis).max(1);
            (BAND_BUFFERS / across).clamp(BUFFER_MIN, BUFFER_MAX) as usize
        });
        let open = chunks.iter().map(|_| None).collect();
        let done = chunks.is_empty();
        Assembly {
            plan,
            chunks,
            row,
            open,
            unread,
            prefix: None,
            band: Vec::new(),
            next: 0,
            current: 0,
            left: 0,
            buffer,
            done,
        }
    }

    /// Moves to the next run; `false` at the end of the tensor.
    fn next_run(&mut self) -> bool {
        loop {
            if let Some(&c) = self.band.get(self.next) {
                self.next += 1;
                self.current = c;
                self.left = match self.plan.axis {
                    Some(a) => self.chunks[c].sizes[a] * self.row,
                    None => self.unread[c],
                };
                return true;
            }
            if !self.next_prefix() {
                return false;
            }
            let prefix = self.prefix.as_deref().unwrap_or(&[]);
            self.band = match self.plan.axis {
                Some(axis) => band(prefix, axis, &self.chunks),
                // One chunk, all of the tensor.
                None => (0..self.chunks.len()).collect(),
            };
            self.next = 0;
        }
    }

    /// The next prefix in row-major order; `false` after the last.
    fn next_prefix(&mut self) -> bool {
        let dims = self.plan.axis.unwrap_or(0);
        let Some(prefix) = &mut self.prefix else {
            self.prefix = Some(vec![0; dims]);
            return true;
        };
        for d in (0..dims).rev() {
            prefix[d] += 1;
            if prefix[d] < self.plan.shape[d] {
                return true;
            }
            prefix[d] = 0;
        }
        false
    }

    /// Chunk `c`'s stream, opened on first use.
    fn stream(&mut self, c: usize) -> Result<&mut BlockingRead> {
        if self.open[c].is_none() {
            let p = &self.plan.pieces[c];
            let raw: BlockingRead = match p.item.form {
                Form::Plain => Box::new(PositionalReader::new(
                    p.file.clone(),
                    p.item.offset,
                    p.item.length,
                )),
                Form::Archive => {
                    let name = &self.plan.name;
                    let local = item::open(&p.file, p.item, name, self.plan.dtype, &p.chunk)
                        .map_err(|e| e.with_tensor(name))?;
                    local.reader(p.file.clone())?
                }
            };
            let cap = self.buffer.map(|b| b.min(self.unread[c] as usize));
            self.open[c] = Some(match cap {
                Some(cap) => Box::new(BufReader::with_capacity(cap, raw)),
                None => raw,
            });
        }
        Ok(self.open[c].as_mut().expect("opened above"))
    }

    /// Ends chunk `c`: its stream must end too (which checks a CRC-32).
    fn finish(&mut self, c: usize) -> io::Result<()> {
        if let Some(mut r) = self.open[c].take() {
            let mut probe = [0u8; 1];
            if r.read(&mut probe)? != 0 {
                return Err(ended(
                    &self.plan.pieces[c].chunk,
                    "holds more bytes than its chunk",
                ));
            }
        }
        Ok(())
    }
}

fn ended(chunk: &Chunk, what: &str) -> io::Error {
    let msg = format!("the item of the chunk at {} {what}", chunk.label());
    io::Error::new(io::ErrorKind::UnexpectedEof, msg)
}

/// How many distinct starts the chunks have on `axis`: the most chunks a
/// band can hold.
fn distinct_starts(chunks: &[Chunk], axis: usize) -> u64 {
    let mut starts: Vec<u64> = chunks.iter().map(|c| c.offsets[axis]).collect();
    starts.sort_unstable();
    starts.dedup();
    starts.len() as u64
}

impl Read for Assembly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.left == 0 {
            if self.done || !self.next_run() {
                self.done = true;
                return Ok(0);
            }
        }
        let c = self.current;
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let r = self.stream(c).map_err(Error::into_io)?;
        let got = r.read(&mut buf[..want])?;
        if got == 0 {
            return Err(ended(
                &self.plan.pieces[c].chunk,
                "ended before its bytes did",
            ));
        }
        self.left -= got as u64;
        self.unread[c] -= got as u64;
        if self.unread[c] == 0 {
            self.finish(c)?;
        }
        Ok(got)
    }
}
