//! A dataset's messages read into what its tensor needs: the shape
//! (dataspace), the dtype (datatype), where its bytes are (layout), the
//! filters its chunks went through, and the fill value of what was never
//! written.

use super::error::Hdf5Error;
use super::header::{kind, Message};
use super::read::{bad, malformed, unknown_version, Fields, Geometry};
use crate::{Dtype, Result};

/// The most dimensions read (numpy's limit).
const MAX_RANK: usize = 64;

/// A filter of a chunk's pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filter {
    /// zlib (HDF5's "deflate", h5py's `compression="gzip"`).
    Deflate,
    /// h5py's LZF (filter 32000, `compression="lzf"`).
    Lzf,
    /// Bytes regrouped by their place in an element, of this width.
    Shuffle(usize),
    /// A 4-byte checksum after the data (not verified: stripped).
    Fletcher32,
    /// Values packed in fewer bits after subtracting their minimum.
    ScaleOffset(ScaleOffset),
}

/// The parameters of a scaleoffset filter (HDF5's filter 6, h5py's
/// `scaleoffset=`), from the 20 values libhdf5 stores with it: the
/// element's kind, size and byte order, the decimal scale of floats, and
/// the fill value, which stands for itself in the packed values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScaleOffset {
    pub(crate) float: bool,
    /// Bytes per element: 1, 2, 4 or 8 (4 or 8 for floats).
    pub(crate) size: usize,
    pub(crate) big_endian: bool,
    /// Floats: the decimal digits kept (h5py's `scaleoffset=D`).
    pub(crate) decimals: i32,
    /// Integers given every bit (`scaleoffset=8 * size`): stored as they are.
    pub(crate) verbatim: bool,
    /// The fill value's bits (the writer's little-endian order), if defined.
    pub(crate) fill: Option<u64>,
    /// Elements per chunk.
    pub(crate) elements: u64,
}

impl ScaleOffset {
    /// Reads the filter's client values (`H5Zscaleoffset.c`: scale type,
    /// scale factor, elements, class, size, sign, order, fill defined,
    /// fill value), or says what is not read.
    pub(crate) fn from_values(v: &[u32]) -> Result<ScaleOffset, String> {
        if v.len() != 20 {
            return Err(format!(
                "a scaleoffset filter with {} parameters (libhdf5 writes 20)",
                v.len()
            ));
        }
        let (scale_type, factor, class, size) = (v[0], v[1] as i32, v[3], v[4] as usize);
        let float = match (class, scale_type) {
            (0, 2) if matches!(size, 1 | 2 | 4 | 8) => false,
            (1, 0) if matches!(size, 4 | 8) => true,
            (1, 1) => return Err("the scaleoffset filter's E-scale method (libhdf5 cannot read it either)".into()),
            _ => {
                return Err(format!(
                    "a scaleoffset filter of class {class}, scale type {scale_type}, {size}-byte elements"
                ))
            }
        };
        let bits = size as i32 * 8;
        if !float && factor > bits {
            return Err(format!(
                "a scaleoffset filter keeping {factor} bits of {bits}"
            ));
        }
        let fill = (v[7] == 1).then(|| u64::from(v[8]) | u64::from(v[9]) << 32);
        Ok(ScaleOffset {
            float,
            size,
            big_endian: v[6] == 1,
            decimals: factor,
            verbatim: !float && factor == bits,
            fill,
            elements: u64::from(v[2]),
        })
    }
}

/// One stored chunk (listed by `chunks` from one of the indexes).
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    /// Its first element's index.
    pub(crate) offsets: Vec<u64>,
    pub(crate) addr: u64,
    /// Its bytes in the file (filtered).
    pub(crate) size: u64,
    /// Bit i set: filter i was not applied.
    pub(crate) mask: u32,
}

/// What a chunk index's entries are read against: the dataset's maximum
/// shape, its chunks' shape, and a chunk's bytes before filters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkShape<'a> {
    pub(crate) max_shape: &'a [u64],
    pub(crate) chunk: &'a [u64],
    pub(crate) logical: u64,
}

/// Where a chunked dataset's chunks are listed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChunkIndex {
    /// A version 1 B-tree (layout version 3, h5py's default).
    BTree(u64),
    /// A fixed array, whose header is here (layout version 4 or 5, a
    /// dataset of fixed maximum shape).
    FixedArray(u64),
    /// An extensible array (one unlimited dimension), whose header is here.
    ExtensibleArray(u64),
    /// A version 2 B-tree (more than one unlimited dimension), whose header is here.
    Btree2(u64),
    /// No index (space allocated early, no filters, a fixed maximum
    /// shape): every chunk of the maximum shape's grid, in row-major
    /// order, one after another from this address.
    Implicit(u64),
    /// One chunk holding the whole dataset (layout version 4 or 5).
    Single {
        addr: u64,
        size: Option<u64>,
        mask: u32,
    },
}

/// Where a dataset's bytes are.
#[derive(Debug)]
pub(crate) enum Layout {
    /// In its object header.
    Compact(Vec<u8>),
    /// One run of the file (`None`: never written, all fill value).
    Contiguous(Option<(u64, u64)>),
    /// Chunks of this shape.
    Chunked { chunk: Vec<u64>, index: ChunkIndex },
}

/// What a dataset is.
#[derive(Debug)]
pub(crate) struct Dataset {
    pub(crate) shape: Vec<u64>,
    /// The most it may grow to (the shape when the file gives none).
    pub(crate) max_shape: Vec<u64>,
    pub(crate) dtype: Dtype,
    pub(crate) big_endian: bool,
    pub(crate) layout: Layout,
    pub(crate) filters: Vec<Filter>,
    /// One element of the fill value, in the file's byte order; zeros when
    /// the file defines none.
    pub(crate) fill: Vec<u8>,
    /// Where the object header is, for errors.
    pub(crate) header: u64,
}

/// Reads a dataset from its header's messages; `None` for an object that
/// is not one (a committed datatype).
pub(crate) fn read_dataset(
    geo: Geometry<'_>,
    header: u64,
    messages: Vec<Message<'_>>,
) -> Result<Option<Dataset>> {
    let (mut shape, mut dtype, mut layout, mut filters, mut fill) = (None, None, None, None, None);
    for mut m in messages {
        if m.flags & 0x02 != 0 && matches!(m.kind, kind::DATATYPE | kind::FILTERS) {
            let e = Hdf5Error::Unsupported("a shared (committed) datatype or filter".into());
            return Err(bad(e, m.body.at()));
        }
        let f = &mut m.body;
        match m.kind {
            kind::DATASPACE => shape = Some(dataspace(f)?),
            kind::DATATYPE => dtype = Some(datatype(f)?),
            kind::LAYOUT => layout = Some(read_layout(geo, f)?),
            kind::FILTERS => filters = Some(pipeline(f)?),
            kind::FILL => fill = fill_value(f)?,
            kind::EXTERNAL_FILES => {
                // The layout then says "contiguous, never written": the
                // bytes are in other files, and reading it as its fill
                // value would be silently wrong.
                let e = Hdf5Error::Unsupported(
                    "external storage (h5py's `external=`: the data is in raw files outside the HDF5 file, which this reader does not open; `h5repack` copies it in)".into(),
                );
                return Err(bad(e, f.at()));
            }
            kind::FILL_OLD if fill.is_none() => {
                let size = f.u32()? as usize;
                fill = Some(f.bytes(size)?.to_vec());
            }
            _ => {}
        }
    }
    let Some(layout) = layout else {
        return Ok(None);
    };
    let missing = |what: &str| malformed(format!("a dataset without a {what} message"), header);
    let (shape, max_shape) = shape.ok_or_else(|| missing("dataspace"))?;
    let (dtype, width, big_endian) = dtype.ok_or_else(|| missing("datatype"))?;
    let fill = match fill {
        Some(v) if v.len() == width => v,
        Some(v) if !v.is_empty() => {
            let e = format!(
                "a fill value of {} bytes for {width}-byte elements",
                v.len()
            );
            return Err(malformed(e, header));
        }
        _ => vec![0; width],
    };
    let filters = filters.unwrap_or_default();
    if !filters.is_empty() && !matches!(layout, Layout::Chunked { .. }) {
        return Err(malformed(
            "filters on a dataset that is not chunked",
            header,
        ));
    }
    if let Layout::Chunked { chunk, .. } = &layout {
        if chunk.len() != shape.len() {
            let e = format!("chunks of {} dimensions in {}", chunk.len(), shape.len());
            return Err(malformed(e, header));
        }
    }
    Ok(Some(Dataset {
        shape,
        max_shape,
        dtype,
        big_endian,
        layout,
        filters,
        fill,
        header,
    }))
}

/// The shape, and the maximum shape (the shape when none is stored).
fn dataspace(f: &mut Fields<'_>) -> Result<(Vec<u64>, Vec<u64>)> {
    let at = f.at();
    let version = f.u8()?;
    let rank = usize::from(f.u8()?);
    let flags = f.u8()?;
    match version {
        1 => f.skip(5)?,
        2 => {
            if f.u8()? == 2 {
                let e = Hdf5Error::Unsupported("a null dataspace (no data)".into());
                return Err(bad(e, at));
            }
        }
        v => return Err(unknown_version("dataspace", v, at)),
    }
    if rank > MAX_RANK {
        return Err(malformed(
            format!("{rank} dimensions (over {MAX_RANK})"),
            at,
        ));
    }
    let shape: Vec<u64> = (0..rank).map(|_| f.length()).collect::<Result<_>>()?;
    // Maximum sizes follow when flag 1 is set (then v1's permutation, not read).
    let max_shape = if flags & 1 != 0 {
        (0..rank).map(|_| f.length()).collect::<Result<_>>()?
    } else {
        shape.clone()
    };
    Ok((shape, max_shape))
}

/// The dtype, its width in bytes and whether it is big-endian.
fn datatype(f: &mut Fields<'_>) -> Result<(Dtype, usize, bool)> {
    let at = f.at();
    let class_version = f.u8()?;
    let bits = f.bytes(3)?.to_vec();
    let size = f.u32()? as usize;
    let class = class_version & 0x0f;
    let big = bits[0] & 1 != 0;
    let unsupported = |what: String| bad(Hdf5Error::Unsupported(what), at);
    let dtype = match class {
        0 => {
            let offset = f.u16()?;
            let precision = f.u16()?;
            if offset != 0 || usize::from(precision) != 8 * size {
                return Err(unsupported(format!(
                    "an integer of {precision} bits at bit {offset} in {size} bytes"
                )));
            }
            let signed = bits[0] & 0x08 != 0;
            match (size, signed) {
                (1, true) => Dtype::I8,
                (1, false) => Dtype::U8,
                (2, true) => Dtype::I16,
                (2, false) => Dtype::U16,
                (4, true) => Dtype::I32,
                (4, false) => Dtype::U32,
                (8, true) => Dtype::I64,
                (8, false) => Dtype::U64,
                _ => return Err(unsupported(format!("a {size}-byte integer"))),
            }
        }
        1 => {
            if bits[0] & 0x40 != 0 {
                return Err(unsupported("a VAX-ordered float".into()));
            }
            f.skip(4)?; // bit offset, precision
            let (_exp_at, exp_bits, _mant_at, mant_bits) = (f.u8()?, f.u8()?, f.u8()?, f.u8()?);
            match (size, exp_bits, mant_bits) {
                (2, 5, 10) => Dtype::F16,
                (2, 8, 7) => Dtype::BF16,
                (4, 8, 23) => Dtype::F32,
                (8, 11, 52) => Dtype::F64,
                _ => {
                    return Err(unsupported(format!(
                        "a {size}-byte float of {exp_bits} exponent and {mant_bits} mantissa bits"
                    )))
                }
            }
        }
        8 => {
            // An enumeration: h5py's bool is one over int8 with FALSE = 0, TRUE = 1.
            let (base, width, big) = datatype(f)?;
            let members = u16::from_le_bytes([bits[0], bits[1]]);
            let mut names = Vec::new();
            for _ in 0..members {
                names.push(enum_name(f, class_version >> 4)?);
            }
            let values = f.bytes(usize::from(members) * width)?.to_vec();
            let is_bool = width == 1
                && names.len() == 2
                && names[0] == "FALSE"
                && names[1] == "TRUE"
                && values == [0, 1];
            return Ok((if is_bool { Dtype::BOOL } else { base }, width, big));
        }
        c => return Err(unsupported(unheld_class(c))),
    };
    Ok((dtype, size, big))
}

/// Why datatype class `class` has no safetensors dtype.
fn unheld_class(class: u8) -> String {
    let what = match class {
        2 => "a time type",
        3 => "a fixed-length string",
        4 => "a bitfield",
        5 => "an opaque type",
        6 => "a compound type, as h5py writes complex numbers",
        7 => "an object or region reference",
        9 => "a variable-length type, as h5py writes `str` and `vlen_dtype`",
        10 => "an array type",
        _ => "an unknown type",
    };
    format!("{what} (datatype class {class}; safetensors holds only numeric tensors)")
}

/// An enumeration member's name: null-terminated, padded to 8 bytes
/// before datatype version 3.
fn enum_name(f: &mut Fields<'_>, version: u8) -> Result<String> {
    let mut name = Vec::new();
    loop {
        let b = f.u8()?;
        if b == 0 {
            break;
        }
        name.push(b);
    }
    if version < 3 {
        let used = name.len() + 1;
        f.skip((8 - used % 8) % 8)?;
    }
    Ok(String::from_utf8_lossy(&name).into_owned())
}

fn read_layout(geo: Geometry<'_>, f: &mut Fields<'_>) -> Result<Layout> {
    let at = f.at();
    let version = f.u8()?;
    // Version 5 (libhdf5 2.0's `libver="latest"`) is version 4's fields;
    // it only changes how the array and tree chunk indexes size a filtered
    // chunk's length, which their entries' own length tells (`farray`).
    if !(3..=5).contains(&version) {
        return Err(unknown_version("data layout", version, at));
    }
    match f.u8()? {
        0 => {
            let size = usize::from(f.u16()?);
            Ok(Layout::Compact(f.bytes(size)?.to_vec()))
        }
        1 => {
            let addr = f.addr()?;
            let size = f.length()?;
            if geo.undefined(addr) {
                return Ok(Layout::Contiguous(None));
            }
            geo.check("a dataset's data", addr, size)?;
            Ok(Layout::Contiguous(Some((addr, size))))
        }
        2 if version == 3 => {
            let dims = usize::from(f.u8()?);
            let addr = f.addr()?;
            let chunk = chunk_dims(f, dims, 4, at)?;
            Ok(Layout::Chunked {
                chunk,
                index: ChunkIndex::BTree(addr),
            })
        }
        2 => {
            let flags = f.u8()?;
            let dims = usize::from(f.u8()?);
            let width = usize::from(f.u8()?);
            if !(1..=8).contains(&width) {
                return Err(malformed(format!("chunk sizes of {width} bytes"), at));
            }
            let chunk = chunk_dims(f, dims, width, at)?;
            let index = match f.u8()? {
                // Each array's or tree's parameters: its header says them again.
                3 => {
                    f.skip(1)?;
                    ChunkIndex::FixedArray(f.addr()?)
                }
                4 => {
                    f.skip(5)?;
                    ChunkIndex::ExtensibleArray(f.addr()?)
                }
                5 => {
                    f.skip(6)?;
                    ChunkIndex::Btree2(f.addr()?)
                }
                1 => {
                    let (size, mask) = if flags & 0x02 != 0 {
                        (Some(f.length()?), f.u32()?)
                    } else {
                        (None, 0)
                    };
                    ChunkIndex::Single {
                        addr: f.addr()?,
                        size,
                        mask,
                    }
                }
                // No index: the chunks lie in a row, from this address.
                2 => ChunkIndex::Implicit(f.addr()?),
                other => {
                    let e = Hdf5Error::Unsupported(format!("chunk index type {other}"));
                    return Err(bad(e, at));
                }
            };
            Ok(Layout::Chunked { chunk, index })
        }
        c => {
            let what = if c == 3 {
                "a virtual dataset (layout class 3: its data is in other datasets)".into()
            } else {
                format!("layout class {c}")
            };
            let e = Hdf5Error::Unsupported(what);
            Err(bad(e, at))
        }
    }
}

/// A chunk's dimensions; the stored list ends with the element size, dropped.
fn chunk_dims(f: &mut Fields<'_>, dims: usize, width: usize, at: u64) -> Result<Vec<u64>> {
    if !(2..=MAX_RANK + 1).contains(&dims) {
        return Err(malformed(format!("chunks of {dims} dimensions"), at));
    }
    let mut chunk: Vec<u64> = (0..dims).map(|_| f.uint(width)).collect::<Result<_>>()?;
    chunk.pop();
    if chunk.contains(&0) {
        return Err(malformed("a chunk dimension of 0", at));
    }
    Ok(chunk)
}

fn pipeline(f: &mut Fields<'_>) -> Result<Vec<Filter>> {
    let at = f.at();
    let version = f.u8()?;
    let count = f.u8()?;
    if version == 1 {
        f.skip(6)?;
    } else if version != 2 {
        return Err(unknown_version("filter pipeline", version, at));
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let id = f.u16()?;
        let name_len = if version == 1 || id >= 256 {
            usize::from(f.u16()?)
        } else {
            0
        };
        let _flags = f.u16()?;
        let values = usize::from(f.u16()?);
        let name_len = if version == 1 {
            name_len.div_ceil(8) * 8
        } else {
            name_len
        };
        f.skip(name_len)?;
        let data: Vec<u32> = (0..values).map(|_| f.u32()).collect::<Result<_>>()?;
        if version == 1 && values % 2 == 1 {
            f.skip(4)?;
        }
        out.push(match id {
            1 => Filter::Deflate,
            2 => Filter::Shuffle(data.first().copied().unwrap_or(1).max(1) as usize),
            3 => Filter::Fletcher32,
            32000 => Filter::Lzf,
            6 => Filter::ScaleOffset(
                ScaleOffset::from_values(&data).map_err(|e| bad(Hdf5Error::Unsupported(e), at))?,
            ),
            _ => {
                let name = match id {
                    4 => "szip".to_string(),
                    5 => "nbit".to_string(),
                    32001 => "blosc".to_string(),
                    32015 => "zstd".to_string(),
                    id => format!("number {id}"),
                };
                let e = Hdf5Error::Unsupported(format!("filter {name}"));
                return Err(bad(e, at));
            }
        });
    }
    Ok(out)
}

/// A fill value message (version 1 to 3): the value, if one is defined.
fn fill_value(f: &mut Fields<'_>) -> Result<Option<Vec<u8>>> {
    let at = f.at();
    let version = f.u8()?;
    let defined = match version {
        1 | 2 => {
            f.skip(2)?; // allocation and write times
            let defined = f.u8()? != 0;
            defined || version == 1
        }
        3 => f.u8()? & 0x20 != 0,
        v => return Err(unknown_version("fill value", v, at)),
    };
    if !defined || f.left() < 4 {
        return Ok(None);
    }
    let size = f.u32()? as usize;
    Ok(Some(f.bytes(size)?.to_vec()))
}
