//! The writer's bookkeeping, free of I/O: the planned header, which tensor
//! is being written, and how many of its bytes have come. Shared by the
//! blocking and the async writer.

use crate::header::{encode, EncodedHeader, Header, TensorEntry, TensorMeta};
use crate::sink::elements::Elements;
use crate::transform::Transform;
use crate::{Error, ErrorKind, Result};

use super::WriterOptions;

#[derive(Debug)]
pub(super) struct WriterState {
    header: EncodedHeader,
    /// The tensor being written (index in file order).
    next: usize,
    /// Its byte count; `None` once every tensor is done.
    current: Option<Elements>,
    written: u64,
    /// The output, for messages.
    output: Option<String>,
}

impl WriterState {
    /// Plans the header for `tensors`.
    pub(super) fn plan(
        tensors: impl IntoIterator<Item = TensorMeta>,
        options: &WriterOptions,
    ) -> Result<Self> {
        let tensors: Vec<TensorMeta> = tensors.into_iter().collect();
        let header = encode(tensors, options.metadata.clone(), options.order)?;
        let written = header.bytes().len() as u64;
        let current = header.header.tensors.first().map(elements_for);
        Ok(WriterState {
            header,
            next: 0,
            current,
            written,
            output: None,
        })
    }

    /// Names the output in errors about writing.
    pub(super) fn name_output(&mut self, name: impl std::fmt::Display) {
        self.output = Some(name.to_string());
    }

    pub(super) fn header_bytes(&self) -> &[u8] {
        self.header.bytes()
    }

    pub(super) fn header(&self) -> &Header {
        &self.header.header
    }

    pub(super) fn order(&self) -> impl Iterator<Item = &str> + '_ {
        self.header().tensors.iter().map(|t| t.meta.name.as_str())
    }

    pub(super) fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.header().get(name)
    }

    pub(super) fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Counts `len` bytes for tensor `name`, moving on to it if the tensor
    /// being written is complete. Nothing is counted on error.
    pub(super) fn accept(&mut self, name: &str, len: usize) -> Result<()> {
        loop {
            let Some(current) = &mut self.current else {
                return Err(self.misplaced(name, None));
            };
            if self.header.header.tensors[self.next].meta.name == name {
                // `pass` counts nothing when it refuses.
                if let Err(e) = current.pass(len) {
                    return Err(e.with_tensor(name).with_output(self.output_name()));
                }
                self.written += len as u64;
                return Ok(());
            }
            if current.left() > 0 {
                return Err(self.misplaced(name, Some(self.next)));
            }
            self.advance();
        }
    }

    /// Moves past the complete tensor being written.
    fn advance(&mut self) {
        self.next += 1;
        self.current = self
            .header
            .header()
            .tensors
            .get(self.next)
            .map(elements_for);
    }

    /// The error for bytes of `name` arriving while tensor `pending` (if
    /// any) still wants bytes, or after the last tensor.
    fn misplaced(&self, name: &str, pending: Option<usize>) -> Error {
        let tensors = &self.header.header.tensors;
        let kind = match tensors.iter().position(|t| t.meta.name == name) {
            None => ErrorKind::TensorNotFound(name.to_string()),
            Some(_) => ErrorKind::WriteOrder {
                tensor: name.to_string(),
                expected: pending.map(|k| {
                    let left = self.current.as_ref().map_or(0, Elements::left);
                    (tensors[k].meta.name.clone(), left)
                }),
            },
        };
        Error::new(kind).with_output(self.output_name())
    }

    /// Checks every tensor got all its bytes (tensors of 0 bytes need none).
    pub(super) fn finish(&mut self) -> Result<()> {
        while self.current.as_ref().is_some_and(|c| c.left() == 0) {
            self.advance();
        }
        let Some(current) = &self.current else {
            return Ok(());
        };
        let missing = self.header.header.tensors.len() - self.next;
        let name = &self.header.header.tensors[self.next].meta.name;
        let e = match current.left() < current.in_len() {
            true => current.too_short(),
            false => Error::new(ErrorKind::Unfinished { missing }),
        };
        Err(e.with_tensor(name.clone()).with_output(self.output_name()))
    }

    /// An error writing to the output, naming it.
    pub(super) fn write_error(&self, e: std::io::Error) -> Error {
        Error::io(e).with_output(self.output_name())
    }

    fn output_name(&self) -> &str {
        self.output.as_deref().unwrap_or("output")
    }
}

fn elements_for(t: &TensorEntry) -> Elements {
    Elements::new(t.len(), Transform::Identity, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;

    fn state(tensors: &[(&str, u64)]) -> WriterState {
        let metas = tensors
            .iter()
            .map(|(n, len)| TensorMeta::new(*n, Dtype::U8, [*len]));
        let options = WriterOptions::default().order(crate::header::Order::AsGiven);
        WriterState::plan(metas, &options).unwrap()
    }

    #[test]
    fn moves_on_only_when_a_tensor_is_complete() {
        let mut s = state(&[("a", 3), ("empty", 0), ("b", 2)]);
        s.accept("a", 2).unwrap();
        let e = s.accept("b", 1).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::WriteOrder { tensor, expected: Some((a, 1)) } if tensor == "b" && a == "a"
        ));
        s.accept("a", 1).unwrap();
        // "empty" needs no bytes: "b" may follow "a" directly.
        s.accept("b", 2).unwrap();
        s.finish().unwrap();
        assert_eq!(s.bytes_written(), s.header().file_len());
    }

    #[test]
    fn refuses_unknown_names_excess_bytes_and_going_back() {
        let mut s = state(&[("a", 1), ("b", 1)]);
        assert!(matches!(
            s.accept("zz", 1).unwrap_err().kind(),
            ErrorKind::TensorNotFound(_)
        ));
        assert!(matches!(
            s.accept("a", 2).unwrap_err().kind(),
            ErrorKind::TensorTooLong { expected: 1 }
        ));
        s.accept("a", 1).unwrap();
        s.accept("b", 1).unwrap();
        assert!(matches!(
            s.accept("a", 1).unwrap_err().kind(),
            ErrorKind::WriteOrder { expected: None, .. }
        ));
    }

    #[test]
    fn finish_names_the_first_incomplete_tensor() {
        let mut s = state(&[("a", 2), ("b", 2)]);
        s.accept("a", 1).unwrap();
        let e = s.finish().unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::TensorTooShort {
                expected: 2,
                actual: 1
            }
        ));
        assert_eq!(e.tensor(), Some("a"));
        s.accept("a", 1).unwrap();
        let e = s.finish().unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Unfinished { missing: 1 }));
        assert_eq!(e.tensor(), Some("b"));
    }
}
