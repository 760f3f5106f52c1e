//! The plan as the sink checks it: each tensor's name and byte length, in
//! offset order, read from the header the plan already holds (shared, not
//! copied: a million tensors would otherwise cost a second list).

use std::ops::Range;
use std::sync::Arc;

use crate::header::{Header, TensorEntry};

/// Names and lengths of a header's tensors, in offset order.
#[derive(Debug)]
pub(crate) struct Planned {
    header: Arc<Header>,
}

impl Planned {
    /// The tensors of `header`.
    pub(crate) fn of(header: Arc<Header>) -> Self {
        Planned { header }
    }

    fn tensors(&self) -> &[TensorEntry] {
        &self.header.tensors
    }

    /// How many tensors.
    pub(crate) fn len(&self) -> usize {
        self.tensors().len()
    }

    /// Tensor `k`'s name.
    pub(crate) fn name(&self, k: usize) -> Option<&str> {
        Some(&self.tensors().get(k)?.meta.name)
    }

    /// Tensor `k`'s byte length.
    pub(crate) fn byte_len(&self, k: usize) -> Option<u64> {
        self.tensors().get(k).map(|t| t.len())
    }

    /// The byte lengths of tensors `range` added up, if they are all planned.
    pub(crate) fn total(&self, range: Range<usize>) -> Option<u64> {
        let lens = self.tensors().get(range)?;
        // Laid out back to back: from the first's start to the last's end.
        Some(lens.last().map_or(0, |l| l.end - lens[0].begin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{encode, Order, TensorMeta};
    use crate::Dtype;

    #[test]
    fn names_and_lengths_in_offset_order() {
        let metas = vec![
            TensorMeta::new("b", Dtype::U8, [3]),
            TensorMeta::new("é.a", Dtype::F64, [2]),
            TensorMeta::new("", Dtype::U8, [0]),
        ];
        let enc = encode(metas, None, Order::Canonical).unwrap();
        let p = Planned::of(enc.shared());
        assert_eq!(p.len(), 3);
        let names: Vec<_> = (0..3).map(|k| p.name(k).unwrap()).collect();
        assert_eq!(names, ["é.a", "", "b"]);
        assert_eq!(p.byte_len(0), Some(16));
        assert_eq!(p.total(0..3), Some(19));
        assert_eq!(p.name(3), None);
        assert_eq!(p.total(2..4), None);
    }
}
