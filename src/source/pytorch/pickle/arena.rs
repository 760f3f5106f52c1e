//! Where a pickle's values live: an arena of 12-byte cells that refer to
//! each other by [`Id`], their strings and items in chunked pools, and the
//! [`Node`] view a reader walks.
//!
//! Apart from the machine because it is the machine's output, read long
//! after the machine is gone. Values refer by index, so memo references
//! share instead of copy (a memo bomb stays linear) and dropping deep
//! nests needs no recursion; a million-tensor checkpoint builds 7 million
//! values, hence cells of 12 bytes and pools that never copy what they hold.

use super::globals::Code;
use super::{err, Budget, Class, Global};
use crate::{PickleError, Result};

/// An index into [`Pickled`]'s values.
pub type Id = u32;

/// A value the pickle built, as [`Pickled::get`] shows it: its strings
/// and items borrowed from the arena's pools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Node<'a> {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// An integer that does not (kept only as a leaf to skip).
    BigInt,
    /// A float.
    Float(f64),
    /// A `str`.
    Str(&'a str),
    /// `bytes` or `bytearray`.
    Bytes(&'a [u8]),
    /// A tuple.
    Tuple(&'a [Id]),
    /// A list.
    List(&'a [Id]),
    /// A dict or `OrderedDict`, in insertion order.
    Dict(&'a [(Id, Id)]),
    /// A set or frozenset.
    Set(&'a [Id]),
    /// An allowed global itself (a dtype, a storage class, a function).
    Global(Global),
    /// `func(*args)` of one of torch's globals, recorded, not performed;
    /// `state` is what `BUILD` gave it.
    Call {
        /// The allowed global.
        func: Global,
        /// The argument tuple.
        args: Id,
        /// `BUILD` state, if any.
        state: Option<Id>,
    },
    /// An instance of a class of the caller's [`Allow`](super::Allow)
    /// table, as `REDUCE` or `NEWOBJ` made it (`args`: the tuple passed,
    /// empty for a dataclass, `(value,)` for an enum member) and `BUILD`
    /// filled it (`state`: a dataclass's attributes as a dict of strs, or
    /// what its `__getstate__` returned). Nothing was constructed.
    Object {
        /// Its class.
        class: Class,
        /// The argument tuple.
        args: Id,
        /// `BUILD` state, if any.
        state: Option<Id>,
    },
    /// A persistent id (`BINPERSID`): how checkpoints point at storages.
    Persistent(Id),
}

/// Where a string, bytes or a tuple's items lie in their [`Pool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) at: u32,
    pub(super) len: u32,
}

/// A mutable container's items in [`Pickled`]'s side lists; `NO_SIDE`
/// while it is empty, so the empty `OrderedDict()` a torch tensor carries
/// for its hooks costs its cell alone.
pub(super) type Side = u32;
pub(super) const NO_SIDE: Side = u32::MAX;
/// `Cell::Call`'s `state` before a `BUILD`.
pub(super) const NO_STATE: Id = Id::MAX;

/// How a value is stored: 12 bytes, its strings and items in pools (a
/// million-tensor checkpoint builds 7 million values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Cell {
    None,
    Bool(bool),
    Int(Bits),
    BigInt,
    Float(Bits),
    Str(Span),
    Bytes(Span),
    Tuple(Span),
    List(Side),
    Dict(Side),
    Set(Side),
    Global(Code),
    Call { func: Code, args: Id, state: Id },
    Persistent(Id),
}

const _: () = assert!(std::mem::size_of::<Cell>() == 12);

/// A number's 64 bits as two `u32`s, so that a [`Cell`] is aligned to 4
/// bytes and takes 12, not 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bits([u32; 2]);

impl Bits {
    pub(super) fn of(v: u64) -> Bits {
        Bits([v as u32, (v >> 32) as u32])
    }

    pub(super) fn get(self) -> u64 {
        u64::from(self.0[0]) | u64::from(self.0[1]) << 32
    }
}

impl Cell {
    pub(super) fn int(v: i64) -> Cell {
        Cell::Int(Bits::of(v as u64))
    }

    pub(super) fn float(v: f64) -> Cell {
        Cell::Float(Bits::of(v.to_bits()))
    }
}

/// Positions in a [`Pool`]'s chunk unless it says otherwise; a longer
/// slice gets a chunk of its own.
pub(super) const CHUNK: usize = 1 << 16;

/// Values kept in chunks of `N` positions: growing never copies what is
/// held (a `Vec` doubling holds up to three times its contents while it
/// moves). A slice lies in one chunk, so its first position addresses it;
/// one longer than a chunk takes a chunk of its size and the positions of
/// as many chunks.
#[derive(Debug, Clone)]
pub(super) struct Pool<T, const N: usize = CHUNK> {
    chunks: Vec<Vec<T>>,
}

impl<T, const N: usize> Default for Pool<T, N> {
    fn default() -> Self {
        Pool { chunks: Vec::new() }
    }
}

impl<T: Copy, const N: usize> Pool<T, N> {
    /// Bytes [`Pool::push`] of `n` items allocates: none while the last
    /// chunk has room, else a chunk (of `n` if that is longer; the room
    /// left in the last one is lost, and so charged).
    pub(super) fn growth(&self, n: usize) -> usize {
        let room = self.chunks.last().map_or(0, |c| c.capacity() - c.len());
        if n == 0 || n <= room {
            return 0;
        }
        n.max(N).saturating_mul(std::mem::size_of::<T>())
    }

    /// Stores `items`; their first position.
    pub(super) fn push(&mut self, items: &[T]) -> Result<u32> {
        if items.is_empty() {
            return Ok(0);
        }
        let room = self.chunks.last().map_or(0, |c| c.capacity() - c.len());
        if room < items.len() {
            let slots = items.len().div_ceil(N);
            self.chunks.push(Vec::with_capacity(items.len().max(N)));
            // Placeholders keep the positions of the chunks it spans.
            self.chunks.extend((1..slots).map(|_| Vec::new()));
            if slots > 1 {
                let start = self.chunks.len() - slots;
                self.chunks[start].extend_from_slice(items);
                return Self::position(start, 0);
            }
        }
        let c = self.chunks.len() - 1;
        let chunk = &mut self.chunks[c];
        let at = chunk.len();
        chunk.extend_from_slice(items);
        Self::position(c, at)
    }

    pub(super) fn slice(&self, s: Span) -> &[T] {
        if s.len == 0 {
            return &[];
        }
        let (c, o) = (s.at as usize / N, s.at as usize % N);
        &self.chunks[c][o..o + s.len as usize]
    }

    pub(super) fn get(&self, at: u32) -> Option<&T> {
        let (c, o) = (at as usize / N, at as usize % N);
        self.chunks.get(c)?.get(o)
    }

    pub(super) fn get_mut(&mut self, at: u32) -> Option<&mut T> {
        let (c, o) = (at as usize / N, at as usize % N);
        self.chunks.get_mut(c)?.get_mut(o)
    }

    fn position(chunk: usize, at: usize) -> Result<u32> {
        chunk
            .checked_mul(N)
            .and_then(|p| u32::try_from(p + at).ok())
            .ok_or_else(|| err(PickleError::Positions))
    }
}

/// A parsed pickle: the arena and the value `STOP` returned.
#[derive(Debug, Clone)]
pub struct Pickled {
    pub(super) cells: Pool<Cell>,
    pub(super) count: usize,
    /// Tuples' items.
    pub(super) items: Pool<Id>,
    /// Strings' and bytes' bytes (strings are checked UTF-8 when stored).
    pub(super) raw: Pool<u8>,
    /// Lists' and sets' items, by [`Side`].
    pub(super) seqs: Vec<Vec<Id>>,
    /// Dicts' items, by [`Side`].
    pub(super) dicts: Vec<Vec<(Id, Id)>>,
    /// The classes of the table the pickle was read with, which its
    /// globals' codes index.
    pub(super) classes: &'static [Class],
    /// The result.
    pub root: Id,
    /// What is left of the pickle's budget, for the walk that names its
    /// tensors: what the unpickler held and freed (its stack and memo)
    /// given back, and the limit widened by the pickle's own bytes, which
    /// the caller must drop before the walk (the budget bounds what is
    /// live beside them: the README's 3 times the pickle + 64 MiB).
    pub budget: Budget,
}

impl Pickled {
    /// An empty arena, for a pickle read with `classes` allowed.
    pub(super) fn new(classes: &'static [Class]) -> Pickled {
        Pickled {
            cells: Pool::default(),
            count: 0,
            items: Pool::default(),
            raw: Pool::default(),
            seqs: Vec::new(),
            dicts: Vec::new(),
            classes,
            root: 0,
            budget: Budget::new(0),
        }
    }

    /// The value `id` refers to.
    pub fn get(&self, id: Id) -> Node<'_> {
        let Some(&cell) = self.cells.get(id) else {
            return Node::None;
        };
        let seq = |slot: Side| {
            self.seqs
                .get(slot as usize)
                .map_or(&[][..], |v| v.as_slice())
        };
        match cell {
            Cell::None => Node::None,
            Cell::Bool(b) => Node::Bool(b),
            Cell::Int(i) => Node::Int(i.get() as i64),
            Cell::BigInt => Node::BigInt,
            Cell::Float(f) => Node::Float(f64::from_bits(f.get())),
            Cell::Str(s) => Node::Str(std::str::from_utf8(self.raw.slice(s)).unwrap_or_default()),
            Cell::Bytes(s) => Node::Bytes(self.raw.slice(s)),
            Cell::Tuple(s) => Node::Tuple(self.items.slice(s)),
            Cell::List(slot) => Node::List(seq(slot)),
            Cell::Set(slot) => Node::Set(seq(slot)),
            Cell::Dict(slot) => Node::Dict(
                self.dicts
                    .get(slot as usize)
                    .map_or(&[][..], |v| v.as_slice()),
            ),
            Cell::Global(c) => Node::Global(Global::from_code(c, self.classes)),
            Cell::Call { func, args, state } => {
                let state = (state != NO_STATE).then_some(state);
                match Global::from_code(func, self.classes) {
                    Global::Class(class) => Node::Object { class, args, state },
                    func => Node::Call { func, args, state },
                }
            }
            Cell::Persistent(p) => Node::Persistent(p),
        }
    }

    /// The attribute `name` of the [`Node::Object`] `object`: the value
    /// under that str key of its state, when its state is a dict (a
    /// dataclass's, whose `BUILD` sets its `__dict__`); `None` otherwise.
    ///
    /// ```
    /// use safetensors_stream::internals::pickle::{unpickle_with, Allow, Class, Global, Limits, Node};
    ///
    /// const POINT: Class = Class::new("geometry", "Point");
    /// let allow = Allow { globals: |_, _| None, classes: &[POINT] };
    /// // geometry.Point() with the state {"x": 3}, as pickle writes a dataclass.
    /// let p = b"\x80\x04\x8c\x08geometry\x8c\x05Point\x93)\x81}\x8c\x01xK\x03sb.";
    /// let (v, _) = unpickle_with(p, Limits::default(), allow).unwrap();
    /// assert!(matches!(v.get(v.root), Node::Object { class: POINT, .. }));
    /// let x = v.attribute(v.root, "x").unwrap();
    /// assert_eq!(v.get(x), Node::Int(3));
    /// assert_eq!(v.attribute(v.root, "y"), None);
    /// ```
    pub fn attribute(&self, object: Id, name: &str) -> Option<Id> {
        let Node::Object {
            state: Some(state), ..
        } = self.get(object)
        else {
            return None;
        };
        let Node::Dict(items) = self.get(state) else {
            return None;
        };
        items
            .iter()
            .find(|&&(k, _)| self.get(k) == Node::Str(name))
            .map(|&(_, v)| v)
    }

    /// How many values were built.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if none was (never, for a pickle that parsed).
    #[cfg(any(test, feature = "internals"))]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The span of nothing: empty strings, bytes and tuples.
pub(super) const EMPTY: Span = Span { at: 0, len: 0 };

/// Bytes one container item costs.
pub(super) const ID: usize = std::mem::size_of::<Id>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_keep_slices_whole_across_chunks() {
        let mut pool: Pool<u32> = Pool::default();
        let small: Vec<u32> = (0..1000).collect();
        let big: Vec<u32> = (0..(CHUNK as u32 * 2 + 5)).collect();
        let mut spans = Vec::new();
        for items in [&small, &big, &small, &big, &small] {
            let at = pool.push(items).unwrap();
            spans.push((
                Span {
                    at,
                    len: items.len() as u32,
                },
                items,
            ));
        }
        for _ in 0..CHUNK {
            pool.push(&[7]).unwrap();
        }
        for (span, items) in spans {
            assert_eq!(pool.slice(span), &items[..]);
        }
        assert_eq!(pool.slice(EMPTY), &[] as &[u32]);
    }
}
