//! The header's JSON, read with serde visitors so that duplicate keys are
//! seen while parsing (a map would silently keep the last one).
//!
//! One parser serves both modes; [`Rules`] decides which of the reference's
//! leniencies apply. Errors with structure (a duplicate key, an unknown
//! field) are stashed beside the parser and returned instead of serde's
//! string error.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::names::NameIndex;
use super::{within_memory_bound, Metadata, Mode, Rules, TensorMeta};
use crate::{Dtype, HeaderError, JsonError};

/// A tensor as written in the JSON: meta and raw offsets, not yet checked.
#[derive(Debug)]
pub(super) struct RawTensor {
    pub meta: TensorMeta,
    pub begin: u64,
    pub end: u64,
}

/// The JSON's content in document order (last one kept for a repeated name,
/// where the rules allow repeats).
#[derive(Debug, Default)]
pub(super) struct RawHeader {
    pub metadata: Option<Metadata>,
    pub tensors: Vec<RawTensor>,
}

/// Parses the header text. On failure returns the structured kind, and the
/// byte position in `text` when serde knows it.
pub(super) fn parse_json(
    text: &str,
    rules: Rules,
) -> Result<RawHeader, (HeaderError, Option<u64>)> {
    let stash = RefCell::new(None);
    let budget = Budget::for_header(text.len());
    let seed = HeaderSeed {
        rules,
        stash: &stash,
        budget: &budget,
        // The smallest entry, `"":{"dtype":"U8","shape":[],"data_offsets":[0,0]}`,
        // is 48 bytes: a capacity that the text itself bounds.
        capacity: text.len() / 48,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let json_error = |e: serde_json::Error, stash: Option<HeaderError>| match stash {
        Some(kind) => (kind, None),
        None => {
            let pos = byte_position(text, e.line(), e.column());
            (HeaderError::HeaderJson(JsonError::without_position(e)), pos)
        }
    };
    let header = seed
        .deserialize(&mut de)
        .map_err(|e| json_error(e, stash.take()))?;
    if let Err(e) = de.end() {
        // The object is whole, so what follows it is padding: in strict
        // mode, name that rule rather than serde's "trailing characters".
        if rules.mode == Mode::Strict {
            if let Some(found) = padding_error(text, &e) {
                return Err(found);
            }
        }
        return Err(json_error(e, None));
    }
    Ok(header)
}

/// The first byte after the object that is not a space, given serde_json's
/// error at the first byte that is not JSON whitespace.
fn padding_error(text: &str, e: &serde_json::Error) -> Option<(HeaderError, Option<u64>)> {
    let at = byte_position(text, e.line(), e.column())? as usize;
    let bytes = text.as_bytes().get(..=at)?;
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let body_end = bytes[..at].iter().rposition(|b| !is_ws(b))? + 1;
    let first = body_end + bytes[body_end..].iter().position(|&b| b != b' ')?;
    Some((HeaderError::BadPadding(bytes[first]), Some(first as u64)))
}

/// serde_json reports 1-based line and byte column; turn them into an offset.
fn byte_position(text: &str, line: usize, column: usize) -> Option<u64> {
    if line == 0 {
        return None;
    }
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    Some((line_start + column.saturating_sub(1)) as u64)
}

type Stash<'a> = &'a RefCell<Option<HeaderError>>;

/// What the parsed header holds, its text included, charged as entries
/// are read (before what they cost has grown past it) against
/// [`within_memory_bound`] for the text's length.
struct Budget {
    charged: std::cell::Cell<u64>,
    read: u64,
}

impl Budget {
    /// The budget of a header of `text_len` bytes, the text charged.
    fn for_header(text_len: usize) -> Budget {
        Budget {
            charged: std::cell::Cell::new(text_len as u64),
            read: text_len as u64,
        }
    }

    /// Charges `bytes` more, or refuses the header.
    fn charge(&self, bytes: usize) -> Result<(), HeaderError> {
        let charged = self.charged.get().saturating_add(bytes as u64);
        within_memory_bound(charged, self.read)?;
        self.charged.set(charged);
        Ok(())
    }

    /// [`charge`](Self::charge) inside a serde visitor.
    fn take<E: de::Error>(&self, stash: Stash<'_>, bytes: usize) -> Result<(), E> {
        self.charge(bytes).map_err(|kind| fail(stash, kind))
    }
}

/// What one metadata entry costs beyond its text: two `String`s and its
/// share of the map's nodes and of the allocator's blocks, here and again
/// in the output's header, which keeps the input's metadata (measured:
/// about 200 bytes each, 340 with the copy).
const METADATA_ENTRY: usize = 448;

/// What one tensor takes in the lists the header builds: its entry and
/// its name's slot in the index.
const TENSOR_SLOT: usize = std::mem::size_of::<RawTensor>() + NameIndex::SLOT;

fn fail<E: de::Error>(stash: Stash<'_>, kind: HeaderError) -> E {
    let msg = kind.to_string();
    *stash.borrow_mut() = Some(kind);
    E::custom(msg)
}

struct HeaderSeed<'a> {
    rules: Rules,
    stash: Stash<'a>,
    budget: &'a Budget,
    capacity: usize,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = RawHeader;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawHeader, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensors")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
        let mut out = RawHeader {
            metadata: None,
            tensors: Vec::new(),
        };
        let mut seen_metadata = false;
        // Indices into out.tensors, hashed by name: no second copy of a name.
        let mut index = NameIndex::with_capacity(0);
        // Room for the tensors is reserved at the first one, less what the
        // metadata before it took: a header that is one 90 MB metadata
        // string reserves nothing for tensors it cannot hold.
        let mut reserved = false;
        let mut metadata_bytes = 0usize;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if seen_metadata {
                    // The reference refuses this too (serde: duplicate field).
                    return Err(fail(self.stash, duplicate(key, "the header")));
                }
                seen_metadata = true;
                out.metadata = map.next_value_seed(MetadataSeed {
                    rules: self.rules,
                    stash: self.stash,
                    budget: self.budget,
                })?;
                metadata_bytes = out
                    .metadata
                    .as_ref()
                    .map_or(0, |md| md.iter().map(|(k, v)| k.len() + v.len()).sum());
                continue;
            }
            if !reserved {
                reserved = true;
                let capacity = self.capacity.saturating_sub(metadata_bytes / 48);
                self.budget.take(self.stash, capacity * TENSOR_SLOT)?;
                out.tensors.reserve_exact(capacity);
                index = NameIndex::with_capacity(capacity);
            }
            let tensor = map.next_value_seed(TensorSeed {
                name: key,
                rules: self.rules,
                stash: self.stash,
                budget: self.budget,
            })?;
            // Past the room reserved, the lists grow: charge what they take.
            let mut cost = tensor.meta.name.len();
            if out.tensors.len() >= out.tensors.capacity() {
                cost += 2 * TENSOR_SLOT;
            }
            self.budget.take(self.stash, cost)?;
            let tensors = &out.tensors;
            let seen = index.insert(tensors.len(), &tensor.meta.name, |i| {
                tensors[i].meta.name.as_str()
            });
            match seen {
                Some(_) if self.rules.refuse_duplicate_keys => {
                    let kind = duplicate(tensor.meta.name, "the header");
                    return Err(fail(self.stash, kind));
                }
                Some(i) => out.tensors[i] = tensor,
                None => out.tensors.push(tensor),
            }
        }
        Ok(out)
    }
}

fn duplicate(key: String, within: &str) -> HeaderError {
    HeaderError::DuplicateKey {
        key,
        within: within.to_string(),
    }
}

struct MetadataSeed<'a> {
    rules: Rules,
    stash: Stash<'a>,
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Option<Metadata>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.rules.mode {
            // The reference's field is an Option: `null` means no metadata.
            Mode::Reference => d.deserialize_option(self),
            Mode::Strict => d.deserialize_map(self),
        }
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<Metadata>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("__metadata__ as an object of string values")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut md = Metadata::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            if md.contains_key(&k) && self.rules.refuse_duplicate_keys {
                return Err(fail(self.stash, duplicate(k, "__metadata__")));
            }
            let cost = METADATA_ENTRY + k.len() + v.len();
            self.budget.take(self.stash, cost)?;
            md.insert(k, v);
        }
        Ok(Some(md))
    }
}

struct TensorSeed<'a> {
    name: String,
    rules: Rules,
    stash: Stash<'a>,
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for TensorSeed<'_> {
    type Value = RawTensor;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawTensor, D::Error> {
        match self.rules.mode {
            // The reference's derived struct also takes `[dtype, shape, offsets]`.
            Mode::Reference => d.deserialize_any(self),
            Mode::Strict => d.deserialize_map(self),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Dtype,
    Shape,
    Offsets,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Dtype => "dtype",
            Field::Shape => "shape",
            Field::Offsets => "data_offsets",
        }
    }

    fn of(key: &str) -> Option<Field> {
        match key {
            "dtype" => Some(Field::Dtype),
            "shape" => Some(Field::Shape),
            "data_offsets" => Some(Field::Offsets),
            _ => None,
        }
    }
}

impl<'a> TensorSeed<'a> {
    fn shape_seed(&self) -> ShapeSeed<'a> {
        ShapeSeed {
            stash: self.stash,
            budget: self.budget,
        }
    }

    fn assemble<E: de::Error>(
        self,
        dtype: Option<Dtype>,
        shape: Option<Vec<u64>>,
        offsets: Option<(u64, u64)>,
    ) -> Result<RawTensor, E> {
        let dtype = dtype.ok_or_else(|| E::missing_field("dtype"))?;
        let shape = shape.ok_or_else(|| E::missing_field("shape"))?;
        let (begin, end) = offsets.ok_or_else(|| E::missing_field("data_offsets"))?;
        Ok(RawTensor {
            meta: TensorMeta::new(self.name, dtype, shape),
            begin,
            end,
        })
    }
}

impl<'de> Visitor<'de> for TensorSeed<'_> {
    type Value = RawTensor;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tensor {:?} as {{dtype, shape, data_offsets}}",
            self.name
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTensor, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(key) = map.next_key::<FieldKey>()? {
            let field = match key {
                FieldKey::Known(f) => f,
                FieldKey::Other(key) if self.rules.mode == Mode::Strict => {
                    let kind = HeaderError::UnknownField {
                        tensor: self.name.to_string(),
                        field: key,
                    };
                    return Err(fail(self.stash, kind));
                }
                FieldKey::Other(_) => {
                    map.next_value::<Buffered>()?;
                    continue;
                }
            };
            let already = match field {
                Field::Dtype => dtype.is_some(),
                Field::Shape => shape.is_some(),
                Field::Offsets => offsets.is_some(),
            };
            if already {
                // The reference's derived struct refuses repeated fields too.
                let within = format!("tensor {:?}", self.name);
                return Err(fail(
                    self.stash,
                    duplicate(field.name().to_string(), &within),
                ));
            }
            match field {
                Field::Dtype => dtype = Some(map.next_value_seed(DtypeSeed(self.rules.mode))?),
                Field::Shape => shape = Some(map.next_value_seed(self.shape_seed())?),
                Field::Offsets => offsets = Some(map.next_value()?),
            }
        }
        self.assemble(dtype, shape, offsets)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawTensor, A::Error> {
        let len_err = |n| de::Error::invalid_length(n, &"a tensor of 3 elements");
        let dtype = seq.next_element_seed(DtypeSeed(self.rules.mode))?;
        let dtype = dtype.ok_or_else(|| len_err(0))?;
        let shape = seq.next_element_seed(self.shape_seed())?;
        let shape = shape.ok_or_else(|| len_err(1))?;
        let offsets = seq.next_element()?.ok_or_else(|| len_err(2))?;
        self.assemble(Some(dtype), Some(shape), Some(offsets))
    }
}

/// Dimensions kept on the stack before the list is allocated at its size.
const INLINE_DIMS: usize = 8;

/// A shape read into a list of exactly its length: serde's `Vec<u64>`
/// starts at room for 4 (32 bytes, a 48-byte heap block) where a 1-D shape
/// needs 8, and a million-tensor header holds a million shapes.
struct ShapeSeed<'a> {
    stash: Stash<'a>,
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for ShapeSeed<'_> {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed<'_> {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence of non-negative integers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut inline = [0u64; INLINE_DIMS];
        let mut len = 0;
        while len < INLINE_DIMS {
            match seq.next_element::<u64>()? {
                Some(d) => inline[len] = d,
                None => {
                    self.budget.take(self.stash, len * 8)?;
                    return Ok(inline[..len].to_vec());
                }
            }
            len += 1;
        }
        // More dimensions than any real tensor has: grow as serde would,
        // each charged twice (what the list may hold unused as it grows).
        let mut dims = inline.to_vec();
        self.budget.take(self.stash, len * 16)?;
        while let Some(d) = seq.next_element::<u64>()? {
            self.budget.take(self.stash, 16)?;
            dims.push(d);
        }
        Ok(dims)
    }
}

/// A tensor entry's key, read without allocating for the three known ones
/// (a million-tensor header has three million of them).
enum FieldKey {
    Known(Field),
    Other(String),
}

impl<'de> Deserialize<'de> for FieldKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FieldKey, D::Error> {
        d.deserialize_str(FieldKeyVisitor)
    }
}

struct FieldKeyVisitor;

impl<'de> Visitor<'de> for FieldKeyVisitor {
    type Value = FieldKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldKey, E> {
        Ok(match Field::of(v) {
            Some(f) => FieldKey::Known(f),
            None => FieldKey::Other(v.to_string()),
        })
    }
}

/// A value the reference parses in full and then ignores: it buffers each
/// tensor's entry as serde's `Content` (through `deserialize_any`) before its
/// derived struct skips unknown fields. `IgnoredAny` would only scan, and so
/// accept what that parse refuses: a lone surrogate escape (`"\ud800"`), a
/// number out of f64's range (`1e400`), nesting past the recursion limit.
struct Buffered;

impl<'de> Deserialize<'de> for Buffered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Buffered, D::Error> {
        d.deserialize_any(Buffered)
    }
}

impl<'de> Visitor<'de> for Buffered {
    type Value = Buffered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Buffered, E> {
        Ok(Buffered)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buffered, A::Error> {
        while seq.next_element::<Buffered>()?.is_some() {}
        Ok(Buffered)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Buffered, A::Error> {
        while map.next_entry::<Buffered, Buffered>()?.is_some() {}
        Ok(Buffered)
    }
}

/// Strict mode reads a dtype as a plain string; reference mode takes whatever
/// serde's derived enum takes (also `{"F32": null}`).
struct DtypeSeed(Mode);

impl<'de> DeserializeSeed<'de> for DtypeSeed {
    type Value = Dtype;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Dtype, D::Error> {
        match self.0 {
            Mode::Reference => Dtype::deserialize(d),
            Mode::Strict => d.deserialize_str(self),
        }
    }
}

impl<'de> Visitor<'de> for DtypeSeed {
    type Value = Dtype;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a dtype string such as \"F32\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Dtype, E> {
        // The format's exact spelling: the people's spellings of FromStr are not for headers.
        Dtype::from_format_name(v).ok_or_else(|| E::custom(crate::UnknownDtype(v.to_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Rules = Rules::STRICT;
    const REFERENCE: Rules = Rules::REFERENCE;

    fn kind(text: &str, rules: Rules) -> HeaderError {
        parse_json(text, rules).unwrap_err().0
    }

    #[test]
    fn duplicate_tensor_name() {
        let text = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
        assert!(matches!(
            kind(text, STRICT),
            HeaderError::DuplicateKey { .. }
        ));
        let h = parse_json(text, REFERENCE).unwrap();
        assert_eq!(h.tensors.len(), 1);
        assert_eq!(h.tensors[0].end, 2, "the reference keeps the last one");
    }

    #[test]
    fn duplicate_metadata_key() {
        let text = r#"{"__metadata__":{"k":"1","k":"2"}}"#;
        assert!(matches!(
            kind(text, STRICT),
            HeaderError::DuplicateKey { .. }
        ));
        let h = parse_json(text, REFERENCE).unwrap();
        assert_eq!(h.metadata.unwrap()["k"], "2");
    }

    #[test]
    fn duplicate_field_refused_in_both_modes() {
        let text = r#"{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
        assert!(matches!(
            kind(text, STRICT),
            HeaderError::DuplicateKey { .. }
        ));
        assert!(matches!(
            kind(text, REFERENCE),
            HeaderError::DuplicateKey { .. }
        ));
    }

    #[test]
    fn extra_field_and_array_form() {
        let text = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{}]}}"#;
        assert!(matches!(
            kind(text, STRICT),
            HeaderError::UnknownField { .. }
        ));
        assert!(parse_json(text, REFERENCE).is_ok());
        let text = r#"{"a":["U8",[1],[0,1]]}"#;
        assert!(parse_json(text, STRICT).is_err());
        assert_eq!(parse_json(text, REFERENCE).unwrap().tensors[0].end, 1);
    }

    #[test]
    fn null_metadata() {
        assert!(parse_json(r#"{"__metadata__":null}"#, STRICT).is_err());
        let h = parse_json(r#"{"__metadata__":null}"#, REFERENCE).unwrap();
        assert!(h.metadata.is_none());
    }

    #[test]
    fn error_position_is_a_byte_offset() {
        let (k, pos) = parse_json("{\"a\":\n  1}", STRICT).unwrap_err();
        assert!(matches!(k, HeaderError::HeaderJson(_)));
        assert_eq!(pos, Some(8)); // the `1`
    }
}
