//! Verbatim bytes copied the way this machine copies fastest: from a
//! mapping of the source ([`copy_mapped`], one memory copy) or the way `cp`
//! does, a `pread` then a `write` through one small buffer (two copies, the
//! second from a buffer that stays in cache).
//!
//! Neither wins everywhere (benches/README.md, "Copy path", "On a host
//! where cp is fast" and "The trial"): where copying memory is dear the
//! mapping saves a copy; where mapping pages is dear, above all a source
//! whose page cache is in small folios, it costs more than `cp`. So the
//! first copy of a conversion long enough to tell ([`TRIAL_MIN`]) copies
//! [`TRIAL`] bytes each way, timing each on the thread's CPU clock, and the
//! conversion's later copies take the faster (the route chooser is told:
//! [`super::policy::CopyPolicy`]). The trial's pieces alternate in a
//! balanced order after an untimed start, so that neither way is charged
//! what a process's first bytes cost or what changes along the file (timed
//! one after the other, the way timed first lost about half the trials on
//! a host where it is the faster over the whole run). The bytes written
//! are the same either way.

use std::fs::File;
use std::io::Write;

use super::mapped::{copy_mapped, WRITE_PIECE};
use super::policy::Way;
use super::positional::read_exact_at;
use crate::sink::elements::too_short;
use crate::{Error, ErrorKind};

/// How one kernel copy goes: by a way, or timing both (the conversion has
/// not chosen yet, and this copy is long enough to tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelWay {
    By(Way),
    Trial,
}

/// Bytes each way copies while it is timed.
const TRIAL: u64 = 8 << 20;

/// A copy this long makes the trial: the trial is a small part of it.
pub(crate) const TRIAL_MIN: u64 = 4 * TRIAL;

/// Bytes copied before the trial, untimed.
const START: u64 = 4 << 20;

/// The trial's pieces, 2 x [`TRIAL`] bytes in all: in a balanced order (a
/// Thue-Morse sequence), so that a cost that grows or shrinks along the file,
/// in a line or a curve, falls on both ways alike.
const PIECES: [Way; 8] = {
    use Way::{Mapped as M, Read as R};
    [M, R, R, M, R, M, M, R]
};

/// Copies `len` bytes of `src` from `offset` to `out` at its offset, `way`.
/// Returns the way a trial found faster. On error also returns how many
/// bytes were done, to find the tensor.
pub(crate) fn copy_verbatim(
    src: &File,
    offset: u64,
    len: u64,
    out: &File,
    way: KernelWay,
    progress: &mut impl FnMut(u64),
) -> Result<Option<Way>, (Error, u64)> {
    let run = Run { src, offset, len };
    let way = match way {
        KernelWay::By(way) => way,
        // Untimed first: a process's first bytes cost more, whichever way.
        KernelWay::Trial if len >= TRIAL_MIN => {
            run.copy(Way::Mapped, 0..START, out, progress)?;
            // Nanoseconds spent by each way: mapped, read.
            let (mut spent, mut at) = ([0i128; 2], START);
            for way in PIECES {
                let part = at..at + 2 * TRIAL / PIECES.len() as u64;
                at = part.end;
                spent[usize::from(way == Way::Read)] += run.timed(way, part, out, progress)?;
            }
            let faster = if spent[0] <= spent[1] {
                Way::Mapped
            } else {
                Way::Read
            };
            run.copy(faster, at..len, out, progress)?;
            return Ok(Some(faster));
        }
        KernelWay::Trial => Way::Mapped,
    };
    run.copy(way, 0..len, out, progress).map(|()| None)
}

/// One verbatim run: `len` bytes of `src` from `offset`.
struct Run<'a> {
    src: &'a File,
    offset: u64,
    len: u64,
}

impl Run<'_> {
    /// Copies bytes `part` of the run `way`; returns the nanoseconds it
    /// took on the thread's CPU clock (system time included: most of a
    /// copy is in the kernel).
    fn timed(
        &self,
        way: Way,
        part: std::ops::Range<u64>,
        out: &File,
        progress: &mut impl FnMut(u64),
    ) -> Result<i128, (Error, u64)> {
        use rustix::time::{clock_gettime, ClockId};
        let nanos = || {
            let t = clock_gettime(ClockId::ThreadCPUTime);
            i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
        };
        let start = nanos();
        self.copy(way, part, out, progress)?;
        Ok(nanos() - start)
    }

    /// Copies bytes `part` of the run `way`; a source that cannot be
    /// mapped is read. Errors count bytes from the run's start.
    fn copy(
        &self,
        way: Way,
        part: std::ops::Range<u64>,
        out: &File,
        progress: &mut impl FnMut(u64),
    ) -> Result<(), (Error, u64)> {
        let n = part.end - part.start;
        if way == Way::Mapped {
            match copy_mapped(self.src, self.offset + part.start, n, out, progress) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err((e, done)) => {
                    return Err((self.whole_run(e, part.start + done), part.start + done))
                }
            }
        }
        self.read(part, out, progress)
    }

    /// `cp`'s way: a `pread` of at most [`WRITE_PIECE`] bytes, then a
    /// `write`, each piece ending on a multiple of it in the output.
    fn read(
        &self,
        part: std::ops::Range<u64>,
        mut out: &File,
        progress: &mut impl FnMut(u64),
    ) -> Result<(), (Error, u64)> {
        use std::io::Seek;
        let out_at = out
            .stream_position()
            .map_err(|e| (Error::io(e), part.start))?;
        let mut buf = vec![0u8; WRITE_PIECE];
        let mut done = part.start;
        while done < part.end {
            let piece = WRITE_PIECE - ((out_at + done - part.start) % WRITE_PIECE as u64) as usize;
            let n = ((part.end - done) as usize).min(piece);
            let at = self.offset + done;
            read_exact_at(None, self.src, &mut buf[..n], at, self.len, done)
                .map_err(|e| (e, done))?;
            out.write_all(&buf[..n]).map_err(|e| (Error::io(e), done))?;
            done += n as u64;
            progress(n as u64);
        }
        Ok(())
    }

    /// A part's "too short" restated for the whole run: `done` of its
    /// bytes were there.
    fn whole_run(&self, e: Error, done: u64) -> Error {
        match e.kind() {
            ErrorKind::TensorTooShort { .. } => too_short(self.len, done),
            _ => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::job::testing::{contents, source};

    /// Both ways, and the trial that times them, write the same bytes.
    #[test]
    fn every_way_copies_the_same_bytes() {
        let len = 4 * TRIAL as usize + 12_345;
        let (src, bytes) = source(len + 777);
        let ways = [Way::Mapped, Way::Read].map(KernelWay::By);
        for way in ways.into_iter().chain([KernelWay::Trial]) {
            let mut out = tempfile::tempfile().unwrap();
            out.write_all(b"head").unwrap();
            let mut seen = 0;
            let mut count = |n| seen += n;
            let chose = copy_verbatim(&src, 777, len as u64, &out, way, &mut count).unwrap();
            assert_eq!(chose.is_some(), way == KernelWay::Trial, "{way:?}");
            assert_eq!(seen, len as u64, "{way:?}");
            let got = contents(&out);
            assert_eq!(&got[..4], b"head");
            assert!(got[4..] == bytes[777..], "{way:?}");
        }
    }

    /// The trial's order charges a cost that changes along the file, in a
    /// line or a curve, to both ways alike: as many pieces each, at
    /// positions with the same sum and the same sum of squares.
    #[test]
    fn the_trial_is_balanced() {
        let moments = |way: Way| {
            let at = PIECES.iter().enumerate().filter(|(_, w)| **w == way);
            at.fold([0; 3], |[n, s, q], (k, _)| [n + 1, s + k, q + k * k])
        };
        assert_eq!(moments(Way::Mapped), moments(Way::Read));
        assert_eq!(moments(Way::Mapped)[0], PIECES.len() / 2);
        assert_eq!(2 * TRIAL % PIECES.len() as u64, 0, "whole pieces");
    }

    /// A source shorter than the run: each way says how many of the run's
    /// bytes were there, counted from the run's start.
    #[test]
    fn a_short_source_is_too_short_for_the_whole_run() {
        let (src, _) = source(3 * TRIAL as usize);
        for way in [Way::Mapped, Way::Read] {
            let out = tempfile::tempfile().unwrap();
            let run = Run {
                src: &src,
                offset: 1000,
                len: 4 * TRIAL,
            };
            let part = TRIAL..4 * TRIAL;
            let (e, _) = run.copy(way, part, &out, &mut |_| {}).unwrap_err();
            let there = 3 * TRIAL - 1000;
            assert!(
                matches!(e.kind(), ErrorKind::TensorTooShort { expected, actual }
                    if *expected == 4 * TRIAL && *actual == there),
                "{way:?}: {e}"
            );
        }
    }
}
