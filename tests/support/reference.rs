//! Helpers shared by the integration tests: the reference fixtures' manifest,
//! building whole files from our encoder, and calling the reference reader.

pub use super::{block_on, fixtures, listing, pattern, write, SplitMix, BIN};

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;

use safetensors_stream::header::{encode, Header, Metadata, Order, TensorMeta};
use safetensors_stream::Dtype;

/// `fixtures/reference/`.
pub fn reference_dir() -> PathBuf {
    fixtures().join("reference")
}

/// One tensor of the manifest, with its data.
#[derive(Debug, Clone)]
pub struct ManifestTensor {
    pub meta: TensorMeta,
    pub data: Vec<u8>,
}

/// One entry of `fixtures/reference/manifest.json`.
#[derive(Debug, Clone)]
pub struct ManifestEntry {
    pub file: String,
    pub metadata: Option<Metadata>,
    /// In the order they were passed to `save_file`.
    pub tensors: Vec<ManifestTensor>,
    pub note: Option<String>,
}

impl ManifestEntry {
    pub fn path(&self) -> PathBuf {
        reference_dir().join(&self.file)
    }

    pub fn metas(&self) -> Vec<TensorMeta> {
        self.tensors.iter().map(|t| t.meta.clone()).collect()
    }

    pub fn data_of(&self, name: &str) -> &[u8] {
        &self
            .tensors
            .iter()
            .find(|t| t.meta.name == name)
            .unwrap_or_else(|| panic!("{}: no tensor {name:?} in the manifest", self.file))
            .data
    }
}

pub fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Reads and checks the manifest.
pub fn manifest() -> Vec<ManifestEntry> {
    let text = std::fs::read(reference_dir().join("manifest.json")).expect("manifest.json");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("manifest is JSON");
    v.as_array()
        .expect("manifest is a list")
        .iter()
        .map(|e| {
            let metadata = match &e["metadata"] {
                serde_json::Value::Null => None,
                serde_json::Value::Object(m) => Some(
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_string()))
                        .collect(),
                ),
                other => panic!("bad metadata {other}"),
            };
            let tensors = e["tensors"]
                .as_array()
                .expect("tensors")
                .iter()
                .map(|t| {
                    let dtype: Dtype = t["dtype"].as_str().unwrap().parse().unwrap();
                    let shape: Vec<u64> = t["shape"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_u64().unwrap())
                        .collect();
                    ManifestTensor {
                        meta: TensorMeta::new(t["name"].as_str().unwrap(), dtype, shape),
                        data: hex(t["data_hex"].as_str().unwrap()),
                    }
                })
                .collect();
            ManifestEntry {
                file: e["file"].as_str().unwrap().to_string(),
                metadata,
                tensors,
                note: e.get("note").and_then(|n| n.as_str()).map(str::to_string),
            }
        })
        .collect()
}

/// A whole file: our header for `tensors` in `order`, and each tensor's data
/// at the offsets the header gives it.
pub fn build_file(
    tensors: &[(TensorMeta, Vec<u8>)],
    metadata: Option<Metadata>,
    order: Order,
) -> (Header, Vec<u8>) {
    let metas = tensors.iter().map(|(m, _)| m.clone()).collect();
    let (header, bytes) = encode(metas, metadata, order).expect("encode").into_parts();
    let mut file = bytes;
    file.resize(header.file_len() as usize, 0);
    let start = header.data_start() as usize;
    for t in &header.tensors {
        let (_, data) = tensors
            .iter()
            .find(|(m, _)| m.name == t.meta.name)
            .expect("tensor placed");
        assert_eq!(
            data.len() as u64,
            t.len(),
            "data length of {:?}",
            t.meta.name
        );
        file[start + t.begin as usize..start + t.end as usize].copy_from_slice(data);
    }
    (header, file)
}

/// A file whose header JSON is `json` verbatim (no padding added), followed
/// by `data_len` bytes of data.
pub fn raw_file(json: &str, data_len: usize) -> Vec<u8> {
    raw_file_bytes(json.as_bytes(), data_len)
}

pub fn raw_file_bytes(json: &[u8], data_len: usize) -> Vec<u8> {
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json);
    f.resize(f.len() + data_len, 0);
    f
}

// ---- the reference reader ---------------------------------------------------

/// Our dtype as the reference crate's.
pub fn to_ref_dtype(d: Dtype) -> safetensors::Dtype {
    serde_json::from_value(serde_json::Value::String(d.as_str().to_string()))
        .expect("the reference knows every dtype")
}

/// What the reference reader made of a file, in our terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefHeader {
    pub header_len: u64,
    pub metadata: Option<BTreeMap<String, String>>,
    /// name -> (dtype spelling, shape, begin, end)
    pub tensors: BTreeMap<String, (String, Vec<u64>, u64, u64)>,
}

/// The reference reader's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefVerdict {
    Accepted(RefHeader),
    Rejected(String),
    /// It panicked (an overflow check on extreme numbers): counts as a rejection.
    Panicked,
}

impl RefVerdict {
    pub fn accepted(&self) -> bool {
        matches!(self, RefVerdict::Accepted(_))
    }
}

thread_local! {
    static QUIET_PANICS: Cell<bool> = const { Cell::new(false) };
}

/// Installs (once) a panic hook that stays silent while the reference runs
/// inside [`reference_read`], and otherwise defers to the default hook.
fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET_PANICS.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs the reference reader (`SafeTensors::deserialize`, and
/// `read_metadata` for the parsed contents) on `file`, catching panics.
pub fn reference_read(file: &[u8]) -> RefVerdict {
    install_quiet_hook();
    QUIET_PANICS.with(|q| q.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        match safetensors::SafeTensors::deserialize(file) {
            Err(e) => Err(e.to_string()),
            Ok(st) => {
                // Same parse again, for the offsets and metadata.
                let (n, md) = safetensors::SafeTensors::read_metadata(file)
                    .expect("read_metadata agrees with deserialize");
                let tensors = md
                    .tensors()
                    .into_iter()
                    .map(|(name, info)| {
                        let shape = info.shape.iter().map(|&d| d as u64).collect();
                        let (b, e) = info.data_offsets;
                        (
                            name,
                            (format!("{:?}", info.dtype), shape, b as u64, e as u64),
                        )
                    })
                    .collect::<BTreeMap<_, _>>();
                assert_eq!(st.len(), tensors.len());
                let metadata = md
                    .metadata()
                    .as_ref()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
                Ok(RefHeader {
                    header_len: n as u64,
                    metadata,
                    tensors,
                })
            }
        }
    }));
    QUIET_PANICS.with(|q| q.set(false));
    match result {
        Ok(Ok(h)) => RefVerdict::Accepted(h),
        Ok(Err(e)) => RefVerdict::Rejected(e),
        Err(_) => RefVerdict::Panicked,
    }
}

/// Our parsed header in the same terms as [`RefHeader`].
pub fn as_ref_header(h: &Header) -> RefHeader {
    RefHeader {
        header_len: h.header_len,
        metadata: h.metadata.clone(),
        tensors: h
            .tensors
            .iter()
            .map(|t| {
                (
                    t.meta.name.clone(),
                    (
                        t.meta.dtype.as_str().to_string(),
                        t.meta.shape.clone(),
                        t.begin,
                        t.end,
                    ),
                )
            })
            .collect(),
    }
}

/// The reference writer's bytes for `tensors` (as `safetensors::serialize`).
pub fn reference_serialize(
    tensors: &[(TensorMeta, Vec<u8>)],
    metadata: Option<&Metadata>,
) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(m, data)| {
            let shape = m.shape.iter().map(|&d| d as usize).collect();
            let view = safetensors::tensor::TensorView::new(to_ref_dtype(m.dtype), shape, data)
                .expect("a valid view");
            (m.name.clone(), view)
        })
        .collect();
    let info: Option<HashMap<String, String>> =
        metadata.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    safetensors::serialize(views, info).expect("the reference serializes")
}

// ---- I/O ----------------------------------------------------------------------

/// A reader that counts the bytes it hands out.
pub struct CountingReader<R> {
    pub inner: R,
    pub count: u64,
}

impl<R> CountingReader<R> {
    pub fn new(inner: R) -> Self {
        CountingReader { inner, count: 0 }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Shows bytes as an escaped string, for failure messages.
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}
