//! A header's tensor names: the checks (none reserved, none twice) and
//! the order the tensors are laid out in ([`Order`], [`lay_out`]),
//! from a list of indices sorted by name; and a set of names that holds
//! no name ([`NameIndex`]): indices into the caller's list, hashed by the
//! name they point at. A million names cost 4 bytes each (plus the
//! table's control bytes), not a second copy of every name or a 16-byte
//! `&str` per entry.

use std::cmp::Reverse;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{TensorEntry, TensorMeta};

/// Names seen so far, as `u32` indices into a list the caller owns.
pub(crate) struct NameIndex {
    hasher: foldhash::fast::RandomState,
    table: HashTable<u32>,
}

impl NameIndex {
    /// Bytes one name may take in the table: its `u32` and control byte,
    /// in a table up to a little over twice as large as its entries.
    pub(crate) const SLOT: usize = 12;

    /// Room for `capacity` names without growing.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        NameIndex {
            hasher: foldhash::fast::RandomState::default(),
            table: HashTable::with_capacity(capacity),
        }
    }

    /// Records `index`, whose name is `name`, unless a name equal to it was
    /// recorded already: then returns that one's index. `name_of` gives the
    /// name of any recorded index.
    ///
    /// Lists longer than `u32::MAX` cannot occur: a header is at most
    /// 100,000,000 bytes, and each entry takes more than one.
    pub(crate) fn insert<'a>(
        &mut self,
        index: usize,
        name: &str,
        name_of: impl Fn(usize) -> &'a str,
    ) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        if let Some(&seen) = self.table.find(hash, |&i| name_of(i as usize) == name) {
            return Some(seen as usize);
        }
        let index = u32::try_from(index).expect("fewer than 2^32 tensors");
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, index, |&i| hasher.hash_one(name_of(i as usize)));
        None
    }
}

/// The first name in `tensors` that an earlier one already has.
pub(crate) fn first_repeated(tensors: &[TensorMeta]) -> Option<String> {
    // Indices into the list (4 bytes each, no copies of the names).
    let mut seen = NameIndex::with_capacity(tensors.len());
    tensors.iter().enumerate().find_map(|(k, t)| {
        seen.insert(k, &t.name, |i| tensors[i].name.as_str())
            .map(|_| t.name.clone())
    })
}

/// A list's indices sorted by name, ties by index: what both the check for
/// a name given twice and the reference's layout order start from. Indices
/// are `u32`, as in [`NameIndex`]: 4 bytes a tensor, and no hash table
/// beside the list (a million names: 4 MB, not 10.5 MB and then 8 MB more).
pub(crate) fn name_order<'a>(len: usize, name_of: impl Fn(usize) -> &'a str) -> Vec<u32> {
    let last = u32::try_from(len).expect("fewer than 2^32 tensors");
    let mut order: Vec<u32> = (0..last).collect();
    // Unstable is enough: the index breaks every tie.
    order.sort_unstable_by(|&a, &b| name_of(a as usize).cmp(name_of(b as usize)).then(a.cmp(&b)));
    order
}

/// The name given twice that a walk through the list in its order meets
/// first, as (its first index, the index that repeats it); from a
/// [`name_order`] of the same list.
pub(crate) fn first_repeat<'a>(
    order: &[u32],
    name_of: impl Fn(usize) -> &'a str,
) -> Option<(usize, usize)> {
    // Equal names sit together, by index: each run's first two are its
    // first repeat, and the earliest of those is the one a walk meets.
    order
        .windows(2)
        .map(|w| (w[0] as usize, w[1] as usize))
        .filter(|&(a, b)| name_of(a) == name_of(b))
        .min_by_key(|&(_, repeat)| repeat)
}

/// What makes a list of names unfit for a header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NameProblem {
    /// The name at this index is `__metadata__`.
    Reserved(usize),
    /// A name given twice: its first index, and the index that repeats it.
    Repeat(usize, usize),
}

/// The problem a walk through the list in its order meets first, from a
/// [`name_order`] of the same list.
pub(crate) fn first_name_problem<'a>(
    order: &[u32],
    name_of: impl Fn(usize) -> &'a str + Copy,
) -> Option<NameProblem> {
    // The reserved name is in its place in the name order: found by
    // binary search, first of its run.
    let at = order.partition_point(|&i| name_of(i as usize) < "__metadata__");
    let reserved = order
        .get(at)
        .map(|&i| i as usize)
        .filter(|&i| name_of(i) == "__metadata__");
    match (reserved, first_repeat(order, name_of)) {
        // A reserved name met first (a repeat of it comes after it).
        (Some(r), repeat) if repeat.is_none_or(|(_, again)| r < again) => {
            Some(NameProblem::Reserved(r))
        }
        (_, Some((first, again))) => Some(NameProblem::Repeat(first, again)),
        _ => None,
    }
}

/// Which order tensors take in the data buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// The reference writer's order: dtype descending, then name by UTF-8 bytes.
    /// Output is byte-identical to `safetensors.save_file`.
    #[default]
    Canonical,
    /// The caller's order, as given. A valid file, but not the reference's bytes.
    AsGiven,
}

/// Checks `entries`' names (none `__metadata__`, none given twice) and
/// puts them in the order `layout` lays them out, by swaps, and `parallel`
/// (a list that runs beside them, as a plan's refs; empty for none) with
/// them.
pub(crate) fn lay_out<T>(
    entries: &mut [TensorEntry],
    layout: Order,
    parallel: &mut [T],
) -> Result<(), NameProblem> {
    if let Some(order) = layout_order(entries, layout)? {
        permute(order, |i, j| {
            entries.swap(i, j);
            if !parallel.is_empty() {
                parallel.swap(i, j);
            }
        });
    }
    Ok(())
}

/// The order `layout` puts `entries` in, `order[k]` being the index of the
/// entry that goes k-th; `None` when they stay as given.
///
/// The reference's `prepare()` sorts by dtype descending, then name
/// ascending by UTF-8 bytes (so `a.10` < `a.2`): a stable sort by dtype
/// of the names' order, which the check needs anyway; tensors of one
/// dtype (the usual case) are not sorted again.
fn layout_order(entries: &[TensorEntry], layout: Order) -> Result<Option<Vec<u32>>, NameProblem> {
    let name_of = |i: usize| entries[i].meta.name.as_str();
    let mut order = name_order(entries.len(), name_of);
    if let Some(problem) = first_name_problem(&order, name_of) {
        return Err(problem);
    }
    if !matches!(layout, Order::Canonical) {
        return Ok(None);
    }
    let key = |&i: &u32| Reverse(entries[i as usize].meta.dtype);
    if !order.is_sorted_by_key(key) {
        order.sort_by_key(key);
    }
    Ok(Some(order))
}

/// Applies `order` (a permutation, as [`layout_order`] returns) in place by
/// swaps, so that item k ends where `order[k]` was; `swap` moves every list
/// that runs in parallel. No second copy of the items: a million of them
/// is big.
pub(crate) fn permute(mut order: Vec<u32>, mut swap: impl FnMut(usize, usize)) {
    const DONE: u32 = u32::MAX;
    for start in 0..order.len() {
        // Follow the cycle through `start`: each step brings the item that
        // belongs at `at` there, and carries the displaced one along.
        let mut at = start;
        while order[at] != DONE {
            let from = order[at] as usize;
            order[at] = DONE;
            if from == start {
                break;
            }
            swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeat_by_walking(names: &[&str]) -> Option<(usize, usize)> {
        let mut seen = NameIndex::with_capacity(names.len());
        names
            .iter()
            .enumerate()
            .find_map(|(i, n)| seen.insert(i, n, |k| names[k]).map(|first| (first, i)))
    }

    #[test]
    fn name_order_sorts_by_bytes_then_index() {
        let names = ["b", "a.10", "a.2", "b", "é", ""];
        let order = name_order(names.len(), |i| names[i]);
        assert_eq!(order, [5, 1, 2, 0, 3, 4]);
    }

    #[test]
    fn first_repeat_is_the_one_a_walk_meets_first() {
        for names in [
            &["x", "y", "z"][..],
            &["a", "b", "a", "b"],
            &["b", "a", "a", "b"],
            &["z", "y", "x", "y", "z", "z"],
            &["", "", ""],
            &[],
        ] {
            let order = name_order(names.len(), |i| names[i]);
            let found = first_repeat(&order, |i| names[i]);
            assert_eq!(found, repeat_by_walking(names), "{names:?}");
        }
    }

    #[test]
    fn the_reserved_name_or_a_repeat_whichever_comes_first() {
        let problem = |names: &[&str]| {
            let order = name_order(names.len(), |i| names[i]);
            first_name_problem(&order, |i| names[i])
        };
        assert_eq!(problem(&["a", "b"]), None);
        assert_eq!(
            problem(&["a", "__metadata__", "a"]),
            Some(NameProblem::Reserved(1))
        );
        assert_eq!(
            problem(&["a", "a", "__metadata__"]),
            Some(NameProblem::Repeat(0, 1))
        );
        assert_eq!(
            problem(&["x", "__metadata__", "__metadata__"]),
            Some(NameProblem::Reserved(1))
        );
        assert_eq!(problem(&["__metadata__ ", "__metadata"]), None);
    }

    proptest::proptest! {
        #[test]
        fn first_repeat_agrees_with_a_walk(names in proptest::collection::vec("[ab]{0,2}", 0..40)) {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let order = name_order(names.len(), |i| names[i]);
            proptest::prop_assert_eq!(first_repeat(&order, |i| names[i]), repeat_by_walking(&names));
        }
    }
}
