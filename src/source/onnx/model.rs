//! The walk of a `ModelProto` down to its initializers: `graph` (field 7)
//! -> `initializer` (field 5) -> each `TensorProto`'s name, type, dims and
//! where its data is. Every other field (the graph's nodes, inputs,
//! outputs, functions, training info) is stepped over by its length,
//! never read. The walk has a fixed depth (model, graph, tensor, external
//! data entry): nothing in the file can make it recurse.
//!
//! Protobuf's merge rules are kept: a repeated `graph` field merges (its
//! initializers are all read), a repeated scalar field's last value wins,
//! repeated `dims` concatenate, packed or not.

use std::collections::HashSet;
use std::fs::File;

use super::external::{number, ExternalFiles};
use super::types::{onnx_type, OnnxType, Storage};
use super::wire::{bad, count_packed_varints, next_field, small_string, Field, Value};
use crate::error::onnx::OnnxError;
use crate::header::TensorMeta;
use crate::source::cursor::FileCursor;
use crate::source::span::first_overlap;
use crate::{Error, Result};

/// The longest initializer name read.
const NAME_LIMIT: u64 = 1 << 16;
/// The longest `external_data` key or value read (a path's length).
const ENTRY_LIMIT: u64 = 4096;
/// numpy's limit on dimensions.
const MAX_DIMS: usize = 64;
/// What one initializer's listing costs beyond its name and dims.
const PER_TENSOR: u64 = 160;

/// Where an initializer's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// `len` bytes at `offset` of a file: 0 is the model, `i + 1` the
    /// external file `i`. The bytes are the tensor's, little-endian.
    Span { file: usize, offset: u64, len: u64 },
    /// A typed field of the `TensorProto` at `[start, end)` of the model:
    /// `values` values of `storage`, each written as `width` bytes.
    Typed {
        storage: Storage,
        width: usize,
        start: u64,
        end: u64,
        values: u64,
    },
}

/// One initializer: its listing and its data.
#[derive(Debug, Clone)]
pub(crate) struct Initializer {
    pub(crate) meta: TensorMeta,
    pub(crate) data: Data,
}

/// What the walk found.
#[derive(Debug)]
pub(crate) struct Model {
    pub(crate) initializers: Vec<Initializer>,
    pub(crate) externals: ExternalFiles,
    /// Sparse initializers, which are not read.
    pub(crate) sparse: u64,
}

/// Walks the model in `file`, `len` bytes long, whose external data is
/// looked for beside `externals`' model path.
pub(crate) fn read_model(file: &File, len: u64, externals: ExternalFiles) -> Result<Model> {
    let mut walk = Walk {
        c: FileCursor::new(file, 0, len),
        externals,
        names: HashSet::new(),
        out: Vec::new(),
        sparse: 0,
        charged: 0,
        metadata: 0,
    };
    while let Some(f) = next_field(&mut walk.c, len)? {
        if f.number == 7 {
            let Value::Bytes { start, len } = f.value else {
                return Err(f.wrong_type("ModelProto.graph"));
            };
            walk.graph(start, start + len)?;
        }
    }
    check_external_overlaps(&walk.out)?;
    Ok(Model {
        initializers: walk.out,
        externals: walk.externals,
        sparse: walk.sparse,
    })
}

/// Refuses two initializers whose external data shares bytes (their data
/// in the model itself lies in fields of their own: it cannot).
fn check_external_overlaps(initializers: &[Initializer]) -> Result<()> {
    let spans = initializers
        .iter()
        .enumerate()
        .filter_map(|(k, init)| match init.data {
            Data::Span { file, offset, len } if file > 0 => Some((file, offset, offset + len, k)),
            _ => None,
        })
        .collect();
    match first_overlap(spans) {
        None => Ok(()),
        Some((a, b, _)) => {
            let name = |k: usize| initializers[k].meta.name.clone();
            let e = OnnxError::Overlap(name(a), name(b));
            Err(Error::new(e).with_tensor(name(b)))
        }
    }
}

struct Walk<'f> {
    c: FileCursor<&'f File>,
    externals: ExternalFiles,
    names: HashSet<String>,
    out: Vec<Initializer>,
    sparse: u64,
    /// Bytes the listing holds, and the initializers' bytes other than
    /// their data: the README's bound on what a header may hold.
    charged: u64,
    metadata: u64,
}

/// A `TensorProto`'s fields as the walk gathers them.
#[derive(Default)]
struct Fields {
    name: Option<String>,
    data_type: i64,
    dims: Vec<u64>,
    raw: Option<(u64, u64)>,
    /// Values of the type's own typed field.
    typed_values: u64,
    external: bool,
    location: Option<String>,
    offset: Option<u64>,
    length: Option<u64>,
}

impl Walk<'_> {
    fn graph(&mut self, start: u64, end: u64) -> Result<()> {
        self.c.seek(start);
        while let Some(f) = next_field(&mut self.c, end)? {
            match (f.number, f.value) {
                (5, Value::Bytes { start, len }) => {
                    let back = self.c.position();
                    self.tensor(start, start + len)?;
                    self.c.seek(back);
                }
                (5, _) => return Err(f.wrong_type("GraphProto.initializer")),
                (15, _) => self.sparse += 1,
                _ => {}
            }
        }
        Ok(())
    }

    fn tensor(&mut self, start: u64, end: u64) -> Result<()> {
        let fields = self.tensor_fields(start, end)?;
        let name = fields
            .name
            .clone()
            .ok_or_else(|| bad(OnnxError::NoName, start))?;
        let named = |e: Error| e.with_tensor(&name);
        let init = self.resolve(fields, start, end).map_err(named)?;
        let cost = PER_TENSOR + name.len() as u64 * 2 + 8 * init.meta.shape.len() as u64;
        self.charged = self.charged.saturating_add(cost);
        let data_bytes = match init.data {
            Data::Span { file: 0, len, .. } => len,
            Data::Typed { .. } => 0,
            Data::Span { .. } => 0,
        };
        self.metadata += (end - start).saturating_sub(data_bytes);
        crate::header::within_memory_bound(self.charged, self.metadata)
            .map_err(|e| Error::new(e).at_offset(start))?;
        if !self.names.insert(name.clone()) {
            return Err(bad(OnnxError::DuplicateTensor(name), start));
        }
        self.out.push(init);
        Ok(())
    }

    /// Reads a `TensorProto`'s fields, its data stepped over.
    fn tensor_fields(&mut self, start: u64, end: u64) -> Result<Fields> {
        let mut t = Fields::default();
        self.c.seek(start);
        while let Some(f) = next_field(&mut self.c, end)? {
            match (f.number, f.value) {
                (1, Value::Varint(d)) => self.push_dim(&mut t.dims, d, f.at)?,
                (1, Value::Bytes { start, len }) => self.packed_dims(&mut t.dims, start, len)?,
                (1, _) => return Err(f.wrong_type("TensorProto.dims")),
                (2, Value::Varint(v)) => t.data_type = v as i64,
                (2, _) => return Err(f.wrong_type("TensorProto.data_type")),
                (3, _) => return Err(bad(OnnxError::Segment, f.at)),
                (8, Value::Bytes { start, len }) => {
                    let back = self.c.position();
                    t.name = Some(small_string(&mut self.c, start, len, NAME_LIMIT, "a name")?);
                    self.c.seek(back);
                }
                (8, _) => return Err(f.wrong_type("TensorProto.name")),
                (9, Value::Bytes { start, len }) => t.raw = Some((start, len)),
                (9, _) => return Err(f.wrong_type("TensorProto.raw_data")),
                (13, Value::Bytes { start, len }) => {
                    let back = self.c.position();
                    self.entry(&mut t, start, start + len)?;
                    self.c.seek(back);
                }
                (13, _) => return Err(f.wrong_type("TensorProto.external_data")),
                (14, Value::Varint(v)) => t.external = v == 1,
                (14, _) => return Err(f.wrong_type("TensorProto.data_location")),
                _ => {}
            }
        }
        // The typed field is known once the type is (it may come last):
        // a second walk counts its values (beside raw or external data
        // too: data in two places is refused).
        if let Ok(ty) = onnx_type(t.data_type) {
            self.c.seek(start);
            while let Some(f) = next_field(&mut self.c, end)? {
                if f.number == ty.storage.field() {
                    let back = self.c.position();
                    t.typed_values += self.count_values(ty.storage, &f)?;
                    self.c.seek(back);
                }
            }
        }
        Ok(t)
    }

    fn push_dim(&self, dims: &mut Vec<u64>, d: u64, at: u64) -> Result<()> {
        if (d as i64) < 0 {
            return Err(bad(OnnxError::NegativeDim(d as i64), at));
        }
        if dims.len() == MAX_DIMS {
            return Err(bad(OnnxError::TooManyDims, at));
        }
        dims.push(d);
        Ok(())
    }

    fn packed_dims(&mut self, dims: &mut Vec<u64>, start: u64, len: u64) -> Result<()> {
        let back = self.c.position();
        self.c.seek(start);
        while self.c.position() < start + len {
            let at = self.c.position();
            let d = super::wire::varint(&mut self.c, start + len, "packed dims")?;
            self.push_dim(dims, d, at)?;
        }
        self.c.seek(back);
        Ok(())
    }

    /// The values in one occurrence of a typed field.
    fn count_values(&mut self, storage: Storage, f: &Field) -> Result<u64> {
        match (f.value, storage.fixed()) {
            (Value::Bytes { len, .. }, Some(w)) => {
                if len % w as u64 != 0 {
                    let e = OnnxError::PackedWidth {
                        field: storage.name(),
                        len,
                        width: w as u64,
                    };
                    return Err(bad(e, f.at));
                }
                Ok(len / w as u64)
            }
            (Value::Bytes { start, len }, None) => {
                count_packed_varints(&mut self.c, start, len, storage.name())
            }
            (v, _) if v.wire() == storage.wire() => Ok(1),
            _ => Err(f.wrong_type(storage.name())),
        }
    }

    /// One `StringStringEntryProto` of `external_data`.
    fn entry(&mut self, t: &mut Fields, start: u64, end: u64) -> Result<()> {
        self.c.seek(start);
        let (mut key, mut value) = (None, None);
        while let Some(f) = next_field(&mut self.c, end)? {
            let Value::Bytes { start, len } = f.value else {
                continue;
            };
            let back = self.c.position();
            let s = small_string(
                &mut self.c,
                start,
                len,
                ENTRY_LIMIT,
                "an external_data entry",
            )?;
            self.c.seek(back);
            match f.number {
                1 => key = Some(s),
                2 => value = Some(s),
                _ => {}
            }
        }
        let value = value.unwrap_or_default();
        let parsed = |k: &str| number(k, &value).map_err(|e| bad(e, start));
        match key.as_deref() {
            Some("location") => t.location = Some(value.clone()),
            Some("offset") => t.offset = Some(parsed("offset")?),
            Some("length") => t.length = Some(parsed("length")?),
            // checksum and basepath are not needed; onnx ignores unknown keys.
            _ => {}
        }
        Ok(())
    }

    /// The initializer the fields describe, its data located and checked.
    fn resolve(&mut self, t: Fields, start: u64, end: u64) -> Result<Initializer> {
        let ty: OnnxType = onnx_type(t.data_type).map_err(|e| bad(e, start))?;
        let name = t.name.clone().unwrap_or_default();
        let meta = TensorMeta::new(name, ty.dtype, t.dims.clone());
        let expected = meta.byte_len()?;
        let elements = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if let Some((a, b)) = two_data_fields(&t, ty.storage.name()) {
            return Err(bad(OnnxError::TwoDataFields(a, b), start));
        }
        let data = if t.external {
            self.external(&t, expected, start)?
        } else if let Some((offset, len)) = t.raw {
            if len != expected {
                let e = OnnxError::DataLength {
                    what: "raw_data",
                    expected,
                    actual: len,
                };
                return Err(bad(e, offset));
            }
            Data::Span {
                file: 0,
                offset,
                len,
            }
        } else if t.typed_values > 0 || expected > 0 {
            let want = elements.and_then(|n| n.checked_mul(ty.per_element));
            if t.typed_values == 0 {
                let e = OnnxError::NoData {
                    elements: elements.unwrap_or(u64::MAX),
                    field: ty.storage.name(),
                };
                return Err(bad(e, start));
            }
            if want != Some(t.typed_values) {
                let e = OnnxError::ElementCount {
                    field: ty.storage.name(),
                    expected: want.unwrap_or(u64::MAX),
                    actual: t.typed_values,
                };
                return Err(bad(e, start));
            }
            let width = (expected / t.typed_values) as usize;
            Data::Typed {
                storage: ty.storage,
                width,
                start,
                end,
                values: t.typed_values,
            }
        } else {
            Data::Span {
                file: 0,
                offset: 0,
                len: 0,
            }
        };
        Ok(Initializer { meta, data })
    }

    fn external(&mut self, t: &Fields, expected: u64, at: u64) -> Result<Data> {
        let refused = |why: &str| bad(OnnxError::External(why.to_string()), at);
        let location = t
            .location
            .as_deref()
            .ok_or_else(|| refused("no location"))?;
        let i = self.externals.open(location).map_err(|e| bad(e, at))?;
        let file_len = self.externals.files[i].len;
        let offset = t.offset.unwrap_or(0);
        if offset > file_len {
            return Err(refused(&format!(
                "offset {offset} is past the end of {location:?} ({file_len} bytes)"
            )));
        }
        let len = t.length.unwrap_or(file_len - offset);
        if len > file_len - offset {
            return Err(refused(&format!(
                "length {len} at offset {offset} runs past the end of {location:?} ({file_len} bytes)"
            )));
        }
        if len != expected {
            let e = OnnxError::DataLength {
                what: "external data",
                expected,
                actual: len,
            };
            return Err(bad(e, at));
        }
        Ok(Data::Span {
            file: i + 1,
            offset,
            len,
        })
    }
}

/// The first two of the places a tensor's data is given in, if it is given
/// in two (`typed`: the name of the type's own typed field). An empty
/// `raw_data` gives none.
fn two_data_fields(t: &Fields, typed: &'static str) -> Option<(&'static str, &'static str)> {
    let given = [
        t.external.then_some("external data"),
        t.raw.filter(|&(_, len)| len > 0).map(|_| "raw_data"),
        (t.typed_values > 0).then_some(typed),
    ];
    let mut given = given.into_iter().flatten();
    given.next().zip(given.next())
}
