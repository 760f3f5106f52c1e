//! What one pickle may build: [`Limits`] on counts (values, memo entries,
//! MARKs, string bytes) and a [`Budget`] of bytes.
//!
//! Apart from the machine because the budget outlives it: the walk that
//! names a checkpoint's tensors spends what the unpickler left
//! ([`Pickled::budget`](super::Pickled::budget)), so one allowance bounds
//! both, and a shared value expanded by either is paid for each time.

use super::err;
use crate::{PickleError, Result};

/// Bounds on what one pickle may build.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Values built (every opcode builds at most one).
    pub nodes: usize,
    /// Entries in the memo.
    pub memo: usize,
    /// Open MARKs at once.
    pub marks: usize,
    /// Bytes of strings and bytes, summed.
    pub bytes: usize,
    /// Bytes of values built in all ([`Budget`]).
    pub budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 8_000_000,
            memo: 4_000_000,
            marks: 10_000,
            bytes: 64 << 20,
            budget: BUDGET_FLOOR,
        }
    }
}

impl Limits {
    /// The default limits with the [`Budget`] of a pickle of `len` bytes;
    /// a pickle past 8 MB may also build a value per byte and memoize one
    /// per two (an opcode builds at most one, a `BINPUT` takes two bytes:
    /// a million tensors take 9 million values and 8 million entries).
    pub fn for_input(len: usize) -> Limits {
        let d = Limits::default();
        Limits {
            nodes: d.nodes.max(len),
            memo: d.memo.max(len / 2),
            budget: Budget::for_input(len).limit(),
            ..d
        }
    }
}

/// A pickle may hold this many times its own size in values...
pub const BUDGET_FACTOR: usize = 2;
/// ...plus this many bytes, so that a small checkpoint is never short.
pub const BUDGET_FLOOR: usize = 48 << 20;

/// Bytes a pickle may materialise: the arena's values, the items of its
/// containers, its strings, the copies its allowed constructors make and
/// the names the walk joins from nested keys. One budget per pickle, spent
/// by the unpickler and then by the naming walk ([`Pickled::budget`]).
///
/// ```
/// use safetensors_stream::internals::pickle::Budget;
///
/// let mut b = Budget::for_input(1000);
/// assert_eq!(b.limit(), 2 * 1000 + (48 << 20));
/// assert!(b.charge(1 << 20, "a name").is_ok());
/// assert!(b.charge(usize::MAX, "a name").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    limit: usize,
    used: usize,
}

impl Budget {
    /// A budget of `limit` bytes, none spent.
    pub fn new(limit: usize) -> Budget {
        Budget { limit, used: 0 }
    }

    /// The budget of a pickle of `len` bytes:
    /// `BUDGET_FACTOR * len + BUDGET_FLOOR`.
    pub fn for_input(len: usize) -> Budget {
        Budget::new(
            len.saturating_mul(BUDGET_FACTOR)
                .saturating_add(BUDGET_FLOOR),
        )
    }

    /// Bytes allowed in all.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes spent so far.
    #[cfg(any(test, feature = "internals"))]
    pub fn used(&self) -> usize {
        self.used
    }

    /// Allows `n` bytes more: the pickle's own, which its caller frees
    /// before the walk that names its tensors spends the rest.
    pub fn widen(&mut self, n: usize) {
        self.limit = self.limit.saturating_add(n);
    }

    /// Gives back `n` bytes spent on something freed since (a copy made
    /// for a moment, the unpickler's stack and memo once it is done).
    pub fn release(&mut self, n: usize) {
        self.used = self.used.saturating_sub(n);
    }

    /// Makes room in `v` for `extra` more items, charging the new buffer in
    /// full before it is allocated: while a `Vec` moves, its old buffer is
    /// live too, so what its growth is charged (at most twice its final
    /// size) covers what it holds at its peak. Returns the bytes charged.
    pub fn reserve<T>(
        &mut self,
        v: &mut Vec<T>,
        extra: usize,
        what: &'static str,
    ) -> Result<usize> {
        let need = v.len().saturating_add(extra);
        if need <= v.capacity() {
            return Ok(0);
        }
        let cap = need.max(v.capacity().saturating_mul(2)).max(4);
        let bytes = cap.saturating_mul(std::mem::size_of::<T>());
        self.charge(bytes, what)?;
        v.reserve_exact(cap - v.len());
        Ok(bytes)
    }

    /// Spends `n` bytes on `what`, or refuses with [`PickleError::Budget`].
    pub fn charge(&mut self, n: usize, what: &'static str) -> Result<()> {
        match self.used.checked_add(n).filter(|&u| u <= self.limit) {
            Some(u) => {
                self.used = u;
                Ok(())
            }
            None => Err(err(PickleError::Budget {
                limit: self.limit as u64,
                what,
            })),
        }
    }
}
