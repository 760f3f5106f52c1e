//! What a conversion did, and what a plan says before it is carried out:
//! the warnings it deserves (the casts it applies are the plan's own,
//! [`Plan::cast_notes`]).

use std::collections::HashMap;

use serde::Serialize;

use crate::dest::WrittenFile;
use crate::error::note::fresh_notes;
use crate::header::HUB_HEADER_LIMIT;
use crate::plan::{CastNote, Plan};
use crate::source::Source;
use crate::{Note, Warning};

/// What a conversion did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The inputs, as named in messages.
    pub inputs: Vec<String>,
    /// Files written, shards first, then the index if any.
    pub outputs: Vec<WrittenFile>,
    /// Tensors written.
    pub tensors: usize,
    /// Tensor bytes written (headers excluded).
    pub data_bytes: u64,
    /// Wall time of the whole job.
    pub seconds: f64,
    /// The casts applied.
    pub casts: Vec<CastNote>,
    /// Things worth knowing that did not stop the job.
    pub warnings: Vec<Warning>,
}

impl Report {
    /// The report as the CLI's `--report json` prints it (and the Python
    /// package returns it): this report's fields, `"ok": true`, and the
    /// notes told during the run appended to `warnings` as text, except a
    /// warning the report holds already. One function for both, so the two
    /// agree by construction.
    ///
    /// ```
    /// use safetensors_stream::{convert_blocking, ConvertOptions, Note, Output};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let out = Output::File(dir.path().join("m.safetensors"));
    /// let report = convert_blocking(&["fixtures/example/model.npz".into()], &out, &ConvertOptions::default())?;
    /// let notes = [Note::Info("a notice".into())];
    /// let json: serde_json::Value = serde_json::from_str(&report.to_json(&notes))?;
    /// assert_eq!(json["ok"], true);
    /// assert_eq!(json["tensors"], report.tensors);
    /// assert_eq!(json["warnings"].as_array().unwrap().last().unwrap(), "a notice");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_json(&self, notes: &[Note]) -> String {
        let mut v = serde_json::to_value(self).expect("JSON of a report");
        v["ok"] = serde_json::Value::Bool(true);
        if let Some(w) = v["warnings"].as_array_mut() {
            let fresh = fresh_notes(notes, &self.warnings);
            w.extend(fresh.map(serde_json::Value::String));
        }
        v.to_string()
    }
}

/// Warnings about a plan of `sources`: headers the Hugging Face Hub would
/// refuse, tied weights written more than once.
pub(crate) fn plan_warnings(plan: &Plan, sources: &[Box<dyn Source + '_>]) -> Vec<Warning> {
    let lens = plan.shards.iter().map(|s| s.header.header.header_len);
    let hub = lens
        .filter(|&len| len > HUB_HEADER_LIMIT)
        .map(|bytes| Warning::HubHeader {
            bytes,
            limit: HUB_HEADER_LIMIT,
        });
    let tied = sources
        .iter()
        .enumerate()
        .filter_map(|(s, source)| tied_written_twice(plan, s, source.as_ref()));
    hub.chain(tied).collect()
}

/// The tied tensors of `source` (the `s`th) that `plan` writes more than
/// once, when `--dedupe-tied` was not asked: each repeat (the selected
/// members of a group after its first, in the input's order) with the
/// name it repeats, and their bytes.
fn tied_written_twice(plan: &Plan, s: usize, source: &dyn Source) -> Option<Warning> {
    let groups = source.tied_views();
    if groups.is_empty() || !source.tied_groups().is_empty() {
        return None;
    }
    let group_of: HashMap<usize, usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, members)| members.iter().map(move |&k| (k, g)))
        .collect();
    // Each group's selected members: (index in the input, output name, bytes).
    let mut selected: Vec<Vec<(usize, &str, u64)>> = vec![Vec::new(); groups.len()];
    let planned = plan.shards.iter().flat_map(|sh| sh.planned(0));
    for p in planned.filter(|p| p.source == s) {
        if let Some(&g) = group_of.get(&p.index) {
            let t = p.entry;
            selected[g].push((p.index, &t.meta.name, t.end - t.begin));
        }
    }
    let (mut repeats, mut bytes) = (Vec::new(), 0u64);
    for mut members in selected {
        members.sort_unstable_by_key(|&(k, _, _)| k);
        if let Some(((_, kept, _), rest)) = members.split_first() {
            for &(_, name, len) in rest {
                repeats.push((name.to_string(), kept.to_string()));
                bytes = bytes.saturating_add(len);
            }
        }
    }
    (!repeats.is_empty()).then(|| Warning::TiedWrittenTwice {
        input: source.input_name().to_string(),
        repeats,
        bytes,
    })
}
