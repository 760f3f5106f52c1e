//! Finding the quantized weights among the inputs' tensors, and checking
//! that their scales, zeros and `g_idx` describe them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::config::{self, QuantConfig};
use super::{refuse, Kind, QuantError, TensorAt, Weight};
use crate::dequant::bnb::FourBitType;
use crate::dequant::fp8::Tiling;
use crate::dequant::gptq::Packing;
use crate::source::Source;
use crate::{Dtype, Result};

/// Tensors of activation quantization: a full-precision model has no use
/// for them once its weights are dequantized.
const ACTIVATION_SCALES: &[&str] = &[
    ".input_scale",
    ".input_scale_ub",
    ".input_global_scale",
    ".k_scale",
    ".v_scale",
];

/// Float dtypes a scale may have.
const SCALE_DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::BF16];

/// The quantized weights of a set of inputs.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Each weight with its home: the input and index of its codes.
    pub weights: Vec<(usize, usize, Weight)>,
    /// Tensors a weight stands for (its codes and auxiliaries), by input and index.
    consumed: HashSet<(usize, usize)>,
}

impl Found {
    /// Inputs with weights at home, and how many.
    pub(crate) fn per_source(&self) -> Vec<(usize, usize)> {
        let mut counts: Vec<(usize, usize)> = Vec::new();
        for (s, _, _) in &self.weights {
            match counts.iter_mut().find(|(c, _)| c == s) {
                Some((_, n)) => *n += 1,
                None => counts.push((*s, 1)),
            }
        }
        counts
    }

    /// The schemes of input `s`'s weights.
    pub(crate) fn schemes(&self, s: usize) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .weights
            .iter()
            .filter(|(at, _, _)| *at == s)
            .map(|(_, _, w)| w.kind.scheme())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Removes and returns input `s`'s weights, by index, in order.
    pub(crate) fn take_source(&mut self, s: usize) -> Vec<(usize, Weight)> {
        let (mine, rest) = std::mem::take(&mut self.weights)
            .into_iter()
            .partition(|(at, _, _)| *at == s);
        self.weights = rest;
        let mut mine: Vec<(usize, Weight)> = mine.into_iter().map(|(_, k, w)| (k, w)).collect();
        mine.sort_by_key(|(k, _)| *k);
        mine
    }

    /// Whether any tensor of input `s` is consumed.
    pub(crate) fn consumes_any(&self, s: usize) -> bool {
        self.consumed.iter().any(|(at, _)| *at == s)
    }

    /// Whether tensor `k` of input `s` is consumed by a weight.
    pub(crate) fn is_consumed(&self, s: usize, k: usize) -> bool {
        self.consumed.contains(&(s, k))
    }
}

/// The tensors of all inputs, by name.
struct Names<'s> {
    sources: &'s [Box<dyn Source + 's>],
    at: HashMap<&'s str, (usize, usize)>,
    configs: Vec<Option<QuantConfig>>,
}

impl<'s> Names<'s> {
    fn part(&self, name: &str) -> Result<Option<((usize, usize), TensorAt)>> {
        let Some(&(s, k)) = self.at.get(name) else {
            return Ok(None);
        };
        let source = &self.sources[s];
        let t = &source.tensors()[k];
        let Some(span) = source.byte_span(k) else {
            let e = QuantError::Unsupported(
                "quantized weights are dequantized from safetensors files and objects only".into(),
            );
            return Err(refuse(e, source.input_name(), name));
        };
        let part = TensorAt {
            at: (s, k),
            name: name.to_string(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            span,
        };
        Ok(Some(((s, k), part)))
    }

    /// The dtype of tensor `name`, if an input has it.
    fn dtype(&self, name: &str) -> Option<Dtype> {
        let &(s, k) = self.at.get(name)?;
        Some(self.sources[s].tensors()[k].dtype)
    }

    fn input(&self, s: usize) -> &str {
        self.sources[s].input_name()
    }

    fn config(&mut self, s: usize) -> Result<&QuantConfig> {
        if self.configs[s].is_none() {
            let source = &self.sources[s];
            let input = source.input_name();
            let c = match source.config_beside() {
                Some(text) => config::parse(text),
                None => config::beside(input),
            };
            let c = c.map_err(|e| refuse(e, input, "config.json"))?;
            self.configs[s] = Some(c);
        }
        Ok(self.configs[s].as_ref().expect("set above"))
    }
}

/// Finds the quantized weights of `sources`, checking each one's tensors.
pub(crate) fn recognize<'s>(sources: &'s [Box<dyn Source + 's>]) -> Result<Found> {
    let mut at = HashMap::new();
    for (s, source) in sources.iter().enumerate() {
        for (k, t) in source.tensors().iter().enumerate() {
            at.entry(t.name.as_str()).or_insert((s, k));
        }
    }
    let mut names = Names {
        sources,
        at,
        configs: vec![None; sources.len()],
    };
    let mut found = Found::default();
    for (s, source) in sources.iter().enumerate() {
        for t in source.tensors() {
            let n = t.name.as_str();
            let weight = if let Some(prefix) = n.strip_suffix(".weight_scale_inv") {
                fp8(&mut names, prefix, n)?
            } else if let Some(prefix) = n.strip_suffix(".weight_scale") {
                fp8(&mut names, prefix, n)?
            } else if let Some(prefix) = n.strip_suffix(".qweight") {
                packed(&mut names, prefix)?
            } else if let Some(prefix) = n.strip_suffix(".weight_packed") {
                if names
                    .dtype(&format!("{prefix}.weight_global_scale"))
                    .is_none()
                {
                    let scale = names.dtype(&format!("{prefix}.weight_scale"));
                    if t.dtype == Dtype::U8 && matches!(scale, Some(Dtype::U8 | Dtype::F8_E8M0)) {
                        ct_mxfp4(&mut names, prefix, n)?
                    } else {
                        // compressed-tensors' integer pack-quantized format.
                        ct_int(&mut names, prefix, n, true)?
                    }
                } else {
                    nvfp4(&mut names, prefix, n, ".weight_global_scale")?
                }
            } else if let Some(prefix) = n.strip_suffix("_blocks") {
                mxfp4(&mut names, prefix, n)?
            } else if let Some(prefix) = n.strip_suffix(".SCB") {
                int8(&mut names, prefix)?
            } else if let Some(prefix) = n.strip_suffix(".weight.quant_state.bitsandbytes__nf4") {
                four_bit(&mut names, prefix, n, FourBitType::Nf4)?
            } else if let Some(prefix) = n.strip_suffix(".weight.quant_state.bitsandbytes__fp4") {
                four_bit(&mut names, prefix, n, FourBitType::Fp4)?
            } else {
                None
            };
            if let Some((home, used, w)) = weight {
                found.consumed.extend(used);
                found.weights.push((home.0, home.1, w));
            }
        }
        let _ = s;
    }
    if !found.weights.is_empty() {
        for (s, source) in sources.iter().enumerate() {
            for (k, t) in source.tensors().iter().enumerate() {
                if ACTIVATION_SCALES.iter().any(|e| t.name.ends_with(e)) {
                    found.consumed.insert((s, k));
                }
            }
        }
    }
    Ok(found)
}

/// A recognised weight: its home (input, index), the tensors it consumes, and it.
type Recognised = Option<((usize, usize), Vec<(usize, usize)>, Weight)>;

/// One scheme's checks of the tensors of one input: each refusal names the
/// scheme, the input and the tensor.
struct Check {
    scheme: &'static str,
    input: String,
}

impl Check {
    /// The checks of `scheme` on the input of the tensor `at`.
    fn new(scheme: &'static str, names: &Names, at: (usize, usize)) -> Check {
        let input = names.input(at.0).to_string();
        Check { scheme, input }
    }

    /// The same input's checks, named as another scheme.
    fn as_scheme(&self, scheme: &'static str) -> Check {
        let input = self.input.clone();
        Check { scheme, input }
    }

    fn refuse(&self, e: QuantError, tensor: &str) -> crate::Error {
        refuse(e, &self.input, tensor)
    }

    fn dtype(&self, p: &TensorAt, allowed: &[Dtype], expected: &'static str) -> Result<()> {
        if allowed.contains(&p.dtype) {
            return Ok(());
        }
        let (scheme, actual) = (self.scheme, p.dtype);
        let e = QuantError::Dtype {
            scheme,
            actual,
            expected,
        };
        Err(self.refuse(e, &p.name))
    }

    fn shape(&self, p: &TensorAt, expected: impl Into<String>) -> crate::Error {
        let (scheme, actual, expected) = (self.scheme, p.shape.clone(), expected.into());
        self.refuse(
            QuantError::Shape {
                scheme,
                actual,
                expected,
            },
            &p.name,
        )
    }

    fn groups(&self, p: &TensorAt, detail: String) -> crate::Error {
        let scheme = self.scheme;
        self.refuse(QuantError::Groups { scheme, detail }, &p.name)
    }

    fn matrix(&self, p: &TensorAt) -> Result<[u64; 2]> {
        match p.shape[..] {
            [r, c] => Ok([r, c]),
            _ => Err(self.shape(p, "a matrix (2 dimensions)")),
        }
    }

    /// Tensor `name`, which the weight `of` needs.
    fn required(
        &self,
        names: &Names,
        name: String,
        of: &str,
    ) -> Result<((usize, usize), TensorAt)> {
        match names.part(&name)? {
            Some(found) => Ok(found),
            None => {
                let (scheme, missing) = (self.scheme, name);
                Err(self.refuse(QuantError::Missing { scheme, missing }, of))
            }
        }
    }
    /// Input columns per group: `k / groups`, which must divide, and agree with
    /// the config's `group_size` when it gives one.
    fn group_size(
        &self,
        scales: &TensorAt,
        groups: u64,
        k: u64,
        config: &QuantConfig,
    ) -> Result<u64> {
        if groups == 0 || k % groups != 0 {
            let detail = format!("{groups} groups do not divide the {k} input columns");
            return Err(self.groups(scales, detail));
        }
        let size = k / groups;
        if let Some(declared) = config.group_size {
            let declared = if declared <= 0 { k } else { declared as u64 };
            if declared != size {
                let detail = format!(
                    "{groups} groups of {size} columns, but config.json's group_size is {declared}"
                );
                return Err(self.groups(scales, detail));
            }
        }
        Ok(size.max(1))
    }

    /// The `[rows, columns]` a `weight_shape` tensor (I32 or I64, two values) holds.
    fn weight_shape(&self, p: &TensorAt) -> Result<[u64; 2]> {
        self.dtype(p, &[Dtype::I32, Dtype::I64], "I32 or I64")?;
        let width = p.dtype.bits() / 8;
        if p.shape != [2] || p.span.len != 2 * width {
            return Err(self.shape(p, "[2] (rows, columns)"));
        }
        let mut bytes = [0u8; 16];
        let bytes = &mut bytes[..p.span.len as usize];
        p.span
            .bytes
            .read_exact_at(bytes, p.span.offset)
            .map_err(|e| {
                crate::Error::io(e)
                    .with_input(&self.input)
                    .with_tensor(&p.name)
            })?;
        let value = |i: usize| -> i64 {
            match width {
                4 => i64::from(i32::from_le_bytes(
                    bytes[i * 4..i * 4 + 4].try_into().expect("4"),
                )),
                _ => i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8")),
            }
        };
        match (u64::try_from(value(0)), u64::try_from(value(1))) {
            (Ok(r), Ok(c)) if r.checked_mul(c).is_some() => Ok([r, c]),
            _ => {
                let e = QuantError::Shape {
                    scheme: self.scheme,
                    actual: vec![],
                    expected: format!("two sizes, not [{}, {}]", value(0), value(1)),
                };
                Err(self.refuse(e, &p.name))
            }
        }
    }
}

/// FP8: `prefix.weight` (E4M3) and its scale `scale_name`.
fn fp8(names: &mut Names, prefix: &str, scale_name: &str) -> Result<Recognised> {
    let wname = format!("{prefix}.weight");
    if !matches!(
        names.dtype(&wname),
        Some(Dtype::F8_E4M3 | Dtype::U8 | Dtype::I8)
    ) {
        return Ok(None); // a scale of something else
    }
    let Some((wat, weight)) = names.part(&wname)? else {
        return Ok(None); // a scale of something else (an activation scale's kin)
    };
    if weight.dtype == Dtype::I8 && scale_name.ends_with(".weight_scale") {
        // compressed-tensors int-quantized / naive-quantized.
        return ct_int(names, prefix, &wname, false);
    }
    if weight.dtype == Dtype::U8 && scale_name.ends_with(".weight_scale") {
        // ModelOpt NVFP4: `weight` U8 and `weight_scale` E4M3.
        return nvfp4(names, prefix, &wname, ".weight_scale_2");
    }
    if weight.dtype != Dtype::F8_E4M3 {
        return Ok(None);
    }
    let check = Check::new("fp8", names, wat);
    let (sat, scale) = names.part(scale_name)?.expect("listed");
    if scale_name.ends_with("_inv") {
        // DeepSeek's block scales, multiplied in f32: E8M0 ones too (NaN refused as read).
        let dtypes = [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F8_E8M0];
        check.dtype(&scale, &dtypes, "F32, F16, BF16 or F8_E8M0")?;
    } else {
        let dtypes = [SCALE_DTYPES, &[Dtype::U8]].concat();
        check.dtype(&scale, &dtypes, "F32, F16, BF16 or U8 (E8M0)")?;
    }
    let [m, n] = check.matrix(&weight)?;
    // compressed-tensors `mxfp8-quantized` stores its E8M0 scales as U8, one
    // a block of 32 columns (MX's block) and nothing else.
    let mx = scale.dtype == Dtype::U8;
    if mx && (n % 32 != 0 || scale.shape != [m, n / 32]) {
        let expected = format!("[{m}, {}] (MXFP8: one E8M0 scale a 32 columns)", n / 32);
        return Err(check.as_scheme("mxfp8-quantized").shape(&scale, expected));
    }
    let whole = Tiling {
        rows: m.max(1),
        cols: n.max(1),
    };
    let tiling = match scale.shape[..] {
        [] | [1] | [1, 1] => whole,
        [r] | [r, 1] if r == m => Tiling {
            rows: 1,
            cols: n.max(1),
        },
        [r, c] if r == m && c > 0 => {
            if n % c != 0 {
                let detail = format!("{c} scale columns do not divide the weight's {n} columns");
                return Err(check.groups(&scale, detail));
            }
            Tiling {
                rows: 1,
                cols: (n / c).max(1),
            }
        }
        [r, c] => {
            let sizes = names.config(wat.0)?.block_sizes();
            let fits = |&&[br, bc]: &&[u64; 2]| {
                br > 0 && bc > 0 && r == m.div_ceil(br) && c == n.div_ceil(bc)
            };
            match sizes.iter().filter(fits).collect::<Vec<_>>()[..] {
                [&[br, bc]] => Tiling { rows: br, cols: bc },
                [] => {
                    let [br, bc] = sizes[0];
                    let expected = format!(
                        "[{}, {}] (blocks of {br}x{bc} over [{m}, {n}])",
                        m.div_ceil(br.max(1)),
                        n.div_ceil(bc.max(1))
                    );
                    return Err(check.shape(&scale, expected));
                }
                ref several => {
                    let detail = format!(
                        "blocks of {several:?} all fit; config.json's groups do not say which"
                    );
                    return Err(check.groups(&scale, detail));
                }
            }
        }
        _ => {
            let expected = format!("[], [{m}], [{m}, groups] or [row blocks, column blocks]");
            return Err(check.shape(&scale, expected));
        }
    };
    // FBGEMM (Meta's Llama 3.1 405B FP8): row-wise F32 scales, the code
    // times its row's scale in f32, as the other FP8 weights.
    let fbgemm = names.config(wat.0)?.quant_method.as_deref() == Some("fbgemm_fp8");
    if fbgemm {
        check
            .as_scheme("fbgemm-fp8")
            .dtype(&scale, &[Dtype::F32], "F32")?;
        if scale.shape != [m, 1] {
            let expected = format!("[{m}, 1] (one scale a row, as FBGEMM writes)");
            return Err(check.as_scheme("fbgemm-fp8").shape(&scale, expected));
        }
    }
    let w = Weight {
        name: weight.name.clone(),
        shape: [m, n],
        kind: Arc::new(Kind::Fp8 {
            weight,
            scale,
            tiling,
            fbgemm,
            mx,
        }),
    };
    Ok(Some((wat, vec![wat, sat], w)))
}

/// GPTQ or AWQ: `prefix.qweight`, `.qzeros`, `.scales`, and GPTQ's `.g_idx`.
fn packed(names: &mut Names, prefix: &str) -> Result<Recognised> {
    let qname = format!("{prefix}.qweight");
    let (qat, qweight) = names.part(&qname)?.expect("listed");
    let check = Check::new("gptq", names, qat);
    let (zat, qzeros) = check.required(names, format!("{prefix}.qzeros"), &qname)?;
    let (sat, scales) = check.required(names, format!("{prefix}.scales"), &qname)?;
    let g_idx = names.part(&format!("{prefix}.g_idx"))?;
    let config = names.config(qat.0)?.clone();
    let [qrows, qcols] = check.matrix(&qweight)?;
    let [groups, n] = check.matrix(&scales)?;
    let awq = match config.quant_method.as_deref() {
        Some("awq") => true,
        Some("gptq") => false,
        _ => g_idx.is_none() && qcols != n && qcols.checked_mul(8) == Some(n),
    };
    let check = check.as_scheme(if awq { "awq" } else { "gptq" });
    check.dtype(&qweight, &[Dtype::I32], "I32")?;
    check.dtype(&qzeros, &[Dtype::I32], "I32")?;
    check.dtype(&scales, SCALE_DTYPES, "F16, F32 or BF16")?;
    let mut used = vec![qat, zat, sat];
    let name = format!("{prefix}.weight");
    let bits = config.bits.unwrap_or(4);
    if awq {
        if bits != 4 {
            let e = QuantError::Unsupported(format!("awq: {bits}-bit weights (only 4-bit)"));
            return Err(check.refuse(e, &qname));
        }
        let k = qrows;
        if qcols.checked_mul(8) != Some(n) {
            return Err(check.shape(&qweight, format!("[in, {}] (scales' columns / 8)", n / 8)));
        }
        if qzeros.shape != [groups, qcols] {
            return Err(check.shape(&qzeros, format!("[{groups}, {qcols}]")));
        }
        let group_size = check.group_size(&scales, groups, k, &config)?;
        let w = Weight {
            name,
            shape: [n, k],
            kind: Arc::new(Kind::Awq {
                qweight,
                qzeros: Box::new(qzeros),
                scales,
                group_size,
            }),
        };
        return Ok(Some((qat, used, w)));
    }
    let g_idx = match g_idx {
        Some((gat, g)) => {
            check.dtype(&g, &[Dtype::I32], "I32")?;
            used.push(gat);
            Some(g)
        }
        None => None,
    };
    // Bits from the config, else from g_idx's length (an input column each), else 4.
    let bits = match (config.bits, &g_idx) {
        (Some(b), _) => b,
        (None, Some(g))
            if g.shape.len() == 1
                && g.shape[0] > 0
                && qrows.checked_mul(32).is_some_and(|b| b % g.shape[0] == 0) =>
        {
            u32::try_from(qrows * 32 / g.shape[0]).unwrap_or(0)
        }
        _ => 4,
    };
    if ![2, 4, 8].contains(&bits) {
        let e = QuantError::Unsupported(format!("gptq: {bits}-bit weights (2, 4 and 8 are)"));
        return Err(check.refuse(e, &qname));
    }
    let per = u64::from(32 / bits);
    let Some(k) = qrows.checked_mul(per) else {
        let expected = format!("[in * {bits} / 32, {n}] with in below 2^64");
        return Err(check.shape(&qweight, expected));
    };
    if qcols != n {
        return Err(check.shape(
            &qweight,
            format!("[in * {bits} / 32, {n}] (the scales' columns)"),
        ));
    }
    if qzeros.shape != [groups, n.div_ceil(per)] {
        let expected = format!("[{groups}, {}]", n.div_ceil(per));
        return Err(check.shape(&qzeros, expected));
    }
    if let Some(g) = &g_idx {
        if g.shape != [k] {
            return Err(check.shape(g, format!("[{k}] (one group per input column)")));
        }
        // A group covers at least one input column: every piece reads all
        // groups' scales for its rows, so more would cost without a bound.
        if groups > k.max(1) {
            let detail = format!("{groups} groups of scales for {k} input columns");
            return Err(check.groups(&scales, detail));
        }
    }
    let group_size = match g_idx {
        Some(_) => k.max(1), // g_idx decides; checked as it is read
        None => check.group_size(&scales, groups, k, &config)?,
    };
    let zero_offset = match config.checkpoint_format.as_deref() {
        Some("gptq_v2") => 0,
        _ => 1,
    };
    let w = Weight {
        name,
        shape: [n, k],
        kind: Arc::new(Kind::Gptq {
            qweight,
            qzeros: Box::new(qzeros),
            scales,
            g_idx: g_idx.map(Box::new),
            packing: Packing { bits, zero_offset },
            group_size,
        }),
    };
    Ok(Some((qat, used, w)))
}

/// bitsandbytes LLM.int8: `prefix.weight` (I8) and `prefix.SCB`.
fn int8(names: &mut Names, prefix: &str) -> Result<Recognised> {
    let wname = format!("{prefix}.weight");
    if names.dtype(&wname).is_none() {
        return Ok(None);
    }
    let Some((wat, weight)) = names.part(&wname)? else {
        return Ok(None);
    };
    let check = Check::new("bitsandbytes-int8", names, wat);
    let (sat, scb) = names.part(&format!("{prefix}.SCB"))?.expect("listed");
    check.dtype(&weight, &[Dtype::I8], "I8")?;
    check.dtype(&scb, &[Dtype::F32], "F32")?;
    let [m, n] = check.matrix(&weight)?;
    if scb.shape != [m] {
        return Err(check.shape(&scb, format!("[{m}] (one per row)")));
    }
    let mut used = vec![wat, sat];
    if let Some((fat, _)) = names.part(&format!("{prefix}.weight_format"))? {
        used.push(fat);
    }
    let w = Weight {
        name: weight.name.clone(),
        shape: [m, n],
        kind: Arc::new(Kind::Int8 { weight, scb }),
    };
    Ok(Some((wat, used, w)))
}

/// bitsandbytes NF4/FP4: `prefix.weight` (packed U8), `.weight.absmax`,
/// `.weight.quant_map`, the record `record_name`, and with nested
/// statistics `.weight.nested_absmax` and `.weight.nested_quant_map`.
fn four_bit(
    names: &mut Names,
    prefix: &str,
    record_name: &str,
    kind: FourBitType,
) -> Result<Recognised> {
    let (rat, rec) = names.part(record_name)?.expect("listed");
    let check = Check::new("bitsandbytes-4bit", names, rat);
    check.dtype(&rec, &[Dtype::U8], "U8")?;
    if rec.span.len > super::record::MAX_RECORD {
        let e = QuantError::Record(format!("{} bytes, more than a record holds", rec.span.len));
        return Err(check.refuse(e, record_name));
    }
    if rec.span.bytes.waits_on_runtime() {
        // Planning runs on the async runtime's thread: an object's record is
        // read when the object is opened (`source::object`), never here.
        let e = QuantError::Unsupported("a record not read when its object was opened".into());
        return Err(check.refuse(e, record_name));
    }
    let mut bytes = vec![0u8; rec.span.len as usize];
    rec.span
        .bytes
        .read_exact_at(&mut bytes, rec.span.offset)
        .map_err(|e| {
            crate::Error::io(e)
                .with_input(&check.input)
                .with_tensor(record_name)
        })?;
    let record = super::record::parse(&bytes, kind).map_err(|e| check.refuse(e, record_name))?;
    let [rows, cols] = record.shape;
    let n = rows * cols; // checked by parse
    let wname = format!("{prefix}.weight");
    let (wat, weight) = check.required(names, wname.clone(), record_name)?;
    check.dtype(&weight, &[Dtype::U8], "U8")?;
    if weight.span.len != n.div_ceil(2) {
        let expected = format!(
            "{} bytes (two codes a byte for {rows} x {cols})",
            n.div_ceil(2)
        );
        return Err(check.shape(&weight, expected));
    }
    let blocks = n.div_ceil(record.blocksize);
    let (aat, absmax) = check.required(names, format!("{wname}.absmax"), record_name)?;
    let mut used = vec![rat, wat, aat];
    let nested = match record.nested {
        None => {
            check.dtype(&absmax, &[Dtype::F32], "F32")?;
            None
        }
        Some((nested_blocksize, _)) => {
            check.dtype(&absmax, &[Dtype::U8], "U8 (nested statistics)")?;
            let (nat, nabs) =
                check.required(names, format!("{wname}.nested_absmax"), record_name)?;
            let (mat, nmap) =
                check.required(names, format!("{wname}.nested_quant_map"), record_name)?;
            check.dtype(&nabs, &[Dtype::F32], "F32")?;
            check.dtype(&nmap, &[Dtype::F32], "F32")?;
            let groups = blocks.div_ceil(nested_blocksize);
            if nabs.shape != [groups] {
                return Err(check.shape(&nabs, format!("[{groups}]")));
            }
            if nmap.shape != [256] {
                return Err(check.shape(&nmap, "[256]"));
            }
            used.extend([nat, mat]);
            Some((nabs, nmap))
        }
    };
    if absmax.shape != [blocks] {
        let expected = format!("[{blocks}] (one per {} elements)", record.blocksize);
        return Err(check.shape(&absmax, expected));
    }
    // The stored code book: the library reads its own instead.
    if let Some((mat, _)) = names.part(&format!("{wname}.quant_map"))? {
        used.push(mat);
    }
    let w = Weight {
        name: wname,
        shape: [rows, cols],
        kind: Arc::new(Kind::FourBit {
            weight,
            absmax,
            nested: nested.map(Box::new),
            record: Box::new(record),
        }),
    };
    Ok(Some((wat, used, w)))
}

/// NVFP4: the packed codes `packed_name` (`prefix.weight` for ModelOpt,
/// `prefix.weight_packed` for compressed-tensors), `prefix.weight_scale`,
/// and the per-tensor scale `prefix` + `global_suffix`.
fn nvfp4(
    names: &mut Names,
    prefix: &str,
    packed_name: &str,
    global_suffix: &str,
) -> Result<Recognised> {
    let (wat, weight) = names.part(packed_name)?.expect("listed");
    let check = Check::new("nvfp4", names, wat);
    let (sat, scale) = check.required(names, format!("{prefix}.weight_scale"), packed_name)?;
    let (gat, global) = check.required(names, format!("{prefix}{global_suffix}"), packed_name)?;
    check.dtype(&weight, &[Dtype::U8], "U8")?;
    check.dtype(&scale, &[Dtype::F8_E4M3], "F8_E4M3")?;
    check.dtype(&global, &[Dtype::F32], "F32")?;
    let [m, half] = check.matrix(&weight)?;
    let Some(n) = half.checked_mul(2) else {
        return Err(check.shape(&weight, "[rows, columns / 2]"));
    };
    if n % 16 != 0 {
        let detail = format!("{n} columns are not whole blocks of 16");
        return Err(check.groups(&weight, detail));
    }
    if scale.shape != [m, n / 16] {
        return Err(check.shape(&scale, format!("[{m}, {}] (one per 16 columns)", n / 16)));
    }
    let quotient = match global.shape[..] {
        [] => Dtype::BF16,
        [1] => Dtype::F32,
        _ => return Err(check.shape(&global, "[] or [1]")),
    };
    let variant = match global_suffix {
        ".weight_scale_2" => crate::dequant::nvfp4::Variant::ModelOpt,
        _ => crate::dequant::nvfp4::Variant::CompressedTensors { quotient },
    };
    let w = Weight {
        name: format!("{prefix}.weight"),
        shape: [m, n],
        kind: Arc::new(Kind::Nvfp4 {
            weight,
            scale,
            global: Box::new(global),
            variant,
        }),
    };
    Ok(Some((wat, vec![wat, sat, gat], w)))
}

/// gpt-oss MXFP4 experts: `prefix_blocks` (U8 `[experts, rows, groups,
/// 16]`) and `prefix_scales` (U8 or F8_E8M0 `[experts, rows, groups]`),
/// recognised when the scales are there or `config.json` says `mxfp4`.
fn mxfp4(names: &mut Names, prefix: &str, blocks_name: &str) -> Result<Recognised> {
    let (bat, blocks) = names.part(blocks_name)?.expect("listed");
    let check = Check::new("mxfp4", names, bat);
    let scales_name = format!("{prefix}_scales");
    let declared = names.config(bat.0)?.quant_method.as_deref() == Some("mxfp4");
    if names.dtype(&scales_name).is_none() && !declared {
        return Ok(None); // some other tensor named `_blocks`
    }
    let (sat, scales) = check.required(names, scales_name, blocks_name)?;
    check.dtype(&blocks, &[Dtype::U8], "U8")?;
    check.dtype(
        &scales,
        &[Dtype::U8, Dtype::F8_E8M0],
        "U8 or F8_E8M0 (E8M0 exponents)",
    )?;
    let [experts, rows, groups] = match blocks.shape[..] {
        [e, r, g, 16] => [e, r, g],
        _ => {
            let expected = "[experts, rows, blocks, 16] (32 codes, 16 bytes, a block)";
            return Err(check.shape(&blocks, expected));
        }
    };
    if scales.shape != [experts, rows, groups] {
        let expected = format!("[{experts}, {rows}, {groups}] (one per block)");
        return Err(check.shape(&scales, expected));
    }
    let codes = groups.checked_mul(32);
    let Some(view_rows) = codes.and_then(|c| c.checked_mul(experts)) else {
        return Err(check.shape(&blocks, "fewer than 2^64 codes"));
    };
    if view_rows.checked_mul(rows).is_none() {
        return Err(check.shape(&blocks, "fewer than 2^64 codes"));
    }
    if names.dtype(prefix).is_some() {
        let e = QuantError::Unsupported(format!(
            "mxfp4: {prefix} is both a tensor and the dequantized name of {blocks_name}"
        ));
        return Err(check.refuse(e, prefix));
    }
    let w = Weight {
        name: prefix.to_string(),
        shape: [view_rows, rows],
        kind: Arc::new(Kind::Mxfp4 {
            blocks,
            scales,
            geometry: super::mxfp4::Geometry {
                experts,
                rows,
                groups,
            },
        }),
    };
    Ok(Some((bat, vec![bat, sat], w)))
}

/// compressed-tensors integer weights: `prefix.weight_packed` (I32 words,
/// with `prefix.weight_shape`) when `packed`, else `prefix.weight` (I8);
/// `prefix.weight_scale`, and optionally `prefix.weight_zero_point` (packed
/// down the rows when the codes are) and `prefix.weight_g_idx`.
fn ct_int(names: &mut Names, prefix: &str, codes_name: &str, packed: bool) -> Result<Recognised> {
    let scheme: &'static str = if packed {
        "pack-quantized"
    } else {
        "int-quantized"
    };
    let (cat, codes) = names.part(codes_name)?.expect("listed");
    let check = Check::new(scheme, names, cat);
    let (sat, scale) = check.required(names, format!("{prefix}.weight_scale"), codes_name)?;
    check.dtype(&scale, SCALE_DTYPES, "F32, F16 or BF16")?;
    let mut used = vec![cat, sat];
    let (rows, cols, bits) = if packed {
        check.dtype(&codes, &[Dtype::I32], "I32")?;
        let [rows, words] = check.matrix(&codes)?;
        let (hat, shape) = check.required(names, format!("{prefix}.weight_shape"), codes_name)?;
        used.push(hat);
        let [r, cols] = check.weight_shape(&shape)?;
        if r != rows {
            let detail = format!("weight_shape says {r} rows");
            return Err(check.shape(&codes, detail));
        }
        let declared = names.config(cat.0)?.group_bits();
        let candidates = if declared.is_empty() {
            vec![4, 8]
        } else {
            declared
        };
        let fits: Vec<u32> = candidates
            .into_iter()
            .filter(|b| (1..=8).contains(b))
            .filter(|&b| cols.checked_mul(u64::from(b)).map(|x| x.div_ceil(32)) == Some(words))
            .collect();
        let [bits] = fits[..] else {
            let detail = format!(
                "{words} words a row do not hold {cols} codes of one bit width config.json declares ({fits:?} fit)"
            );
            return Err(check.groups(&codes, detail));
        };
        (rows, cols, bits)
    } else {
        check.dtype(&codes, &[Dtype::I8], "I8")?;
        let [rows, cols] = check.matrix(&codes)?;
        (rows, cols, 8)
    };
    // The block strategy's block of rows x columns a scale, as config.json's
    // groups declare it, when the scale's shape is [row blocks, column
    // blocks] and no other's (the edge blocks may be partial).
    let fits = |[br, bc]: &[u64; 2]| {
        *br > 0 && *bc > 0 && scale.shape == [rows.div_ceil(*br), cols.div_ceil(*bc)]
    };
    let block = match scale.shape[..] {
        [r, _] if r != rows => names.config(cat.0)?.group_blocks().into_iter().find(fits),
        _ => None,
    };
    let zero_point = names.part(&format!("{prefix}.weight_zero_point"))?;
    let (groups, per_tensor) = match scale.shape[..] {
        [] | [1] if rows != 1 || one_unpacked_zero(zero_point.as_ref().map(|z| &z.1)) => (1, true),
        [r] | [r, 1] if r == rows => (1, false),
        [r, g] if r == rows && g > 0 => (g, false),
        [_, g] if block.is_some() => (g, false),
        _ => {
            let expected = format!(
                "[], [{rows}], [{rows}, 1], [{rows}, groups] or [row blocks, column blocks] of a block_structure config.json declares"
            );
            return Err(check.shape(&scale, expected));
        }
    };
    if block.is_none() && cols % groups != 0 {
        let detail = format!("{groups} groups do not divide the {cols} columns");
        return Err(check.groups(&scale, detail));
    }
    let zeros = match zero_point {
        None => None,
        Some((zat, z)) => {
            if per_tensor || block.is_some() {
                // compressed-tensors packs zero points only for the group and
                // channel strategies (PACK_ZP_STRATS): the tensor and block
                // strategies' are I8 as they are, one a scale, in either format.
                check.dtype(&z, &[Dtype::I8], "I8")?;
                let ok = z.shape == scale.shape || (per_tensor && matches!(z.shape[..], [] | [1]));
                if !ok {
                    let expected = format!("{:?} (one a scale)", scale.shape);
                    return Err(check.shape(&z, expected));
                }
            } else if packed {
                check.dtype(&z, &[Dtype::I32], "I32 (packed down the rows)")?;
                let word_rows = rows.saturating_mul(u64::from(bits)).div_ceil(32);
                if z.shape != [word_rows, groups] {
                    let expected = format!(
                        "[{word_rows}, {groups}] ({rows} zero points of {bits} bits packed down each column)"
                    );
                    return Err(check.shape(&z, expected));
                }
            } else {
                check.dtype(&z, &[Dtype::I8], "I8")?;
                let ok = z.shape == [rows, groups] || (groups == 1 && z.shape == [rows]);
                if !ok {
                    return Err(check.shape(&z, format!("[{rows}, {groups}]")));
                }
            }
            used.push(zat);
            Some(z)
        }
    };
    let g_idx = match names.part(&format!("{prefix}.weight_g_idx"))? {
        None => None,
        Some((gat, g)) => {
            check.dtype(&g, &[Dtype::I32], "I32")?;
            if g.shape != [cols] {
                return Err(check.shape(&g, format!("[{cols}] (a group per column)")));
            }
            used.push(gat);
            Some(g)
        }
    };
    let w = Weight {
        name: format!("{prefix}.weight"),
        shape: [rows, cols],
        kind: Arc::new(Kind::CtInt {
            codes,
            scale,
            zeros: zeros.map(Box::new),
            g_idx: g_idx.map(Box::new),
            bits,
            packed,
            groups,
            per_tensor,
            group_size: match block {
                Some([_, bc]) => bc,
                None => (cols / groups).max(1),
            },
            block_rows: block.map_or(1, |[br, _]| br),
        }),
    };
    Ok(Some((cat, used, w)))
}

/// Whether a one-row weight's single scale (`[]` or `[1]`, a tensor's and
/// a row's alike) is the tensor strategy's: compressed-tensors packs the
/// zero point (I32, down the rows) for the group and channel strategies
/// only, by the config's strategy, and stores the tensor strategy's as one
/// I8 as it is, in either format (`PackedQuantizationCompressor`). So no
/// zero point, or one I8, is the tensor's; an I32 one the row's, packed.
fn one_unpacked_zero(zero_point: Option<&TensorAt>) -> bool {
    zero_point.is_none_or(|z| z.dtype == Dtype::I8 && matches!(z.shape[..], [] | [1]))
}

/// compressed-tensors `mxfp4-pack-quantized`: `prefix.weight_packed` (U8
/// `[rows, cols / 2]`) and `prefix.weight_scale` (E8M0 as U8 or F8_E8M0,
/// `[rows, cols / 32]`); or `mxfp6-pack-quantized`, `[rows, cols / 4 * 3]`.
fn ct_mxfp4(names: &mut Names, prefix: &str, packed_name: &str) -> Result<Recognised> {
    let (wat, weight) = names.part(packed_name)?.expect("listed");
    let check = Check::new("mxfp4-pack-quantized", names, wat);
    let (sat, scale) = names
        .part(&format!("{prefix}.weight_scale"))?
        .expect("checked");
    let [m, half] = check.matrix(&weight)?;
    // `mxfp6-pack-quantized` is stored the same way, but three bytes hold
    // four codes: 24 bytes a scale, where MXFP4 has 16. An MXFP4 weight
    // with too few scales has that shape too: config.json must declare
    // 6-bit weights.
    let fp6 = names.config(wat.0)?.group_bits().contains(&6);
    if fp6
        && matches!(scale.shape[..], [r, g] if r == m && g > 0 && g.checked_mul(24) == Some(half))
    {
        let w = Weight {
            name: format!("{prefix}.weight"),
            shape: [m, half / 3 * 4],
            kind: Arc::new(Kind::CtMxfp6 { weight, scale }),
        };
        return Ok(Some((wat, vec![wat, sat], w)));
    }
    let Some(n) = half.checked_mul(2) else {
        return Err(check.shape(&weight, "[rows, columns / 2]"));
    };
    if n % 32 != 0 {
        let detail = format!("{n} columns are not whole blocks of 32");
        return Err(check.groups(&weight, detail));
    }
    if scale.shape != [m, n / 32] {
        let expected = format!("[{m}, {}] (one per 32 columns)", n / 32);
        return Err(check.shape(&scale, expected));
    }
    let w = Weight {
        name: format!("{prefix}.weight"),
        shape: [m, n],
        kind: Arc::new(Kind::CtMxfp4 { weight, scale }),
    };
    Ok(Some((wat, vec![wat, sat], w)))
}
