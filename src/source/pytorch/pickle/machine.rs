//! The machine: a stack, a memo and the arena being built, stepping through
//! a pickle's opcodes (`opcodes.rs`) until `STOP`.
//!
//! This file holds its state and the moves every opcode is made of:
//! reading arguments, storing values (each charged to the [`Budget`]),
//! the stack and its MARKs, the memo, filling containers, looking a
//! global up in the [`Allow`] table. What the opcodes mean is elsewhere:
//! `opcodes.rs` (one arm each), `text.rs` (the
//! text arguments of protocols 0 and 1), `reduce.rs` (what
//! calling an allowed global builds).

use std::collections::HashMap;

use super::arena::{Cell, Id, Pickled, Side, Span, ID, NO_SIDE};
use super::globals::Code;
use super::memo::Memo;
use super::{err, Allow, Budget, Global, Limits};
use crate::{PickleError, Result};

/// A stack entry: a value or a MARK.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Mark,
    Val(Id),
}

/// Shared values: the ints 0-255 (`BININT1`), then `False`, `True` and
/// the empty tuple.
const CONSTANTS: usize = 259;
pub(super) const FALSE: usize = 256;
pub(super) const TRUE: usize = 257;
pub(super) const EMPTY_TUPLE: usize = 258;

pub(super) struct Machine<'a> {
    data: &'a [u8],
    pub(super) pos: usize,
    pub(super) limits: Limits,
    /// What the pickle may name.
    pub(super) allow: Allow,
    /// The arena being built; its root and budget are set at `STOP`.
    pub(super) out: Pickled,
    pub(super) stack: Vec<Slot>,
    pub(super) marks: usize,
    pub(super) memo: Memo,
    /// [`Machine::push_constant`]'s values, once built.
    pub(super) constants: [Id; CONSTANTS],
    /// Tuples of one to three constants, shared ([`Machine::tuple_of`]).
    pub(super) small_tuples: HashMap<[Id; 3], Id>,
    bytes: usize,
    pub(super) budget: Budget,
    /// Bytes charged for what the machine frees when it is done: the
    /// stack, the memo, `small_tuples`; given back to the walk's budget.
    pub(super) scratch: usize,
}

/// Unpickles one PyTorch checkpoint pickle from the start of `data`,
/// allowing what [`Allow::CHECKPOINT`] allows. Returns it and the number
/// of bytes it took (the `STOP` opcode included).
///
/// ```
/// use safetensors_stream::internals::pickle::{unpickle, Limits, Node};
///
/// // pickle.dumps({"a": 1}, protocol=2)
/// let p = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.";
/// let (v, used) = unpickle(p, Limits::default()).unwrap();
/// assert_eq!(used, p.len());
/// assert!(matches!(v.get(v.root), Node::Dict(items) if items.len() == 1));
///
/// // pickle.dumps(os.system) names posix.system: refused, never imported.
/// let evil = b"\x80\x02cposix\nsystem\nq\x00.";
/// assert!(unpickle(evil, Limits::default()).is_err());
/// ```
pub fn unpickle(data: &[u8], limits: Limits) -> Result<(Pickled, usize)> {
    unpickle_with(data, limits, Allow::CHECKPOINT)
}

/// Unpickles one pickle from the start of `data`, allowing the globals and
/// classes of `allow` and refusing every other by name
/// ([`PickleError::Global`]): how a reader of another kind of pickle
/// reuses the machine with its own table. Returns it and the number of
/// bytes it took (the `STOP` opcode included).
pub fn unpickle_with(data: &[u8], limits: Limits, allow: Allow) -> Result<(Pickled, usize)> {
    let mut m = Machine {
        data,
        pos: 0,
        limits,
        allow,
        out: Pickled::new(allow.classes),
        stack: Vec::new(),
        marks: 0,
        memo: Memo::default(),
        constants: [Memo::EMPTY; CONSTANTS],
        small_tuples: HashMap::new(),
        bytes: 0,
        budget: Budget::new(limits.budget),
        scratch: 0,
    };
    loop {
        let at = m.pos;
        let op = m.byte().map_err(|e| e.at_offset(at as u64))?;
        match m.step(op) {
            Ok(Some(root)) => {
                let pos = m.pos;
                let mut out = m.out;
                out.root = root;
                out.budget = m.budget;
                // The stack, the memo and the shared tuples' map go now,
                // and the pickle's bytes before the walk (both callers
                // drop them first): the walk may hold what they held.
                out.budget.release(m.scratch);
                out.budget.widen(pos);
                return Ok((out, pos));
            }
            Ok(None) => {}
            Err(e) => return Err(e.at_offset(at as u64)),
        }
    }
}

impl<'a> Machine<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| err(PickleError::Truncated))?;
        let s = &data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The bytes not read yet.
    pub(super) fn rest(&self) -> &'a [u8] {
        let data: &'a [u8] = self.data;
        &data[self.pos..]
    }

    pub(super) fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    /// A `str` stored in the pool, charged what the pool grows by.
    pub(super) fn str_cell(&mut self, s: &str) -> Result<Cell> {
        self.budget
            .charge(self.out.raw.growth(s.len()), "strings and bytes")?;
        let at = self.out.raw.push(s.as_bytes())?;
        Ok(Cell::Str(Span {
            at,
            len: s.len() as u32,
        }))
    }

    pub(super) fn bytes_cell(&mut self, b: &[u8]) -> Result<Cell> {
        self.budget
            .charge(self.out.raw.growth(b.len()), "strings and bytes")?;
        let at = self.out.raw.push(b)?;
        Ok(Cell::Bytes(Span {
            at,
            len: b.len() as u32,
        }))
    }

    pub(super) fn tuple_cell(&mut self, items: &[Id]) -> Result<Cell> {
        self.budget
            .charge(self.out.items.growth(items.len()), "container items")?;
        let at = self.out.items.push(items)?;
        Ok(Cell::Tuple(Span {
            at,
            len: items.len() as u32,
        }))
    }

    /// A list's or set's items in the side list (none while it is empty);
    /// `items` was charged when it was collected.
    pub(super) fn seq(&mut self, items: Vec<Id>) -> Result<Side> {
        if items.is_empty() {
            return Ok(NO_SIDE);
        }
        self.budget
            .reserve(&mut self.out.seqs, 1, "container items")?;
        self.out.seqs.push(items);
        Ok((self.out.seqs.len() - 1) as Side)
    }

    /// A length from the pickle, checked against the bytes that remain.
    pub(super) fn sized(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).map_err(|_| err(PickleError::LengthTooLarge))?;
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.bytes {
            return Err(err(PickleError::BytesLimit(self.limits.bytes as u64)));
        }
        // Borrowed from the pickle: what is stored of it is charged then.
        self.take(n)
    }

    /// Pushes `slot`, charging the stack's growth: an opcode of one byte
    /// pushes a slot of 8 (`NEWTRUE`, `DUP`, `BINGET`...).
    pub(super) fn push(&mut self, slot: Slot) -> Result<()> {
        self.scratch += self.budget.reserve(&mut self.stack, 1, "the stack")?;
        self.stack.push(slot);
        Ok(())
    }

    pub(super) fn push_node(&mut self, node: Cell) -> Result<()> {
        let id = self.alloc(node)?;
        self.push(Slot::Val(id))?;
        Ok(())
    }

    /// Pushes the small int or bool in `slot`, built the first time and
    /// shared after: they never change, and a million tensors' offsets,
    /// sizes and strides are mostly 0s and 1s (4 values a tensor).
    pub(super) fn push_constant(&mut self, slot: usize, node: Cell) -> Result<()> {
        let id = match self.constants[slot] {
            Memo::EMPTY => {
                let id = self.alloc(node)?;
                self.constants[slot] = id;
                id
            }
            id => id,
        };
        self.push(Slot::Val(id))?;
        Ok(())
    }

    pub(super) fn alloc(&mut self, node: Cell) -> Result<Id> {
        if self.out.count >= self.limits.nodes {
            return Err(err(PickleError::ValuesLimit(self.limits.nodes as u64)));
        }
        // 12 bytes a value, charged a chunk at a time as the pool grows.
        self.budget.charge(self.out.cells.growth(1), "values")?;
        let id = self.out.cells.push(&[node])?;
        self.out.count += 1;
        Ok(id)
    }

    pub(super) fn cell(&self, id: Id) -> Cell {
        self.out.cells.get(id).copied().unwrap_or(Cell::None)
    }

    pub(super) fn pop(&mut self) -> Result<Id> {
        match self.stack.pop() {
            Some(Slot::Val(id)) => Ok(id),
            Some(Slot::Mark) => Err(err(PickleError::MarkNotValue)),
            None => Err(err(PickleError::StackUnderflow)),
        }
    }

    pub(super) fn top(&self) -> Result<Id> {
        match self.stack.last() {
            Some(Slot::Val(id)) => Ok(*id),
            _ => Err(err(PickleError::StackUnderflow)),
        }
    }

    /// Pops everything down to the last MARK, and the MARK.
    pub(super) fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let at = self
            .stack
            .iter()
            .rposition(|s| *s == Slot::Mark)
            .ok_or_else(|| err(PickleError::NoMark))?;
        let n = self.stack.len() - at - 1;
        self.budget
            .charge(n.saturating_mul(ID), "container items")?;
        let items = self.stack[at + 1..]
            .iter()
            .map(|s| match s {
                Slot::Val(id) => *id,
                Slot::Mark => unreachable!("after the last MARK"),
            })
            .collect();
        self.stack.truncate(at);
        self.marks -= 1;
        Ok(items)
    }

    pub(super) fn memo_put(&mut self, key: u32) -> Result<()> {
        let id = self.top()?;
        let known = self.memo.get(key).is_some();
        if !known && self.memo.len() >= self.limits.memo {
            return Err(err(PickleError::MemoLimit(self.limits.memo as u64)));
        }
        self.scratch += self.memo.insert(key, id, &mut self.budget)?;
        Ok(())
    }

    pub(super) fn memo_get(&mut self, key: u32) -> Result<()> {
        let id = self
            .memo
            .get(key)
            .ok_or_else(|| err(PickleError::MemoKeyNeverStored(u64::from(key))))?;
        self.push(Slot::Val(id))?;
        Ok(())
    }

    pub(super) fn kind_of(&self, id: Id) -> &'static str {
        match self.cell(id) {
            Cell::None => "None",
            Cell::Bool(_) => "a bool",
            Cell::Int(_) | Cell::BigInt => "an int",
            Cell::Float(_) => "a float",
            Cell::Str(_) => "a str",
            Cell::Bytes(_) => "bytes",
            Cell::Tuple(_) => "a tuple",
            Cell::List(_) => "a list",
            Cell::Dict(_) => "a dict",
            Cell::Set(_) => "a set",
            Cell::Global(_) => "a global",
            Cell::Call { .. } => "an object",
            Cell::Persistent(_) => "a persistent id",
        }
    }

    /// The side list `target`'s items are in, given one first if it had
    /// none (charged); `None` if `target` is not the container `want` makes.
    fn side(&mut self, target: Id, want: fn(Side) -> Cell) -> Result<Option<usize>> {
        let Some(&cell) = self.out.cells.get(target) else {
            return Ok(None);
        };
        let (slot, fresh) = match cell {
            Cell::List(s) | Cell::Set(s) if want(s) == cell => (s, self.out.seqs.len()),
            Cell::Dict(s) if want(s) == cell => (s, self.out.dicts.len()),
            _ => return Ok(None),
        };
        if slot != NO_SIDE {
            return Ok(Some(slot as usize));
        }
        match cell {
            Cell::Dict(_) => {
                self.budget
                    .reserve(&mut self.out.dicts, 1, "container items")?;
                self.out.dicts.push(Vec::new());
            }
            _ => {
                self.budget
                    .reserve(&mut self.out.seqs, 1, "container items")?;
                self.out.seqs.push(Vec::new());
            }
        }
        if let Some(c) = self.out.cells.get_mut(target) {
            *c = want(fresh as Side);
        }
        Ok(Some(fresh))
    }

    pub(super) fn set_items(&mut self, target: Id, pairs: &[Id]) -> Result<()> {
        if pairs.len() % 2 != 0 {
            return Err(err(PickleError::SetItemsOdd));
        }
        let kind = self.kind_of(target);
        let Some(slot) = self.side(target, Cell::Dict)? else {
            return Err(err(PickleError::SetItemNotDict(kind)));
        };
        let items = &mut self.out.dicts[slot];
        self.budget
            .reserve(items, pairs.len() / 2, "container items")?;
        items.extend(pairs.chunks_exact(2).map(|kv| (kv[0], kv[1])));
        Ok(())
    }

    pub(super) fn append(&mut self, target: Id, values: &[Id]) -> Result<()> {
        self.extend_seq(target, values, Cell::List, "APPEND", "a list")
    }

    pub(super) fn add_items(&mut self, target: Id, values: &[Id]) -> Result<()> {
        self.extend_seq(target, values, Cell::Set, "ADDITEMS", "a set")
    }

    fn extend_seq(
        &mut self,
        target: Id,
        values: &[Id],
        want: fn(Side) -> Cell,
        op: &'static str,
        what: &'static str,
    ) -> Result<()> {
        let kind = self.kind_of(target);
        let Some(slot) = self.side(target, want)? else {
            return Err(err(PickleError::NotContainer {
                op,
                kind,
                expected: what,
            }));
        };
        let items = &mut self.out.seqs[slot];
        self.budget
            .reserve(items, values.len(), "container items")?;
        items.extend_from_slice(values);
        Ok(())
    }

    /// `g`'s code in the arena.
    pub(super) fn code(&self, g: Global) -> Code {
        g.code(self.allow.classes)
    }

    pub(super) fn global(&mut self, module: &str, name: &str) -> Result<()> {
        match self.allow.lookup(module, name) {
            Some(g) => self.push_node(Cell::Global(self.code(g))),
            None => Err(err(PickleError::Global {
                module: module.chars().take(200).collect(),
                name: name.chars().take(200).collect(),
            })),
        }
    }
}
