//! A conversion planned and checked, nothing written: what `--dry-run`
//! shows. One function for every shell (the binary, the Python package),
//! so a dry run makes exactly the checks the real run makes before its
//! first write, and its JSON is the same whoever asks.

use serde::Serialize;
use serde_json::json;

use super::report::plan_warnings;
use super::{plan_sources, ConvertOptions, Output};
use crate::error::note::fresh_notes;
use crate::inspect::{render_plan, PlanFilesJson};
use crate::plan::{plan_id, Plan};
use crate::source::{Listed, Source};
use crate::{Note, Result, Warning};

/// A plan made from opened sources and checked against its output, as a
/// real run would before writing: what `convert --dry-run` prints.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use safetensors_stream::convert::{dry_run, open_inputs, ConvertOptions, Output};
///
/// let inputs = ["fixtures/example/model.npz".into()];
/// let options = ConvertOptions::default();
/// let sources = open_inputs(&inputs, &options).await?;
/// let out = Output::File("model.safetensors".into());
/// let planned = dry_run(&sources, &out, &options)?;
/// assert_eq!(planned.outputs(), ["model.safetensors"]);
/// let json: serde_json::Value = serde_json::from_str(&planned.to_json(&[])).unwrap();
/// assert_eq!(json["ok"], true);
/// assert_eq!(json["plan_id"], planned.plan_id()); // what `--expect-plan` takes
/// assert!(planned.render().contains("model.safetensors: "));
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
pub struct DryRun<'a> {
    sources: &'a [Box<dyn Source + 'a>],
    plan: Plan,
    outputs: Vec<String>,
    warnings: Vec<Warning>,
}

/// Plans `sources` (opened by [`open_inputs`](super::open_inputs), or any
/// others) for `output` and makes every check the real run makes before writing;
/// nothing is written. An error is the error the real run would stop with.
/// Refused:
/// - binary output to a terminal (`-o -`, `/dev/stdout`, `/dev/tty`);
/// - a sharded set to standard output, a device, a FIFO or a socket;
/// - one file named like an index (`*.index.json`), a name over
///   `NAME_MAX` bytes, a file of the set that is not a regular file;
/// - an output file that is one of the files the sources read (an
///   index's shards, `-` when it is a file, links followed; same device
///   and inode), or an object one of the objects they read, unless
///   [`ConvertOptions::overwrite_input`];
/// - a folder that cannot be written (the nearest existing one, when the
///   output's folders are still to be made);
/// - a [`Part`](super::Part) the plan does not have.
pub fn dry_run<'a>(
    sources: &'a [Box<dyn Source + 'a>],
    output: &Output,
    options: &ConvertOptions,
) -> Result<DryRun<'a>> {
    let plan = plan_sources(sources, options)?;
    let mut warnings = plan_warnings(&plan, sources);
    let (part, overwrite) = (options.part, options.overwrite_input);
    let read = super::read_by(sources);
    warnings.extend(crate::dest::check(&read, output, &plan, part, overwrite)?.1);
    let outputs = output.names(plan.shards.len());
    Ok(DryRun {
        sources,
        plan,
        outputs,
        warnings,
    })
}

/// `--dry-run --json`'s line; fields in sorted order.
#[derive(Serialize)]
#[serde(bound = "")]
struct DryRunJson<'a, L: Listed> {
    // As `Value`s: their keys sorted, as the line always had them.
    casts: serde_json::Value,
    data_bytes: u64,
    file_bytes: u64,
    ok: bool,
    outputs: PlanFilesJson<'a, L>,
    plan_id: String,
    renames: serde_json::Value,
    tensors: usize,
    warnings: Vec<String>,
}

/// A tensor whose output name is not its input name.
#[derive(Serialize)]
struct Rename<'a> {
    input: &'a str,
    from: &'a str,
    to: &'a str,
}

impl DryRun<'_> {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The files the run would write, shards in order then the index.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Things worth knowing that would not stop the run.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The plan's id, for `--expect-plan` ([`plan_id`]).
    pub fn plan_id(&self) -> String {
        plan_id(self.sources, &self.plan)
    }

    /// What `--dry-run --json` prints, as one line without its newline:
    /// the plan with `plan_id`, `casts`, `renames`, `"ok": true`, and in
    /// `warnings` the warnings followed by the `notes` told while opening
    /// and planning, as text, but for a warning listed already.
    pub fn to_json(&self, notes: &[Note]) -> String {
        let warnings = self.warnings.iter().map(Warning::to_string);
        let fresh = fresh_notes(notes, &self.warnings);
        // Serialized as written, not as a `Value` tree (which held ~2 KB a
        // tensor); the keys in the sorted order such a tree gives them.
        let line = DryRunJson {
            casts: json!(self.plan.cast_notes()),
            data_bytes: self.plan.data_len(),
            file_bytes: self.plan.file_len(),
            ok: true,
            outputs: PlanFilesJson {
                plan: &self.plan,
                paths: &self.outputs,
                sources: self.sources,
            },
            plan_id: self.plan_id(),
            renames: json!(self.renames()),
            tensors: self.plan.tensor_count(),
            warnings: warnings.chain(fresh).collect(),
        };
        serde_json::to_string(&line).expect("a plan serializes to JSON")
    }

    /// The plan for people: every output file with its tensors, then one
    /// line per rename. The warnings are not in it: a shell tells them its
    /// own way.
    pub fn render(&self) -> String {
        let mut text = render_plan(&self.plan, &self.outputs, self.sources);
        for r in self.renames() {
            text.push_str(&format!("rename {}: {:?} -> {:?}\n", r.input, r.from, r.to));
        }
        text
    }

    /// Every tensor whose output name differs from its input name, in
    /// output order.
    fn renames(&self) -> Vec<Rename<'_>> {
        self.plan
            .shards
            .iter()
            .flat_map(|s| s.planned(0))
            .filter_map(|p| {
                let source = self.sources[p.source].listing();
                let (from, to) = (&source.tensors[p.index].name, &p.entry.meta.name);
                (from != to).then(|| Rename {
                    input: &source.input,
                    from,
                    to,
                })
            })
            .collect()
    }
}
