//! What a conversion did, and what a plan says before it is carried out:
//! the casts it applies, the warnings it deserves.

use serde::Serialize;

use crate::dest::WrittenFile;
use crate::header::HUB_HEADER_LIMIT;
use crate::plan::Plan;

/// A cast that a conversion applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CastNote {
    /// The output tensor.
    pub tensor: String,
    /// Its dtype in the input.
    pub from: String,
    /// Its dtype in the output.
    pub to: String,
}

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
    pub warnings: Vec<String>,
}

impl Report {
    /// The report as the CLI's `--report json` prints it (and the Python
    /// package returns it): this report's fields, `"ok": true`, and the
    /// notices collected during the run appended to `warnings`, except a
    /// `warning: ...` notice of a warning the report holds already. One
    /// function for both, so the two agree by construction.
    ///
    /// ```
    /// use safetensors_stream::{convert_blocking, ConvertOptions, Output};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let out = Output::File(dir.path().join("m.safetensors"));
    /// let report = convert_blocking(&["fixtures/example/model.npz".into()], &out, &ConvertOptions::default())?;
    /// let json: serde_json::Value = serde_json::from_str(&report.to_json(&["a notice".into()]))?;
    /// assert_eq!(json["ok"], true);
    /// assert_eq!(json["tensors"], report.tensors);
    /// assert_eq!(json["warnings"].as_array().unwrap().last().unwrap(), "a notice");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_json(&self, notices: &[String]) -> String {
        let mut v = serde_json::to_value(self).expect("JSON of a report");
        v["ok"] = serde_json::Value::Bool(true);
        if let Some(w) = v["warnings"].as_array_mut() {
            let fresh = fresh_notices(notices, &self.warnings);
            w.extend(fresh.cloned().map(serde_json::Value::String));
        }
        v.to_string()
    }
}

/// The notices that say something `warnings` does not: a warning the
/// library also told as a `warning: ...` notice is listed once.
pub(crate) fn fresh_notices<'a>(
    notices: &'a [String],
    warnings: &'a [String],
) -> impl Iterator<Item = &'a String> + 'a {
    notices.iter().filter(|n| {
        !n.strip_prefix("warning: ")
            .is_some_and(|bare| warnings.iter().any(|w| w == bare))
    })
}

/// The casts a plan applies, for reports.
pub(crate) fn cast_notes(plan: &Plan) -> Vec<CastNote> {
    plan.shards
        .iter()
        .flat_map(|s| s.refs.iter().zip(&s.header.header().tensors))
        .filter_map(|(r, t)| {
            r.cast().map(|c| CastNote {
                tensor: t.meta.name.clone(),
                from: c.from().to_string(),
                to: c.to().to_string(),
            })
        })
        .collect()
}

/// Warnings about a plan: headers the Hugging Face Hub would refuse.
pub(crate) fn plan_warnings(plan: &Plan) -> Vec<String> {
    let lens = plan.shards.iter().map(|s| s.header.header().header_len);
    lens.filter(|&len| len > HUB_HEADER_LIMIT)
        .map(|len| {
            let hub = HUB_HEADER_LIMIT;
            format!("a header of {len} bytes exceeds the {hub} bytes the Hugging Face Hub accepts")
        })
        .collect()
}
