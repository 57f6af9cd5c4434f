//! kcat-style output formats: `%k\t%v\t%p\t%o`.

use std::io::Write;

use weir_client::consumer::ConsumerRecord;

/// One piece of a parsed format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
}

/// A format, parsed once and applied to every record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFormat {
    tokens: Vec<Token>,
}

impl RecordFormat {
    /// Parses `%`-directives and `\`-escapes; adds a final newline if there is none.
    pub fn parse(format: &str) -> Result<Self, String> {
        let mut tokens = Vec::new();
        let mut literal = Vec::new();
        let mut chars = format.chars();
        let mut has_newline = false;
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let token = match chars.next() {
                        Some('t') => Token::Topic,
                        Some('p') => Token::Partition,
                        Some('o') => Token::Offset,
                        Some('k') => Token::Key,
                        Some('v') | Some('s') => Token::Value,
                        Some('T') => Token::Timestamp,
                        Some('h') => Token::Headers,
                        Some('%') => {
                            literal.push(b'%');
                            continue;
                        }
                        other => {
                            return Err(format!(
                                "--format: unknown directive %{} (known: %t %p %o %k %v %T %h %%)",
                                other.map(String::from).unwrap_or_default()
                            ));
                        }
                    };
                    if !literal.is_empty() {
                        tokens.push(Token::Literal(std::mem::take(&mut literal)));
                    }
                    tokens.push(token);
                }
                '\\' => match chars.next() {
                    Some('t') => literal.push(b'\t'),
                    Some('n') => {
                        has_newline = true;
                        literal.push(b'\n');
                    }
                    Some('\\') => literal.push(b'\\'),
                    other => {
                        literal.push(b'\\');
                        if let Some(o) = other {
                            let mut buf = [0u8; 4];
                            literal.extend_from_slice(o.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                },
                c => {
                    has_newline |= c == '\n';
                    let mut buf = [0u8; 4];
                    literal.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        if !has_newline {
            literal.push(b'\n');
        }
        if !literal.is_empty() {
            tokens.push(Token::Literal(literal));
        }
        Ok(Self { tokens })
    }

    /// Writes one record in this format. Keys and values are written as raw bytes.
    pub fn write(&self, out: &mut impl Write, record: &ConsumerRecord) -> std::io::Result<()> {
        for token in &self.tokens {
            match token {
                Token::Literal(bytes) => out.write_all(bytes)?,
                Token::Topic => out.write_all(record.topic.as_bytes())?,
                Token::Partition => write!(out, "{}", record.partition)?,
                Token::Offset => write!(out, "{}", record.offset)?,
                Token::Key => out.write_all(record.key.as_deref().unwrap_or_default())?,
                Token::Value => out.write_all(record.value.as_deref().unwrap_or_default())?,
                Token::Timestamp => write!(out, "{}", record.timestamp)?,
                Token::Headers => {
                    for (i, h) in record.headers.iter().enumerate() {
                        if i > 0 {
                            out.write_all(b",")?;
                        }
                        out.write_all(h.key.as_bytes())?;
                        out.write_all(b"=")?;
                        out.write_all(h.value.as_deref().unwrap_or_default())?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 3,
            offset: 42,
            timestamp: 1000,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
        }
    }

    fn render(format: &str) -> String {
        let mut out = Vec::new();
        RecordFormat::parse(format)
            .unwrap()
            .write(&mut out, &record())
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn renders_directives_and_escapes() {
        assert_eq!(render("%k\\t%v\\t%p\\t%o"), "k\tv\t3\t42\n");
        assert_eq!(render("%t/%T 100%%\\n"), "t/1000 100%\n");
        assert_eq!(render("%v"), "v\n");
    }

    #[test]
    fn unknown_directive_is_an_error() {
        assert!(RecordFormat::parse("%q").unwrap_err().contains("%q"));
    }
}
