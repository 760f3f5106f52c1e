//! ndarray in and out: stream a Rust program's own arrays into a file, and
//! read one tensor of a file back as an array.

use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use ndarray::{ArrayD, ArrayView, Dimension, IxDyn};
use tokio::io::{AsyncRead, ReadBuf};

use crate::header::{Rules, TensorMeta};
use crate::source::read_file_header;
use crate::source::{Listing, Source, TensorData};
use crate::{Dtype, Error, ErrorKind, Result};

/// A Rust element type with a safetensors dtype.
pub trait Element: Copy + Send + Sync + 'static {
    /// Its dtype.
    const DTYPE: Dtype;
    /// Bytes per element.
    const WIDTH: usize;
    /// Writes the little-endian bytes into `out` (`WIDTH` long).
    fn write_le(self, out: &mut [u8]);
    /// Reads from little-endian bytes (`WIDTH` long).
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("WIDTH bytes"))
            }
        }
    };
}

element!(u8, U8);
element!(i8, I8);
element!(u16, U16);
element!(i16, I16);
element!(u32, U32);
element!(i32, I32);
element!(u64, U64);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);
element!(half::f16, F16);
element!(half::bf16, BF16);

impl Element for bool {
    const DTYPE: Dtype = Dtype::BOOL;
    const WIDTH: usize = 1;
    fn write_le(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Something that can hand out a reader of its elements' bytes.
trait ArrayBytes: Send + Sync {
    fn reader(&self) -> Pin<Box<dyn AsyncRead + Send + '_>>;
}

impl<T: Element> ArrayBytes for ArrayView<'_, T, IxDyn> {
    fn reader(&self) -> Pin<Box<dyn AsyncRead + Send + '_>> {
        Box::pin(ElementReader {
            iter: self.iter(),
            carry: [0; 8],
            carry_pos: 8,
        })
    }
}

/// Yields elements in logical C order, whatever the view's memory layout.
struct ElementReader<'a, T: Element> {
    iter: ndarray::iter::Iter<'a, T, IxDyn>,
    /// The rest of an element split across two reads.
    carry: [u8; 8],
    carry_pos: usize,
}

impl<T: Element> AsyncRead for ElementReader<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let w = T::WIDTH;
        while self.carry_pos < w && buf.remaining() > 0 {
            let b = self.carry[self.carry_pos];
            buf.put_slice(&[b]);
            self.carry_pos += 1;
        }
        let out = buf.initialize_unfilled();
        let mut n = 0;
        while n + w <= out.len() {
            let Some(&x) = self.iter.next() else { break };
            x.write_le(&mut out[n..n + w]);
            n += w;
        }
        if n < out.len() && n + w > out.len() {
            if let Some(&x) = self.iter.next() {
                let mut carry = [0u8; 8];
                x.write_le(&mut carry[..w]);
                let k = out.len() - n;
                out[n..].copy_from_slice(&carry[..k]);
                n += k;
                self.carry = carry;
                self.carry_pos = k;
            }
        }
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// In-memory `ndarray` views as a source; a view of any layout (Fortran,
/// sliced, strided) is written in logical C order.
///
/// ```
/// use ndarray::{array, ShapeBuilder};
/// use safetensors_stream::array::{read_array, ArraySource};
/// use safetensors_stream::convert::{convert_sources, ConvertOptions, Output};
/// use safetensors_stream::source::Source;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let w = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
/// let t = w.t(); // a transposed (Fortran-layout) view
/// let mut src = ArraySource::new("memory");
/// src.push("w", w.view())?.push("wt", t)?;
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("w.safetensors");
/// let mut sources: Vec<Box<dyn Source + '_>> = vec![Box::new(src)];
/// convert_sources(&mut sources, &Output::File(out.clone()), &ConvertOptions::default()).await?;
/// let back = read_array::<f32>(&out, "wt")?;
/// assert_eq!(back, t.into_dyn());
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
#[derive(Default)]
pub struct ArraySource<'a> {
    listing: Listing,
    arrays: Vec<Box<dyn ArrayBytes + 'a>>,
}

impl std::fmt::Debug for ArraySource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArraySource")
            .field("listing", &self.listing)
            .finish()
    }
}

impl<'a> ArraySource<'a> {
    /// An empty source named `input` in messages.
    pub fn new(input: impl Into<String>) -> Self {
        ArraySource {
            listing: Listing::new(input),
            ..Default::default()
        }
    }

    /// Adds a view as tensor `name`.
    pub fn push<T: Element, D: Dimension>(
        &mut self,
        name: impl Into<String>,
        view: ArrayView<'a, T, D>,
    ) -> Result<&mut Self> {
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        let meta = TensorMeta::new(name, T::DTYPE, shape);
        meta.byte_len()?;
        self.listing.tensors.push(meta);
        self.arrays.push(Box::new(view.into_dyn()));
        Ok(self)
    }
}

impl Source for ArraySource<'_> {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let reader = self.arrays[k].reader();
        async move {
            Ok(TensorData {
                reader,
                transform: crate::transform::Transform::Identity,
            })
        }
        .boxed()
    }
}

/// Reads tensor `name` of the safetensors file at `path`: its description
/// and bytes. Reads the header and that tensor's bytes, nothing else.
pub fn read_tensor_bytes(path: &Path, name: &str) -> Result<(TensorMeta, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let header = read_file_header(path, Rules::SOURCE)?;
    let on_path = |e: Error| e.with_input(path.display()).with_tensor(name);
    let t = header
        .get(name)
        .ok_or_else(|| on_path(Error::new(ErrorKind::TensorNotFound(name.to_string()))))?;
    let file = std::fs::File::open(path).map_err(|e| on_path(Error::io(e)))?;
    let len = usize::try_from(t.len())
        .map_err(|_| on_path(Error::new(ErrorKind::TooLargeForMemory { len: t.len() })))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, header.data_start() + t.begin)
        .map_err(|e| on_path(Error::io(e)))?;
    Ok((t.meta.clone(), bytes))
}

/// Reads tensor `name` of the file at `path` as an array; its dtype must be `T`'s.
pub fn read_array<T: Element>(path: &Path, name: &str) -> Result<ArrayD<T>> {
    let (meta, bytes) = read_tensor_bytes(path, name)?;
    if meta.dtype != T::DTYPE {
        let e = ErrorKind::DtypeMismatch {
            expected: T::DTYPE,
            actual: meta.dtype,
        };
        return Err(Error::new(e).with_input(path.display()).with_tensor(name));
    }
    let values: Vec<T> = bytes.chunks_exact(T::WIDTH).map(T::read_le).collect();
    let shape: Vec<usize> = meta.shape.iter().map(|&d| d as usize).collect();
    ArrayD::from_shape_vec(IxDyn(&shape), values)
        .map_err(|e| Error::new(ErrorKind::Usage(e.to_string())).with_tensor(name))
}
