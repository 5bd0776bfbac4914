//! Attribute filters in Google Cloud Pub/Sub's filter syntax.
//!
//! ```text
//! attributes.region = "IN"              the attribute is present and equal
//! attributes.region == "IN"             the same (`==` is accepted for `=`)
//! attributes.region != "IN"             the attribute is present and differs
//! attributes:region                     the attribute is present
//! hasPrefix(attributes.region, "eu-")   the attribute is present and starts with the prefix
//! NOT e, e AND e AND ..., e OR e OR ..., ( e )
//! ```
//!
//! As in Pub/Sub, one level cannot mix `AND` and `OR`: `a AND b OR c` is an
//! error that asks for parentheses. Keywords are upper case. An attribute key
//! is written bare (letters, digits and `_ - . ~ % +`) or quoted
//! (`attributes."key with spaces"`). Strings are in double quotes, with `\"`,
//! `\\`, `\n`, `\t` and `\r` escapes. A message without the attribute never
//! matches `=`, `!=` or `hasPrefix`; `NOT attributes.k = "v"` matches it.
//!
//! Filters are parsed once, at subscribe time; a malformed one is refused
//! with the byte position and what was expected. Evaluation reads the record's
//! encoded attributes in place and never allocates.

use std::fmt;

use crate::error::{Error, Result};
use crate::log::Attributes;

/// Most nesting of parentheses and `NOT`s a filter may have.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    Eq(Box<str>, Box<str>),
    Ne(Box<str>, Box<str>),
    Has(Box<str>),
    Prefix(Box<str>, Box<str>),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Expr {
    fn eval(&self, attrs: &Attributes<'_>) -> bool {
        match self {
            Expr::Eq(k, v) => attrs.clone().get(k) == Some(&**v),
            Expr::Ne(k, v) => attrs.clone().get(k).is_some_and(|x| x != &**v),
            Expr::Has(k) => attrs.clone().get(k).is_some(),
            Expr::Prefix(k, p) => attrs.clone().get(k).is_some_and(|x| x.starts_with(&**p)),
            Expr::Not(e) => !e.eval(attrs),
            Expr::And(es) => es.iter().all(|e| e.eval(attrs)),
            Expr::Or(es) => es.iter().any(|e| e.eval(attrs)),
        }
    }
}

/// A parsed attribute filter.
#[derive(Clone, PartialEq, Eq)]
pub struct Filter {
    text: Box<str>,
    expr: Expr,
}

impl Filter {
    /// Parses a filter; errors carry the byte position and the reason.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, Filter};
    ///
    /// let filter = Filter::parse(r#"attributes.region = "IN" AND NOT attributes:test"#)?;
    /// assert_eq!(filter.as_str(), r#"attributes.region = "IN" AND NOT attributes:test"#);
    /// // One level cannot mix AND and OR: the error gives the byte position.
    /// let mixed = Filter::parse(r#"attributes:a AND attributes:b OR attributes:c"#);
    /// assert!(matches!(mixed, Err(Error::InvalidFilter { .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<Filter> {
        let mut p = Parser { src: text, pos: 0, depth: 0 };
        p.skip_ws();
        if p.pos == text.len() {
            return Err(p.error_at(0, "the filter is empty"));
        }
        let expr = p.expr()?;
        p.skip_ws();
        if p.pos != text.len() {
            return Err(p.error("expected AND, OR, ')' or the end of the filter"));
        }
        Ok(Filter { text: text.into(), expr })
    }

    /// True if a message with these attributes passes the filter.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Filter;
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let filter = Filter::parse(r#"hasPrefix(attributes.region, "eu-")"#)?;
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"a").with_attributes(&[("region", "eu-west")]))?;
    /// log.append(&Record::new(b"b").with_attributes(&[("region", "us-east")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(2).expect("nothing was trimmed");
    /// let passed: Vec<bool> = batch.iter().map(|r| filter.matches(r.attributes())).collect();
    /// assert_eq!(passed, [true, false]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn matches(&self, attributes: Attributes<'_>) -> bool {
        self.expr.eval(&attributes)
    }

    /// The filter as written.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Filter;
    ///
    /// assert_eq!(Filter::parse("attributes:region")?.as_str(), "attributes:region");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Filter({:?})", self.text)
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Join {
    And,
    Or,
}

impl<'a> Parser<'a> {
    fn error_at(&self, position: usize, reason: impl Into<String>) -> Error {
        Error::InvalidFilter { position, reason: reason.into() }
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        let found = match self.rest().chars().next() {
            None => "the end of the filter".to_owned(),
            Some(_) => format!("{:?}", self.rest().chars().take(12).collect::<String>()),
        };
        self.error_at(self.pos, format!("{}, found {found}", reason.into()))
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
    }

    /// Consumes `word` if it is next and is not the start of a longer word.
    fn keyword(&mut self, word: &str) -> bool {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(word) && !rest[word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    fn punct(&mut self, p: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(p) {
            self.pos += p.len();
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(self.pos, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        Ok(())
    }

    /// expr := term ((AND term)* | (OR term)*)
    fn expr(&mut self) -> Result<Expr> {
        let first = self.term()?;
        let mut terms = vec![first];
        let mut join: Option<Join> = None;
        loop {
            let at = {
                self.skip_ws();
                self.pos
            };
            let this = if self.keyword("AND") {
                Join::And
            } else if self.keyword("OR") {
                Join::Or
            } else {
                break;
            };
            match join {
                Some(j) if j != this => {
                    return Err(self.error_at(at, "AND and OR cannot be mixed without parentheses"));
                }
                _ => join = Some(this),
            }
            terms.push(self.term()?);
        }
        Ok(match join {
            None => terms.pop().expect("one term"),
            Some(Join::And) => Expr::And(terms),
            Some(Join::Or) => Expr::Or(terms),
        })
    }

    /// term := NOT term | primary
    fn term(&mut self) -> Result<Expr> {
        if self.keyword("NOT") {
            self.enter()?;
            let inner = self.term()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr> {
        if self.punct("(") {
            self.enter()?;
            let inner = self.expr()?;
            self.depth -= 1;
            if !self.punct(")") {
                return Err(self.error("expected ')'"));
            }
            return Ok(inner);
        }
        if self.keyword("hasPrefix") {
            if !self.punct("(") {
                return Err(self.error("expected '(' after hasPrefix"));
            }
            let key = self.attribute_ref()?;
            if !self.punct(",") {
                return Err(self.error("expected ',' after the attribute in hasPrefix"));
            }
            let prefix = self.string()?;
            if !self.punct(")") {
                return Err(self.error("expected ')' to close hasPrefix"));
            }
            return Ok(Expr::Prefix(key, prefix));
        }
        self.skip_ws();
        if !self.keyword("attributes") {
            return Err(self.error("expected attributes.KEY, attributes:KEY, hasPrefix(...), NOT or '('"));
        }
        if self.rest().starts_with(':') {
            self.pos += 1;
            return Ok(Expr::Has(self.key()?));
        }
        if !self.rest().starts_with('.') {
            return Err(self.error("expected '.' or ':' after attributes"));
        }
        self.pos += 1;
        let key = self.key()?;
        if self.punct("!=") {
            Ok(Expr::Ne(key, self.string()?))
        } else if self.punct("==") || self.punct("=") {
            Ok(Expr::Eq(key, self.string()?))
        } else {
            Err(self.error(format!("expected '=', '==' or '!=' after attributes.{key}")))
        }
    }

    /// `attributes.KEY` inside hasPrefix.
    fn attribute_ref(&mut self) -> Result<Box<str>> {
        if !self.keyword("attributes") || !self.rest().starts_with('.') {
            return Err(self.error("expected attributes.KEY"));
        }
        self.pos += 1;
        self.key()
    }

    /// A bare or quoted attribute key, directly at the current position.
    fn key(&mut self) -> Result<Box<str>> {
        if self.rest().starts_with('"') {
            return self.string();
        }
        let len =
            self.rest().find(|c: char| !(c.is_alphanumeric() || "_-.~%+".contains(c))).unwrap_or(self.rest().len());
        if len == 0 {
            return Err(self.error("expected an attribute key"));
        }
        let key = &self.rest()[..len];
        self.pos += len;
        Ok(key.into())
    }

    /// A double-quoted string with escapes.
    fn string(&mut self) -> Result<Box<str>> {
        self.skip_ws();
        let start = self.pos;
        if !self.rest().starts_with('"') {
            return Err(self.error("expected a string in double quotes"));
        }
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out.into());
                }
                '\\' => {
                    let escaped = match chars.next() {
                        Some((_, '"')) => '"',
                        Some((_, '\\')) => '\\',
                        Some((_, 'n')) => '\n',
                        Some((_, 't')) => '\t',
                        Some((_, 'r')) => '\r',
                        Some((j, other)) => {
                            return Err(self.error_at(self.pos + j - 1, format!("unknown escape '\\{other}'")));
                        }
                        None => break,
                    };
                    out.push(escaped);
                }
                c => out.push(c),
            }
        }
        Err(self.error_at(start, "the string is not closed"))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::log::{Record, RecordView};

    fn with_attrs<R>(attrs: &[(&str, &str)], f: impl FnOnce(RecordView<'_>) -> R) -> R {
        let rec = Record::new(b"").with_attributes(attrs);
        let mut buf = vec![0; rec.encoded_len().unwrap()];
        rec.encode_into(&mut buf, 0);
        let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        f(RecordView::from_bytes(0, &buf[..len]))
    }

    fn check(filter: &str, attrs: &[(&str, &str)]) -> bool {
        let f = Filter::parse(filter).unwrap_or_else(|e| panic!("{filter}: {e}"));
        with_attrs(attrs, |r| f.matches(r.attributes()))
    }

    /// (filter, attributes, matches?)
    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    #[test]
    fn filter_table() {
        let table: &[Row<'_>] = &[
            (r#"attributes.region = "IN""#, &[("region", "IN")], true),
            (r#"attributes.region = "IN""#, &[("region", "US")], false),
            (r#"attributes.region = "IN""#, &[], false),
            (r#"attributes.region == "IN""#, &[("region", "IN")], true),
            (r#"attributes.region != "IN""#, &[("region", "US")], true),
            (r#"attributes.region != "IN""#, &[("region", "IN")], false),
            (r#"attributes.region != "IN""#, &[], false),
            (r#"NOT attributes.region = "IN""#, &[], true),
            ("attributes:region", &[("region", "")], true),
            ("attributes:region", &[("other", "x")], false),
            ("NOT attributes:region", &[("other", "x")], true),
            (r#"hasPrefix(attributes.region, "eu-")"#, &[("region", "eu-west")], true),
            (r#"hasPrefix(attributes.region, "eu-")"#, &[("region", "us-east")], false),
            (r#"hasPrefix(attributes.region, "eu-")"#, &[], false),
            (r#"hasPrefix(attributes.region, "")"#, &[("region", "x")], true),
            (r#"attributes.a = "1" AND attributes.b = "2""#, &[("a", "1"), ("b", "2")], true),
            (r#"attributes.a = "1" AND attributes.b = "2""#, &[("a", "1"), ("b", "3")], false),
            (r#"attributes.a = "1" OR attributes.b = "2" OR attributes:c"#, &[("c", "")], true),
            (r#"attributes.a = "1" OR attributes.b = "2""#, &[("a", "2")], false),
            (r#"(attributes.a = "1" OR attributes.a = "2") AND NOT attributes:x"#, &[("a", "2")], true),
            (r#"(attributes.a = "1" OR attributes.a = "2") AND NOT attributes:x"#, &[("a", "2"), ("x", "")], false),
            (r#"NOT NOT attributes:a"#, &[("a", "")], true),
            (
                r#"attributes.ce-type = "dev.x" AND attributes.rill.dlq.reason != """#,
                &[("ce-type", "dev.x"), ("rill.dlq.reason", "boom")],
                true,
            ),
            (r#"attributes."key with space" = "v""#, &[("key with space", "v")], true),
            (r#"attributes.q = "say \"hi\"\n""#, &[("q", "say \"hi\"\n")], true),
            (r#"  attributes.x="1"  "#, &[("x", "1")], true),
            (r#"attributes.ключ = "значение""#, &[("ключ", "значение")], true),
        ];
        for &(filter, attrs, expect) in table {
            assert_eq!(check(filter, attrs), expect, "{filter} with {attrs:?}");
        }
    }

    #[test]
    fn malformed_filters_say_where_and_why() {
        let table: &[(&str, usize, &str)] = &[
            ("", 0, "empty"),
            ("   ", 0, "empty"),
            (r#"attributes.a = "1" AND attributes.b = "2" OR attributes.c = "3""#, 42, "cannot be mixed"),
            (r#"attributes.a = "1" OR attributes.b = "2" AND attributes.c = "3""#, 41, "cannot be mixed"),
            ("attributes.a", 12, "expected '='"),
            ("attributes.a = 1", 15, "double quotes"),
            (r#"attributes.a = "open"#, 15, "not closed"),
            (r#"(attributes.a = "1""#, 19, "expected ')'"),
            (r#"attributes.a = "1")"#, 18, "end of the filter"),
            ("region = \"x\"", 0, "expected attributes"),
            (r#"hasPrefix(attributes.a "x")"#, 23, "expected ','"),
            (r#"hasprefix(attributes.a, "x")"#, 0, "expected attributes"),
            (r#"attributes.a = "1" and attributes.b = "2""#, 19, "expected AND"),
            (r#"attributes.a = "\q""#, 16, "unknown escape"),
            ("attributes.", 11, "attribute key"),
            ("attributes;a", 10, "'.' or ':'"),
            ("NOT", 3, "expected attributes"),
        ];
        for &(filter, position, says) in table {
            match Filter::parse(filter) {
                Err(Error::InvalidFilter { position: p, reason }) => {
                    assert_eq!(p, position, "{filter:?}: {reason}");
                    assert!(reason.contains(says), "{filter:?}: {reason}");
                }
                other => panic!("{filter:?} parsed as {other:?}"),
            }
        }
        let deep = format!("{}attributes:a{}", "(".repeat(100), ")".repeat(100));
        assert!(matches!(Filter::parse(&deep), Err(Error::InvalidFilter { .. })));
    }
}
