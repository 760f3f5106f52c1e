//! Differential property tests against the reference implementation, the
//! `safetensors` crate 0.8.0:
//!
//! - random tensor lists: our header and data bytes equal `serialize`'s, and
//!   the reference reads what we write;
//! - random valid files, randomly mutated: our reference mode accepts exactly
//!   what `SafeTensors::deserialize` accepts (and reads the same header from
//!   it), and strict mode accepts nothing the reference refuses.
//!
//! Run with `--nocapture` to see the mutation test's counts.

use crate::support;

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use safetensors_stream::header::read_header;
use safetensors_stream::header::{parse_file_bytes, Metadata, Order, Rules, TensorMeta};
use safetensors_stream::{Dtype, Writer, WriterOptions};
use support::reference::{
    as_ref_header, build_file, pattern, reference_read, reference_serialize, show, RefVerdict,
    SplitMix,
};

// ---- strategies -----------------------------------------------------------------

/// Characters that stress JSON escaping and UTF-8 byte order.
fn name_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range('a', 'e'),
        1 => prop::sample::select(vec![
            '"', '\\', '\n', '\t', '\r', '\u{0}', '\u{1}', '\u{8}', '\u{c}', '\u{1f}', '\u{7f}',
            '/', '.', '_', 'B', 'Z', 'é', '名', '🙂', '\u{ff61}', '\u{2028}', '\u{feff}',
            '\u{fffd}', '\u{10ffff}',
        ]),
        1 => any::<char>(),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(name_char(), 0..6).prop_map(|cs| cs.into_iter().collect())
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop::sample::select(Dtype::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![1 => Just(0u64), 6 => 1u64..5], 0..4)
}

/// Distinct names (never `__metadata__`), whole-byte shapes, data from a seed.
fn tensor_list(max: usize) -> impl Strategy<Value = Vec<(TensorMeta, Vec<u8>)>> {
    prop::collection::vec((name(), dtype(), shape(), any::<u64>()), 0..max).prop_map(|raw| {
        let mut seen = std::collections::HashSet::new();
        raw.into_iter()
            .filter(|(n, ..)| n != "__metadata__" && seen.insert(n.clone()))
            .map(|(n, d, mut s, seed)| {
                if d.byte_len(&s).is_err() {
                    s.push(4); // F4 and F6 need a multiple of 2 or 4 elements
                }
                let len = d.byte_len(&s).expect("whole bytes") as usize;
                (TensorMeta::new(n, d, s), pattern(seed, len))
            })
            .collect()
    })
}

/// No metadata, an empty map, or one key: where the reference's bytes are
/// deterministic.
fn metadata_0_or_1() -> impl Strategy<Value = Option<Metadata>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Metadata::new())),
        2 => (name(), name()).prop_map(|(k, v)| Some(Metadata::from([(k, v)]))),
    ]
}

fn metadata_any() -> impl Strategy<Value = Option<Metadata>> {
    prop::option::of(prop::collection::btree_map(name(), name(), 0..3))
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

// ---- (a) writer: byte-identical to the reference's serialize ------------------------

#[test]
fn our_bytes_equal_the_reference_serialize() {
    let strategy = (tensor_list(10), metadata_0_or_1());
    let cases = AtomicU64::new(0);
    let broken = AtomicU64::new(0);
    let result = runner(4000).run(&strategy, |(tensors, metadata)| {
        cases.fetch_add(1, Relaxed);
        let (header, ours) = build_file(&tensors, metadata.clone(), Order::Canonical);
        let theirs = reference_serialize(&tensors, metadata.as_ref());
        if tensors.is_empty() && metadata.as_ref().is_some_and(|m| m.is_empty()) {
            // The reference's own bug: see `reference_writer_breaks_empty_metadata_alone`.
            broken.fetch_add(1, Relaxed);
            prop_assert_eq!(&theirs[8..], REFERENCE_BROKEN_EMPTY.as_bytes());
            prop_assert!(parse_file_bytes(&ours, Rules::STRICT).is_ok());
            prop_assert!(reference_read(&ours).accepted());
            return Ok(());
        }
        prop_assert!(
            ours == theirs,
            "bytes differ\n ours: {}\n them: {}",
            show(&ours),
            show(&theirs)
        );

        // The reference reads ours back, tensor by tensor.
        let st = safetensors::SafeTensors::deserialize(&ours)
            .map_err(|e| TestCaseError::fail(format!("reference refuses ours: {e}")))?;
        prop_assert_eq!(st.len(), tensors.len());
        for (meta, data) in &tensors {
            let v = st
                .tensor(&meta.name)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(format!("{:?}", v.dtype()), meta.dtype.as_str());
            let s: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
            prop_assert_eq!(&s, &meta.shape);
            prop_assert_eq!(v.data(), &data[..]);
        }

        // And we read ours back in both modes.
        for rules in [Rules::STRICT, Rules::REFERENCE] {
            let parsed = parse_file_bytes(&ours, rules)
                .map_err(|e| TestCaseError::fail(format!("we refuse ours: {e}")))?;
            prop_assert_eq!(&parsed, &header);
        }
        Ok(())
    });
    eprintln!(
        "serialize differential: {} cases run, 0 byte differences ({} of them the \
         reference's broken empty-metadata-only file, checked separately)",
        cases.load(Relaxed),
        broken.load(Relaxed)
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The streaming `Writer`, fed each tensor in pieces of random sizes (in
/// the file's order, as it asks), writes exactly the reference's bytes.
#[test]
fn the_writer_in_random_pieces_equals_the_reference_serialize() {
    let strategy = (tensor_list(8), metadata_0_or_1(), any::<u64>());
    let result = runner(1000).run(&strategy, |(tensors, metadata, seed)| {
        if tensors.is_empty() && metadata.as_ref().is_some_and(|m| m.is_empty()) {
            return Ok(()); // the reference's own bug, above
        }
        let mut options = WriterOptions::default();
        options.metadata = metadata.clone();
        let metas = tensors.iter().map(|(m, _)| m.clone());
        let mut w = Writer::new(Vec::new(), metas, options)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let order: Vec<String> = w.order().map(String::from).collect();
        let mut rng = SplitMix(seed);
        for name in &order {
            let data = &tensors.iter().find(|(m, _)| &m.name == name).unwrap().1;
            let mut at = 0;
            while at < data.len() {
                let n = 1 + rng.below(data.len() - at);
                w.write(name, &data[at..at + n])
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                at += n;
            }
        }
        let ours = w.finish().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let theirs = reference_serialize(&tensors, metadata.as_ref());
        prop_assert!(
            ours == theirs,
            "bytes differ\n ours: {}\n them: {}",
            show(&ours),
            show(&theirs)
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// What `serialize` writes for no tensors and `Some({})` metadata: it sizes
/// its JSON map by the metadata's key count (0) instead of its entry count
/// (1), so serde_json closes the map at once and then writes the entry after
/// it. The reference's own reader refuses the result.
const REFERENCE_BROKEN_EMPTY: &str = r#"{},"__metadata__":{}}   "#;

#[test]
fn reference_writer_breaks_empty_metadata_alone() {
    let theirs = reference_serialize(&[], Some(&Metadata::new()));
    assert_eq!(&theirs[8..], REFERENCE_BROKEN_EMPTY.as_bytes());
    assert!(safetensors::SafeTensors::deserialize(&theirs).is_err());
    assert!(parse_file_bytes(&theirs, Rules::REFERENCE).is_err());

    // Ours is what the spec says: `"__metadata__":{}`, a valid file both read.
    let (_, ours) = build_file(&[], Some(Metadata::new()), Order::Canonical);
    assert_eq!(&ours[8..], br#"{"__metadata__":{}}     "#);
    assert!(reference_read(&ours).accepted());

    // With one tensor, or one key, the reference is right and we match it.
    let one = [(TensorMeta::new("a", Dtype::U8, [1]), vec![7])];
    let (_, ours) = build_file(&one, Some(Metadata::new()), Order::Canonical);
    assert_eq!(ours, reference_serialize(&one, Some(&Metadata::new())));
    let md = Metadata::from([("k".to_string(), "v".to_string())]);
    let (_, ours) = build_file(&[], Some(md.clone()), Order::Canonical);
    assert_eq!(ours, reference_serialize(&[], Some(&md)));
}

// ---- (b) reader: accept/reject equals the reference's on mutated files --------------

/// A JSON value kept as text leaves, so that mutations can write anything.
#[derive(Debug, Clone)]
enum J {
    /// Keys are raw JSON text, quotes included.
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
    Raw(String),
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn raw(s: impl Into<String>) -> J {
    J::Raw(s.into())
}

impl J {
    fn tokens(&self, out: &mut Vec<String>) {
        match self {
            J::Raw(s) => out.push(s.clone()),
            J::Arr(items) => {
                out.push("[".into());
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(",".into());
                    }
                    v.tokens(out);
                }
                out.push("]".into());
            }
            J::Obj(fields) => {
                out.push("{".into());
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(",".into());
                    }
                    out.push(k.clone());
                    out.push(":".into());
                    v.tokens(out);
                }
                out.push("}".into());
            }
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            J::Raw(s) => s.parse().ok(),
            _ => None,
        }
    }
}

/// A file as a header tree, whitespace insertions, padding and data.
#[derive(Debug, Clone)]
struct Model {
    json: J,
    /// (token boundary, chosen by `pos % (tokens + 1)`, text to insert)
    spaces: Vec<(usize, String)>,
    /// What follows the JSON: `None` pads with spaces to a multiple of 8.
    pad: Option<Vec<u8>>,
    data: Vec<u8>,
}

impl Model {
    fn of(header: &safetensors_stream::header::Header, data: &[u8]) -> Model {
        let mut top = Vec::new();
        if let Some(md) = &header.metadata {
            let m = md.iter().map(|(k, v)| (q(k), raw(q(v)))).collect();
            top.push((q("__metadata__"), J::Obj(m)));
        }
        for t in &header.tensors {
            let entry = J::Obj(vec![
                (q("dtype"), raw(q(t.meta.dtype.as_str()))),
                (
                    q("shape"),
                    J::Arr(t.meta.shape.iter().map(|d| raw(d.to_string())).collect()),
                ),
                (
                    q("data_offsets"),
                    J::Arr(vec![raw(t.begin.to_string()), raw(t.end.to_string())]),
                ),
            ]);
            top.push((q(&t.meta.name), entry));
        }
        Model {
            json: J::Obj(top),
            spaces: Vec::new(),
            pad: None,
            data: data.to_vec(),
        }
    }

    fn render(&self) -> Vec<u8> {
        let mut tokens = Vec::new();
        self.json.tokens(&mut tokens);
        let mut spaces = self.spaces.clone();
        for (pos, _) in &mut spaces {
            *pos %= tokens.len() + 1;
        }
        // Insert from the back so earlier positions stay valid.
        spaces.sort_by_key(|(p, _)| std::cmp::Reverse(*p));
        for (pos, s) in spaces {
            tokens.insert(pos, s);
        }
        let mut json = tokens.concat().into_bytes();
        match &self.pad {
            None => json.resize(json.len().next_multiple_of(8), b' '),
            Some(p) => json.extend_from_slice(p),
        }
        let mut file = (json.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&json);
        file.extend_from_slice(&self.data);
        file
    }

    /// Indices of the top-level entries that are tensors (not `__metadata__`).
    fn tensor_slots(&self) -> Vec<usize> {
        match &self.json {
            J::Obj(f) => (0..f.len())
                .filter(|&i| f[i].0 != q("__metadata__"))
                .collect(),
            _ => vec![],
        }
    }

    fn top(&mut self) -> &mut Vec<(String, J)> {
        match &mut self.json {
            J::Obj(f) => f,
            _ => unreachable!("the top level stays an object"),
        }
    }

    /// A random tensor entry's object fields, if it still is an object.
    fn entry_fields(&mut self, rng: &mut SplitMix) -> Option<&mut Vec<(String, J)>> {
        let slots = self.tensor_slots();
        if slots.is_empty() {
            return None;
        }
        let i = *rng.pick(&slots);
        match &mut self.top()[i].1 {
            J::Obj(f) => Some(f),
            _ => None,
        }
    }

    /// Gives the tensors fresh packed offsets in their current order, where
    /// dtype and shape can be read, and sizes the data to match: a way back
    /// to files the checks further down must look at.
    fn relayout(&mut self, limit: u64) {
        let mut offset = 0u64;
        for (key, entry) in self.top().iter_mut() {
            if key == &q("__metadata__") {
                continue;
            }
            let J::Obj(fields) = entry else { continue };
            let field = |name: &str| fields.iter().position(|(k, _)| k == &q(name));
            let (Some(d), Some(s), Some(o)) =
                (field("dtype"), field("shape"), field("data_offsets"))
            else {
                continue;
            };
            let dtype = match &fields[d].1 {
                J::Raw(t) => serde_json::from_str::<String>(t)
                    .ok()
                    .and_then(|s| Dtype::from_format_name(&s)),
                _ => None,
            };
            let shape: Option<Vec<u64>> = match &fields[s].1 {
                J::Arr(dims) => dims.iter().map(J::as_u64).collect(),
                _ => None,
            };
            let len = match (dtype, shape) {
                (Some(d), Some(s)) => d.byte_len(&s).ok(),
                _ => None,
            };
            let Some(len) = len.filter(|&l| l <= limit) else {
                continue;
            };
            let Some(end) = offset.checked_add(len) else {
                continue;
            };
            fields[o].1 = J::Arr(vec![raw(offset.to_string()), raw(end.to_string())]);
            offset = end;
        }
        if offset < 1 << 20 {
            let seed = self.data.len() as u64;
            self.data = pattern(seed, offset as usize);
        }
    }
}

const WHITESPACE: &[&str] = &[" ", "  ", "\t", "\n", "\r", "\r\n ", " \t\n"];
const NOT_WHITESPACE: &[&str] = &["\u{c}", "\0", "\u{a0}", "\u{feff}", "\u{b}", "x", ","];

const ODD_NUMBERS: &[&str] = &[
    "-1",
    "-0",
    "0.0",
    "1.0",
    "1e1",
    "1E+0",
    "012",
    "+1",
    "1e400",
    "0e400",
    "4294967296",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "null",
    "\"1\"",
    "[]",
    "{}",
];

const ODD_DTYPES: &[&str] = &[
    "\"F33\"",
    "\"f32\"",
    "\"\"",
    "\"F32 \"",
    "\"F\\u00332\"",
    "\"B\\u004fOL\"",
    "5",
    "null",
    "true",
    "[\"F32\"]",
    "{\"F32\":null}",
    "{\"U8\":null}",
    "{\"F32\":{}}",
    "{\"F32\":null,\"x\":1}",
    "{\"F33\":null}",
    "{}",
];

/// Values for a field the schema does not know: some the reference's
/// buffering refuses (out-of-range numbers, lone surrogates, deep nesting).
fn odd_value(rng: &mut SplitMix) -> String {
    let fixed: &[&str] = &[
        "1",
        "-1",
        "1.5",
        "1e400",
        "-1e400",
        "0e999999",
        "18446744073709551616",
        "\"ok\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud83d\\ude42\"",
        "\"\\ud83d\\u0041\"",
        "\"\\u0000\"",
        "\"\u{1}\"",
        "\"\\x\"",
        "null",
        "true",
        "[]",
        "{}",
        "[{}]",
        "{\"a\":1,\"a\":2}",
        "{\"dtype\":\"F32\"}",
        "[1e400]",
        "{\"k\":\"\\udfff\"}",
        "01",
        "1.",
        "[1,]",
        "{\"a\" 1}",
    ];
    match rng.below(4) {
        0 => {
            // Nesting around serde_json's recursion limit of 128.
            let depth = *rng.pick(&[1usize, 100, 124, 125, 126, 127, 128, 200]);
            let (open, close) = if rng.chance(1, 2) {
                ("[", "]")
            } else {
                ("{\"a\":", "}")
            };
            let mut s = open.repeat(depth);
            s.push_str(if rng.chance(1, 2) { "1" } else { "{}" });
            s.push_str(&close.repeat(depth));
            s
        }
        _ => rng.pick(fixed).to_string(),
    }
}

/// Writes some characters of a key as `\uXXXX` escapes (same string, other text).
fn escape_some(key: &str, rng: &mut SplitMix) -> String {
    let Ok(s) = serde_json::from_str::<String>(key) else {
        return key.to_string();
    };
    let mut out = String::from("\"");
    for c in s.chars() {
        if rng.chance(1, 2) && (c as u32) < 0x10000 {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            let e = serde_json::to_string(&c.to_string()).unwrap();
            out.push_str(&e[1..e.len() - 1]);
        }
    }
    out.push('"');
    out
}

/// One structural mutation of the header tree, chosen by `seed`.
fn mutate_tree(m: &mut Model, seed: u64) -> String {
    let mut rng = SplitMix(seed);
    let what = rng.below(21);
    match what {
        0 => {
            // An offset: nudged, zeroed or made extreme.
            if let Some(f) = m.entry_fields(&mut rng) {
                if let Some((_, J::Arr(o))) = f.iter_mut().find(|(k, _)| k == "\"data_offsets\"") {
                    if !o.is_empty() {
                        let i = rng.below(o.len());
                        let cur = o[i].as_u64().unwrap_or(0) as i128;
                        let new = match rng.below(3) {
                            0 => (cur + rng.below(17) as i128 - 8).to_string(),
                            1 => "0".to_string(),
                            _ => rng.pick(ODD_NUMBERS).to_string(),
                        };
                        o[i] = raw(new);
                    }
                }
            }
        }
        1 => {
            // Two tensors swap offsets, or one's begin and end swap.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let (a, b) = (*rng.pick(&slots), *rng.pick(&slots));
                let get = |m: &mut Model, i: usize| match &m.top()[i].1 {
                    J::Obj(f) => f
                        .iter()
                        .find(|(k, _)| k == "\"data_offsets\"")
                        .map(|x| x.1.clone()),
                    _ => None,
                };
                let set = |m: &mut Model, i: usize, v: J| {
                    if let J::Obj(f) = &mut m.top()[i].1 {
                        if let Some(x) = f.iter_mut().find(|(k, _)| k == "\"data_offsets\"") {
                            x.1 = v;
                        }
                    }
                };
                if let (Some(oa), Some(ob)) = (get(m, a), get(m, b)) {
                    if a == b {
                        if let J::Arr(mut v) = oa {
                            v.reverse();
                            set(m, a, J::Arr(v));
                        }
                    } else {
                        set(m, a, ob);
                        set(m, b, oa);
                    }
                }
            }
        }
        2 => {
            // A dtype: another real one, or something odd.
            if let Some(f) = m.entry_fields(&mut rng) {
                if let Some(x) = f.iter_mut().find(|(k, _)| k == "\"dtype\"") {
                    x.1 = if rng.chance(1, 2) {
                        raw(q(rng.pick(&Dtype::ALL).as_str()))
                    } else {
                        raw(*rng.pick(ODD_DTYPES))
                    };
                }
            }
        }
        3 => {
            // A shape: a dim added, removed, changed or made extreme.
            if let Some(f) = m.entry_fields(&mut rng) {
                if let Some(x) = f.iter_mut().find(|(k, _)| k == "\"shape\"") {
                    match &mut x.1 {
                        J::Arr(dims) => match rng.below(5) {
                            0 => dims.push(raw(rng.below(4).to_string())),
                            1 => {
                                dims.pop();
                            }
                            2 if !dims.is_empty() => {
                                let i = rng.below(dims.len());
                                dims[i] = raw(rng.pick(ODD_NUMBERS).to_string());
                            }
                            3 => {
                                let big = [
                                    "4294967296",
                                    "9223372036854775808",
                                    "18446744073709551615",
                                    "2305843009213693952",
                                    "4611686018427387904",
                                ];
                                let i = rng.below(dims.len() + 1);
                                dims.insert(i, raw(*rng.pick(&big)));
                                if rng.chance(1, 2) {
                                    dims.push(raw(rng.pick(&["0", "2", "4"]).to_string()));
                                }
                            }
                            _ => *dims = vec![],
                        },
                        other => *other = raw("[]"),
                    }
                }
            }
        }
        4 => {
            // Whitespace (or almost-whitespace) between two tokens.
            let s = if rng.chance(5, 6) {
                rng.pick(WHITESPACE)
            } else {
                rng.pick(NOT_WHITESPACE)
            };
            m.spaces.push((rng.next() as usize, s.to_string()));
        }
        5 => {
            // A tensor's key repeated: a copy of an entry, or another's name.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let i = *rng.pick(&slots);
                let at = rng.below(m.top().len() + 1);
                if rng.chance(1, 2) {
                    let copy = m.top()[i].clone();
                    m.top().insert(at, copy);
                } else {
                    let j = *rng.pick(&slots);
                    let key = m.top()[j].0.clone();
                    m.top()[i].0 = key;
                }
            }
        }
        6 => {
            // A field of an entry repeated.
            if let Some(f) = m.entry_fields(&mut rng) {
                if !f.is_empty() {
                    let i = rng.below(f.len());
                    let copy = f[i].clone();
                    let at = rng.below(f.len() + 1);
                    f.insert(at, copy);
                }
            }
        }
        7 => {
            // A field the schema does not have.
            let keys = [
                "\"x\"",
                "\"\"",
                "\"Dtype\"",
                "\"__metadata__\"",
                "\"data_offsets \"",
                "\"dtype\\u0000\"",
            ];
            let key = rng.pick(&keys).to_string();
            let value = odd_value(&mut rng);
            if let Some(f) = m.entry_fields(&mut rng) {
                let at = rng.below(f.len() + 1);
                f.insert(at, (key, raw(value)));
            }
        }
        8 => {
            // An entry written as an array `[dtype, shape, offsets]`.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let i = *rng.pick(&slots);
                if let J::Obj(f) = &m.top()[i].1 {
                    let mut items: Vec<J> = f.iter().map(|(_, v)| v.clone()).collect();
                    match rng.below(6) {
                        0 => {
                            items.pop();
                        }
                        1 => items.push(raw("0")),
                        2 => items.reverse(),
                        _ => {}
                    }
                    m.top()[i].1 = J::Arr(items);
                }
            }
        }
        9 => {
            // __metadata__: null, not an object, odd values, added, repeated.
            let values = [
                "null",
                "5",
                "\"x\"",
                "[]",
                "{}",
                "{\"k\":1}",
                "{\"k\":null}",
                "{\"k\":\"v\",\"k\":\"w\"}",
                "{\"k\":\"v\"}",
                "{\"k\":[\"v\"]}",
                "{\"k\":\"\\ud800\"}",
                "{\"\\u006b\":\"v\"}",
            ];
            let v = raw(*rng.pick(&values));
            let md = q("__metadata__");
            let top = m.top();
            match top.iter().position(|(k, _)| k == &md) {
                Some(i) if rng.chance(2, 3) => top[i].1 = v,
                _ => {
                    let at = rng.below(top.len() + 1);
                    top.insert(at, (md, v));
                }
            }
        }
        10 => {
            // A field removed.
            if let Some(f) = m.entry_fields(&mut rng) {
                if !f.is_empty() {
                    let i = rng.below(f.len());
                    f.remove(i);
                }
            }
        }
        11 => {
            // Fields or entries in another order.
            if rng.chance(1, 2) {
                if let Some(f) = m.entry_fields(&mut rng) {
                    f.reverse();
                }
            } else {
                let top = m.top();
                if top.len() > 1 {
                    let (a, b) = (rng.below(top.len()), rng.below(top.len()));
                    top.swap(a, b);
                }
            }
        }
        12 => {
            // The same key in other text: escapes, or renamed to __metadata__.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let i = *rng.pick(&slots);
                match rng.below(5) {
                    0 => m.top()[i].0 = q("__metadata__"),
                    1 => m.top()[i].0 = "\"\\u005f_metadata__\"".to_string(),
                    2 => {
                        let odd = ["\"\\ud800\"", "\"\\udc00x\"", "\"\\u00\"", "\"\\q\""];
                        m.top()[i].0 = rng.pick(&odd).to_string();
                    }
                    _ => {
                        let k = m.top()[i].0.clone();
                        m.top()[i].0 = escape_some(&k, &mut rng);
                    }
                }
            }
            if rng.chance(1, 2) {
                if let Some(f) = m.entry_fields(&mut rng) {
                    if !f.is_empty() {
                        let j = rng.below(f.len());
                        let k = f[j].0.clone();
                        f[j].0 = escape_some(&k, &mut rng);
                    }
                }
            }
        }
        13 => {
            // A tensor removed.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let i = *rng.pick(&slots);
                m.top().remove(i);
            }
        }
        14 => {
            // A tensor's value that is not an entry.
            let slots = m.tensor_slots();
            if !slots.is_empty() {
                let i = *rng.pick(&slots);
                let vals = ["5", "null", "\"x\"", "[]", "{}", "[[]]", "true"];
                m.top()[i].1 = raw(*rng.pick(&vals));
            }
        }
        15 => {
            // Padding: other lengths, other bytes, none.
            let mut pad: Vec<u8> = Vec::new();
            let len = rng.below(10);
            for _ in 0..len {
                pad.push(*rng.pick(&[b' ', b' ', b' ', b'\t', b'\n', b'\r', 0, b'x', 0x0c]));
            }
            m.pad = Some(pad);
        }
        16 => {
            // Offsets as numbers in other spellings.
            if let Some(f) = m.entry_fields(&mut rng) {
                if let Some((_, J::Arr(o))) = f.iter_mut().find(|(k, _)| k == "\"data_offsets\"") {
                    if let Some(x) = o.iter_mut().find(|x| x.as_u64().is_some()) {
                        let n = x.as_u64().unwrap();
                        let spellings = [
                            format!("{n}.0"),
                            format!("{n}e0"),
                            format!("0{n}"),
                            format!("-{n}"),
                            format!("{n} "),
                        ];
                        *x = raw(rng.pick(&spellings).clone());
                    }
                }
            }
        }
        17 => {
            // A whole new tensor entry, possibly odd.
            let names: [&str; 5] = ["n", "", "a", "\u{1}", "🙂"];
            let name = q(names[rng.below(names.len())]);
            let d = rng.pick(&Dtype::ALL).as_str();
            let dims = rng.below(3);
            let shape: Vec<J> = (0..dims).map(|_| raw(rng.below(3).to_string())).collect();
            let e = J::Obj(vec![
                (q("dtype"), raw(q(d))),
                (q("shape"), J::Arr(shape)),
                (q("data_offsets"), J::Arr(vec![raw("0"), raw("0")])),
            ]);
            let at = rng.below(m.top().len() + 1);
            m.top().insert(at, (name, e));
        }
        18 => {
            // The whole top level replaced: not an object.
            let vals = ["[]", "null", "\"{}\"", "1", "{", "", "{}{}", "[{}]"];
            m.json = J::Obj(vec![]);
            m.spaces.push((0, rng.pick(&vals).to_string()));
        }
        19 => {
            // Repair: packed offsets and data of the right size.
            m.relayout(1 << 16);
        }
        _ => {
            // Tensors of up to 2^61 bytes each (the most the reference's bit
            // count allows), tiled to an end near 2^64: the reference's
            // `buffer_end + 8 + n` then overflows, and panics in a build
            // with overflow checks.
            let sizes = [
                "2305843009213693951",
                "2305843009213693950",
                "2305843009213693944",
                "1152921504606846976",
            ];
            let count = 7 + rng.below(3);
            let mut entries = Vec::new();
            for i in 0..count {
                let (d, dims) = match rng.below(3) {
                    0 => ("U64", vec![raw("288230376151711743")]),
                    1 => ("F4", vec![raw("2"), raw(*rng.pick(&sizes))]),
                    _ => ("U8", vec![raw(*rng.pick(&sizes))]),
                };
                let e = J::Obj(vec![
                    (q("dtype"), raw(q(d))),
                    (q("shape"), J::Arr(dims)),
                    (q("data_offsets"), J::Arr(vec![raw("0"), raw("0")])),
                ]);
                entries.push((q(&format!("h{i}")), e));
            }
            *m.top() = entries;
            m.relayout(u64::MAX);
        }
    }
    format!("tree{what}")
}

/// One byte-level mutation of the rendered file, chosen by `seed`.
fn mutate_bytes(file: &mut Vec<u8>, seed: u64) -> String {
    let mut rng = SplitMix(seed);
    let what = rng.below(7);
    match what {
        0 if !file.is_empty() => {
            let i = rng.below(file.len());
            file[i] ^= 1 << rng.below(8);
        }
        1 if file.len() > 8 => {
            // A byte of the header set to something meaningful.
            let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
            let i = 8 + rng.below(n.min(file.len() - 8).max(1));
            if i < file.len() {
                file[i] = *rng.pick(b"\"\\{}[],: \t\n0-e.\xff\xc3\x80\x00");
            }
        }
        2 => {
            let at = rng.below(file.len() + 1);
            file.truncate(at);
        }
        3 => {
            let extra = pattern(rng.next(), 1 + rng.below(16));
            file.extend_from_slice(&extra);
        }
        4 | 5 if file.len() >= 8 => {
            // N edited.
            let n = u64::from_le_bytes(file[..8].try_into().unwrap());
            let len = file.len() as u64;
            let new = match rng.below(10) {
                0 => n.wrapping_add(1 + rng.below(8) as u64),
                1 => n.wrapping_sub(1 + rng.below(8) as u64),
                2 => 0,
                3 => 100_000_000,
                4 => 100_000_001,
                5 => u64::MAX,
                6 => len - 8,
                7 => len.wrapping_sub(7),
                8 => 1 << 63,
                _ => rng.next() % (len + 16),
            };
            file[..8].copy_from_slice(&new.to_le_bytes());
        }
        _ => {
            // Data bytes removed or added at the end.
            if rng.chance(1, 2) {
                let cut = file.len().saturating_sub(1 + rng.below(8));
                file.truncate(cut);
            } else {
                file.resize(file.len() + 1 + rng.below(8), 0);
            }
        }
    }
    format!("bytes{what}")
}

#[derive(Default)]
struct Counts {
    /// Valid files before mutation: all three readers must accept them.
    originals: AtomicU64,
    /// Mutated files.
    cases: AtomicU64,
    both_accept: AtomicU64,
    both_reject: AtomicU64,
    strict_only_reject: AtomicU64,
    reference_panics: AtomicU64,
    disagreements: AtomicU64,
    /// Our reference mode's error kinds on the mutated files.
    kinds: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// A valid file as written: every reader accepts it, and reads the same.
fn judge_original(file: &[u8], counts: &Counts) -> Result<(), TestCaseError> {
    counts.originals.fetch_add(1, Relaxed);
    let ours = parse_file_bytes(file, Rules::REFERENCE)
        .map_err(|e| TestCaseError::fail(format!("reference mode refuses {}: {e}", show(file))))?;
    let strict = parse_file_bytes(file, Rules::STRICT)
        .map_err(|e| TestCaseError::fail(format!("strict mode refuses {}: {e}", show(file))))?;
    prop_assert_eq!(&strict, &ours);
    prop_assert_eq!(
        reference_read(file),
        RefVerdict::Accepted(as_ref_header(&ours))
    );
    Ok(())
}

/// Compares the readers on one mutated file; counts the outcome.
fn judge(file: &[u8], counts: &Counts, how: &str) -> Result<(), TestCaseError> {
    counts.cases.fetch_add(1, Relaxed);
    let ours = parse_file_bytes(file, Rules::REFERENCE);
    let strict = parse_file_bytes(file, Rules::STRICT);
    let theirs = reference_read(file);
    if theirs == RefVerdict::Panicked {
        counts.reference_panics.fetch_add(1, Relaxed);
    }

    // The streaming driver agrees with the in-memory one.
    let streamed = read_header(&mut Cursor::new(file), file.len() as u64, Rules::REFERENCE);
    prop_assert_eq!(
        streamed.as_ref().ok(),
        ours.as_ref().ok(),
        "read_header and parse_file_bytes differ on {}",
        show(file)
    );

    let agree = match (&ours, &theirs) {
        (Ok(h), RefVerdict::Accepted(r)) => &as_ref_header(h) == r,
        (Err(_), RefVerdict::Rejected(_) | RefVerdict::Panicked) => true,
        _ => false,
    };
    if !agree {
        counts.disagreements.fetch_add(1, Relaxed);
        prop_assert!(
            false,
            "DISAGREEMENT after {how}\n file: {}\n ours (reference mode): {:?}\n theirs: {:?}",
            show(file),
            ours.as_ref()
                .map(as_ref_header)
                .map_err(ToString::to_string),
            theirs
        );
    }
    match &ours {
        Ok(_) => {
            counts.both_accept.fetch_add(1, Relaxed);
        }
        Err(e) => {
            counts.both_reject.fetch_add(1, Relaxed);
            let debug = match e.kind() {
                safetensors_stream::ErrorKind::Header(h) => format!("{h:?}"),
                k => format!("{k:?}"),
            };
            let kind = debug
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("")
                .to_string();
            *counts.kinds.lock().unwrap().entry(kind).or_default() += 1;
        }
    }

    match (&strict, &ours) {
        (Ok(s), Ok(r)) => prop_assert_eq!(s, r, "strict and reference read differently"),
        (Ok(_), Err(e)) => prop_assert!(
            false,
            "strict accepts what the reference refuses ({e}): {}",
            show(file)
        ),
        (Err(_), Ok(_)) => {
            counts.strict_only_reject.fetch_add(1, Relaxed);
        }
        (Err(_), Err(_)) => {}
    }
    Ok(())
}

#[test]
fn our_reference_mode_accepts_exactly_what_the_reference_accepts() {
    let strategy = (
        tensor_list(6),
        metadata_any(),
        any::<bool>(),
        prop::collection::vec(any::<u64>(), 1..4),
        prop::collection::vec(any::<u64>(), 0..3),
    );
    let counts = Counts::default();
    let result = runner(25_000).run(
        &strategy,
        |(tensors, metadata, canonical, tree_seeds, byte_seeds)| {
            let order = if canonical {
                Order::Canonical
            } else {
                Order::AsGiven
            };
            let (header, file) = build_file(&tensors, metadata, order);
            let data = &file[header.data_start() as usize..];
            let model = Model::of(&header, data);
            prop_assert_eq!(&model.render(), &file, "the model renders the valid file");

            // The valid file itself, then each structural mutation, then bytes.
            judge_original(&file, &counts)?;
            let mut m = model;
            let mut how = Vec::new();
            for s in &tree_seeds {
                how.push(mutate_tree(&mut m, *s));
            }
            let mut bytes = m.render();
            judge(&bytes, &counts, &how.join(","))?;
            for s in &byte_seeds {
                how.push(mutate_bytes(&mut bytes, *s));
                judge(&bytes, &counts, &how.join(","))?;
            }
            Ok(())
        },
    );
    let get = |c: &AtomicU64| c.load(Relaxed);
    eprintln!(
        "mutation differential: {} valid originals accepted by all; {} mutated files run, \
         {} accepted by both, {} rejected by both ({} of them by a reference panic), \
         {} disagreements; strict mode also refused {} that the reference accepts",
        get(&counts.originals),
        get(&counts.cases),
        get(&counts.both_accept),
        get(&counts.both_reject),
        get(&counts.reference_panics),
        get(&counts.disagreements),
        get(&counts.strict_only_reject),
    );
    let kinds = counts.kinds.lock().unwrap().clone();
    eprintln!("mutation differential: refusals by kind: {kinds:?}");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(get(&counts.disagreements), 0);
    // The mutations must reach both sides of the line, and every rule.
    assert!(get(&counts.both_accept) > get(&counts.cases) / 20);
    assert!(get(&counts.both_reject) > get(&counts.cases) / 10);
    assert!(get(&counts.strict_only_reject) > 0);
    assert!(get(&counts.reference_panics) > 0);
    for kind in [
        "FileTooShort",
        "HeaderTooLarge",
        "HeaderPastEnd",
        "HeaderNotUtf8",
        "HeaderJson",
        "InvertedOffsets",
        "Overlap",
        "Gap",
        "ShapeOverflow",
        "NotWholeBytes",
        "RangeLength",
        "FileLength",
    ] {
        assert!(kinds.contains_key(kind), "no mutation reached {kind}");
    }
}

// ---- regressions found by the mutation test ------------------------------------------

/// Runs both readers on a header text (padded with spaces) and `data_len` bytes.
fn verdicts(json: &str, data_len: usize) -> (bool, bool, bool) {
    let mut text = json.as_bytes().to_vec();
    text.resize(text.len().next_multiple_of(8), b' ');
    let file = support::reference::raw_file_bytes(&text, data_len);
    (
        parse_file_bytes(&file, Rules::REFERENCE).is_ok(),
        reference_read(&file).accepted(),
        parse_file_bytes(&file, Rules::STRICT).is_ok(),
    )
}

/// Found by the mutation test: the reference parses an unknown field's value
/// in full (serde `Content`) before ignoring it; we used to only scan it
/// (`IgnoredAny`), and so accepted a lone surrogate escape in it.
#[test]
fn regression_lone_surrogate_in_an_unknown_field() {
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":"\ud83d\u0041"}}"#;
    assert_eq!(verdicts(json, 1), (false, false, false));
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":"\ud800"}}"#;
    assert_eq!(verdicts(json, 1), (false, false, false));
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":{"\udfff":1}}}"#;
    assert_eq!(verdicts(json, 1), (false, false, false));
    // A valid pair is fine.
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":"\ud83d\ude42"}}"#;
    assert_eq!(verdicts(json, 1), (true, true, false));
}

/// Same root cause: a number out of f64's range in an unknown field.
#[test]
fn regression_number_out_of_range_in_an_unknown_field() {
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[1e400]}}"#;
    assert_eq!(verdicts(json, 1), (false, false, false));
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":0e400}}"#;
    assert_eq!(verdicts(json, 1), (true, true, false));
}

/// Same root cause: nesting past serde_json's recursion limit (128) in an
/// unknown field (scanning has no limit).
#[test]
fn regression_deep_nesting_in_an_unknown_field() {
    let deep = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
    let file = |d: usize| {
        format!(
            r#"{{"a":{{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":{}}}}}"#,
            deep(d)
        )
    };
    // With the header and the entry, 125 arrays make 127 levels: the most
    // serde_json allows.
    assert_eq!(verdicts(&file(125), 1), (true, true, false));
    assert_eq!(verdicts(&file(126), 1), (false, false, false));
    assert_eq!(verdicts(&file(300), 1), (false, false, false));
    for d in 100..140 {
        let (ours, theirs, _) = verdicts(&file(d), 1);
        assert_eq!(ours, theirs, "depth {d}");
    }
}

#[test]
fn baseline_extra_field_is_accepted_by_the_reference() {
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{"y":"ok"}]}}"#;
    assert_eq!(verdicts(json, 1), (true, true, false));
}

/// The reference computes `buffer_end + 8 + n` unchecked: eight tensors of
/// 2^61 - 1 bytes tiled end to end reach 2^64 - 8, and the sum overflows.
/// Built with overflow checks it panics (a release build would wrap, and
/// then refuse the file length); we refuse with a file-length error.
#[test]
fn reference_panics_on_a_buffer_end_near_2_64() {
    let size: u64 = (1 << 61) - 1;
    let entries: Vec<String> = (0..8u64)
        .map(|i| {
            format!(
                r#""h{i}":{{"dtype":"U8","shape":[{size}],"data_offsets":[{},{}]}}"#,
                i * size,
                (i + 1) * size
            )
        })
        .collect();
    let json = format!("{{{}}}", entries.join(","));
    let file = support::reference::raw_file(&json, 0);
    assert_eq!(reference_read(&file), RefVerdict::Panicked);
    for rules in [Rules::REFERENCE, Rules::STRICT] {
        let e = parse_file_bytes(&file, rules).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                safetensors_stream::ErrorKind::Header(
                    safetensors_stream::HeaderError::FileLength {
                        expected: u64::MAX,
                        ..
                    }
                )
            ),
            "{e}"
        );
    }
}
