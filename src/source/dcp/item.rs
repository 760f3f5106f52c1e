//! One chunk's item in a `.distcp` file: a whole `torch.save` archive of
//! the rank's local shard, at the item's offset, read with the PyTorch
//! source's zip layout, unpickler and tensor walk. Its one tensor must be
//! the chunk (dtype and sizes), inside its storage, and its bytes are read
//! in the chunk's row-major order whatever its strides, its storage's
//! CRC-32 checked (torch's own reader checks none).

use std::fs::File;
use std::sync::Arc;

use super::layout::Chunk;
use crate::dtype::numel;
use crate::error::dcp::DcpError;
use crate::io_util::PositionalReader;
use crate::source::pytorch::model::{self, Naming};
use crate::source::pytorch::pickle::{unpickle, Limits};
use crate::source::pytorch::strided::{StridedReader, View};
use crate::source::pytorch::zipfmt;
use crate::source::zip::{read_directory_at, MemberReader, Method, ZipEntry};
use crate::source::BlockingRead;
use crate::{Dtype, Error, Result};

/// Where an item lies: its file (an index into the source's files), first
/// byte and length, as the metadata's storage entry says, and its form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Item {
    /// The `.distcp` file.
    pub(crate) file: u32,
    /// Its first byte there.
    pub(crate) offset: u64,
    pub(crate) length: u64,
    /// What its bytes are.
    pub(crate) form: Form,
}

/// What an item's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A whole `torch.save` archive of the chunk's local tensor
    /// (`FileSystemWriter`'s `.distcp` items).
    Archive,
    /// The chunk's own elements, row-major and little-endian (a tensor of
    /// a safetensors file, as `HuggingFaceStorageWriter` writes them).
    Plain,
}

/// A chunk's local tensor as its item holds it.
#[derive(Debug)]
pub(crate) struct Local {
    /// The view of its storage (offset, sizes and strides in elements).
    view: View,
    /// Its storage's first byte in the file.
    storage_start: u64,
    /// Its storage's bytes.
    storage_len: u64,
    /// Its storage's zip member, when it has a CRC-32 to check.
    member: Option<ZipEntry>,
}

fn item_tensor(tensor: &str, chunk: &Chunk, expected: String, found: String) -> Error {
    let e = DcpError::ItemTensor {
        chunk: chunk.label(),
        expected,
        found,
    };
    Error::new(e).with_tensor(tensor)
}

/// Opens the item of `chunk` of `tensor` (of `dtype`) at `at` in `file`.
pub(crate) fn open(
    file: &File,
    at: Item,
    tensor: &str,
    dtype: Dtype,
    chunk: &Chunk,
) -> Result<Local> {
    let (entries, dir_start) = read_directory_at(file, at.offset, at.length)?;
    let c = zipfmt::open(file, &entries, dir_start)?;
    drop(entries);
    let pickle = zipfmt::read_pickle(file, &c)?;
    let (p, _) = unpickle(&pickle, Limits::for_input(pickle.len()))?;
    let naming = Naming {
        root: None,
        bare: Some(tensor.to_string()),
    };
    let tree = model::tensors(&p, &naming, &c.storages)?;
    let expected = format!("one {dtype} tensor of sizes {:?}", chunk.sizes);
    let (t, place) = match (tree.tensors.as_slice(), tree.skipped) {
        ([t], 0) => (t, tree.places[0]),
        (all, skipped) => {
            let found = format!("{} tensors and {skipped} other values", all.len());
            return Err(item_tensor(tensor, chunk, expected, found));
        }
    };
    if t.dtype != dtype || t.shape[..] != chunk.sizes[..] {
        let found = format!("a {} tensor of sizes {:?}", t.dtype, t.shape);
        return Err(item_tensor(tensor, chunk, expected, found));
    }
    if c.big_endian && t.dtype.byte_width().is_some_and(|w| w > 1) {
        // Each item says its order, and a tensor's chunks could disagree:
        // written by torch on a big-endian machine, not read yet.
        let found = "big-endian bytes".to_string();
        return Err(item_tensor(tensor, chunk, expected, found));
    }
    let (key, storage) = c.storages.get(place.storage);
    let view = model::view(t, place, model::stride_of(&tree.strides, 0));
    // The walk checked the view inside its storage. It may not reach more
    // bytes than the storage holds either (a stride-0 expansion): torch's
    // writer clones such a shard before saving it, so none is written.
    let bytes = numel(&view.shape).and_then(|n| n.checked_mul(view.width));
    if bytes.is_none_or(|b| b > storage.len) {
        let found = format!(
            "a view of {:?} elements over a storage of {} bytes",
            view.shape, storage.len
        );
        return Err(item_tensor(tensor, chunk, expected, found));
    }
    let member = storage.crc.map(|crc32| ZipEntry {
        name: format!("{}{key}", c.data_prefix),
        method: Method::Stored,
        flags: 0,
        crc32,
        compressed: storage.len,
        uncompressed: storage.len,
        local_offset: 0,
    });
    Ok(Local {
        view,
        storage_start: storage.start,
        storage_len: storage.len,
        member,
    })
}

impl Local {
    /// Its bytes in row-major order, from `file`. A contiguous view of its
    /// whole storage is read through the member's CRC-32 check; any other
    /// view has its storage checked in one pass first.
    pub(crate) fn reader(&self, file: Arc<File>) -> Result<BlockingRead> {
        let bytes = self.storage_len;
        let whole = self.view.is_contiguous()
            && self.view.offset == 0
            && numel(&self.view.shape).and_then(|n| n.checked_mul(self.view.width)) == Some(bytes);
        if let Some(member) = &self.member {
            if whole {
                return Ok(Box::new(MemberReader::new(
                    file,
                    member,
                    self.storage_start,
                    0,
                )?));
            }
            let mut check = MemberReader::new(&*file, member, self.storage_start, 0)?;
            std::io::copy(&mut check, &mut std::io::sink()).map_err(Error::io)?;
        }
        if self.view.is_contiguous() {
            let len = numel(&self.view.shape).unwrap_or(0) * self.view.width;
            let from = self.storage_start + self.view.offset * self.view.width;
            return Ok(Box::new(PositionalReader::new(file, from, len)));
        }
        let file = Arc::try_unwrap(file).or_else(|f| f.try_clone())?;
        Ok(Box::new(StridedReader::new(
            file,
            self.storage_start,
            &self.view,
        )))
    }
}
