//! What a run tells that is not an error: [`Note`]s, told as they happen
//! to a [`NoticeFn`], of which [`Warning`]s are the ones a user should
//! heed. Warnings are values: a report lists each once, however many ways
//! it was told, by comparing them, not their text. The shells render them
//! (`convert: warning: ...` on stderr, strings in the JSON report).

use std::fmt;
use std::sync::Arc;

use crate::Dtype;

/// Something worth knowing that did not stop the run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // a field its variant's doc names goes undocumented
pub enum Warning {
    /// A header longer than the Hugging Face Hub accepts.
    HubHeader { bytes: u64, limit: u64 },
    /// An output named like another format (its bytes are safetensors).
    OutputExtension { output: String, extension: String },
    /// An output replaced whose other hard links keep the old bytes.
    HardLinks { output: String, others: u64 },
    /// Values of a checkpoint that are not tensors (numbers, strings,
    /// hyper-parameters), skipped.
    SkippedValues {
        input: String,
        count: usize,
        /// The paths of the first few.
        paths: Vec<String>,
    },
    /// Finite values of a tensor that a cast turned to infinity.
    Overflow {
        tensor: String,
        count: u64,
        from: Dtype,
        to: Dtype,
    },
    /// A clean-up after the run failed (an upload left open), as its error says.
    Cleanup(String),
    /// A checkpoint with no tensor at its top level, only under keys (a
    /// training checkpoint's `model`, `optimizer`): converted with each
    /// key in the names, where `--pt-root KEY` takes one key's tensors
    /// named as a model's.
    TensorsUnderKeys {
        input: String,
        /// The top-level keys holding tensors, with how many, in order.
        keys: Vec<(String, usize)>,
        /// The key to suggest (a model's, when one is among them).
        suggested: String,
    },
    /// Tensors that are one storage's same view under several names (tied
    /// weights: GPT-2's `lm_head.weight` and `transformer.wte.weight`),
    /// each written in full, where `--dedupe-tied` writes them once.
    TiedWrittenTwice {
        input: String,
        /// Each repeat as written, and the first name of its group: the
        /// name `--dedupe-tied` keeps.
        repeats: Vec<(String, String)>,
        /// Bytes `--dedupe-tied` would not write.
        bytes: u64,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::HubHeader { bytes, limit } => write!(
                f,
                "a header of {bytes} bytes exceeds the {limit} bytes the Hugging Face Hub accepts"
            ),
            Warning::OutputExtension { output, extension } => write!(
                f,
                "{output}: the output is a safetensors file, though its name ends in .{extension}"
            ),
            Warning::HardLinks { output, others } => write!(
                f,
                "{output} has {others} other hard links; they keep the old bytes (the output is a new file)"
            ),
            Warning::SkippedValues {
                input,
                count,
                paths,
            } => {
                let more = if *count > paths.len() { ", ..." } else { "" };
                write!(
                    f,
                    "{input}: skipped {count} non-tensor {} (numbers, strings, hyper-parameters): {}{more}",
                    plural(*count, "value"),
                    paths.join(", ")
                )
            }
            Warning::Overflow {
                tensor,
                count,
                from,
                to,
            } => {
                let values = if *count == 1 { "value" } else { "values" };
                write!(
                    f,
                    "tensor {tensor:?}: {count} finite {values} overflowed to infinity casting {from} to {to}"
                )
            }
            Warning::Cleanup(error) => f.write_str(error),
            Warning::TensorsUnderKeys {
                input,
                keys,
                suggested,
            } => {
                let listed: Vec<String> = keys
                    .iter()
                    .map(|(k, n)| format!("{k:?} ({n} {})", plural(*n, "tensor")))
                    .collect();
                write!(
                    f,
                    "{input}: no tensor at the top level, only under {}, written with the key in their names; \
                     to take one key's tensors named as a model's, pass --pt-root {suggested:?}",
                    listed.join(", ")
                )
            }
            Warning::TiedWrittenTwice {
                input,
                repeats,
                bytes,
            } => {
                const SHOWN: usize = 4;
                let mut listed: Vec<String> = repeats
                    .iter()
                    .take(SHOWN)
                    .map(|(name, of)| format!("{name:?} (the same as {of:?})"))
                    .collect();
                if repeats.len() > SHOWN {
                    listed.push(format!("{} more", repeats.len() - SHOWN));
                }
                let mib = match *bytes >= 1 << 20 {
                    true => format!(" ({:.1} MiB)", *bytes as f64 / f64::from(1 << 20)),
                    false => String::new(),
                };
                write!(
                    f,
                    "{input}: tied weights written twice: {}; pass --dedupe-tied to write each once \
                     (the others named in the metadata), {bytes} bytes{mib} less",
                    listed.join(", ")
                )
            }
        }
    }
}

/// `noun` for `n` of it: `tensor`, `tensors`.
fn plural(n: usize, noun: &str) -> String {
    match n {
        1 => noun.to_string(),
        _ => format!("{noun}s"),
    }
}

/// In JSON, a warning is its text.
impl serde::Serialize for Warning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Something a run tells as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// What it is doing ("spooling ...", "reading ...").
    Info(String),
    /// A [`Warning`].
    Warning(Warning),
}

/// A note as a line: its text; a warning's after `warning: `, safe to
/// print ([`printable_line`](super::printable_line): it may quote names
/// from the input).
impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Info(text) => f.write_str(text),
            Note::Warning(w) => f.write_str(&super::printable_line(&format!("warning: {w}"))),
        }
    }
}

/// Where notes are told, as they happen.
pub type NoticeFn = Arc<dyn Fn(&Note) + Send + Sync>;

/// A [`NoticeFn`] lent to the code that tells.
pub(crate) type Notice<'a> = &'a (dyn Fn(&Note) + Send + Sync);

/// The `notes` a list of `warnings` does not hold already, as text: a
/// warning both reported and told as it happened is listed once.
pub(crate) fn fresh_notes<'a>(
    notes: &'a [Note],
    warnings: &'a [Warning],
) -> impl Iterator<Item = String> + 'a {
    notes
        .iter()
        .filter(|n| !matches!(n, Note::Warning(w) if warnings.contains(w)))
        .map(Note::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_told_and_reported_is_listed_once_by_value() {
        let overflow = |count| Warning::Overflow {
            tensor: "w".into(),
            count,
            from: Dtype::F32,
            to: Dtype::F16,
        };
        let reported = [overflow(2)];
        let notes = [
            Note::Info("spooling".into()),
            Note::Warning(overflow(2)),
            Note::Warning(overflow(3)),
        ];
        let fresh: Vec<String> = fresh_notes(&notes, &reported).collect();
        assert_eq!(
            fresh,
            [
                "spooling",
                "warning: tensor \"w\": 3 finite values overflowed to infinity casting F32 to F16"
            ]
        );
    }

    #[test]
    fn skipped_values_name_the_first_paths_and_say_when_there_are_more() {
        let skipped = |count| Warning::SkippedValues {
            input: "a.pt".into(),
            count,
            paths: vec!["epoch".into(), "opt.lr".into()],
        };
        let text = |n: usize| {
            format!("a.pt: skipped {n} non-tensor values (numbers, strings, hyper-parameters): epoch, opt.lr")
        };
        assert_eq!(
            skipped(1).to_string(),
            text(1).replace("1 non-tensor values", "1 non-tensor value")
        );
        assert_eq!(skipped(2).to_string(), text(2));
        assert_eq!(skipped(9).to_string(), text(9) + ", ...");
    }
}
