//! A bridge from a blocking `std::io::Read` to `AsyncRead`: each chunk is
//! read on tokio's blocking pool, so decoders and positional file readers
//! can be written as plain synchronous code without stalling the runtime.

use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::task::JoinHandle;

/// Bytes read per trip to the blocking pool: the bridge's whole memory.
pub(crate) const CHUNK: usize = 1 << 20;

type Trip<R> = (R, Vec<u8>, io::Result<usize>);

/// Reads a blocking reader on tokio's blocking pool, one chunk at a time.
pub(crate) struct BlockingReader<R> {
    state: State<R>,
    chunk: usize,
}

enum State<R> {
    /// The reader is here; `buf[pos..filled]` is read but not yet returned.
    Idle {
        reader: R,
        buf: Vec<u8>,
        pos: usize,
        filled: usize,
    },
    Busy(JoinHandle<Trip<R>>),
    /// A trip panicked or was cancelled; the reader is gone.
    Broken,
}

impl<R: Read + Send + 'static> BlockingReader<R> {
    /// Wraps `reader`.
    pub(crate) fn new(reader: R) -> Self {
        Self::with_chunk(reader, CHUNK)
    }

    /// Wraps `reader`, reading `chunk` bytes per trip.
    pub(crate) fn with_chunk(reader: R, chunk: usize) -> Self {
        BlockingReader {
            state: State::Idle {
                reader,
                buf: Vec::new(),
                pos: 0,
                filled: 0,
            },
            chunk: chunk.max(1),
        }
    }
}

// The reader is moved, never pinned: only the JoinHandle is polled.
impl<R> Unpin for BlockingReader<R> {}

impl<R: Read + Send + 'static> AsyncRead for BlockingReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Idle {
                    buf, pos, filled, ..
                } if *pos < *filled => {
                    let n = (*filled - *pos).min(out.remaining());
                    out.put_slice(&buf[*pos..*pos + n]);
                    *pos += n;
                    return Poll::Ready(Ok(()));
                }
                State::Idle { .. } => {
                    let State::Idle {
                        mut reader,
                        mut buf,
                        ..
                    } = std::mem::replace(&mut this.state, State::Broken)
                    else {
                        unreachable!("matched Idle above")
                    };
                    // Grows once to `chunk`; never beyond.
                    buf.resize(this.chunk, 0);
                    this.state = State::Busy(tokio::task::spawn_blocking(move || {
                        let r = reader.read(&mut buf);
                        (reader, buf, r)
                    }));
                }
                State::Busy(handle) => {
                    let joined = ready!(Pin::new(handle).poll(cx));
                    let (reader, buf, result) = match joined {
                        Ok(trip) => trip,
                        Err(e) => {
                            this.state = State::Broken;
                            return Poll::Ready(Err(io::Error::other(e)));
                        }
                    };
                    let filled = match result {
                        Ok(n) => n,
                        Err(e) => {
                            this.state = State::Idle {
                                reader,
                                buf,
                                pos: 0,
                                filled: 0,
                            };
                            return Poll::Ready(Err(e));
                        }
                    };
                    this.state = State::Idle {
                        reader,
                        buf,
                        pos: 0,
                        filled,
                    };
                    if filled == 0 {
                        return Poll::Ready(Ok(())); // end of input
                    }
                }
                State::Broken => {
                    return Poll::Ready(Err(io::Error::other(
                        "reader lost after a failed blocking read",
                    )));
                }
            }
        }
    }
}

/// Reads a blocking reader on a thread of its own, up to `depth` chunks
/// ahead of the consumer: the next npz member inflates on the second core
/// while this one is written. Memory: at most `depth + 1` chunks.
pub(crate) struct ReadAhead {
    rx: tokio::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    pos: usize,
}

impl ReadAhead {
    /// Starts reading `reader` now, in `chunk`-byte pieces. Needs a tokio runtime.
    pub(crate) fn spawn<R: Read + Send + 'static>(
        mut reader: R,
        chunk: usize,
        depth: usize,
    ) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(depth.max(1));
        let chunk = chunk.max(1);
        tokio::task::spawn_blocking(move || loop {
            let mut buf = vec![0u8; chunk];
            let msg = match crate::io_util::fill(&mut reader, &mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(buf)
                }
                Err(e) => Err(e),
            };
            let failed = msg.is_err();
            // A dropped consumer ends the thread.
            if tx.blocking_send(msg).is_err() || failed {
                return;
            }
        });
        ReadAhead {
            rx,
            current: Vec::new(),
            pos: 0,
        }
    }
}

impl AsyncRead for ReadAhead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pos == this.current.len() {
            match ready!(this.rx.poll_recv(cx)) {
                Some(Ok(buf)) => {
                    this.current = buf;
                    this.pos = 0;
                }
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => return Poll::Ready(Ok(())), // end of input
            }
        }
        let n = (this.current.len() - this.pos).min(out.remaining());
        out.put_slice(&this.current[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn reads_everything_in_small_chunks() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut r = BlockingReader::with_chunk(std::io::Cursor::new(data.clone()), 7);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, data);
    }
}
