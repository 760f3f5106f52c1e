//! The Python literal subset that .npy headers are written in:
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`.
//!
//! A small recursive-descent parser with a depth limit: a hostile header
//! cannot overflow the stack or make us allocate more than its own length.

/// A parsed literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Literal {
    Str(String),
    Bool(bool),
    Int(u64),
    None,
    Tuple(Vec<Literal>),
    List(Vec<Literal>),
    Dict(Vec<(Literal, Literal)>),
}

const MAX_DEPTH: usize = 16;

/// Longest rendering [`Literal::to_python`] gives, for messages.
const MAX_RENDER: usize = 200;

impl Literal {
    /// The literal written back in Python syntax (cut short if long), for
    /// messages that must name a descr that is not a plain string.
    pub(crate) fn to_python(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        if out.len() > MAX_RENDER {
            let mut cut = MAX_RENDER;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str("...");
        }
        out
    }

    fn render(&self, out: &mut String) {
        let seq = |out: &mut String, items: &[Literal], open: char, close: char| {
            out.push(open);
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                v.render(out);
            }
            if open == '(' && items.len() == 1 {
                out.push(',');
            }
            out.push(close);
        };
        match self {
            Literal::Str(s) => out.push_str(&format!("{s:?}").replace('"', "'")),
            Literal::Bool(true) => out.push_str("True"),
            Literal::Bool(false) => out.push_str("False"),
            Literal::Int(n) => out.push_str(&n.to_string()),
            Literal::None => out.push_str("None"),
            Literal::Tuple(items) => seq(out, items, '(', ')'),
            Literal::List(items) => seq(out, items, '[', ']'),
            Literal::Dict(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.render(out);
                    out.push_str(": ");
                    v.render(out);
                }
                out.push('}');
            }
        }
    }
}

/// Parses `text` as one literal followed only by whitespace.
pub(crate) fn parse(text: &str) -> Result<Literal, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    let v = p.value(0)?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(format!(
            "unexpected {:?} at character {}",
            p.peek_char(),
            p.i
        ));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek_char(&self) -> Option<char> {
        self.text.get(self.i..).and_then(|r| r.chars().next())
    }

    fn eat(&mut self, b: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Literal, String> {
        if depth > MAX_DEPTH {
            return Err("literal nested too deeply".into());
        }
        self.skip_ws();
        match self.s.get(self.i) {
            Some(b'\'') | Some(b'"') => self.string().map(Literal::Str),
            Some(b'(') => self.seq(b')', depth).map(Literal::Tuple),
            Some(b'[') => self.seq(b']', depth).map(Literal::List),
            Some(b'{') => self.dict(depth),
            Some(b) if b.is_ascii_digit() => self.int(),
            Some(_) => self.word(),
            None => Err("unexpected end of header".into()),
        }
    }

    fn word(&mut self) -> Result<Literal, String> {
        let rest = &self.text[self.i..];
        for (w, v) in [
            ("True", Literal::Bool(true)),
            ("False", Literal::Bool(false)),
            ("None", Literal::None),
        ] {
            if rest.starts_with(w) {
                self.i += w.len();
                return Ok(v);
            }
        }
        Err(format!(
            "unexpected {:?} at character {}",
            self.peek_char(),
            self.i
        ))
    }

    fn int(&mut self) -> Result<Literal, String> {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        let digits = &self.text[start..self.i];
        // Python 2 wrote long integers with an `L` suffix.
        if matches!(self.s.get(self.i), Some(b'L') | Some(b'l')) {
            self.i += 1;
        }
        digits
            .parse::<u64>()
            .map(Literal::Int)
            .map_err(|_| format!("integer {digits} does not fit in 64 bits"))
    }

    fn string(&mut self) -> Result<String, String> {
        let quote = self.s[self.i];
        self.i += 1;
        // Without escapes, as numpy writes them, the string is a slice: the
        // quote is ASCII, so it never falls inside a multi-byte character.
        let start = self.i;
        let stop = self.s[start..]
            .iter()
            .position(|&b| b == quote || b == b'\\');
        if let Some(k) = stop.filter(|&k| self.s[start + k] == quote) {
            self.i = start + k + 1;
            return Ok(self.text[start..start + k].to_string());
        }
        let mut out = String::new();
        loop {
            let Some(c) = self.peek_char() else {
                return Err("unterminated string".into());
            };
            self.i += c.len_utf8();
            match c {
                c if c as u32 == quote as u32 => return Ok(out),
                '\\' => {
                    let Some(e) = self.peek_char() else {
                        return Err("unterminated string".into());
                    };
                    self.i += e.len_utf8();
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                }
                c => out.push(c),
            }
        }
    }

    /// Comma-separated values up to `close`; a trailing comma is allowed.
    fn seq(&mut self, close: u8, depth: usize) -> Result<Vec<Literal>, String> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            if !self.eat(b',') {
                return if self.eat(close) {
                    Ok(items)
                } else {
                    Err(format!(
                        "expected ',' or '{}' at character {}",
                        close as char, self.i
                    ))
                };
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Literal, String> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            if self.eat(b'}') {
                return Ok(Literal::Dict(items));
            }
            let k = self.value(depth + 1)?;
            if !self.eat(b':') {
                return Err(format!("expected ':' at character {}", self.i));
            }
            let v = self.value(depth + 1)?;
            items.push((k, v));
            if !self.eat(b',') {
                return if self.eat(b'}') {
                    Ok(Literal::Dict(items))
                } else {
                    Err(format!("expected ',' or '}}' at character {}", self.i))
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_header() {
        let v =
            parse("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }        \n").unwrap();
        let Literal::Dict(items) = v else { panic!() };
        assert_eq!(
            items[2].1,
            Literal::Tuple(vec![Literal::Int(3), Literal::Int(4)])
        );
    }

    #[test]
    fn edge_cases() {
        assert_eq!(parse("()").unwrap(), Literal::Tuple(vec![]));
        assert_eq!(
            parse("(5,)").unwrap(),
            Literal::Tuple(vec![Literal::Int(5)])
        );
        assert_eq!(parse("3L").unwrap(), Literal::Int(3));
        assert_eq!(parse(r#""a\'b""#).unwrap(), Literal::Str("a'b".into()));
        assert!(parse(&"(".repeat(100)).is_err());
        assert!(parse("(1 2)").is_err());
        assert!(parse("99999999999999999999999").is_err());
        assert!(parse("'abc").is_err());
        assert!(parse("{'a': 1} x").is_err());
    }

    #[test]
    fn renders_back_as_python() {
        for text in [
            "('<i4', (2,))",
            "[('a', '<i4'), ('b', '<f8', (2, 3))]",
            "{'x': True}",
        ] {
            assert_eq!(parse(text).unwrap().to_python(), text);
        }
        let long = format!("[{}]", vec!["'<f4'"; 100].join(", "));
        assert!(parse(&long).unwrap().to_python().ends_with("..."));
    }
}
