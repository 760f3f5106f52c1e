//! The text arguments of protocols 0 and 1 (`torch.save(...,
//! pickle_protocol=1)`, legacy checkpoints): numbers, memo keys, global
//! names, raw-unicode-escape strings and persistent ids written as lines.
//!
//! Apart from the opcodes because each is a small parser of its own, with
//! its own ways to be malformed.

use super::arena::{Cell, Id};
use super::machine::Machine;
use super::{err, Global};
use crate::{PickleError, Result};

/// A decimal integer (`-12`, `7L`); `None` if it overflows 64 bits (a big
/// int, kept only as a leaf).
pub(super) fn parse_decimal(line: &[u8]) -> Result<Option<i64>> {
    let t = std::str::from_utf8(line).map_err(|_| err(PickleError::NumberNotAscii))?;
    let t = t.strip_suffix('L').unwrap_or(t);
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(PickleError::NotDecimal(t.into())));
    }
    Ok(t.parse().ok())
}

impl<'a> Machine<'a> {
    /// A `GLOBAL`'s module or name: a line of at most 256 bytes.
    pub(super) fn line(&mut self) -> Result<String> {
        let rest = self.rest();
        let n = rest
            .iter()
            .take(256)
            .position(|&b| b == b'\n')
            .ok_or_else(|| err(PickleError::GlobalLine))?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    /// A text opcode's argument (protocols 0 and 1): the bytes up to the
    /// next newline, which is consumed; charged like any string.
    pub(super) fn text_line(&mut self) -> Result<&'a [u8]> {
        let n = self
            .rest()
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| err(PickleError::Truncated))?;
        let line = self.sized(n as u64)?;
        self.pos += 1;
        Ok(line)
    }

    /// A decimal number on a text line (`PUT`, `GET`, `INT`, `LONG`).
    pub(super) fn decimal(&mut self) -> Result<Option<i64>> {
        let line = self.text_line()?;
        parse_decimal(line)
    }

    pub(super) fn memo_key(&mut self) -> Result<u32> {
        self.decimal()?
            .and_then(|k| u32::try_from(k).ok())
            .ok_or_else(|| err(PickleError::MemoKeyRange))
    }

    /// `UNICODE` (protocol 0): raw-unicode-escape text, `\uXXXX` and
    /// `\UXXXXXXXX` escapes, every other byte a latin-1 character.
    pub(super) fn unicode_line(&mut self) -> Result<String> {
        let line = self.text_line()?;
        // Each byte or escape is at most two bytes of UTF-8 a byte, so
        // the text never outgrows twice the line: charged so until it is
        // stored (the caller gives back its capacity).
        self.budget.charge(2 * line.len(), "strings and bytes")?;
        let mut out = String::with_capacity(2 * line.len());
        let mut i = 0;
        while i < line.len() {
            let digits = match (line[i], line.get(i + 1)) {
                (b'\\', Some(b'u')) => 4,
                (b'\\', Some(b'U')) => 8,
                (b, _) => {
                    out.push(b as char);
                    i += 1;
                    continue;
                }
            };
            let hex = line
                .get(i + 2..i + 2 + digits)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
                .ok_or_else(|| err(PickleError::UnicodeEscape))?;
            out.push(hex);
            i += 2 + digits;
        }
        Ok(out)
    }

    /// `PERSID` (protocol 0): the persistent id is the `str()` of torch's
    /// storage tuple, `('storage', <class 'torch.FloatStorage'>, '0', 'cpu', 6)`.
    /// Only that exact shape is read, into the tuple protocol 1+ would hold.
    pub(super) fn text_persistent_id(&mut self) -> Result<Id> {
        let line = self.text_line()?;
        let text = std::str::from_utf8(line).map_err(|_| err(PickleError::PersidNotText))?;
        let refuse = || err(PickleError::PersidNotStorage);
        let inner = text
            .strip_prefix("('storage', <class 'torch.")
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(refuse)?;
        let (class, rest) = inner.split_once("'>, '").ok_or_else(refuse)?;
        let (key, rest) = rest.split_once("', '").ok_or_else(refuse)?;
        let (location, numel) = rest.split_once("', ").ok_or_else(refuse)?;
        let numel: i64 = numel.parse().map_err(|_| refuse())?;
        let storage = match self.allow.lookup("torch", class) {
            Some(g @ Global::Storage(_)) => g,
            _ => return Err(refuse()),
        };
        let items = [
            self.str_cell("storage")?,
            Cell::Global(self.code(storage)),
            self.str_cell(key)?,
            self.str_cell(location)?,
            Cell::int(numel),
        ];
        let mut ids = [0; 5];
        for (id, cell) in ids.iter_mut().zip(items) {
            *id = self.alloc(cell)?;
        }
        let tuple = self.tuple_cell(&ids)?;
        self.alloc(tuple)
    }
}
