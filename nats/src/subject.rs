//! Names across the bridge: rill topics <-> NATS subjects, and the escaping
//! that keeps both directions lossless.
//!
//! A rill topic is `/`-separated segments that may hold any character but NUL
//! and `*`; a NATS subject is `.`-separated tokens that may not hold `.`, `*`,
//! `>` or whitespace, nor be empty. A topic maps to a subject segment by
//! segment: each byte a token may not hold (and the escape byte `%` itself)
//! becomes `%` and two upper-case hex digits, everything else is kept. The
//! mapping is injective, so the import side recovers the exact topic.
//!
//! Headers carry the key (arbitrary bytes) and attributes (name = value
//! pairs) with the same escape, applied to every byte outside printable
//! ASCII, plus `=` in attribute names, so a value never holds a line break
//! and a pair splits at its first `=`.

use crate::error::{Error, Result};

/// The escape byte.
const ESCAPE: u8 = b'%';

/// Whether a subject token may hold `b` unescaped.
fn token_byte_ok(b: u8) -> bool {
    !(b <= b' ' || b == 0x7f || b == b'.' || b == b'*' || b == b'>' || b == ESCAPE)
}

/// Whether a header value may hold `b` unescaped.
fn header_byte_ok(b: u8) -> bool {
    (0x21..0x7f).contains(&b) && b != ESCAPE
}

fn escape_into(out: &mut String, bytes: &[u8], ok: impl Fn(u8) -> bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut start = 0;
    // Bytes that are kept are copied a run at a time; a run never splits a
    // UTF-8 sequence, since every byte of a multi-byte sequence is kept or
    // every one escaped (`ok` only refuses ASCII in subjects and everything
    // past ASCII in headers).
    for (i, &b) in bytes.iter().enumerate() {
        if !ok(b) {
            out.push_str(&String::from_utf8_lossy(&bytes[start..i]));
            out.push(ESCAPE as char);
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
            start = i + 1;
        }
    }
    out.push_str(&String::from_utf8_lossy(&bytes[start..]));
}

fn unescape(s: &str, what: &str) -> Result<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == ESCAPE {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::Mapping(format!("{what} {s:?} has a malformed escape at byte {i}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// The subject a topic is exported on: `prefix` + `.` + its escaped segments.
pub fn topic_to_subject(prefix: &str, topic: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + topic.len() + 8);
    s.push_str(prefix);
    for segment in topic.split('/') {
        if !s.is_empty() {
            s.push('.');
        }
        escape_into(&mut s, segment.as_bytes(), token_byte_ok);
    }
    s
}

/// The topic a subject is imported into: the subject's tokens after
/// `subject_prefix`, unescaped, joined with `/`, after `topic_prefix`.
pub fn subject_to_topic(subject: &str, subject_prefix: &str, topic_prefix: &str) -> Result<String> {
    let rest = if subject_prefix.is_empty() {
        subject
    } else {
        subject
            .strip_prefix(subject_prefix)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or_else(|| Error::Mapping(format!("subject {subject:?} is not under the prefix {subject_prefix:?}")))?
    };
    let mut topic = String::with_capacity(topic_prefix.len() + rest.len() + 1);
    topic.push_str(topic_prefix);
    for token in rest.split('.') {
        if !topic.is_empty() {
            topic.push('/');
        }
        let bytes = unescape(token, "subject token")?;
        let segment = String::from_utf8(bytes)
            .map_err(|_| Error::Mapping(format!("subject token {token:?} unescapes to invalid UTF-8")))?;
        if segment.is_empty() || segment.contains('/') {
            return Err(Error::Mapping(format!("subject token {token:?} is not a topic segment")));
        }
        topic.push_str(&segment);
    }
    Ok(topic)
}

/// Checks a subject prefix: dot-separated non-empty tokens without wildcards
/// or whitespace (empty means no prefix).
pub fn validate_prefix(prefix: &str, what: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    for token in prefix.split('.') {
        if token.is_empty() || !token.bytes().all(|b| token_byte_ok(b) || b == ESCAPE) {
            return Err(Error::InvalidConfig(format!(
                "{what} {prefix:?} is not a subject prefix (dot-separated tokens without spaces, '*' or '>')"
            )));
        }
    }
    Ok(())
}

/// Checks a subject filter: non-empty tokens, `*` only as a whole token and
/// `>` only as the last one.
pub fn validate_filter(filter: &str) -> Result<()> {
    let tokens: Vec<&str> = filter.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        let ok = match *token {
            "*" => true,
            ">" => i + 1 == tokens.len(),
            t => !t.is_empty() && t.bytes().all(|b| token_byte_ok(b) || b == ESCAPE),
        };
        if !ok {
            return Err(Error::InvalidConfig(format!("subject filter {filter:?} is malformed at token {token:?}")));
        }
    }
    Ok(())
}

/// A subject under `prefix` matching every subject there.
pub fn all_under(prefix: &str) -> String {
    if prefix.is_empty() { ">".to_owned() } else { format!("{prefix}.>") }
}

/// The header value of a key.
pub fn escape_key(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    escape_into(&mut s, key, header_byte_ok);
    s
}

/// A key back from its header value.
pub fn unescape_key(value: &str) -> Result<Vec<u8>> {
    unescape(value, "key header")
}

/// The header value of one attribute: `name=value`, both escaped.
pub fn escape_attribute(name: &str, value: &str) -> String {
    let mut s = String::with_capacity(name.len() + value.len() + 1);
    escape_into(&mut s, name.as_bytes(), |b| header_byte_ok(b) && b != b'=');
    s.push('=');
    escape_into(&mut s, value.as_bytes(), header_byte_ok);
    s
}

/// An attribute back from its header value.
pub fn unescape_attribute(pair: &str) -> Result<(String, String)> {
    let (name, value) =
        pair.split_once('=').ok_or_else(|| Error::Mapping(format!("attribute header {pair:?} has no '='")))?;
    let text = |s: &str| {
        String::from_utf8(unescape(s, "attribute header")?)
            .map_err(|_| Error::Mapping(format!("attribute header {pair:?} unescapes to invalid UTF-8")))
    };
    Ok((text(name)?, text(value)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_map_to_subjects_and_back() {
        for topic in ["orders/eu", "a", "a b/c.d/e*f>g", "100%/x\ty", "ünï/cödé", "$sys/x"] {
            let topic = topic.replace('*', "-");
            let subject = topic_to_subject("rill.out", &topic);
            assert!(subject.starts_with("rill.out."), "{subject}");
            assert_eq!(subject.split('.').count(), 2 + topic.split('/').count(), "{subject}");
            assert!(!subject.contains(' ') && !subject.contains('>') && !subject.contains('*'), "{subject}");
            assert_eq!(subject_to_topic(&subject, "rill.out", "").unwrap(), topic);
            assert_eq!(subject_to_topic(&subject, "rill.out", "in").unwrap(), format!("in/{topic}"));
        }
        assert_eq!(topic_to_subject("p", "a.b/c d"), "p.a%2Eb.c%20d");
        assert_eq!(topic_to_subject("", "a/b"), "a.b");
        assert_eq!(subject_to_topic("a.b", "", "").unwrap(), "a/b");
    }

    #[test]
    fn malformed_subjects_are_errors() {
        assert!(matches!(subject_to_topic("other.x", "rill", ""), Err(Error::Mapping(_))));
        assert!(matches!(subject_to_topic("rill", "rill", ""), Err(Error::Mapping(_))));
        assert!(matches!(subject_to_topic("rill.%4", "rill", ""), Err(Error::Mapping(_))));
        assert!(matches!(subject_to_topic("rill.a%2Fb", "rill", ""), Err(Error::Mapping(_))));
        assert!(matches!(subject_to_topic("rill.%FF", "rill", ""), Err(Error::Mapping(_))));
    }

    #[test]
    fn prefixes_and_filters_are_checked() {
        validate_prefix("rill.out", "p").unwrap();
        validate_prefix("", "p").unwrap();
        for bad in ["a..b", ".a", "a.", "a.*", "a.>", "a b"] {
            assert!(matches!(validate_prefix(bad, "p"), Err(Error::InvalidConfig(_))), "{bad}");
        }
        for good in ["a.>", "a.*.c", ">", "a"] {
            validate_filter(good).unwrap();
        }
        for bad in ["", "a.>.b", "a..b", "a.b*", "a b"] {
            assert!(matches!(validate_filter(bad), Err(Error::InvalidConfig(_))), "{bad}");
        }
        assert_eq!(all_under("x.y"), "x.y.>");
        assert_eq!(all_under(""), ">");
    }

    #[test]
    fn keys_and_attributes_round_trip_through_headers() {
        let key: Vec<u8> = (0..=255u8).collect();
        let v = escape_key(&key);
        assert!(v.bytes().all(|b| (0x21..0x7f).contains(&b)), "{v}");
        assert_eq!(unescape_key(&v).unwrap(), key);
        for (n, val) in [("a", "b"), ("x=y", "1=2"), ("sp ace", "line\r\nbreak"), ("ü", ""), ("%", "%%")] {
            let h = escape_attribute(n, val);
            assert!(h.bytes().all(|b| (0x21..0x7f).contains(&b)), "{h}");
            assert_eq!(unescape_attribute(&h).unwrap(), (n.to_owned(), val.to_owned()));
        }
        assert!(unescape_attribute("novalue").is_err());
    }
}
