//! What an unrecognised input is when it is no model file at all: a
//! download that went wrong. A Git LFS pointer (a clone without `git lfs`),
//! a web page saved under the model's name, an empty file. They are said
//! for what they are, with what to do, instead of the raw-dump hint that
//! suits an unknown binary file.
//!
//! Layer: source, beside detection; reads only the first bytes.

/// The first line of every Git LFS pointer file.
const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/";

/// What to say of an input whose first bytes no format claims, when they
/// show a broken download; `None` for anything else (maybe a raw dump).
/// `first` is up to the sniffed prefix (64 bytes are enough); an empty
/// `first` is an empty input.
///
/// ```
/// use safetensors_stream::source::broken_download;
///
/// let pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 548\n";
/// assert!(broken_download(pointer).unwrap().contains("git lfs pull"));
/// assert!(broken_download(b"<!DOCTYPE html><html>").unwrap().contains("HTML page"));
/// assert!(broken_download(b"").unwrap().contains("empty"));
/// assert_eq!(broken_download(&[0x12, 0x34, 0x00, 0xff]), None);
/// ```
pub fn broken_download(first: &[u8]) -> Option<String> {
    if first.is_empty() {
        return Some(
            "the input is empty (0 bytes): a download or copy that did not finish; fetch it again"
                .to_string(),
        );
    }
    // A stream is sniffed on 16 bytes: `version https://` is the pointer's start.
    let lfs =
        first.starts_with(LFS_POINTER) || (first.len() >= 16 && LFS_POINTER.starts_with(first));
    if lfs {
        let size = lfs_size(first)
            .map(|n| format!(" of a {n}-byte file"))
            .unwrap_or_default();
        return Some(format!(
            "a Git LFS pointer{size}, not the file itself: the repository was cloned without \
             Git LFS; run `git lfs install && git lfs pull` in the clone (or download the file)"
        ));
    }
    let text = trimmed_start(first);
    let lower: Vec<u8> = text.iter().take(15).map(u8::to_ascii_lowercase).collect();
    if lower.starts_with(b"<!doctype html") || lower.starts_with(b"<html") {
        return Some(
            "an HTML page, not a model file: the download saved a web page (a login, an \
             error, the file's page); download the file itself (a Hub URL with /resolve/, \
             not /blob/)"
                .to_string(),
        );
    }
    None
}

/// The first bytes of an unknown input as a message shows them: hex, and
/// the text they spell when they are printable (`76 65 72 73 ("vers")`).
///
/// ```
/// use safetensors_stream::source::first_bytes;
///
/// assert_eq!(first_bytes(b"vers"), r#"76 65 72 73 ("vers")"#);
/// assert_eq!(first_bytes(&[0x12, 0x34]), "12 34");
/// ```
pub fn first_bytes(first: &[u8]) -> String {
    const SHOWN: usize = 4;
    const TEXT: usize = 24;
    let hex: Vec<String> = first
        .iter()
        .take(SHOWN)
        .map(|b| format!("{b:02x}"))
        .collect();
    if hex.is_empty() {
        return "none: the input is empty".to_string();
    }
    let printable = |b: &u8| b.is_ascii_graphic() || *b == b' ';
    let text: Vec<u8> = first
        .iter()
        .take(TEXT)
        .copied()
        .take_while(printable)
        .collect();
    match text.len() >= SHOWN.min(first.len()) {
        true => format!("{} ({:?})", hex.join(" "), String::from_utf8_lossy(&text)),
        false => hex.join(" "),
    }
}

/// `first` without a UTF-8 byte order mark and leading whitespace.
fn trimmed_start(first: &[u8]) -> &[u8] {
    let first = first.strip_prefix(b"\xef\xbb\xbf").unwrap_or(first);
    let skip = first.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &first[skip..]
}

/// The `size N` line of an LFS pointer, if the prefix holds it.
fn lfs_size(first: &[u8]) -> Option<u64> {
    // Only a whole line: a prefix may end inside the number.
    let text = String::from_utf8_lossy(first);
    text.split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .find_map(|l| l.strip_prefix("size "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_broken_download_is_named_and_others_are_not() {
        let pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 548\n";
        let said = broken_download(pointer).unwrap();
        assert!(
            said.starts_with("a Git LFS pointer of a 548-byte file"),
            "{said}"
        );
        for page in [
            &b"<!DOCTYPE html>\n<html>"[..],
            b"\xef\xbb\xbf  <html lang=en>",
            b"\n<!doctype HTML>",
        ] {
            assert!(broken_download(page).unwrap().contains("HTML page"));
        }
        assert!(broken_download(b"")
            .unwrap()
            .starts_with("the input is empty"));
        assert!(broken_download(b"version https://")
            .unwrap()
            .contains("git lfs pull"));
        for other in [&b"\x93NUMPY"[..], b"{\"a\": 1}", b"PK\x03\x04", b"\x00\x00"] {
            assert_eq!(broken_download(other), None);
        }
    }

    #[test]
    fn first_bytes_show_text_when_printable() {
        assert_eq!(first_bytes(b""), "none: the input is empty");
        assert_eq!(first_bytes(b"ab"), r#"61 62 ("ab")"#);
        assert_eq!(
            first_bytes(b"hello world, and more text than shown"),
            r#"68 65 6c 6c ("hello world, and more te")"#
        );
        assert_eq!(first_bytes(b"ab\x00\x01"), "61 62 00 01");
    }
}
