//! Pattern renames: `--strip-prefix P` then `--rename-regex PATTERN=REPLACEMENT`,
//! compiled once and applied to each selected tensor name by the planner.
//!
//! The planner's order, in full: `--include`/`--exclude` pick by input
//! name; an exact `--rename FROM=TO` (FROM an input name) gives a final
//! name; every other name loses the `--strip-prefix` if it starts with it,
//! then goes through each `--rename-regex` in the order given (every match
//! replaced); last, `--prefix` is prepended to every name.

use regex::Regex;

use crate::header::MAX_HEADER_LEN;
use crate::{Error, ErrorKind, Result};

/// The compiled pattern renames, with a note of which ones ever matched.
///
/// Renamed names are bounded by the header limit: all of them together
/// may hold at most [`MAX_HEADER_LEN`] bytes (they must fit one header),
/// checked before each replacement is built, so thirty doubling rules
/// cannot ask for 2^30 times a name. Past it every name is left as it is
/// and [`Renamer::check_all_used`] reports the rule that grew too far.
#[derive(Debug)]
pub(crate) struct Renamer {
    strip: Option<(String, bool)>,
    regexes: Vec<(Regex, String, bool)>,
    /// Bytes of renamed names so far.
    total: usize,
    /// The rule that would have grown the names past the limit.
    overflow: Option<String>,
}

impl Renamer {
    /// Compiles the rules; a bad pattern is a usage error naming it.
    pub(crate) fn new(strip_prefix: Option<&str>, regexes: &[(String, String)]) -> Result<Renamer> {
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
            total: 0,
            overflow: None,
        })
    }

    /// The renamed name, or `None` when no rule touches `name` (or the
    /// renamed names outgrew the header limit: see [`Renamer::check_all_used`]).
    pub(crate) fn apply(&mut self, name: &str) -> Option<String> {
        if self.overflow.is_some() {
            return None;
        }
        let room = (MAX_HEADER_LEN as usize).saturating_sub(self.total);
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
                match replace_bounded(re, now, replacement, room) {
                    Some(next) => current = Some(next),
                    None => {
                        self.overflow = Some(format!(
                            "--rename-regex {}={replacement}: renamed names would exceed the header limit of {MAX_HEADER_LEN} bytes",
                            re.as_str()
                        ));
                        return None;
                    }
                }
            }
        }
        if let Some(c) = &current {
            self.total += c.len();
        }
        current
    }

    /// A rule that matched no name is a usage error (most likely a typo).
    pub(crate) fn check_all_used(&self) -> Result<()> {
        if let Some(msg) = &self.overflow {
            return Err(usage(msg.clone()));
        }
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

/// `re.replace_all(now, replacement)` (the same matches and `$` syntax),
/// or `None` if the result could pass `room` bytes: each match's
/// expansion is bounded before it is written (the replacement's bytes
/// plus, per `$` reference, the whole name).
fn replace_bounded(re: &Regex, now: &str, replacement: &str, room: usize) -> Option<String> {
    let refs = replacement.matches('$').count();
    let per_match = replacement
        .len()
        .saturating_add(refs.saturating_mul(now.len()));
    let mut out = String::new();
    let mut last = 0;
    for caps in re.captures_iter(now) {
        let m = caps.get(0).expect("group 0 is the match");
        let before = &now[last..m.start()];
        if out
            .len()
            .saturating_add(before.len())
            .saturating_add(per_match)
            > room
        {
            return None;
        }
        out.push_str(before);
        caps.expand(replacement, &mut out);
        last = m.end();
    }
    let rest = &now[last..];
    (out.len() + rest.len() <= room).then(|| out + rest)
}

fn usage(msg: String) -> Error {
    Error::new(ErrorKind::Usage(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_the_prefix_then_applies_each_regex() {
        let rules = vec![(r"^layers\.(\d+)\.".to_string(), "h.$1.".to_string())];
        let mut r = Renamer::new(Some("model."), &rules).unwrap();
        assert_eq!(r.apply("model.layers.3.attn").as_deref(), Some("h.3.attn"));
        assert_eq!(r.apply("lm_head").as_deref(), None); // untouched
        r.check_all_used().unwrap();
    }

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
    fn doubling_rules_stop_at_the_header_limit() {
        // 30 rules each doubling the name: 2^30 times 8 bytes asked.
        let rules: Vec<(String, String)> = (0..30)
            .map(|_| ("(.+)".to_string(), "$1$1".to_string()))
            .collect();
        let mut r = Renamer::new(None, &rules).unwrap();
        assert_eq!(r.apply("abcdefgh"), None);
        let e = r.check_all_used().unwrap_err();
        assert!(e.to_string().contains("header limit"), "{e}");
        // The same as replace_all below the limit, `$` syntax included.
        let re = Regex::new(r"(\w)\.").unwrap();
        for (name, rep) in [("a.b.c", "${1}_"), ("x.y", "$$"), ("", "z")] {
            let want = re.replace_all(name, rep).into_owned();
            assert_eq!(replace_bounded(&re, name, rep, 1000), Some(want));
        }
        let mut small = Renamer::new(None, &[("a".into(), "bb".into())]).unwrap();
        assert_eq!(small.apply("aa").as_deref(), Some("bbbb"));
        small.check_all_used().unwrap();
    }

    #[test]
    fn bad_pattern_is_a_usage_error() {
        let e = Renamer::new(None, &[("(".into(), "x".into())]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Usage(_)));
    }
}
