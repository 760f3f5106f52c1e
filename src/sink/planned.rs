//! The plan as the sink checks it: each tensor's name and byte length, in
//! offset order. The names share one string: a million tensors cost two
//! allocations, not a million name copies (and none per tensor written).

use std::ops::Range;

use crate::header::Header;

/// Names and lengths of a header's tensors, in offset order.
#[derive(Debug, Default)]
pub(crate) struct Planned {
    /// Every name, back to back.
    names: String,
    /// Per tensor: where its name ends in `names`, and its byte length.
    tensors: Vec<(usize, u64)>,
}

impl Planned {
    /// The tensors of `header`.
    pub(crate) fn of(header: &Header) -> Self {
        let names_len = header.tensors.iter().map(|t| t.meta.name.len()).sum();
        let mut planned = Planned {
            names: String::with_capacity(names_len),
            tensors: Vec::with_capacity(header.tensors.len()),
        };
        for t in &header.tensors {
            planned.names.push_str(&t.meta.name);
            planned.tensors.push((planned.names.len(), t.len()));
        }
        planned
    }

    /// How many tensors.
    pub(crate) fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Tensor `k`'s name.
    pub(crate) fn name(&self, k: usize) -> Option<&str> {
        let end = self.tensors.get(k)?.0;
        let start = k.checked_sub(1).map_or(0, |p| self.tensors[p].0);
        // Both ends were recorded after whole names: char boundaries.
        Some(&self.names[start..end])
    }

    /// Tensor `k`'s byte length.
    pub(crate) fn byte_len(&self, k: usize) -> Option<u64> {
        self.tensors.get(k).map(|&(_, len)| len)
    }

    /// The byte lengths of tensors `range` added up, if they are all planned.
    pub(crate) fn total(&self, range: Range<usize>) -> Option<u64> {
        let lens = self.tensors.get(range)?;
        Some(lens.iter().map(|&(_, len)| len).sum())
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
        let p = Planned::of(enc.header());
        assert_eq!(p.len(), 3);
        let names: Vec<_> = (0..3).map(|k| p.name(k).unwrap()).collect();
        assert_eq!(names, ["é.a", "", "b"]);
        assert_eq!(p.byte_len(0), Some(16));
        assert_eq!(p.total(0..3), Some(19));
        assert_eq!(p.name(3), None);
        assert_eq!(p.total(2..4), None);
    }
}
