//! The machine's memo: what `PUT` stored for `GET` to share, in 4 bytes
//! an entry for the keys Python's pickler writes and a map for the rest.
//!
//! Apart from the machine because its layout is its own trade-off: a
//! million-tensor checkpoint memoizes 8 million values, where a hash map
//! took 16 bytes and more each.

use std::collections::HashMap;

use super::arena::{Id, Pool};
use super::Budget;
use crate::Result;

/// The memo. Python's pickler numbers its entries 0, 1, 2...: those keys
/// index a list (4 bytes an entry, where a hash map took 16 and more for a
/// million-tensor checkpoint's 8 million); a key far past the list's end
/// goes to a map, so a crafted key cannot grow the list.
#[derive(Default)]
pub(super) struct Memo {
    dense: Pool<Id, MEMO_CHUNK>,
    dense_len: usize,
    sparse: HashMap<u32, Id>,
    len: usize,
}

/// The memo's chunks: 1 MiB, past what mimalloc (the `convert` binary's
/// allocator) packs several of into one page, where the tuple items'
/// 256 KiB chunks would share pages with them and keep them from being
/// handed back when the memo is dropped (a million tensors: 32 MB).
const MEMO_CHUNK: usize = 1 << 18;

/// A key this far past the list's end still extends it.
const MEMO_GAP: usize = 64;

/// Bytes a memo key in the map is charged: its 8 bytes and control byte,
/// in a table at most 8/7 full that doubles (old and new live at once).
pub(super) const SPARSE_ENTRY: usize = 32;

impl Memo {
    pub(super) const EMPTY: Id = Id::MAX;

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, key: u32) -> Option<Id> {
        match self.dense_get(key) {
            Some(&id) if id != Self::EMPTY => Some(id),
            _ => self.sparse.get(&key).copied(),
        }
    }

    fn dense_get(&self, key: u32) -> Option<&Id> {
        ((key as usize) < self.dense_len).then(|| self.dense.get(key))?
    }

    /// Memoizes `id` under `key`, charging `budget` what the memo grows
    /// by: the list's new chunk when the key extends it past its room (up
    /// to [`MEMO_GAP`] entries for one key), or a map entry. Returns the
    /// bytes charged.
    pub(super) fn insert(&mut self, key: u32, id: Id, budget: &mut Budget) -> Result<usize> {
        let k = key as usize;
        let mut cost = 0;
        if k >= self.dense_len && k - self.dense_len < MEMO_GAP {
            // One chunk at most: the gap is shorter than a chunk.
            cost = self.dense.growth(k + 1 - self.dense_len);
            budget.charge(cost, "memo entries")?;
            while self.dense_len <= k {
                self.dense.push(&[Self::EMPTY])?;
                self.dense_len += 1;
            }
        }
        let slot = if k < self.dense_len {
            self.dense.get_mut(key)
        } else {
            None
        };
        let new = match slot {
            // A key the map took before the list reached it moves over.
            Some(slot) => {
                std::mem::replace(slot, id) == Self::EMPTY && self.sparse.remove(&key).is_none()
            }
            None if self.sparse.contains_key(&key) => {
                self.sparse.insert(key, id);
                false
            }
            None => {
                // A hash map entry and its share of the table, doubled
                // while the table moves.
                budget.charge(SPARSE_ENTRY, "memo entries")?;
                cost += SPARSE_ENTRY;
                self.sparse.insert(key, id);
                true
            }
        };
        if new {
            self.len += 1;
        }
        Ok(cost)
    }
}
