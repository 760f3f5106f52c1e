//! Pattern renames: `--strip-prefix P` then `--rename-regex PATTERN=REPLACEMENT`,
//! compiled once and applied to each selected tensor name by the planner.
//!
//! The planner's order, in full: `--include`/`--exclude` pick by input
//! name; an exact `--rename FROM=TO` (FROM an input name) gives a final
//! name; every other name loses the `--strip-prefix` if it starts with it,
//! then goes through each `--rename-regex` in the order given (every match
//! replaced); last, `--prefix` is prepended to every name.
//!
//! ```
//! use safetensors_stream::rename::Renamer;
//!
//! let rules = vec![(r"^layers\.(\d+)\.".to_string(), "h.$1.".to_string())];
//! let mut r = Renamer::new(Some("model."), &rules)?;
//! assert_eq!(r.apply("model.layers.3.attn").as_deref(), Some("h.3.attn"));
//! assert_eq!(r.apply("lm_head").as_deref(), None); // untouched
//! r.check_all_used()?;
//! # Ok::<(), safetensors_stream::Error>(())
//! ```

use regex::Regex;

use crate::{Error, ErrorKind, Result};

/// The compiled pattern renames, with a note of which ones ever matched.
#[derive(Debug)]
pub struct Renamer {
    strip: Option<(String, bool)>,
    regexes: Vec<(Regex, String, bool)>,
}

impl Renamer {
    /// Compiles the rules; a bad pattern is a usage error naming it.
    pub fn new(strip_prefix: Option<&str>, regexes: &[(String, String)]) -> Result<Renamer> {
        let regexes = regexes
            .iter()
            .map(|(pattern, replacement)| {
                let re = Regex::new(pattern).map_err(|e| {
                    usage(format!(
                        "--rename-regex {pattern}={replacement}: bad pattern: {e}"
                    ))
                })?;
                Ok((re, replacement.clone(), false))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Renamer {
            strip: strip_prefix.map(|p| (p.to_string(), false)),
            regexes,
        })
    }

    /// The renamed name, or `None` when no rule touches `name`.
    pub fn apply(&mut self, name: &str) -> Option<String> {
        let mut current: Option<String> = None;
        if let Some((prefix, used)) = &mut self.strip {
            if let Some(rest) = name.strip_prefix(prefix.as_str()) {
                *used = true;
                current = Some(rest.to_string());
            }
        }
        for (re, replacement, used) in &mut self.regexes {
            let now = current.as_deref().unwrap_or(name);
            if re.is_match(now) {
                *used = true;
                current = Some(re.replace_all(now, replacement.as_str()).into_owned());
            }
        }
        current
    }

    /// A rule that matched no name is a usage error (most likely a typo).
    pub fn check_all_used(&self) -> Result<()> {
        if let Some((prefix, false)) = &self.strip {
            return Err(usage(format!(
                "--strip-prefix {prefix:?}: no selected tensor name starts with it"
            )));
        }
        if let Some((re, replacement, _)) = self.regexes.iter().find(|r| !r.2) {
            return Err(usage(format!(
                "--rename-regex {}={replacement}: matches no selected tensor name",
                re.as_str()
            )));
        }
        Ok(())
    }
}

fn usage(msg: String) -> Error {
    Error::new(ErrorKind::Usage(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_apply_in_order_and_unused_ones_are_refused() {
        let rules = vec![
            ("a".to_string(), "b".to_string()),
            ("bb".to_string(), "c".to_string()),
        ];
        let mut r = Renamer::new(None, &rules).unwrap();
        // Every match, then the next rule over the result.
        assert_eq!(r.apply("aa.x").as_deref(), Some("c.x"));
        r.check_all_used().unwrap();
        let mut unused = Renamer::new(Some("zz."), &rules).unwrap();
        assert_eq!(unused.apply("q").as_deref(), None);
        assert!(matches!(
            unused.check_all_used().unwrap_err().kind(),
            ErrorKind::Usage(_)
        ));
    }

    #[test]
    fn bad_pattern_is_a_usage_error() {
        let e = Renamer::new(None, &[("(".into(), "x".into())]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Usage(_)));
    }
}
