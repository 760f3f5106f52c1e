//! What calling an allowed global builds (`REDUCE`, `NEWOBJ`) and what
//! `BUILD` sets: nothing is called. The few constructors whose result is a
//! plain value (`OrderedDict()`, `set(x)`, `torch.Size(x)`, `bytearray(x)`,
//! `_codecs.encode(text, "latin1")`) build that value, each copy charged
//! to the budget; a tensor rebuild call is recorded as a call, an
//! instance of a table's class as an object, for the reader to interpret.

use super::arena::{Cell, Node, EMPTY, ID, NO_SIDE, NO_STATE};
use super::machine::{Machine, EMPTY_TUPLE};
use super::{err, Global};
use crate::{PickleError, Result};

/// `_codecs.encode(text, "latin1")`: protocol 2's spelling of bytes.
fn codecs_encode(text: Option<Node>, enc: Option<Node>) -> Result<Vec<u8>> {
    let (Some(Node::Str(text)), Some(Node::Str(enc))) = (text, enc) else {
        return Err(err(PickleError::CodecsArgs));
    };
    if enc != "latin1" && enc != "latin-1" {
        return Err(err(PickleError::CodecsEncoding(enc.into())));
    }
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| err(PickleError::NotLatin1)))
        .collect()
}

impl Machine<'_> {
    /// `REDUCE` / `NEWOBJ`: records the call; builds the few plain values
    /// whose constructors we know.
    pub(super) fn reduce(&mut self) -> Result<()> {
        let args = self.pop()?;
        let func = self.pop()?;
        let Node::Global(g) = self.out.get(func) else {
            let kind = self.kind_of(func);
            return Err(err(PickleError::ReduceNotGlobal(kind)));
        };
        let Node::Tuple(arg_ids) = self.out.get(args) else {
            return Err(err(PickleError::ReduceArgs));
        };
        let first = arg_ids.first().map(|&a| self.out.get(a));
        // Constructors that copy their argument: each copy is charged, so
        // one shared list copied a thousand times costs a thousand lists
        // (a set keeps its copy; the others' are given back once stored,
        // in pools charged as they grow).
        let copied = match (g, first) {
            (Global::Set | Global::Size, Some(Node::List(v) | Node::Tuple(v) | Node::Set(v))) => {
                v.len().saturating_mul(ID)
            }
            (Global::ByteArray, Some(Node::Bytes(b))) => b.len(),
            (Global::CodecsEncode, Some(Node::Str(t))) => t.len(),
            _ => 0,
        };
        self.budget.charge(copied, "copies made by constructors")?;
        let node = match (g, first) {
            (Global::OrderedDict, None) => Cell::Dict(NO_SIDE),
            (Global::Set, None) => Cell::Set(NO_SIDE),
            (Global::Set, Some(Node::List(v) | Node::Tuple(v) | Node::Set(v))) => {
                let items = v.to_vec();
                Cell::Set(self.seq(items)?)
            }
            (Global::Set, Some(_)) => return Err(err(PickleError::SetArg)),
            (Global::Size, None) => return self.push_constant(EMPTY_TUPLE, Cell::Tuple(EMPTY)),
            (Global::Size, Some(Node::Tuple(v) | Node::List(v))) => {
                // Copied out first: the pool it is read from is the one written.
                let items = v.to_vec();
                self.tuple_cell(&items)?
            }
            (Global::Size, Some(_)) => return Err(err(PickleError::SizeArg)),
            (Global::CodecsEncode, _) => {
                let second = arg_ids.get(1).map(|&a| self.out.get(a));
                let b = codecs_encode(first, second)?;
                self.bytes_cell(&b)?
            }
            (Global::ByteArray, None) => Cell::Bytes(EMPTY),
            (Global::ByteArray, Some(Node::Bytes(b))) => {
                let copy = b.to_vec();
                self.bytes_cell(&copy)?
            }
            (Global::ByteArray, Some(_)) => return Err(err(PickleError::ByteArrayArg)),
            (Global::Dtype(_) | Global::Layout(_) | Global::Storage(_), _) => {
                return Err(err(PickleError::NotCallable(format!("{g:?}"))))
            }
            _ => Cell::Call {
                func: self.code(g),
                args,
                state: NO_STATE,
            },
        };
        if g != Global::Set {
            self.budget.release(copied);
        }
        self.push_node(node)
    }

    pub(super) fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let target = self.top()?;
        let kind = self.kind_of(target);
        match self.out.cells.get_mut(target) {
            // An OrderedDict's instance attributes (`_metadata`): not items.
            Some(Cell::Dict(_)) => Ok(()),
            Some(Cell::Call { state: s, .. }) => {
                *s = state;
                Ok(())
            }
            _ => Err(err(PickleError::BuildOn(kind))),
        }
    }
}
