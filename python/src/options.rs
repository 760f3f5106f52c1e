// The one table of the `convert` CLI's options and the Python `convert`'s
// keywords, and the translation of messages from one to the other.
//
// Plain Rust, no pyo3 (and `//` comments, no inner doc): the CLI's tests
// `include!` this file and check the table against clap's own list of
// flags, and the Python tests check it against `convert`'s signature, so
// neither side can gain an option the other lacks.

/// How a CLI flag is given as a Python keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--x` is `x=True`.
    Switch,
    /// `--no-x` is `x=False` (the keyword is the positive name).
    Negated,
    /// `--x VALUE` is `x="VALUE"`.
    Text,
    /// `--x 3` is `x=3`.
    Number,
    /// `--x A=B`, repeatable, is `x={"A": "B"}`.
    Pairs,
    /// No keyword: the reason is what Python does instead.
    CliOnly(&'static str),
}

/// One option: its CLI flag (without `--`), its Python keyword, its kind.
#[derive(Debug, Clone, Copy)]
pub struct ConvertOption {
    pub flag: &'static str,
    pub keyword: &'static str,
    pub kind: Kind,
}

const fn opt(flag: &'static str, keyword: &'static str, kind: Kind) -> ConvertOption {
    ConvertOption {
        flag,
        keyword,
        kind,
    }
}

/// Every option of `convert` (converting, and how inputs are read), in the
/// CLI's `--help` order.
pub const CONVERT_OPTIONS: &[ConvertOption] = &[
    opt("cast", "cast", Kind::Pairs),
    opt("cast-all", "cast_all", Kind::Text),
    opt("output", "output", Kind::Text),
    opt("include", "include", Kind::Text),
    opt("exclude", "exclude", Kind::Text),
    opt("rename", "rename", Kind::Pairs),
    opt("strip-prefix", "strip_prefix", Kind::Text),
    opt("rename-regex", "rename_regex", Kind::Pairs),
    opt("prefix", "prefix", Kind::Text),
    opt("allow-empty", "allow_empty", Kind::Switch),
    opt("metadata", "metadata", Kind::Pairs),
    opt("order", "order", Kind::Text),
    opt("max-shard-size", "max_shard_size", Kind::Text),
    opt("shard", "shard", Kind::Number),
    opt("shard-stride", "shard_stride", Kind::Number),
    opt("index-only", "index_only", Kind::Switch),
    opt("expect-plan", "expect_plan", Kind::Text),
    opt("overwrite-input", "overwrite_input", Kind::Switch),
    opt("no-sync", "sync", Kind::Negated),
    opt("buffer-size", "buffer_size", Kind::Text),
    opt(
        "quiet",
        "",
        Kind::CliOnly("convert() prints nothing; notices are the report's \"warnings\""),
    ),
    opt("progress", "progress", Kind::Switch),
    opt("dry-run", "dry_run", Kind::Switch),
    opt(
        "json",
        "",
        Kind::CliOnly("convert(dry_run=True) returns the plan as a dict"),
    ),
    opt(
        "report",
        "",
        Kind::CliOnly("convert() returns the report as a dict"),
    ),
    opt("checksum", "checksum", Kind::Text),
    opt("name", "name", Kind::Text),
    opt("skip-non-npy", "skip_non_npy", Kind::Switch),
    opt("npy-void-as", "npy_void_as", Kind::Text),
    opt("dedupe-tied", "dedupe_tied", Kind::Switch),
    opt("pt-root", "pt_root", Kind::Text),
    opt("allow-expanded-views", "allow_expanded_views", Kind::Switch),
    opt("dequantize", "dequantize", Kind::Switch),
    opt("dequantize-to", "dequantize_to", Kind::Text),
    opt("gguf-metadata", "gguf_metadata", Kind::Switch),
    opt("names", "names", Kind::Text),
    opt("raw-dtype", "raw_dtype", Kind::Text),
    opt("raw-shape", "raw_shape", Kind::Text),
    opt("raw-offset", "raw_offset", Kind::Number),
    opt("raw-byte-order", "raw_byte_order", Kind::Text),
    opt("raw-manifest", "raw_manifest", Kind::Text),
    opt("raw-allow-trailing", "raw_allow_trailing", Kind::Switch),
    opt("limit", "limits", Kind::Pairs),
];

fn option_of(flag: &str) -> Option<&'static ConvertOption> {
    CONVERT_OPTIONS
        .iter()
        .find(|o| o.flag == flag && !matches!(o.kind, Kind::CliOnly(_)))
}

/// `message` as a Python caller reads it: each `--flag` of the table (and
/// the value the message gives it) in the keyword form, `--allow-empty` as
/// `allow_empty=True`, `--cast-all "I8"` as `cast_all="I8"`, `--rename a=b`
/// as `rename={"a": "b"}`. The library's messages name CLI flags; a value
/// follows a flag quoted (`{:?}`), as `KEY=VALUE`, or as a number.
pub fn pythonic(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "([{'`,".contains(c));
        let after = &rest[at + 2..];
        let len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(after.len());
        let flag = after[..len].trim_end_matches('-');
        let known = option_of(flag).filter(|_| starts_word && !flag.is_empty());
        let Some(option) = known else {
            out.push_str(&rest[..at + 2]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        rest = &after[flag.len()..];
        let (value, used) = value_after(rest, option.kind);
        out.push_str(option.keyword);
        match (option.kind, value) {
            (Kind::Switch, _) => out.push_str("=True"),
            (Kind::Negated, _) => out.push_str("=False"),
            (_, Some(v)) => {
                out.push('=');
                out.push_str(&v);
                rest = &rest[used..];
            }
            (_, None) => {}
        }
    }
    out.push_str(rest);
    out
}

/// The value written after a flag (`rest` starts just after it), in
/// Python's form, and the bytes of `rest` it took.
fn value_after(rest: &str, kind: Kind) -> (Option<String>, usize) {
    let Some(text) = rest.strip_prefix(' ') else {
        return (None, 0);
    };
    if text.starts_with('"') {
        // A Debug-quoted string: up to the closing quote not escaped.
        let mut escaped = false;
        for (i, c) in text.char_indices().skip(1) {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => return (Some(text[..=i].to_string()), i + 2),
                _ => escaped = false,
            }
        }
        return (None, 0);
    }
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    let token = text[..end].trim_end_matches([':', ',', ';', ')']);
    match kind {
        Kind::Number if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) => {
            (Some(token.to_string()), token.len() + 1)
        }
        Kind::Pairs => match token.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                (Some(format!("{{{:?}: {:?}}}", k, v)), token.len() + 1)
            }
            _ => (None, 0),
        },
        // A bare dtype (`--cast-all I8`): capitals, digits and `_` only.
        Kind::Text
            if !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') =>
        {
            (Some(format!("{token:?}")), token.len() + 1)
        }
        _ => (None, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_keywords_with_their_values() {
        for (cli, python) in [
            (
                "no tensor selected: --include \"enc\"; pass --allow-empty to write one",
                "no tensor selected: include=\"enc\"; pass allow_empty=True to write one",
            ),
            (
                "--cast-all I8: only F64, F32, F16 or BF16",
                "cast_all=\"I8\": only F64, F32, F16 or BF16",
            ),
            (
                "--rename a=b: no selected tensor is named \"a\"",
                "rename={\"a\": \"b\"}: no selected tensor is named \"a\"",
            ),
            (
                "--shard 3: the plan has 2 shards",
                "shard=3: the plan has 2 shards",
            ),
            (
                "for a raw dump give its dtype and shape (--raw-dtype, --raw-shape)",
                "for a raw dump give its dtype and shape (raw_dtype, raw_shape)",
            ),
            (
                "a tensor under an empty key (pass --pt-root or --name)",
                "a tensor under an empty key (pass pt_root or name)",
            ),
            (
                "over the limit pickle-budget=48MiB (raise it with --limit pickle-budget=96MiB)",
                "over the limit pickle-budget=48MiB (raise it with limits={\"pickle-budget\": \"96MiB\"})",
            ),
            (
                "skip the fsyncs (--no-sync)",
                "skip the fsyncs (sync=False)",
            ),
            (
                "--pt-root \"a \\\"b\\\"\": no key",
                "pt_root=\"a \\\"b\\\"\": no key",
            ),
        ] {
            assert_eq!(pythonic(cli), python);
        }
        // Not flags of the table: left as they are.
        for same in [
            "a--b",
            "--quiet",
            "--unknown-flag x",
            "-- a",
            "path/--include",
        ] {
            assert_eq!(pythonic(same), same);
        }
    }
}
