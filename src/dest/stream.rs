//! A stream destination (standard output, a device, a FIFO, a socket):
//! bytes go out as they come, so a failure part-way leaves what was sent;
//! only the exit code tells. One file: sharded plans were refused by the
//! check.

use std::path::{Path, PathBuf};

use super::target::open_stream;
use super::writer::{OutWriter, Staged};
use super::WrittenFile;
use crate::{Error, ErrorKind, Result};

/// Standard output, or the stream at a path.
pub(crate) struct StreamOut {
    /// `None`: standard output.
    path: Option<PathBuf>,
    /// Its name as given (`-` for standard output).
    shown: String,
    /// What was sent: nothing to commit.
    pub(crate) written: Vec<WrittenFile>,
}

impl StreamOut {
    pub(crate) fn new(path: Option<PathBuf>, shown: String) -> StreamOut {
        StreamOut {
            path,
            shown,
            written: Vec::new(),
        }
    }

    pub(crate) async fn stage(&mut self) -> Result<Staged> {
        let writer = match &self.path {
            None => OutWriter::Stdout(tokio::io::stdout()),
            Some(path) => OutWriter::File(open_stream_output(path).await?),
        };
        Ok(Staged {
            writer,
            file: None,
            name: self.shown.clone(),
        })
    }
}

/// Opens a device, FIFO or socket output, off the runtime's threads (a FIFO
/// waits for its reader, and a signal must still end the run meanwhile).
async fn open_stream_output(path: &Path) -> Result<tokio::fs::File> {
    use std::io::IsTerminal;
    let on_path = |e: std::io::Error| Error::io(e).with_output(path.display());
    let owned = path.to_path_buf();
    let file = tokio::task::spawn_blocking(move || open_stream(&owned))
        .await
        .map_err(|e| on_path(std::io::Error::other(e)))?
        .map_err(on_path)?;
    if file.is_terminal() {
        return Err(Error::new(ErrorKind::TerminalOutput).with_output(path.display()));
    }
    Ok(tokio::fs::File::from_std(file))
}
