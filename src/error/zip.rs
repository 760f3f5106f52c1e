//! What can be wrong with a zip archive (an .npz, the container of a
//! PyTorch checkpoint): a broken or self-contradicting record, or a
//! feature this reader does not implement. Member names are quoted with
//! escapes (`{:?}`).

use std::io;

/// A zip archive that breaks the format, or whose records disagree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum ZipError {
    // ---- the end records ------------------------------------------------------
    /// Shorter than an end-of-central-directory record.
    #[error("file too short for a zip archive")]
    TooShort,
    #[error(
        "no end-of-central-directory record in the last {searched} bytes; \
         the file looks truncated (an interrupted download or copy?)"
    )]
    NoEndRecord { searched: u64 },
    #[error("{}end record counts {on_disk} entries on its disk but {total} in all", if *.zip64 { "zip64 " } else { "" })]
    DiskCounts {
        zip64: bool,
        on_disk: u64,
        total: u64,
    },
    /// The classic and the zip64 end records place the directory apart.
    #[error(
        "end record ({} entries, {} bytes at {}) and zip64 end record ({} entries, {} bytes at {}) disagree",
        .classic.entries, .classic.size, .classic.offset, .zip64.entries, .zip64.size, .zip64.offset
    )]
    EndRecordsDisagree {
        classic: Directory,
        zip64: Directory,
    },
    /// Zip64 markers, and no zip64 locator before the end record.
    #[error("zip64 fields without a zip64 locator")]
    Zip64WithoutLocator,
    #[error("zip64 end record offset {0} is outside the archive")]
    Zip64Outside(u64),
    /// No zip64 end record where the locator points.
    #[error("bad zip64 end-of-central-directory signature")]
    Zip64Signature,
    #[error("zip64 end record at {at} does not end at its locator ({locator})")]
    Zip64Misplaced { at: u64, locator: u64 },

    // ---- the central directory --------------------------------------------------
    #[error("central directory [{}, +{}) does not end where its end record begins ({end})", .directory.offset, .directory.size)]
    DirectoryMisplaced { directory: Directory, end: u64 },
    /// More entries than the directory's bytes can hold.
    #[error("central directory claims {} entries in {} bytes", .0.entries, .0.size)]
    TooManyEntries(Directory),
    #[error("the end record counts {entries} entries, which end at byte {end}, but the directory runs to {directory_end}")]
    EntryCount {
        entries: u64,
        end: u64,
        directory_end: u64,
    },
    #[error("bad central directory entry signature")]
    EntrySignature,
    #[error("central directory ends inside an entry")]
    DirectoryTruncated,
    /// Two entries of one name.
    #[error("member {0:?} appears twice in the central directory")]
    DuplicateMember(String),
    #[error("extra field of member {0:?} overruns its entry")]
    ExtraOverrun(String),
    /// A zip64 extra without a field the entry marks as in it.
    #[error("zip64 extra of member {0:?} is too short")]
    Zip64ExtraShort(String),
    #[error(
        "member {member:?} at offset {offset} with {len} bytes runs past the central directory"
    )]
    PastDirectory {
        member: String,
        offset: u64,
        len: u64,
    },

    // ---- a member's local header --------------------------------------------------
    #[error("bad local header signature for member {0:?}")]
    LocalSignature(String),
    /// A member whose local header and bytes run past the archive's end.
    #[error("member {0:?} runs past the end of its archive")]
    PastEnd(String),
    #[error("member {member:?} has local header name {local:?}")]
    LocalName { member: String, local: String },
    #[error(
        "member {member:?} is method {directory} in the directory but {local} in its local header"
    )]
    LocalMethod {
        member: String,
        directory: u16,
        local: u16,
    },
    #[error("member {member:?} is {} bytes ({} inflated) in the directory but {} ({}) in its local header", .directory.0, .directory.1, .local.0, .local.1)]
    LocalSizes {
        member: String,
        directory: (u64, u64),
        local: (u64, u64),
    },
    #[error("member {member:?} has CRC-32 {directory:08x} in the directory but {local:08x} in its local header")]
    LocalCrc {
        member: String,
        directory: u32,
        local: u32,
    },

    // ---- a member's bytes ---------------------------------------------------------
    #[error("stored member {member:?} has sizes {compressed} and {uncompressed}")]
    StoredSizes {
        member: String,
        compressed: u64,
        uncompressed: u64,
    },
    /// Two members sharing bytes (a zip bomb's trick).
    #[error("members {0:?} and {1:?} overlap")]
    Overlap(String, String),
    /// Deflated bytes that do not inflate.
    #[error("member {member:?}: corrupt deflate data ({source})")]
    CorruptDeflate { member: String, source: io::Error },
    /// Deflated bytes that stop before their end marker.
    #[error(
        "member {member:?}: deflate data ends within its {compressed} compressed bytes ({source})"
    )]
    DeflateTruncated {
        member: String,
        compressed: u64,
        source: io::Error,
    },
    #[error("member {member:?}: inflates past its declared {declared} bytes")]
    InflatesPast { member: String, declared: u64 },
    /// A member that inflates to less than its declared size.
    #[error("member {member:?}: ends after {produced} of its declared {declared} bytes")]
    EndsEarly {
        member: String,
        produced: u64,
        declared: u64,
    },

    // ---- an .npz's members ----------------------------------------------------------
    #[error("member {0:?} is not an .npy array (pass --skip-non-npy to skip it)")]
    NotAnArray(String),
    /// A Keras 3 `.keras` archive (`model.save`): its weights are an HDF5
    /// file inside it, which is read once extracted.
    #[error("a Keras 3 .keras archive (model.save): its weights are the member \"model.weights.h5\", an HDF5 file; extract it (`unzip MODEL.keras model.weights.h5`) and convert that")]
    KerasArchive,

    // ---- what this reader does not do, and what the bytes read say ----------------
    /// A well-formed archive that uses a feature this reader does not
    /// implement (encryption, several disks, a compression method other
    /// than stored and deflated).
    #[error("{0} is not supported")]
    Unsupported(#[source] ZipFeature),
    /// Bytes whose CRC-32 is not the one their archive records (raised
    /// where a member's bytes are read: the zip reader, or the copy path
    /// that reads a stored member's bytes directly).
    #[error("CRC-32 is {actual:08x}, the archive says {expected:08x}")]
    CrcMismatch { actual: u32, expected: u32 },
}

impl ZipError {
    /// Its kind name in reports: `zip_unsupported` and `crc_mismatch`, as
    /// when they were variants of [`ErrorKind`](super::ErrorKind), else `zip`.
    ///
    /// ```
    /// use safetensors_stream::{ErrorKind, ZipError, ZipFeature};
    /// let e = ErrorKind::Zip(ZipError::Unsupported(ZipFeature::MultiDisk));
    /// assert_eq!(e.name(), "zip_unsupported");
    /// assert_eq!(e.to_string(), "zip: a multi-disk archive is not supported");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            ZipError::Unsupported(_) => "zip_unsupported",
            ZipError::CrcMismatch { .. } => "crc_mismatch",
            _ => "zip",
        }
    }

    /// What [`ErrorKind::Zip`](super::ErrorKind::Zip) says before the
    /// error's words: nothing for a CRC mismatch, whose words say "archive".
    pub(super) fn prefix(&self) -> &'static str {
        match self {
            ZipError::CrcMismatch { .. } => "",
            _ => "zip: ",
        }
    }
}

/// A well-formed zip archive that uses a feature this reader does not
/// implement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum ZipFeature {
    /// An archive split over several disks.
    #[error("a multi-disk archive")]
    MultiDisk,
    #[error("compression method {0} (only stored and deflated are read)")]
    Method(u16),
    #[error("encryption (member {0:?})")]
    Encryption(String),
}

/// Where an end record places the central directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directory {
    /// Entries it holds.
    pub entries: u64,
    /// Its bytes.
    pub size: u64,
    /// Where it starts.
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are the ones the parser wrote before its errors had kinds.
    #[test]
    fn messages_say_what_they_said_as_text() {
        let dir = |entries, size, offset| Directory {
            entries,
            size,
            offset,
        };
        let m = || "w.npy".to_string();
        let cases: Vec<(ZipError, &str)> = vec![
            (
                ZipError::NoEndRecord { searched: 22 },
                "no end-of-central-directory record in the last 22 bytes; the file looks \
                 truncated (an interrupted download or copy?)",
            ),
            (
                ZipError::DiskCounts {
                    zip64: true,
                    on_disk: 1,
                    total: 2,
                },
                "zip64 end record counts 1 entries on its disk but 2 in all",
            ),
            (
                ZipError::DiskCounts {
                    zip64: false,
                    on_disk: 1,
                    total: 2,
                },
                "end record counts 1 entries on its disk but 2 in all",
            ),
            (
                ZipError::EndRecordsDisagree {
                    classic: dir(1, 46, 0),
                    zip64: dir(2, 92, 10),
                },
                "end record (1 entries, 46 bytes at 0) and zip64 end record (2 entries, 92 \
                 bytes at 10) disagree",
            ),
            (
                ZipError::DirectoryMisplaced {
                    directory: dir(1, 46, 100),
                    end: 150,
                },
                "central directory [100, +46) does not end where its end record begins (150)",
            ),
            (
                ZipError::TooManyEntries(dir(9, 46, 0)),
                "central directory claims 9 entries in 46 bytes",
            ),
            (
                ZipError::EntryCount {
                    entries: 1,
                    end: 146,
                    directory_end: 192,
                },
                "the end record counts 1 entries, which end at byte 146, but the directory \
                 runs to 192",
            ),
            (
                ZipError::PastDirectory {
                    member: m(),
                    offset: 7,
                    len: 9,
                },
                "member \"w.npy\" at offset 7 with 9 bytes runs past the central directory",
            ),
            (
                ZipError::LocalSizes {
                    member: m(),
                    directory: (1, 2),
                    local: (3, 4),
                },
                "member \"w.npy\" is 1 bytes (2 inflated) in the directory but 3 (4) in its \
                 local header",
            ),
            (
                ZipError::LocalCrc {
                    member: m(),
                    directory: 0xab,
                    local: 0xcd,
                },
                "member \"w.npy\" has CRC-32 000000ab in the directory but 000000cd in its \
                 local header",
            ),
            (
                ZipError::DeflateTruncated {
                    member: m(),
                    compressed: 5,
                    source: io::Error::new(io::ErrorKind::UnexpectedEof, "eof"),
                },
                "member \"w.npy\": deflate data ends within its 5 compressed bytes (eof)",
            ),
            (
                ZipError::EndsEarly {
                    member: m(),
                    produced: 3,
                    declared: 8,
                },
                "member \"w.npy\": ends after 3 of its declared 8 bytes",
            ),
            (
                ZipError::NotAnArray("a.txt".into()),
                "member \"a.txt\" is not an .npy array (pass --skip-non-npy to \
                 skip it)",
            ),
        ];
        for (e, words) in cases {
            assert_eq!(e.to_string(), words);
        }
        assert_eq!(
            ZipFeature::Method(14).to_string(),
            "compression method 14 (only stored and deflated are read)"
        );
        assert_eq!(
            ZipFeature::Encryption("k".into()).to_string(),
            "encryption (member \"k\")"
        );
    }

    #[test]
    fn the_inflaters_error_is_the_source() {
        let e = crate::Error::new(crate::ErrorKind::Zip(ZipError::CorruptDeflate {
            member: "w.npy".into(),
            source: io::Error::new(io::ErrorKind::InvalidData, "invalid block type"),
        }));
        assert_eq!(e.kind().name(), "zip");
        let zip = std::error::Error::source(&e).expect("the zip error");
        let inflater = zip.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(
            inflater.map(io::Error::kind),
            Some(io::ErrorKind::InvalidData)
        );
    }
}
