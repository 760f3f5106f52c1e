//! A hook between the phases of opening a large input, which the caller
//! answers: a parser never calls an allocator itself.

use std::fmt;

/// Called by a source between the phases of opening a large input, once a
/// phase has freed much memory the next does not reuse (a pickle's bytes
/// before its values are built, its values before its tensors are
/// checked), and by `convert::convert_sources` between planning a large
/// input and writing it. The `convert` binary answers with its allocator's
/// collect (mimalloc keeps freed pages a while, so each phase's peak would
/// add the last's); a library user may pass its own allocator's, or nothing
/// (the default: nothing is called).
///
/// ```
/// use safetensors_stream::source::{FreedMemoryHook, SourceOptions};
///
/// fn hand_back() { /* e.g. the allocator's collect or trim */ }
/// let options = SourceOptions::default().freed_memory(FreedMemoryHook::new(hand_back));
/// // A hook changes nothing about what is read.
/// assert_eq!(options, SourceOptions::default());
/// ```
#[derive(Clone, Copy, Default)]
pub struct FreedMemoryHook(Option<fn()>);

impl FreedMemoryHook {
    /// No hook: nothing is called (the default).
    pub const NONE: FreedMemoryHook = FreedMemoryHook(None);

    /// A hook calling `hand_back`, from the thread that opens the input.
    pub const fn new(hand_back: fn()) -> FreedMemoryHook {
        FreedMemoryHook(Some(hand_back))
    }

    /// Tells the caller a phase freed much memory.
    pub(crate) fn call(self) {
        if let Some(hand_back) = self.0 {
            hand_back()
        }
    }

    /// Tells the caller a phase over `tensors` tensors (opening their
    /// headers, planning them) freed memory, when there are enough for it
    /// to be worth handing back: [`LARGE_PHASE`](Self::LARGE_PHASE) or more.
    /// For a few tensors a hand-back only costs: the pages it returns are
    /// soon faulted in again.
    ///
    /// ```
    /// use safetensors_stream::source::FreedMemoryHook;
    ///
    /// FreedMemoryHook::new(|| println!("handed back")).after_phase(1_000_000);
    /// FreedMemoryHook::new(|| unreachable!()).after_phase(10);
    /// ```
    pub fn after_phase(self, tensors: usize) {
        if tensors >= Self::LARGE_PHASE {
            self.call()
        }
    }

    /// Tensors from which a phase frees tens of MB ([`Self::after_phase`]):
    /// a header of a million tensors is 72 MB of text, and planning
    /// allocates as much again.
    pub const LARGE_PHASE: usize = 100_000;
}

impl fmt::Debug for FreedMemoryHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = if self.0.is_some() { "set" } else { "none" };
        write!(f, "FreedMemoryHook({set})")
    }
}

/// Every hook is equal: options that differ only in it read the same.
impl PartialEq for FreedMemoryHook {
    fn eq(&self, _: &FreedMemoryHook) -> bool {
        true
    }
}

impl Eq for FreedMemoryHook {}
