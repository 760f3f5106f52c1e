//! How a distributed checkpoint cuts a tensor into chunks, checked to tile
//! it exactly, and the order a row-major copy of the tensor takes them in.
//!
//! torch reads a checkpoint into a tensor it allocated with `torch.empty`,
//! chunk by chunk: a missing chunk leaves its elements as whatever the
//! allocator held, and of two overlapping chunks the later wins. Here
//! every element must be held by exactly one chunk, or the tensor is
//! refused naming the chunks.
//!
//! A row-major copy: let `k` be the last dimension any chunk cuts (chunks
//! span every dimension after it whole). Fixing the indices before `k` (a
//! *prefix*), the chunks holding that prefix tile dimension `k`, and each
//! gives one run: its next `sizes[k]` indices on `k`, every element after,
//! which are the next bytes of the chunk's own row-major stream. So a
//! tensor cut on dimension 0 is its chunks one after another; one cut on
//! dimension 1 is, row by row, a piece of each chunk in turn.

use crate::error::dcp::DcpError;
use crate::{Error, Result};

/// A chunk of a tensor as the metadata gives it: where it starts in the
/// global tensor and its sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Its first element's index in the global tensor.
    pub(crate) offsets: Box<[u64]>,
    pub(crate) sizes: Box<[u64]>,
}

impl Chunk {
    /// Its elements (it lies inside its tensor, checked: no overflow).
    pub(crate) fn numel(&self) -> u64 {
        self.sizes.iter().product()
    }

    /// Whether it holds index `prefix` on the dimensions `prefix` covers.
    fn holds(&self, prefix: &[u64]) -> bool {
        prefix
            .iter()
            .zip(self.offsets.iter().zip(self.sizes.iter()))
            .all(|(&i, (&o, &s))| o <= i && i < o + s)
    }

    /// How it is named in messages: its offsets.
    pub(crate) fn label(&self) -> String {
        format!("{:?}", self.offsets)
    }
}

/// Comparisons of chunk pairs the overlap check may make in one tensor
/// before it refuses the layout: a grid of 64 x 64 chunks takes 2^18.
pub(crate) const MAX_COMPARISONS: u64 = 1 << 28;

/// `e`, about tensor `tensor`.
fn err(tensor: &str, e: DcpError) -> Error {
    Error::new(e).with_tensor(tensor)
}

/// Checks that `chunks` tile `shape` exactly: each inside it, none
/// overlapping another, every element held.
pub(crate) fn check_tiling(tensor: &str, shape: &[u64], chunks: &[Chunk]) -> Result<()> {
    let numel = crate::dtype::numel(shape).ok_or_else(|| {
        let shape = shape.to_vec();
        err(tensor, DcpError::TooLarge { shape })
    })?;
    for c in chunks {
        check_inside(tensor, shape, c)?;
    }
    let full: Vec<&Chunk> = chunks.iter().filter(|c| c.numel() > 0).collect();
    check_disjoint(tensor, &full)?;
    // Disjoint and inside: they hold the sum of their elements.
    let held = full
        .iter()
        .map(|c| c.numel())
        .fold(0u64, u64::saturating_add);
    if held != numel {
        return Err(err(
            tensor,
            DcpError::ChunkGap {
                held,
                numel,
                missing: first_missing(shape, &full),
            },
        ));
    }
    Ok(())
}

fn check_inside(tensor: &str, shape: &[u64], c: &Chunk) -> Result<()> {
    if c.offsets.len() != shape.len() || c.sizes.len() != shape.len() {
        return Err(err(
            tensor,
            DcpError::ChunkRank {
                chunk: c.label(),
                dims: shape.len(),
                chunk_dims: c.offsets.len().max(c.sizes.len()),
            },
        ));
    }
    let inside = (0..shape.len()).all(|d| {
        c.offsets[d]
            .checked_add(c.sizes[d])
            .is_some_and(|end| end <= shape[d])
    });
    if !inside {
        return Err(err(
            tensor,
            DcpError::ChunkOutside {
                shape: shape.to_vec(),
                chunk: c.label(),
                sizes: c.sizes.to_vec(),
            },
        ));
    }
    Ok(())
}

/// Refuses two chunks sharing an element. A sweep along the dimension
/// with the most distinct offsets: each chunk is compared with those that
/// start before it ends there (a row of a grid, not all of it).
fn check_disjoint(tensor: &str, full: &[&Chunk]) -> Result<()> {
    let Some(first) = full.first() else {
        return Ok(());
    };
    let dims = first.offsets.len();
    let axis = (0..dims)
        .max_by_key(|&d| {
            let mut starts: Vec<u64> = full.iter().map(|c| c.offsets[d]).collect();
            starts.sort_unstable();
            starts.dedup();
            starts.len()
        })
        .unwrap_or(0);
    let start = |c: &Chunk| c.offsets.get(axis).copied().unwrap_or(0);
    let end = |c: &Chunk| start(c) + c.sizes.get(axis).copied().unwrap_or(1);
    let mut order: Vec<usize> = (0..full.len()).collect();
    order.sort_by_key(|&i| start(full[i]));
    let mut compared = 0u64;
    for (n, &i) in order.iter().enumerate() {
        for &j in &order[n + 1..] {
            if start(full[j]) >= end(full[i]) {
                break;
            }
            compared += 1;
            if compared > MAX_COMPARISONS {
                return Err(err(
                    tensor,
                    DcpError::Shape {
                        what: format!("the chunks of tensor {tensor:?}"),
                        expected: "a layout checked in 2^28 comparisons",
                        found: format!("{} chunks, too many overlapping on every axis", full.len()),
                    },
                ));
            }
            if intersect(full[i], full[j]) {
                let (a, b) = (i.min(j), i.max(j));
                return Err(err(
                    tensor,
                    DcpError::ChunkOverlap {
                        first: full[a].label(),
                        second: full[b].label(),
                    },
                ));
            }
        }
    }
    Ok(())
}

fn intersect(a: &Chunk, b: &Chunk) -> bool {
    (0..a.offsets.len()).all(|d| {
        let (a0, b0) = (a.offsets[d], b.offsets[d]);
        a0 < b0 + b.sizes[d] && b0 < a0 + a.sizes[d]
    })
}

/// Candidate points the search for a missing element may try.
const MAX_CANDIDATES: u64 = 1 << 16;

/// The first element (row-major) no chunk holds, as an index; `"?"` when
/// the search would be too long. Its every coordinate is 0 or where some
/// chunk ends: from any missing element, stepping back along a dimension
/// stays missing until one of those.
fn first_missing(shape: &[u64], full: &[&Chunk]) -> String {
    let marks: Vec<Vec<u64>> = (0..shape.len())
        .map(|d| {
            let mut m: Vec<u64> = std::iter::once(0)
                .chain(full.iter().map(|c| c.offsets[d] + c.sizes[d]))
                .filter(|&x| x < shape[d])
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        })
        .collect();
    let count = marks
        .iter()
        .map(|m| m.len() as u64)
        .fold(1u64, u64::saturating_mul);
    if count > MAX_CANDIDATES {
        return "?".into();
    }
    let mut at = vec![0usize; shape.len()];
    loop {
        let point: Vec<u64> = at.iter().zip(&marks).map(|(&i, m)| m[i]).collect();
        if !full.iter().any(|c| c.holds(&point)) {
            return format!("{point:?}");
        }
        // The next candidate in row-major order.
        let mut d = shape.len();
        loop {
            if d == 0 {
                return "?".into();
            }
            d -= 1;
            at[d] += 1;
            if at[d] < marks[d].len() {
                break;
            }
            at[d] = 0;
        }
    }
}

/// The dimension a row-major copy cuts at (see the module's notes): the
/// last one some chunk does not span whole; `None` when none does (one
/// chunk is the whole tensor).
pub(crate) fn cut_axis(shape: &[u64], chunks: &[Chunk]) -> Option<usize> {
    (0..shape.len()).rev().find(|&d| {
        chunks
            .iter()
            .any(|c| c.numel() > 0 && c.sizes[d] != shape[d])
    })
}

/// The chunks (indices into `chunks`) holding `prefix`, the indices on
/// the dimensions before the cut axis, in order along the cut axis.
pub(crate) fn band(prefix: &[u64], axis: usize, chunks: &[Chunk]) -> Vec<usize> {
    let mut held: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].numel() > 0 && chunks[i].holds(prefix))
        .collect();
    held.sort_by_key(|&i| chunks[i].offsets[axis]);
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn chunk(offsets: &[u64], sizes: &[u64]) -> Chunk {
        Chunk {
            offsets: offsets.into(),
            sizes: sizes.into(),
        }
    }

    /// The distributed-checkpoint error of a refused layout.
    fn refused(shape: &[u64], chunks: &[Chunk]) -> Error {
        check_tiling("w", shape, chunks).unwrap_err()
    }

    #[test]
    fn a_grid_rows_and_columns_tile() {
        let grid = [
            chunk(&[0, 4], &[3, 4]),
            chunk(&[0, 0], &[3, 4]),
            chunk(&[3, 0], &[3, 4]),
            chunk(&[3, 4], &[3, 4]),
        ];
        check_tiling("t", &[6, 8], &grid).unwrap();
        assert_eq!(cut_axis(&[6, 8], &grid), Some(1));
        assert_eq!(band(&[4], 1, &grid), vec![2, 3]);
        let rows = [chunk(&[4, 0], &[3, 3]), chunk(&[0, 0], &[4, 3])];
        check_tiling("t", &[7, 3], &rows).unwrap();
        assert_eq!(cut_axis(&[7, 3], &rows), Some(0));
        assert_eq!(band(&[], 0, &rows), vec![1, 0]);
        let whole = [chunk(&[0, 0], &[2, 2]), chunk(&[2, 0], &[0, 2])];
        check_tiling("t", &[2, 2], &whole).unwrap();
        assert_eq!(cut_axis(&[2, 2], &whole), None);
        check_tiling("s", &[], &[chunk(&[], &[])]).unwrap();
    }

    #[test]
    fn an_overlap_names_both_chunks() {
        let over = [
            chunk(&[0, 0], &[4, 3]),
            chunk(&[3, 2], &[2, 1]),
            chunk(&[4, 0], &[1, 2]),
        ];
        let e = refused(&[5, 3], &over);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkOverlap { first, second })
                if first == "[0, 0]" && second == "[3, 2]")
                && e.tensor() == Some("w"),
            "{e}"
        );
        // The same chunk twice (a replicated one listed by two ranks).
        let twice = [chunk(&[0], &[3]), chunk(&[0], &[3])];
        let e = refused(&[3], &twice);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkOverlap { .. })),
            "{e}"
        );
    }

    #[test]
    fn a_gap_names_its_first_element() {
        let gap = [chunk(&[0, 0], &[2, 3]), chunk(&[2, 1], &[1, 2])];
        let e = refused(&[3, 3], &gap);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkGap { held: 8, numel: 9, missing, .. })
                if missing == "[2, 0]"),
            "{e}"
        );
        let e = refused(&[3], &[]);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkGap { held: 0, .. })),
            "{e}"
        );
    }

    #[test]
    fn strays_and_huge_claims_are_refused() {
        let e = refused(&[3], &[chunk(&[1], &[u64::MAX])]);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkOutside { .. })),
            "{e}"
        );
        let e = refused(&[3, 1], &[chunk(&[0], &[3])]);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::ChunkRank { .. })),
            "{e}"
        );
        let e = refused(&[1 << 40, 1 << 40], &[chunk(&[0, 0], &[1 << 40, 1 << 40])]);
        assert!(
            matches!(e.kind(), ErrorKind::Dcp(DcpError::TooLarge { .. })),
            "{e}"
        );
    }
}
