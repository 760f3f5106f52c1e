//! One arm per opcode: what each pushes, pops and builds, from the moves
//! of [`Machine`]. The opcodes are those of protocols 0 to 5 that a
//! checkpoint uses; any other is refused by its byte.
//!
//! Apart from the machine's state so that the table of opcodes reads as
//! one match, beside the few values it shares rather than builds again
//! (small ints, bools, short tuples of them).

use super::arena::{Cell, Id, Node, EMPTY, ID, NO_SIDE};
use super::err;
use super::machine::{Machine, Slot, EMPTY_TUPLE, FALSE, TRUE};
use super::memo::{Memo, SPARSE_ENTRY};
use super::text::parse_decimal;
use crate::{PickleError, Result};

impl Machine<'_> {
    fn long(&mut self, n: u64) -> Result<()> {
        let raw = self.sized(n)?;
        let node = match raw.len() {
            0 => Cell::int(0),
            1..=8 => {
                let neg = raw[raw.len() - 1] & 0x80 != 0;
                let mut b = [if neg { 0xff } else { 0 }; 8];
                b[..raw.len()].copy_from_slice(raw);
                Cell::int(i64::from_le_bytes(b))
            }
            _ => Cell::BigInt,
        };
        self.push_node(node)
    }

    fn tuple_of(&mut self, n: usize) -> Result<()> {
        let mut items = [0; 3];
        for slot in items[..n].iter_mut().rev() {
            *slot = self.pop()?;
        }
        if !items[..n].iter().all(|&id| self.is_constant(id)) {
            let tuple = self.tuple_cell(&items[..n])?;
            return self.push_node(tuple);
        }
        // A short tuple of shared constants is shared too: a tuple never
        // changes, and every 1-D tensor's stride is `(1,)`.
        items[n..].fill(Memo::EMPTY);
        let id = match self.small_tuples.get(&items) {
            Some(&id) => id,
            None => {
                let tuple = self.tuple_cell(&items[..n])?;
                let id = self.alloc(tuple)?;
                // A map entry: 16 bytes and a control byte, doubling.
                self.budget.charge(SPARSE_ENTRY * 2, "shared tuples")?;
                self.scratch += SPARSE_ENTRY * 2;
                self.small_tuples.insert(items, id);
                id
            }
        };
        self.push(Slot::Val(id))?;
        Ok(())
    }

    /// True if `id` is one of [`Machine::push_constant`]'s shared values.
    fn is_constant(&self, id: Id) -> bool {
        let slot = match self.cell(id) {
            Cell::Int(v) => match v.get() {
                v @ 0..=255 => v as usize,
                _ => return false,
            },
            Cell::Bool(false) => FALSE,
            Cell::Bool(true) => TRUE,
            Cell::Tuple(EMPTY) => EMPTY_TUPLE,
            _ => return false,
        };
        self.constants[slot] == id
    }

    /// Runs one opcode; returns the root at `STOP`.
    pub(super) fn step(&mut self, op: u8) -> Result<Option<Id>> {
        match op {
            0x80 => {
                let proto = self.byte()?;
                if proto > 5 {
                    return Err(err(PickleError::Protocol(proto)));
                }
            }
            // FRAME: a length hint; frames are read as one stream.
            0x95 => {
                self.u64()?;
            }
            b'.' => return self.pop().map(Some),
            b'(' => {
                if self.marks >= self.limits.marks {
                    return Err(err(PickleError::MarksLimit(self.limits.marks as u64)));
                }
                self.marks += 1;
                self.push(Slot::Mark)?;
            }
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let id = self.top()?;
                self.push(Slot::Val(id))?;
            }
            b'N' => self.push_node(Cell::None)?,
            // Protocols 0 and 1 (`torch.save(..., pickle_protocol=1)`):
            // numbers, strings, memo keys and persistent ids as text lines.
            b'I' => {
                let line = self.text_line()?;
                let node = match line {
                    b"00" => Cell::Bool(false),
                    b"01" => Cell::Bool(true),
                    _ => parse_decimal(line)?.map_or(Cell::BigInt, Cell::int),
                };
                self.push_node(node)?
            }
            b'L' => {
                let v = self.decimal()?;
                self.push_node(v.map_or(Cell::BigInt, Cell::int))?
            }
            b'F' => {
                let line = self.text_line()?;
                let v = std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| err(PickleError::FloatNotNumber))?;
                self.push_node(Cell::float(v))?
            }
            b'V' => {
                let s = self.unicode_line()?;
                let cell = self.str_cell(&s)?;
                self.budget.release(s.capacity());
                self.push_node(cell)?
            }
            b'P' => {
                let pid = self.text_persistent_id()?;
                self.push_node(Cell::Persistent(pid))?
            }
            b'p' => {
                let k = self.memo_key()?;
                self.memo_put(k)?
            }
            b'g' => {
                let k = self.memo_key()?;
                self.memo_get(k)?
            }
            0x88 => self.push_constant(TRUE, Cell::Bool(true))?,
            0x89 => self.push_constant(FALSE, Cell::Bool(false))?,
            b'J' => {
                let v = self.u32()? as i32;
                self.push_node(Cell::int(v.into()))?
            }
            b'K' => {
                let v = self.byte()?;
                self.push_constant(v.into(), Cell::int(v.into()))?
            }
            b'M' => {
                let v = self.u16()?;
                self.push_node(Cell::int(v.into()))?
            }
            0x8a => {
                let n = self.byte()?;
                self.long(n.into())?
            }
            0x8b => {
                let n = self.u32()? as i32;
                let n = u64::try_from(n).map_err(|_| err(PickleError::NegativeLong4))?;
                self.long(n)?
            }
            b'G' => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8"));
                self.push_node(Cell::float(v))?
            }
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => self.u32()?.into(),
                    0x8c => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let raw = self.sized(n)?;
                let s = std::str::from_utf8(raw).map_err(|_| err(PickleError::StrNotUtf8))?;
                let cell = self.str_cell(s)?;
                self.push_node(cell)?
            }
            // Protocol 2's byte strings (STRING family) decode as latin1
            // text here, as torch loads them with `encoding="latin1"`.
            b'T' | b'U' => {
                let n = if op == b'T' {
                    self.u32()?.into()
                } else {
                    self.byte()?.into()
                };
                let raw = self.sized(n)?;
                // As UTF-8, each byte at most two, for a moment.
                let copy = 2 * raw.len();
                self.budget.charge(copy, "strings and bytes")?;
                let s: String = raw.iter().map(|&b| b as char).collect();
                let cell = self.str_cell(&s)?;
                self.budget.release(copy);
                self.push_node(cell)?
            }
            b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    b'B' => self.u32()?.into(),
                    b'C' => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let b = self.sized(n)?;
                let cell = self.bytes_cell(b)?;
                self.push_node(cell)?
            }
            b']' => self.push_node(Cell::List(NO_SIDE))?,
            b'l' => {
                let items = self.pop_mark()?;
                let list = Cell::List(self.seq(items)?);
                self.push_node(list)?
            }
            // Tuples never change: one empty tuple serves them all.
            b')' => self.push_constant(EMPTY_TUPLE, Cell::Tuple(EMPTY))?,
            b't' => {
                let items = self.pop_mark()?;
                let tuple = self.tuple_cell(&items)?;
                self.budget.release(items.len() * ID);
                self.push_node(tuple)?
            }
            0x85 => self.tuple_of(1)?,
            0x86 => self.tuple_of(2)?,
            0x87 => self.tuple_of(3)?,
            b'}' => self.push_node(Cell::Dict(NO_SIDE))?,
            b'd' => {
                let items = self.pop_mark()?;
                let dict = self.alloc(Cell::Dict(NO_SIDE))?;
                self.set_items(dict, &items)?;
                self.budget.release(items.len() * ID);
                self.push(Slot::Val(dict))?;
            }
            0x8f => self.push_node(Cell::Set(NO_SIDE))?,
            0x91 => {
                let items = self.pop_mark()?;
                let set = Cell::Set(self.seq(items)?);
                self.push_node(set)?
            }
            0x90 => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.add_items(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b'a' => {
                let v = self.pop()?;
                let target = self.top()?;
                self.append(target, &[v])?
            }
            b'e' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?;
                self.set_items(target, &[k, v])?
            }
            b'u' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(&module, &name)?
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (self.out.get(module), self.out.get(name)) {
                    (Node::Str(m), Node::Str(n)) => {
                        let copy = m.len() + n.len();
                        self.budget.charge(copy, "global names")?;
                        let (m, n) = (m.to_string(), n.to_string());
                        self.global(&m, &n)?;
                        self.budget.release(copy);
                    }
                    _ => return Err(err(PickleError::StackGlobalArgs)),
                }
            }
            b'R' | 0x81 => self.reduce()?,
            b'b' => self.build()?,
            b'Q' => {
                let pid = self.pop()?;
                self.push_node(Cell::Persistent(pid))?
            }
            b'h' => {
                let k = self.byte()?;
                self.memo_get(k.into())?
            }
            b'j' => {
                let k = self.u32()?;
                self.memo_get(k)?
            }
            b'q' => {
                let k = self.byte()?;
                self.memo_put(k.into())?
            }
            b'r' => {
                let k = self.u32()?;
                self.memo_put(k)?
            }
            0x94 => {
                let k =
                    u32::try_from(self.memo.len()).map_err(|_| err(PickleError::MemoOverflow))?;
                self.memo_put(k)?
            }
            other => return Err(err(PickleError::UnknownOpcode(other))),
        }
        Ok(None)
    }
}
