//! Quantized safetensors (FP8, GPTQ, AWQ, bitsandbytes int8) read as the
//! full-precision model they stand for.
//!
//! [`wrap`] recognises each quantized weight from the inputs' tensors (its
//! scales, zeros and `g_idx` may lie in any shard of any input) and the
//! `config.json` beside them. With [`SourceOptions::dequantize`] set, each
//! input is wrapped in a [`QuantizedSource`] that lists one plain tensor per
//! quantized weight, named as the unquantized model names it
//! (`...q_proj.weight`) at its dequantized dtype and shape, drops the
//! auxiliary tensors (scales, zeros, `g_idx`, `SCB`, `weight_format`, and
//! the activation scales `input_scale`, `k_scale`, `v_scale`, which a
//! full-precision model has no use for, as transformers' dequantizing
//! loaders drop them), and passes everything else through as it is.
//! Without it, the inputs are returned as they are, and a notice says they
//! are quantized.
//!
//! A dequantized weight is produced by a blocking reader in row pieces of
//! at most [`PIECE_ELEMENTS`] values: each piece reads the codes of its
//! rows and the scales and zeros that cover them, with positional reads.

mod config;
mod mxfp4;
mod read;
mod recognize;
pub(crate) mod record;

pub use crate::error::quantized::QuantError;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{ByteSpan, FileSpan, Listing, OpenBlocking, Source, SourceOptions, TensorData};
use crate::error::note::{Note, Notice};
use crate::header::TensorMeta;
use crate::transform::Transform;
use crate::{Dtype, Error, ErrorKind, Result};

pub(crate) use recognize::{recognize, Found};

/// Whether recognising the quantized weights reads tensor `name`'s bytes
/// while planning (a bitsandbytes 4-bit `quant_state` record, a
/// compressed-tensors packed weight's `weight_shape`): a source
/// whose reads wait on the runtime (an object) reads such tensors when it
/// opens, as they are small ([`record::MAX_RECORD`] bytes at most).
#[cfg_attr(not(feature = "object-store"), allow(dead_code))]
pub(crate) fn read_while_planning(name: &str) -> bool {
    name.ends_with(".quant_state.bitsandbytes__nf4")
        || name.ends_with(".quant_state.bitsandbytes__fp4")
        || name.ends_with(".weight_shape")
}

/// Values dequantized per piece: 1 Mi (4 MiB of f32, before storing).
pub(crate) const PIECE_ELEMENTS: u64 = 1 << 20;

/// The longest row dequantized. A piece is at least one row, and a row is
/// held whole with its codes and scales: at 2 Mi values that is about 24
/// MiB. A real weight's rows are its input features, tens of thousands;
/// a longer row is refused rather than held (a small file can claim a row
/// of any length: benches/README.md, "Costs charged per entry").
pub(crate) const ROW_MAX: u64 = 2 * PIECE_ELEMENTS;

/// One tensor of an input, where its bytes are.
///
/// A [`QuantizedSource`] keeps the records of its own tensors without
/// their name and shape (empty: the inner source lists them at `at`) and
/// restores them for reading ([`QuantizedSource::dressed`]): 92k copies
/// of names were most of a DeepSeek-V3 conversion's heap.
#[derive(Debug, Clone)]
pub(crate) struct TensorAt {
    /// Its input and its index there.
    pub at: (usize, usize),
    /// Its name in the input.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its bytes: in a file, or in an object read by ranges.
    pub span: ByteSpan,
}

/// How one quantized weight is stored.
///
/// Every variant is at most two [`TensorAt`]s inline, FP8's size (the
/// common scheme at scale, one `Arc<Kind>` per weight): the rarer
/// schemes' further tensors are boxed.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// FP8 E4M3 codes times a float scale per tile.
    Fp8 {
        weight: TensorAt,
        scale: TensorAt,
        tiling: crate::dequant::fp8::Tiling,
        /// FBGEMM's row-wise FP8 (`quant_method: fbgemm_fp8`): the same arithmetic.
        fbgemm: bool,
        /// compressed-tensors `mxfp8-quantized`: U8 E8M0 exponents, one a
        /// 32 columns, that `decompress_mx_scale` makes BF16 powers of two:
        /// the product is rounded to BF16.
        mx: bool,
    },
    /// GPTQ packed codes, zeros and scales, with an optional `g_idx`.
    Gptq {
        qweight: TensorAt,
        qzeros: Box<TensorAt>,
        scales: TensorAt,
        g_idx: Option<Box<TensorAt>>,
        packing: crate::dequant::gptq::Packing,
        /// Input columns per group, when there is no `g_idx`.
        group_size: u64,
    },
    /// AutoAWQ GEMM packed codes, zeros and scales.
    Awq {
        qweight: TensorAt,
        qzeros: Box<TensorAt>,
        scales: TensorAt,
        group_size: u64,
    },
    /// bitsandbytes LLM.int8: int8 codes and a row absmax.
    Int8 { weight: TensorAt, scb: TensorAt },
    /// NVFP4 (ModelOpt or compressed-tensors): packed E2M1 codes, an E4M3
    /// scale per 16, and a per-tensor scale.
    Nvfp4 {
        weight: TensorAt,
        scale: TensorAt,
        global: Box<TensorAt>,
        variant: crate::dequant::nvfp4::Variant,
    },
    /// bitsandbytes NF4/FP4: packed codes, a block absmax (itself
    /// quantized, with nested statistics, when `nested` is there).
    FourBit {
        weight: TensorAt,
        absmax: TensorAt,
        /// `nested_absmax` and `nested_quant_map`.
        nested: Option<Box<(TensorAt, TensorAt)>>,
        record: Box<record::Record>,
    },
    /// compressed-tensors integer codes: packed into I32 words
    /// (`pack-quantized`) or one I8 an element (`int-quantized`), with
    /// scales, optional zero points and an optional `g_idx`.
    CtInt {
        codes: TensorAt,
        scale: TensorAt,
        zeros: Option<Box<TensorAt>>,
        g_idx: Option<Box<TensorAt>>,
        /// Bits per code; `packed` says whether codes and zero points are packed.
        bits: u32,
        packed: bool,
        /// Scales per row (1 for a per-tensor scale, then `per_tensor`).
        groups: u64,
        per_tensor: bool,
        /// Columns per group, when there is no `g_idx`.
        group_size: u64,
        /// Rows per row of scales: the block strategy's block height, else 1.
        block_rows: u64,
    },
    /// compressed-tensors `mxfp4-pack-quantized`: packed E2M1 codes and an
    /// E8M0 scale per 32 along the row.
    CtMxfp4 { weight: TensorAt, scale: TensorAt },
    /// compressed-tensors `mxfp6-pack-quantized`: E2M3 codes four in three
    /// bytes and an E8M0 scale (U8 or `F8_E8M0`) per 32.
    CtMxfp6 { weight: TensorAt, scale: TensorAt },
    /// gpt-oss MXFP4 experts: `*_blocks` and their E8M0 `*_scales`,
    /// dequantized transposed to `[experts, groups * 32, rows]`.
    Mxfp4 {
        blocks: TensorAt,
        scales: TensorAt,
        geometry: mxfp4::Geometry,
    },
}

/// Calls `$f` on each tensor a [`Kind`] is read from, in order: the one
/// list of every scheme's tensors, by reference or (`mut`) by mutable
/// reference as `$kind` is.
macro_rules! each_part {
    ($kind:expr, $f:expr $(, $mut:ident)?) => {{
        let mut f = $f;
        match $kind {
            Kind::Fp8 { weight: a, scale: b, .. }
            | Kind::CtMxfp4 { weight: a, scale: b }
            | Kind::CtMxfp6 { weight: a, scale: b }
            | Kind::Int8 { weight: a, scb: b }
            | Kind::Mxfp4 { blocks: a, scales: b, .. } => {
                f(a);
                f(b);
            }
            Kind::Nvfp4 { weight, scale, global, .. } => {
                f(weight);
                f(scale);
                f(&$($mut)? **global);
            }
            Kind::Gptq { qweight, qzeros, scales, g_idx, .. } => {
                f(qweight);
                f(&$($mut)? **qzeros);
                f(scales);
                if let Some(g) = g_idx {
                    f(&$($mut)? **g);
                }
            }
            Kind::Awq { qweight, qzeros, scales, .. } => {
                f(qweight);
                f(&$($mut)? **qzeros);
                f(scales);
            }
            Kind::FourBit { weight, absmax, nested, .. } => {
                f(weight);
                f(absmax);
                if let Some(n) = nested {
                    let (x, y) = &$($mut)? **n;
                    f(x);
                    f(y);
                }
            }
            Kind::CtInt { codes, scale, zeros, g_idx, .. } => {
                f(codes);
                f(scale);
                if let Some(z) = zeros {
                    f(&$($mut)? **z);
                }
                if let Some(g) = g_idx {
                    f(&$($mut)? **g);
                }
            }
        }
    }};
}

impl Kind {
    /// The tensors it is read from.
    pub(crate) fn parts(&self) -> Vec<&TensorAt> {
        let mut parts = Vec::with_capacity(4);
        each_part!(self, |p| parts.push(p));
        parts
    }

    /// Calls `f` on each tensor it is read from, mutably ([`Kind::parts`]).
    fn each_part_mut(&mut self, f: impl FnMut(&mut TensorAt)) {
        each_part!(self, f, mut)
    }

    /// The scheme's name, for `inspect` and notices.
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Kind::Fp8 { fbgemm: true, .. } => "fbgemm-fp8",
            Kind::Fp8 { mx: true, .. } => "mxfp8-quantized",
            Kind::Fp8 { .. } => "fp8",
            Kind::Gptq { .. } => "gptq",
            Kind::Awq { .. } => "awq",
            Kind::Int8 { .. } => "bitsandbytes-int8",
            Kind::Nvfp4 { .. } => "nvfp4",
            Kind::Mxfp4 { .. } => "mxfp4",
            Kind::CtMxfp4 { .. } => "mxfp4-pack-quantized",
            Kind::CtMxfp6 { .. } => "mxfp6-pack-quantized",
            Kind::CtInt { packed: true, .. } => "pack-quantized",
            Kind::CtInt { packed: false, .. } => "int-quantized",
            Kind::FourBit { record, .. } => match record.kind {
                crate::dequant::bnb::FourBitType::Nf4 => "bitsandbytes-nf4",
                crate::dequant::bnb::FourBitType::Fp4 => "bitsandbytes-fp4",
            },
        }
    }
}

/// A quantized weight: the plain tensor it becomes, and how it is stored.
#[derive(Debug, Clone)]
pub(crate) struct Weight {
    /// The output name (`...proj.weight`); empty in a [`QuantizedSource`]'s
    /// entry, whose listing holds it.
    pub name: String,
    /// Rows and columns of the full-precision weight.
    pub shape: [u64; 2],
    /// Its storage.
    pub kind: Arc<Kind>,
}

impl Weight {
    /// The dequantized tensor's shape: `shape`, but for MXFP4 experts, whose
    /// `[experts * codes, rows]` matrix is listed as `[experts, codes, rows]`.
    pub(crate) fn dims(&self) -> Vec<u64> {
        match &*self.kind {
            Kind::Mxfp4 { geometry: g, .. } => vec![g.experts, g.groups * 32, g.rows],
            _ => self.shape.to_vec(),
        }
    }
}

/// Wraps the opened `sources` so that quantized weights come out
/// dequantized to `options.dequantize`; without it, returns them as they
/// are, after a notice for each quantized input.
pub(crate) fn wrap(
    sources: Vec<Box<dyn Source>>,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    let found = recognize(&sources)?;
    if found.weights.is_empty() {
        return Ok(sources);
    }
    let Some(to) = options.dequantize else {
        // A listing (inspect) copies nothing: nothing to say.
        let said = found
            .per_source()
            .into_iter()
            .filter(|_| !options.listing_only);
        for (s, count) in said {
            notice(&Note::Info(format!(
                "{}: {count} quantized weights ({}) copied as they are; --dequantize writes them in full precision",
                sources[s].input_name(),
                found.schemes(s).join(", ")
            )));
        }
        return Ok(sources);
    };
    check_rows(&found, &sources)?;
    let mut found = found;
    let mut out: Vec<Box<dyn Source>> = Vec::with_capacity(sources.len());
    for (s, source) in sources.into_iter().enumerate() {
        let homed = found.take_source(s);
        if homed.is_empty() && !found.consumes_any(s) {
            out.push(source);
            continue;
        }
        out.push(Box::new(QuantizedSource::new(source, s, homed, &found, to)));
    }
    Ok(out)
}

/// What a listed tensor is.
#[derive(Debug, Clone)]
enum Entry {
    /// The inner source's tensor `k`, as it is.
    Pass(usize),
    /// A dequantized weight.
    Dequant(Weight),
    /// An FP8 weight whose codes and scales are both the inner source's:
    /// kept as their indices, its [`Kind`] made when it is read
    /// (`QuantizedSource::fp8_weight`). The common case at scale (every
    /// weight of DeepSeek-V3's 46k): a record of two indices where an
    /// `Arc<Kind>` of two [`TensorAt`]s would copy names and shapes the
    /// inner listing already holds.
    Fp8(Fp8At),
}

/// How a listed tensor is read ([`QuantizedSource::read_as`]).
enum ReadAs {
    /// As the inner source's tensor `k`.
    Passed(usize),
    /// Dequantized from this weight, dressed with its tensors' names and shapes.
    Dequantized(Weight),
}

/// An FP8 weight of the inner source, by the indices of its tensors.
#[derive(Debug, Clone, Copy)]
struct Fp8At {
    weight: usize,
    scale: usize,
    tiling: crate::dequant::fp8::Tiling,
    fbgemm: bool,
    mx: bool,
}

impl Fp8At {
    /// `kind` as indices, when it is FP8 and both its tensors are input `s`'s.
    fn of(kind: &Kind, s: usize) -> Option<Fp8At> {
        match kind {
            Kind::Fp8 {
                weight,
                scale,
                tiling,
                fbgemm,
                mx,
            } if weight.at.0 == s && scale.at.0 == s => Some(Fp8At {
                weight: weight.at.1,
                scale: scale.at.1,
                tiling: *tiling,
                fbgemm: *fbgemm,
                mx: *mx,
            }),
            _ => None,
        }
    }
}

/// An input whose quantized weights are listed and read dequantized.
pub struct QuantizedSource<'a> {
    inner: Box<dyn Source + 'a>,
    /// The inner source's number among the inputs.
    s: usize,
    /// The inner source's name and metadata; its weights listed dequantized.
    listing: Listing,
    entries: Vec<Entry>,
    to: Dtype,
}

impl<'a> QuantizedSource<'a> {
    fn new(
        inner: Box<dyn Source + 'a>,
        s: usize,
        homed: Vec<(usize, Weight)>,
        found: &Found,
        to: Dtype,
    ) -> Self {
        let mut homed = homed.into_iter().peekable();
        let mut tensors = Vec::new();
        let mut entries = Vec::new();
        for (k, t) in inner.tensors().iter().enumerate() {
            if homed.peek().is_some_and(|(at, _)| *at == k) {
                let (_, mut w) = homed.next().expect("peeked");
                let dims = w.dims();
                // The listing holds the name; the entry needs none.
                let name = std::mem::take(&mut w.name);
                tensors.push(TensorMeta::new(name, to, dims));
                if let Some(fp8) = Fp8At::of(&w.kind, s) {
                    entries.push(Entry::Fp8(fp8));
                    continue;
                }
                Arc::make_mut(&mut w.kind).each_part_mut(|p| {
                    if p.at.0 == s {
                        p.name = String::new();
                        p.shape = Vec::new();
                    }
                });
                entries.push(Entry::Dequant(w));
            } else if !found.is_consumed(s, k) {
                tensors.push(t.clone());
                entries.push(Entry::Pass(k));
            }
        }
        // Moved into lists of their size: a doubled list's unused room
        // stays (mimalloc shrinks in place under 2 x).
        fn exact<T>(grown: Vec<T>) -> Vec<T> {
            let mut exact = Vec::with_capacity(grown.len());
            exact.extend(grown);
            exact
        }
        let (tensors, entries) = (exact(tensors), exact(entries));
        let listing = Listing {
            input: inner.input_name().to_string(),
            tensors,
            metadata: inner.metadata().cloned(),
        };
        QuantizedSource {
            inner,
            s,
            listing,
            entries,
            to,
        }
    }

    /// How the tensor listed `k`th is read: a dequantized weight with the names and
    /// shapes of this input's tensors, which its entry keeps only as
    /// indices ([`TensorAt`], [`Fp8At`]).
    fn read_as(&self, k: usize) -> ReadAs {
        match &self.entries[k] {
            Entry::Pass(inner) => ReadAs::Passed(*inner),
            Entry::Dequant(w) => ReadAs::Dequantized(self.dressed(w)),
            Entry::Fp8(fp8) => ReadAs::Dequantized(self.fp8_weight(k, fp8)),
        }
    }

    /// The [`Weight`] an [`Fp8At`] listed `k`th stands for.
    fn fp8_weight(&self, k: usize, fp8: &Fp8At) -> Weight {
        let listed = self.inner.tensors();
        let at = |i: usize| {
            let t = &listed[i];
            TensorAt {
                at: (self.s, i),
                name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                span: self
                    .inner
                    .byte_span(i)
                    .expect("recognised by its byte span"),
            }
        };
        let dims = &self.listing.tensors[k].shape;
        Weight {
            name: String::new(),
            shape: [dims[0], dims[1]],
            kind: Arc::new(Kind::Fp8 {
                weight: at(fp8.weight),
                scale: at(fp8.scale),
                tiling: fp8.tiling,
                fbgemm: fp8.fbgemm,
                mx: fp8.mx,
            }),
        }
    }

    /// `w` with the names and shapes of this input's tensors, which its
    /// entry keeps only as indices ([`TensorAt`]).
    fn dressed(&self, w: &Weight) -> Weight {
        let mut w = w.clone();
        let listed = self.inner.tensors();
        Arc::make_mut(&mut w.kind).each_part_mut(|p| {
            if p.at.0 == self.s {
                let t = &listed[p.at.1];
                p.name.clone_from(&t.name);
                p.shape.clone_from(&t.shape);
            }
        });
        w
    }

    fn reader(&self, w: Weight) -> read::DequantReader {
        read::DequantReader::new(w, self.to)
    }
}

impl Source for QuantizedSource<'_> {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn wrapped(&self) -> Option<&dyn Source> {
        Some(self.inner.as_ref())
    }

    /// The inner source's, then the `config.json` beside a file input,
    /// which dequantizing reads too: no output may replace it either.
    fn opened(&self) -> Vec<crate::location::Opened> {
        let mut opened = self.inner.opened();
        let beside = self.inner.config_beside().is_none();
        let config = beside.then(|| config::path_beside(self.inner.input_name()));
        if let Some(path) = config.flatten().filter(|p| p.is_file()) {
            opened.push(crate::location::Opened::file(&path));
        }
        opened
    }

    fn will_read(&self, order: &[usize]) {
        // A dequantized weight reads its tensors of this input.
        let mut inner = Vec::with_capacity(order.len());
        for &k in order {
            match &self.entries[k] {
                Entry::Pass(i) => inner.push(*i),
                Entry::Dequant(w) => {
                    let mine = w.kind.parts().into_iter().filter(|p| p.at.0 == self.s);
                    inner.extend(mine.map(|p| p.at.1));
                }
                Entry::Fp8(fp8) => inner.extend([fp8.weight, fp8.scale]),
            }
        }
        self.inner.will_read(&inner);
    }

    fn open_ahead(&self, k: usize) -> Option<Result<TensorData<'static>>> {
        match &self.entries[k] {
            Entry::Pass(inner) => self.inner.open_ahead(*inner),
            Entry::Dequant(_) | Entry::Fp8(_) => None,
        }
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        match self.read_as(k) {
            ReadAs::Passed(inner) => self.inner.open(inner),
            ReadAs::Dequantized(w) => {
                let reader = self.reader(w);
                async move {
                    let bridge = super::blocking::BlockingReader::new(reader);
                    Ok(TensorData::new(bridge))
                }
                .boxed()
            }
        }
    }

    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        match self.read_as(k) {
            ReadAs::Passed(inner) => self.inner.open_blocking(inner),
            ReadAs::Dequantized(w) => {
                let reader = self.reader(w);
                Some(Box::new(move || {
                    let r: super::BlockingRead = Box::new(reader);
                    Ok((r, Transform::Identity))
                }))
            }
        }
    }

    fn open_blocking_parts(&self, k: usize, target: u64) -> Option<Vec<super::BlockingPart>> {
        match self.read_as(k) {
            ReadAs::Passed(inner) => self.inner.open_blocking_parts(inner, target),
            ReadAs::Dequantized(w) => read::parts(&w, self.to, target),
        }
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        match &self.entries[k] {
            Entry::Pass(inner) => self.inner.file_span(*inner),
            Entry::Dequant(_) | Entry::Fp8(_) => None,
        }
    }

    fn byte_span(&self, k: usize) -> Option<ByteSpan> {
        match &self.entries[k] {
            Entry::Pass(inner) => self.inner.byte_span(*inner),
            Entry::Dequant(_) | Entry::Fp8(_) => None,
        }
    }
}

/// The error for a piece whose length this machine cannot address.
fn too_large() -> Error {
    let e = QuantError::Unsupported("a piece too large for this machine's addresses".into());
    Error::new(ErrorKind::Quantized(e))
}

/// A [`QuantError`] about tensor `tensor` of `input`.
pub(crate) fn refuse(e: QuantError, input: &str, tensor: &str) -> Error {
    Error::new(ErrorKind::Quantized(e))
        .with_input(input)
        .with_tensor(tensor)
}

/// Refuses a weight whose rows are longer than [`ROW_MAX`].
fn check_rows(found: &Found, sources: &[Box<dyn Source + '_>]) -> Result<()> {
    for (s, _, w) in &found.weights {
        let [_, cols] = w.shape;
        if cols > ROW_MAX {
            let e = QuantError::Unsupported(format!(
                "{}: rows of {cols} values; dequantizing holds a row at a time, and the most is {ROW_MAX}",
                w.kind.scheme()
            ));
            return Err(refuse(e, sources[*s].input_name(), &w.name));
        }
    }
    Ok(())
}

/// What `inspect` says of a quantized checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The schemes found (`fp8`, `gptq`, ...).
    pub schemes: Vec<&'static str>,
    /// Quantized weights.
    pub weights: usize,
    /// Tensor bytes after `--dequantize` (to BF16): dequantized weights,
    /// and the tensors passed through; auxiliary tensors dropped.
    pub dequantized_bytes: u64,
}

/// The quantized weights of a checkpoint's files, if it has any; an error
/// says what `--dequantize` would refuse. Files that cannot be opened
/// (objects in a store) are not looked at.
pub(crate) fn summarize(cp: &crate::index::Checkpoint) -> Option<Result<Summary>> {
    let mut sources: Vec<Box<dyn Source>> = Vec::with_capacity(cp.files.len());
    for (location, header) in &cp.files {
        let file = std::fs::File::open(location.path()?).ok()?;
        let input = location.to_string();
        let src = super::safetensors::SafetensorsSource::from_data(file, header.clone(), &input);
        sources.push(Box::new(src));
    }
    let found = match recognize(&sources).and_then(|f| check_rows(&f, &sources).map(|()| f)) {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    if found.weights.is_empty() {
        return None;
    }
    let mut schemes: Vec<&'static str> = found
        .weights
        .iter()
        .map(|(_, _, w)| w.kind.scheme())
        .collect();
    schemes.sort_unstable();
    schemes.dedup();
    let mut bytes = 0u64;
    for (s, source) in sources.iter().enumerate() {
        for (k, t) in source.tensors().iter().enumerate() {
            if !found.is_consumed(s, k) {
                bytes = bytes.saturating_add(t.byte_len().unwrap_or(0));
            }
        }
    }
    for (_, _, w) in &found.weights {
        let elements = w.shape[0].saturating_mul(w.shape[1]);
        bytes = bytes.saturating_add(elements.saturating_mul(2));
    }
    Some(Ok(Summary {
        schemes,
        weights: found.weights.len(),
        dequantized_bytes: bytes,
    }))
}
