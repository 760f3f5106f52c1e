//! The plan id a shard records outside its bytes, so that `--index-only
//! --expect-plan ID` can refuse a set whose shards came from another plan
//! (an input replaced between two workers' runs) while every shard stays
//! byte-identical to one run's.
//!
//! A run with `--expect-plan` records the id with each shard it writes:
//! - an object: user metadata `plan-id` (S3 `x-amz-meta-plan-id`, GCS
//!   `x-goog-meta-plan-id`, Azure `x-ms-meta-plan-id`), set when the upload
//!   starts, so it exists exactly when the object does;
//! - a file: the extended attribute [`XATTR`], set on the staged file
//!   before it is renamed into place (a rename keeps it). Where the
//!   filesystem has no user extended attributes, nothing is recorded, and
//!   nothing is said: the file is the same either way.
//!
//! `--index-only --expect-plan ID` reads every shard's record first
//! ([`check_records`]): a shard recording another id is refused by name; a
//! shard recording none is refused when another shard records one (a set
//! part written with `--expect-plan`, part without, or a shard copied
//! without its record); a set where no shard records an id is accepted
//! (written without `--expect-plan`, or on a filesystem without extended
//! attributes), the lengths being checked as always.

use std::path::Path;

use crate::{Error, ErrorKind, Result};

/// The extended attribute a shard file records its plan id in.
pub(crate) const XATTR: &str = "user.safetensors_stream.plan_id";

/// The user metadata key an object records its plan id under (S3 sends it
/// as `x-amz-meta-plan-id`).
#[cfg(feature = "object-store")]
pub(crate) const METADATA_KEY: &str = "plan-id";

/// What `found` says of a shard that records no plan id.
const NONE_RECORDED: &str =
    "no plan id recorded with this shard (written without --expect-plan, or copied without it)";

/// Records `id` on `file` as [`XATTR`]; a filesystem without user
/// extended attributes records nothing, silently.
pub(crate) fn record_file(file: &std::fs::File, id: &str, shown: &str) -> Result<()> {
    use rustix::fs::{fsetxattr, XattrFlags};
    match fsetxattr(file, XATTR, id.as_bytes(), XattrFlags::empty()) {
        Err(e) if !unsupported(e) => Err(Error::io(e.into()).with_output(shown)),
        _ => Ok(()),
    }
}

/// The plan id `path` records, if any.
pub(crate) fn read_file(path: &Path) -> Result<Option<String>> {
    let mut buf = [0u8; 256];
    match rustix::fs::getxattr(path, XATTR, &mut buf) {
        Ok(n) => Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
        Err(e) if e == rustix::io::Errno::NODATA || unsupported(e) => Ok(None),
        // Longer than any id we write: another writer's, so another plan.
        Err(e) if e == rustix::io::Errno::RANGE => Ok(Some("(an overlong record)".into())),
        Err(e) => Err(Error::io(e.into()).with_output(path.display())),
    }
}

fn unsupported(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    e == Errno::NOTSUP || e == Errno::OPNOTSUPP || e == Errno::PERM
}

/// Refuses the set unless every shard (named, with its record) records
/// `expected`, or none records anything: the first shard that differs is
/// named, as [`ErrorKind::PlanMismatch`] (exit 1).
pub(crate) fn check_records(expected: &str, shards: &[(String, Option<String>)]) -> Result<()> {
    let expected_id = expected.trim();
    let any = shards.iter().any(|(_, r)| r.is_some());
    for (name, record) in shards {
        let found = match record {
            Some(id) if id.trim().eq_ignore_ascii_case(expected_id) => continue,
            Some(id) => format!("a shard written under plan {id}"),
            None if any => NONE_RECORDED.to_string(),
            None => continue,
        };
        let e = Error::new(ErrorKind::PlanMismatch {
            expected: expected.to_string(),
            found,
        });
        return Err(e.with_output(name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(records: &[Option<&str>]) -> Vec<(String, Option<String>)> {
        records
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("s{i}"), r.map(str::to_string)))
            .collect()
    }

    #[test]
    fn a_shard_without_a_record_is_refused_only_beside_one_with() {
        let e = check_records("aa", &shards(&[Some("aa"), None])).unwrap_err();
        assert_eq!(e.output(), Some("s1"));
        assert!(e.to_string().contains("no plan id recorded"), "{e}");
        assert!(check_records("aa", &shards(&[None, None])).is_ok());
        assert!(check_records("AA ", &shards(&[Some("aa"), Some("aa")])).is_ok());
    }

    #[test]
    fn a_file_records_its_id_where_the_filesystem_can() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        let file = std::fs::File::create(&path).unwrap();
        assert_eq!(read_file(&path).unwrap(), None);
        record_file(&file, "0123abcd", "x").unwrap();
        let got = read_file(&path).unwrap();
        // tmpfs before Linux 6.6 has no user attributes: nothing recorded.
        assert!(matches!(got.as_deref(), Some("0123abcd") | None), "{got:?}");
        // The bytes are untouched either way.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
