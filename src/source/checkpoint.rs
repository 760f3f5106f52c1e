//! Safetensors files read from a path, as `validate` and `inspect` read
//! them: an error says what a file of another format is instead ("an .npz
//! (zip) archive, not a safetensors file").
//!
//! Layer: source, above detection (which it asks) and the safetensors
//! format (whose readers it gives detection to).

use std::path::Path;

use super::detect::say_what_it_is;
use super::safetensors::{open_checkpoint, read_header_explained, SafetensorsSource};
use crate::header::{Header, Rules};
use crate::index::Checkpoint;
use crate::Result;

/// Opens `path` (`-` for standard input) and validates its header; the
/// error names the path, and says what the file is when it is another
/// format convert reads (an .npz, a PyTorch checkpoint).
///
/// ```no_run
/// use safetensors_stream::{header::Rules, source::read_file_header};
///
/// let header = read_file_header("model.safetensors".as_ref(), Rules::STRICT)?;
/// println!("{} tensors, {} data bytes", header.tensors.len(), header.data_len());
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub fn read_file_header(path: &Path, rules: Rules) -> Result<Header> {
    read_header_explained(path, rules, say_what_it_is)
}

impl Checkpoint {
    /// Opens `path`: a `.safetensors` file, or an index whose shards are all
    /// validated and checked against its `weight_map` and `total_size`.
    /// Reads headers only.
    pub fn open(path: &Path, rules: Rules) -> Result<Checkpoint> {
        open_checkpoint(path, rules, say_what_it_is)
    }
}

impl SafetensorsSource {
    /// Opens `path` (a `.safetensors` file or a `.safetensors.index.json`), reading headers only.
    #[cfg(any(test, feature = "internals"))]
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_explained(path, say_what_it_is, &crate::Limits::default())
    }
}
