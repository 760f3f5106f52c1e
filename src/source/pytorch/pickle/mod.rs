//! A restricted unpickler: reads the pickle opcodes that PyTorch checkpoints
//! use and builds values in our own model. It never calls anything.
//!
//! Python's `pickle` imports whatever a `GLOBAL` names and calls whatever a
//! `REDUCE` hands it, which is how a checkpoint runs `os.system`. Here a
//! global is looked up in an allow-list ([`Global`]) and anything else is
//! refused by name; `REDUCE` on an allowed global records the call as a
//! [`Node::Call`] (a few, like `OrderedDict()`, become the plain value they
//! would build). Nothing is imported, nothing is run.
//!
//! Sans-I/O: it reads a byte slice. Values live in an arena and refer to
//! each other by index, so memo references (`BINGET`) share instead of
//! copy (a memo bomb stays linear) and dropping deep nests needs no
//! recursion. Limits bound the arena, the memo, the stack and the bytes.
//!
//! Sharing keeps the arena linear, but a shared value can still be
//! *expanded*: copied by a constructor (`set(x)`, `bytearray(x)`,
//! `torch.Size(x)`, `_codecs.encode(x)`) or named once per path by the
//! walk that names tensors. Every byte built that way is charged to one
//! [`Budget`] per pickle, [`BUDGET_FACTOR`] times its size plus
//! [`BUDGET_FLOOR`]; a value used again costs what building it again costs,
//! so a DAG that expands to gigabytes is refused after a few MiB.
//!
//! The parts, each a file with its own module doc: `budget`, `globals`,
//! `arena`, `memo`, `machine`, and what each opcode does (`opcodes`,
//! `text`, `reduce`).
//!
//! A reader of another pickle than a checkpoint's reuses the machine with
//! its own [`Allow`] table ([`unpickle_with`]): a distributed checkpoint's
//! `.metadata` names `torch.distributed.checkpoint.metadata` dataclasses,
//! which it lists as [`Class`]es and reads as [`Node::Object`]s.

mod arena;
mod budget;
mod globals;
mod machine;
mod memo;
mod opcodes;
mod reduce;
#[cfg(test)]
mod tests;
mod text;

pub use arena::{Id, Node, Pickled};
// The whole surface is the `internals` feature's (tests, fuzz targets).
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use budget::{Budget, Limits, BUDGET_FACTOR, BUDGET_FLOOR};
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use globals::{Allow, Class, Global, MAX_CLASSES};
pub use machine::{unpickle, unpickle_with};

use crate::{Error, ErrorKind, PickleError};

fn err(e: PickleError) -> Error {
    Error::new(ErrorKind::Pickle(e))
}
