//! One plan, many independent workers: which part of a sharded plan a run
//! writes (`--shard K`, `--index-only`), and the check that every shard is
//! in place before the index, the set's commit point, is written.
//!
//! Every worker plans the whole conversion from the headers alone, so all
//! of them agree on the layout without talking to each other; worker K
//! writes shard K only, byte-identical to the shard a single run writes.

use std::path::PathBuf;

use crate::plan::Plan;
use crate::{Error, ErrorKind, Result};

/// Which files of the plan a run writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Part {
    /// Every shard, then the index (the default).
    #[default]
    All,
    /// Shard K only (1-based: the K of `-0000K-of-0000N`), no index.
    /// Running it twice writes the same bytes.
    Shard(usize),
    /// No shard: check that every planned shard is there at its planned
    /// length, then write the index. A plan of one file has no index: the
    /// file is checked, and nothing is written, so a fan-out's last step is
    /// the same command for any number of shards.
    IndexOnly,
}

impl Part {
    /// Refuses a part the plan does not have: a shard number out of range.
    pub fn check(self, plan: &Plan) -> Result<()> {
        let count = plan.shards.len();
        let msg = match self {
            Part::All => return Ok(()),
            Part::Shard(k) if (1..=count).contains(&k) => return Ok(()),
            Part::Shard(k) => format!(
                "--shard {k}: the plan has {count} shard{} (numbered from 1)",
                if count == 1 { "" } else { "s" }
            ),
            Part::IndexOnly => return Ok(()),
        };
        Err(ErrorKind::Usage(msg).into())
    }

    /// Whether the shard at `index` (0-based) is written by this run.
    pub fn writes_shard(self, index: usize) -> bool {
        match self {
            Part::All => true,
            Part::Shard(k) => k == index + 1,
            Part::IndexOnly => false,
        }
    }

    /// Whether this run writes the index (when the plan has one).
    pub fn writes_index(self) -> bool {
        matches!(self, Part::All | Part::IndexOnly)
    }
}

/// `--index-only` on files: every shard exists as a regular file of its
/// planned length (a stat each), or the first that does not is named.
pub(crate) fn check_shard_files(plan: &Plan, paths: &[PathBuf]) -> Result<()> {
    for (shard, path) in plan.shards.iter().zip(paths) {
        let found = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => Some(m.len()),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(e).with_output(path.display())),
        };
        check_shard_len(&path.display().to_string(), found, shard.file_len())?;
    }
    Ok(())
}

/// A shard found at `found` bytes (`None`: not there) against its plan.
pub(crate) fn check_shard_len(shown: &str, found: Option<u64>, planned: u64) -> Result<()> {
    let detail = match found {
        Some(len) if len == planned => return Ok(()),
        Some(len) => format!("it holds {len} bytes, the plan {planned}"),
        None => "it does not exist".to_string(),
    };
    Err(Error::new(ErrorKind::ShardNotWritten {
        shard: shown.to_string(),
        detail,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_select_shards_and_index() {
        assert!(Part::All.writes_shard(3) && Part::All.writes_index());
        assert!(Part::Shard(2).writes_shard(1));
        assert!(!Part::Shard(2).writes_shard(0) && !Part::Shard(2).writes_index());
        assert!(!Part::IndexOnly.writes_shard(0) && Part::IndexOnly.writes_index());
    }

    #[test]
    fn shard_lengths_are_checked() {
        assert!(check_shard_len("a", Some(8), 8).is_ok());
        for found in [None, Some(7)] {
            let e = check_shard_len("a", found, 8).unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::ShardNotWritten { shard, .. } if shard == "a"));
        }
    }
}
