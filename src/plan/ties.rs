//! `--dedupe-tied`: one tensor of each group of tied tensors is written,
//! the others are recorded in the metadata as `dropped name -> kept name`.
//!
//! A source reports its groups ([`crate::source::Listed::tied_groups`]):
//! tensors that are the same bytes (a PyTorch checkpoint's views with one
//! storage, dtype, shape, stride and offset). The planner applies them here,
//! *after* `--include/--exclude/--rename/--prefix`, so that:
//! - a group counts only its selected members: excluding one name of a pair
//!   writes the other, including one selects it, as without the flag;
//! - the records name output tensors (renamed, prefixed);
//! - a name that is already a metadata key (an input's or `--metadata`'s,
//!   e.g. a tensor called `format`) keeps its tensor: its record could not
//!   be written, and dropping it would lose it.
//!
//! **Which name is kept: the first of the group in the checkpoint's own
//! order** (the pickle's dict order, which for a `state_dict` is module
//! registration order). This is the name transformers keeps:
//! `save_pretrained` (`remove_tied_weights_from_state_dict` in
//! `modeling_utils.py`) deletes the names matching the model's
//! `_tied_weights_keys`, the tie *targets* (`lm_head.weight`,
//! `cls.predictions.decoder.weight`, T5's `encoder/decoder.embed_tokens`),
//! and keeps the source, the input embedding; the Hugging Face conversion
//! script (`bindings/python/convert.py` of huggingface/safetensors, through
//! `_remove_duplicate_names` with `discard_names = _tied_weights_keys`) does
//! the same. Without the model class we cannot read `_tied_weights_keys`,
//! but a model registers its input embedding before the head tied to it,
//! so the first name in the checkpoint is the source for GPT-2, LLaMA,
//! BERT, T5 and OPT; transformers 4.5x re-ties only from the source side,
//! so keeping the target (the first name in sorted order) loads with the
//! tied weights left on the `meta` device.

use std::collections::HashMap;

use crate::header::{Metadata, TensorEntry};
use crate::plan::TensorRef;
use crate::source::Listed;

/// Drops every selected member of a tied group but its first, in place,
/// and records each dropped output name in `metadata`, pointing at the kept
/// one. Groups with fewer than two selected members change nothing.
pub(super) fn dedupe<L: Listed>(
    listings: &[L],
    entries: &mut Vec<TensorEntry>,
    refs: &mut Vec<TensorRef>,
    metadata: &mut Option<Metadata>,
) {
    let groups: Vec<Vec<Vec<usize>>> = listings.iter().map(|l| l.tied_groups()).collect();
    if groups.iter().all(Vec::is_empty) {
        return;
    }
    // Where each selected (source, index) landed in the output.
    let at: HashMap<(usize, usize), usize> = refs
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.source(), r.index()), i))
        .collect();
    let mut drop = vec![false; entries.len()];
    for (source, groups) in groups.iter().enumerate() {
        for group in groups {
            let mut selected = group.iter().filter_map(|&k| at.get(&(source, k)).copied());
            let Some(kept) = selected.next() else {
                continue;
            };
            for i in selected {
                let name = &entries[i].meta.name;
                let md = metadata.get_or_insert_with(Metadata::new);
                if md.contains_key(name) {
                    continue;
                }
                md.insert(name.clone(), entries[kept].meta.name.clone());
                drop[i] = true;
            }
        }
    }
    let mut k = 0;
    entries.retain(|_| {
        k += 1;
        !drop[k - 1]
    });
    let mut k = 0;
    refs.retain(|_| {
        k += 1;
        !drop[k - 1]
    });
}

#[cfg(test)]
mod tests {
    use crate::header::{Metadata, TensorMeta};
    use crate::plan::{plan, Plan, PlanOptions};
    use crate::source::{Listed, Listing};
    use crate::Dtype;

    /// A checkpoint whose tensors 0 and 2 are one storage view (GPT-2's
    /// `wte` registered before `lm_head`, which sorts first).
    struct Tied(Listing);

    impl Listed for Tied {
        fn listing(&self) -> &Listing {
            &self.0
        }
        fn tied_groups(&self) -> Vec<Vec<usize>> {
            vec![vec![0, 2]]
        }
    }

    fn gpt2(third: &str) -> Tied {
        let t = |n: &str| TensorMeta::new(n, Dtype::F32, [4, 2]);
        Tied(Listing {
            input: "gpt2.bin".into(),
            tensors: vec![t("wte.weight"), t("h.0.w"), t(third)],
            metadata: Some([("format".to_string(), "pt".to_string())].into()),
        })
    }

    fn names(p: &Plan) -> Vec<String> {
        let mut v: Vec<String> = p.shards[0]
            .header
            .header()
            .tensors
            .iter()
            .map(|t| t.meta.name.clone())
            .collect();
        v.sort();
        v
    }

    fn metadata(p: &Plan) -> Metadata {
        p.shards[0]
            .header
            .header()
            .metadata
            .clone()
            .unwrap_or_default()
    }

    #[test]
    fn keeps_the_first_in_checkpoint_order_not_sorted() {
        let p = plan(&[gpt2("lm_head.weight")], &PlanOptions::default()).unwrap();
        assert_eq!(names(&p), ["h.0.w", "wte.weight"]);
        assert_eq!(metadata(&p)["lm_head.weight"], "wte.weight");
    }

    #[test]
    fn records_name_output_tensors_after_renames_and_prefix() {
        let o = PlanOptions::default()
            .renames(vec![("wte.weight".into(), "embed.weight".into())])
            .prefix(Some("m.".into()));
        let p = plan(&[gpt2("lm_head.weight")], &o).unwrap();
        assert_eq!(names(&p), ["m.embed.weight", "m.h.0.w"]);
        let md = metadata(&p);
        assert_eq!(md["m.lm_head.weight"], "m.embed.weight");
        assert!(!md.contains_key("lm_head.weight"));
    }

    #[test]
    fn excluding_or_including_one_name_behaves_as_without_the_flag() {
        let o = PlanOptions::default().exclude(vec!["wte.*".into()]);
        let p = plan(&[gpt2("lm_head.weight")], &o).unwrap();
        assert_eq!(names(&p), ["h.0.w", "lm_head.weight"]);
        assert!(!metadata(&p).contains_key("lm_head.weight"));
        let o = PlanOptions::default().include(vec!["lm_head.*".into()]);
        let p = plan(&[gpt2("lm_head.weight")], &o).unwrap();
        assert_eq!(names(&p), ["lm_head.weight"]);
        assert_eq!(metadata(&p).len(), 1, "only format: {:?}", metadata(&p));
    }

    #[test]
    fn a_tensor_named_like_a_metadata_key_is_kept() {
        let p = plan(&[gpt2("format")], &PlanOptions::default()).unwrap();
        assert_eq!(names(&p), ["format", "h.0.w", "wte.weight"]);
        assert_eq!(metadata(&p)["format"], "pt");
        let o = PlanOptions::default().metadata(vec![("note".into(), "x".into())]);
        let p = plan(&[gpt2("note")], &o).unwrap();
        assert_eq!(names(&p), ["h.0.w", "note", "wte.weight"]);
    }
}
