//! ONNX models and Flax MessagePack files built by hand, for the tests of
//! hostile inputs (`tests/it/formats.rs`, `tests/memory/formats.rs`).

/// Protobuf by hand: a varint, a varint field, a length-delimited field.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

pub fn fv(field: u64, v: u64) -> Vec<u8> {
    [varint(field << 3), varint(v)].concat()
}

pub fn fb(field: u64, bytes: &[u8]) -> Vec<u8> {
    [
        varint(field << 3 | 2),
        varint(bytes.len() as u64),
        bytes.to_vec(),
    ]
    .concat()
}

/// A model whose graph has these initializers.
pub fn model(inits: &[Vec<u8>]) -> Vec<u8> {
    let graph: Vec<u8> = inits.iter().flat_map(|t| fb(5, t)).collect();
    [fv(1, 9), fb(2, b"hand"), fb(7, &graph)].concat()
}

/// A TensorProto: name, data_type, dims, then `rest`.
pub fn tensor(name: &str, data_type: u64, dims: &[u64], rest: &[u8]) -> Vec<u8> {
    let dims: Vec<u8> = dims.iter().flat_map(|&d| fv(1, d)).collect();
    [
        dims,
        fv(2, data_type),
        fb(8, name.as_bytes()),
        rest.to_vec(),
    ]
    .concat()
}

/// A flax ndarray ext value: `[shape, dtype, bytes]`.
pub fn ndarray(shape: &[u64], dtype: &str, data: &[u8]) -> Vec<u8> {
    let mut inner = vec![0x93, 0x90 | shape.len() as u8];
    for &d in shape {
        inner.push(0xcf);
        inner.extend_from_slice(&d.to_be_bytes());
    }
    inner.push(0xa0 | dtype.len() as u8);
    inner.extend_from_slice(dtype.as_bytes());
    inner.push(0xc6);
    inner.extend_from_slice(&(data.len() as u32).to_be_bytes());
    inner.extend_from_slice(data);
    let mut ext = vec![0xc9];
    ext.extend_from_slice(&(inner.len() as u32).to_be_bytes());
    ext.push(1);
    [ext, inner].concat()
}

/// `{key: value}`.
pub fn map1(key: &str, value: &[u8]) -> Vec<u8> {
    [
        vec![0x81, 0xa0 | key.len() as u8],
        key.as_bytes().to_vec(),
        value.to_vec(),
    ]
    .concat()
}
