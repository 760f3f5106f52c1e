//! PyTorch checkpoints built without torch: nested dicts of F32 tensors
//! (and ints), pickled as `torch.save` does and zipped as it lays them
//! out, for the tests that need a checkpoint shape no fixture has.

use super::numpy::{build_zip, ZipMember};

/// A value of a checkpoint: a tensor of F32 values, an int, or a dict.
pub enum Item {
    Tensor(Vec<f32>),
    Int(i32),
    Dict(Vec<(&'static str, Item)>),
}

/// A `torch.save` zip of `root` (a dict): each tensor 1-D, on a storage
/// of its own, keyed `0`, `1`, ... in the order they are met.
pub fn checkpoint(root: &[(&'static str, Item)]) -> Vec<u8> {
    let mut pickle = b"\x80\x02".to_vec();
    let mut storages = Vec::new();
    dict(&mut pickle, root, &mut storages);
    pickle.push(b'.');
    let mut members = vec![
        ZipMember::stored("archive/data.pkl", pickle),
        ZipMember::stored("archive/byteorder", b"little".to_vec()),
    ];
    for (k, data) in storages.into_iter().enumerate() {
        members.push(ZipMember::stored(&format!("archive/data/{k}"), data));
    }
    build_zip(&members).0
}

/// Pickles `s` as a `BINUNICODE` string.
pub fn text(p: &mut Vec<u8>, s: &str) {
    p.push(b'X');
    p.extend_from_slice(&(s.len() as u32).to_le_bytes());
    p.extend_from_slice(s.as_bytes());
}

/// Pickles `v` as a `BININT`.
pub fn int(p: &mut Vec<u8>, v: i32) {
    p.push(b'J');
    p.extend_from_slice(&v.to_le_bytes());
}

fn dict(p: &mut Vec<u8>, items: &[(&str, Item)], storages: &mut Vec<Vec<u8>>) {
    p.extend_from_slice(b"}(");
    for (key, value) in items {
        text(p, key);
        match value {
            Item::Int(v) => int(p, *v),
            Item::Dict(inner) => dict(p, inner, storages),
            Item::Tensor(values) => {
                let key = storages.len().to_string();
                rebuild_tensor(p, "FloatStorage", &key, values.len() as i32);
                storages.push(values.iter().flat_map(|v| v.to_le_bytes()).collect());
            }
        }
    }
    p.push(b'u');
}

/// Pickles a 1-D tensor of all `n` elements of storage `key` of class
/// `class` (`FloatStorage`, `ByteStorage`), as torch does:
/// `_rebuild_tensor_v2((storage, class, key, cpu, n), 0, (n,), (1,), False, OrderedDict())`.
pub fn rebuild_tensor(p: &mut Vec<u8>, class: &str, key: &str, n: i32) {
    p.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    text(p, "storage");
    p.extend_from_slice(format!("ctorch\n{class}\n").as_bytes());
    text(p, key);
    text(p, "cpu");
    int(p, n);
    p.extend_from_slice(b"tQK\x00(");
    int(p, n);
    p.extend_from_slice(b"t(K\x01t\x89ccollections\nOrderedDict\n)RtR");
}
