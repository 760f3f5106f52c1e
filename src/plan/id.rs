//! A plan's id: what every run of one fan-out must agree on.
//!
//! Workers of a fan-out plan on their own (`--shard K`), so each must plan
//! against the same version of every input, or the set it commits mixes
//! versions. The id is a digest of the version of every file and object
//! the sources read, as of its opening (a file's length and modification
//! time, an object's size and ETag; an index and each of its shards:
//! [`crate::source::Source::opened`]) and of every planned header's
//! bytes, which hold the whole layout: names, dtypes, shapes, offsets,
//! shards and metadata, so every option that shapes the output is in it.
//! Input names are not: two workers may spell one path differently.
//!
//! `--dry-run --json` reports it as `plan_id`; `--expect-plan ID`
//! ([`crate::plan::PlanOptions::expect_plan`]) makes a run refuse, before
//! writing anything, when its own plan's id differs. Reads stay pinned to
//! the identities planned with: a file is checked unchanged before its
//! output is committed, an object is read with `If-Match` its ETag.

use sha2::{Digest, Sha256};

use crate::plan::Plan;
use crate::source::Listed;
use crate::{ErrorKind, Result};

/// The id of `plan`, made from `listings`: 32 hex digits.
///
/// ```
/// use safetensors_stream::{Dtype, header::TensorMeta, source::Listing};
/// use safetensors_stream::plan::{plan, plan_id, PlanOptions};
///
/// let input = |n: u64| Listing {
///     input: "a.safetensors".into(),
///     tensors: vec![TensorMeta::new("x", Dtype::F32, [n])],
///     metadata: None,
/// };
/// let id = |n| plan_id(&[input(n)], &plan(&[input(n)], &PlanOptions::default()).unwrap());
/// assert_eq!(id(3).len(), 32);
/// assert_eq!(id(3), id(3));
/// assert_ne!(id(3), id(4)); // another layout, another id
/// ```
pub fn plan_id<L: Listed>(listings: &[L], plan: &Plan) -> String {
    let mut digest = Sha256::new();
    digest.update(b"safetensors-stream plan v1\n");
    for listing in listings {
        match listing.identity() {
            Some(identity) => {
                digest.update(b"input ");
                digest.update(identity.len().to_le_bytes());
                digest.update(identity.as_bytes());
            }
            None => digest.update(b"input without identity"),
        }
    }
    digest.update(plan.shards.len().to_le_bytes());
    for shard in &plan.shards {
        // Its length and bytes, hashed a piece at a time (never held whole).
        let len = shard.header.len() as usize;
        digest.update(len.to_le_bytes());
        shard.header.each_piece(|piece| digest.update(piece));
    }
    let bytes = digest.finalize();
    bytes[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses `plan` when `expected` is set and is not its id.
pub(crate) fn check_expected<L: Listed>(
    listings: &[L],
    plan: &Plan,
    expected: Option<&str>,
) -> Result<()> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let found = plan_id(listings, plan);
    if found.eq_ignore_ascii_case(expected.trim()) {
        return Ok(());
    }
    Err(ErrorKind::PlanMismatch {
        expected: expected.to_string(),
        found: format!("this run plans {found}"),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::TensorMeta;
    use crate::plan::{plan, PlanOptions};
    use crate::source::Listing;
    use crate::Dtype;

    /// A listing with an identity, as an opened file has.
    struct Identified(&'static str, Listing);

    impl Listed for Identified {
        fn listing(&self) -> &Listing {
            &self.1
        }
        fn identity(&self) -> Option<String> {
            Some(self.0.to_string())
        }
    }

    /// One F32 tensor `w` of an input of this `identity`.
    fn identified(identity: &'static str) -> [Identified; 1] {
        let mut listing = Listing::new("in.safetensors");
        listing.tensors.push(TensorMeta::new("w", Dtype::F32, [4]));
        [Identified(identity, listing)]
    }

    fn id(identity: &'static str, options: &PlanOptions) -> String {
        let listings = identified(identity);
        plan_id(&listings, &plan(&listings, options).unwrap())
    }

    #[test]
    fn ids_follow_identities_and_options() {
        let plain = PlanOptions::default();
        assert_eq!(id("len=8;mtime=1.0", &plain), id("len=8;mtime=1.0", &plain));
        assert_ne!(id("len=8;mtime=1.0", &plain), id("len=8;mtime=2.0", &plain));
        let cast = PlanOptions::default().cast_all(Some(Dtype::BF16));
        assert_ne!(id("len=8;mtime=1.0", &plain), id("len=8;mtime=1.0", &cast));
        let renamed = PlanOptions::default().prefix(Some("m.".into()));
        assert_ne!(
            id("len=8;mtime=1.0", &plain),
            id("len=8;mtime=1.0", &renamed)
        );
    }

    #[test]
    fn an_unexpected_plan_is_refused_naming_both_ids() {
        let listings = identified("len=8");
        let p = plan(&listings, &PlanOptions::default()).unwrap();
        let own = plan_id(&listings, &p);
        assert!(check_expected(&listings, &p, None).is_ok());
        assert!(check_expected(&listings, &p, Some(&own.to_uppercase())).is_ok());
        let e = check_expected(&listings, &p, Some("0123")).unwrap_err();
        assert_eq!(e.category(), crate::Category::BadInput);
        assert!(e.to_string().contains(&own), "{e}");
    }
}
