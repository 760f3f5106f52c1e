//! How one conversion copies: the routes it may take and the way it copies
//! verbatim bytes, a value the conversion makes when it starts and hands
//! to every shard's [`super::route::routes`]. Nothing here outlives the
//! conversion: a process converting twice chooses twice.

/// How verbatim bytes are copied (`copy::verbatim` copies them so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From a mapping of the source, handed to `write`.
    Mapped,
    /// `pread` into one buffer of a page-cache-friendly size, then `write`.
    Read,
}

/// Which routes a conversion may take into a file: all, by default. With
/// one off, its tensors take the next route down (a kernel copy, a checked
/// copy or a gathered batch: one tensor through the buffer; the buffer or
/// blocking readers: the async sink), so the output is the same bytes
/// whichever are on, as the conformance suite checks. All off is
/// [`ConvertOptions::fast_path`](crate::ConvertOptions::fast_path) off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Routes {
    /// Verbatim runs copied by the kernel, from a mapping of the source or
    /// through one small buffer (see `way`).
    pub kernel: bool,
    /// Checksummed members copied by the kernel, the CRC computed beside.
    pub checked: bool,
    /// Small tensors gathered into batches, several batches side by side.
    pub gather: bool,
    /// One tensor read at offsets through one buffer.
    pub buffered: bool,
    /// Tensors only blocking readers produce, read side by side.
    pub blocking: bool,
    /// How the kernel copies verbatim bytes: `None` (the default), the way
    /// this machine copies faster, timed on the conversion's first long run.
    pub way: Option<Way>,
}

impl Default for Routes {
    fn default() -> Self {
        Routes::ALL
    }
}

impl Routes {
    /// Every route on: the default, as a constant.
    pub(crate) const ALL: Routes = Routes::all(true);

    /// Every route off: everything through the async sink, as into
    /// anything written forward only (a stream, an object, a checksummed
    /// file).
    pub(crate) const NONE: Routes = Routes::all(false);

    /// Every route on, or every route off.
    const fn all(on: bool) -> Routes {
        Routes {
            kernel: on,
            checked: on,
            gather: on,
            buffered: on,
            blocking: on,
            way: None,
        }
    }

    /// Some route into a file is on.
    pub(crate) fn any(&self) -> bool {
        Routes { way: None, ..*self } != Routes::NONE
    }
}

// For the conformance suite, which forces each route off in turn.
#[cfg(any(test, feature = "internals"))]
crate::setters::setters!(Routes {
    kernel: bool,
    checked: bool,
    gather: bool,
    buffered: bool,
    blocking: bool,
    way: Option<Way>,
});

/// One conversion's copy decisions: made when it starts, from its options,
/// and carried from shard to shard; the trial of the first long verbatim
/// run adds the way it found faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyPolicy {
    /// The routes allowed into an output file; with none on, every tensor
    /// goes through the async sink, the next opened ahead.
    pub(crate) routes: Routes,
}

impl CopyPolicy {
    /// The policy of a conversion allowed `routes`. A checksum must see
    /// every byte: with one, no route goes beside the sink.
    pub(crate) fn new(routes: Routes, checksum: bool) -> CopyPolicy {
        let routes = if checksum { Routes::NONE } else { routes };
        CopyPolicy { routes }
    }

    /// Into what is not a file: no route beside the sink.
    pub(crate) const SINK_ONLY: CopyPolicy = CopyPolicy {
        routes: Routes::NONE,
    };

    /// Tensors may go straight into the output file.
    pub(crate) fn file_routes(&self) -> bool {
        self.routes.any()
    }

    /// The way verbatim runs are copied: forced, or found by this
    /// conversion's trial; `None` before it.
    pub(crate) fn way(&self) -> Option<Way> {
        self.routes.way
    }

    /// Keeps the way this conversion's trial found faster.
    pub(crate) fn chose(&mut self, way: Way) {
        self.routes.way = Some(way);
    }
}
