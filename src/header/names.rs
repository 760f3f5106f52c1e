//! A set of tensor names that holds no name: indices into the caller's
//! list, hashed by the name they point at. A million names cost 4 bytes
//! each (plus the table's control bytes), not a second copy of every name
//! or a 16-byte `&str` per entry.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Names seen so far, as `u32` indices into a list the caller owns.
pub(crate) struct NameIndex {
    hasher: foldhash::fast::RandomState,
    table: HashTable<u32>,
}

impl NameIndex {
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
