//! Every name rill is given, in one place: topic names, subscription patterns,
//! durable subscription names, consumer group names and dead-letter topics.
//! Validation, matching, and the index that finds the subscriptions a new
//! topic must be attached to.
//!
//! A topic name is `/`-separated segments: UTF-8, at most 255 bytes, no empty
//! segment, no NUL, no `*`. Names starting with `$` belong to the broker (dead
//! letter topics); users cannot create them, but may publish to, subscribe to
//! and poll them once they exist.
//!
//! A durable subscription name and a consumer group name follow the same
//! rules, except that a subscription name is at most
//! [`MAX_SUBSCRIPTION_NAME_LEN`] bytes (250), so that its default dead-letter
//! topic `$dlq/<name>` is a valid topic name too; so is the group name of a
//! consumer without a `dead_letter_topic` of its own, whose dead letters go to
//! `$dlq/<group>`. A subscription's or consumer's `dead_letter_topic` option
//! is a topic name (and may be a `$` one). Each is checked where it is given,
//! and its error names the argument that is wrong.
//!
//! A pattern is a name whose segments may also be `*` (exactly one segment) or
//! `**` (zero or more segments, anywhere in the pattern). A pattern whose first
//! segment is a wildcard does not match `$` topics, so `**` never picks up the
//! broker's own topics by accident; `$dlq/*` does. A pattern has at most
//! [`MAX_PATTERN_SEGMENTS`] segments, at most [`MAX_PATTERN_ANY`] of them
//! `**`, and at most [`MAX_NAME_LEN`] bytes. Consecutive `**` mean the same as
//! one and are matched as one.
//!
//! # The cost of matching
//!
//! A new topic is matched against every live pattern at once by walking the
//! [`PatternIndex`] trie (under the broker's control lock, so it must be
//! quick). A `**` can absorb any number of segments, so a naive walk tries
//! every way of splitting the topic's segments among a pattern's `**`s:
//! exponential in their number. The walk instead remembers which (trie node,
//! topic segment index) pairs it has visited and never visits one twice, so
//! it costs at most `nodes * (segments + 1)` visits, each of which (at a `**`)
//! fans out over at most `segments + 1` positions: polynomial, whatever the
//! patterns.
//!
//! Its unit tests, at the end, are a third of the file.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::error::{Error, Result};

/// Longest topic name or pattern, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Most segments in a subscription pattern.
pub const MAX_PATTERN_SEGMENTS: usize = 64;
/// Most `**` segments in a subscription pattern.
pub const MAX_PATTERN_ANY: usize = 32;
/// First character of the broker's reserved topics.
pub(crate) const RESERVED_PREFIX: char = '$';
/// What a subscription's default dead-letter topic name starts with.
const DEAD_LETTER_PREFIX: &str = "$dlq/";
/// Longest durable subscription name, in bytes: `$dlq/<name>` must fit
/// [`MAX_NAME_LEN`]. The group name of a consumer that leaves its
/// dead-letter topic to the default, `$dlq/<group>`, has the same limit.
pub const MAX_SUBSCRIPTION_NAME_LEN: usize = MAX_NAME_LEN - DEAD_LETTER_PREFIX.len();

/// Checks the shape shared by every name and pattern: non-empty, at most
/// `max_len` bytes, no NUL, `/`-separated non-empty segments. Returns what is
/// wrong, for the caller to say whose name it is.
fn check_segments(text: &str, max_len: usize) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > max_len {
        return Err(format!("is {} bytes long; at most {max_len} are allowed", text.len()));
    }
    if text.contains('\0') {
        return Err("contains a NUL character".into());
    }
    if let Some(i) = text.split('/').position(str::is_empty) {
        return Err(format!("segment {} is empty (names are non-empty segments separated by single '/')", i + 1));
    }
    Ok(())
}

/// Validates a topic name as something a publisher or subscriber may name.
pub(crate) fn validate_topic(name: &str) -> Result<()> {
    check_name(name, MAX_NAME_LEN).map_err(|reason| Error::InvalidTopic { name: name.to_owned(), reason })
}

/// The rules of a name that is not a pattern: [`check_segments`], and no `*`.
fn check_name(name: &str, max_len: usize) -> Result<(), String> {
    check_segments(name, max_len)?;
    if name.contains('*') {
        return Err("contains '*', which is only allowed in subscription patterns".into());
    }
    Ok(())
}

/// Validates a durable subscription name (the `name` option).
pub(crate) fn validate_subscription_name(name: &str) -> Result<()> {
    check_name(name, MAX_SUBSCRIPTION_NAME_LEN)
        .map_err(|reason| Error::InvalidArgument(format!("subscription name {name:?} {reason}")))
}

/// Validates a consumer group name.
pub(crate) fn validate_group(group: &str) -> Result<()> {
    check_name(group, MAX_NAME_LEN)
        .map_err(|reason| Error::InvalidArgument(format!("consumer group name {group:?} {reason}")))
}

/// Validates the group name of a new consumer without a `dead_letter_topic`
/// of its own (after [`validate_group`]): its dead letters go to
/// `$dlq/<group>`, which must be a topic name too, or no nack could ever
/// dead-letter a message.
pub(crate) fn validate_group_for_default_dead_letters(group: &str) -> Result<()> {
    if group.len() > MAX_SUBSCRIPTION_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "consumer group name {group:?} is {} bytes long; at most {MAX_SUBSCRIPTION_NAME_LEN} are allowed \
             without a dead_letter_topic, so that the default dead-letter topic {DEAD_LETTER_PREFIX}<group> \
             fits the {MAX_NAME_LEN}-byte limit of a topic name",
            group.len()
        )));
    }
    Ok(())
}

/// Validates a subscription's `dead_letter_topic` option (any topic name,
/// the broker's `$` ones included).
pub(crate) fn validate_dead_letter_topic(topic: &str) -> Result<()> {
    check_name(topic, MAX_NAME_LEN)
        .map_err(|reason| Error::InvalidArgument(format!("dead_letter_topic {topic:?} {reason}")))
}

/// The dead-letter topic of subscription `name` when none is given.
pub(crate) fn default_dead_letter_topic(name: &str) -> String {
    format!("{DEAD_LETTER_PREFIX}{name}")
}

/// Checks that topic `topic`'s own dead-letter topic, `$dlq/<topic>`
/// (where `OnInvalid::DeadLetter` sends what its schema refuses), is a
/// valid name: a topic name longer than [`MAX_SUBSCRIPTION_NAME_LEN`] has
/// none.
pub(crate) fn validate_schema_dead_letter(topic: &str) -> Result<()> {
    if topic.len() > MAX_SUBSCRIPTION_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "topic {topic:?} is {} bytes long: its dead-letter topic {DEAD_LETTER_PREFIX}<topic> would be too long \
             for a name, so OnInvalid::DeadLetter needs a topic name of at most {MAX_SUBSCRIPTION_NAME_LEN} bytes",
            topic.len()
        )));
    }
    Ok(())
}

/// Validates a name a user wants to create a topic under.
pub(crate) fn validate_user_topic(name: &str) -> Result<()> {
    validate_topic(name)?;
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Error::InvalidTopic {
            name: name.to_owned(),
            reason: format!("names starting with '{RESERVED_PREFIX}' are reserved for the broker's own topics"),
        });
    }
    Ok(())
}

/// One segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Seg {
    Literal(Box<str>),
    /// `*`: exactly one segment.
    One,
    /// `**`: zero or more segments.
    Any,
}

/// A parsed subscription pattern.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    text: Box<str>,
    segs: Box<[Seg]>,
}

impl Pattern {
    /// Parses and validates a pattern.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::{Error, Pattern};
    ///
    /// let pattern = Pattern::parse("shop/*/orders")?;
    /// assert!(pattern.matches("shop/eu/orders"));
    /// assert!(matches!(Pattern::parse("shop/eu*"), Err(Error::InvalidPattern { .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<Pattern> {
        let invalid = |reason: String| Error::InvalidPattern { pattern: text.to_owned(), reason };
        check_segments(text, MAX_NAME_LEN).map_err(invalid)?;
        let count = text.split('/').count();
        if count > MAX_PATTERN_SEGMENTS {
            return Err(invalid(format!("has {count} segments; at most {MAX_PATTERN_SEGMENTS} are allowed")));
        }
        let any = text.split('/').filter(|s| *s == "**").count();
        if any > MAX_PATTERN_ANY {
            return Err(invalid(format!("has {any} '**' segments; at most {MAX_PATTERN_ANY} are allowed")));
        }
        let mut segs = Vec::new();
        for (i, s) in text.split('/').enumerate() {
            segs.push(match s {
                "*" => Seg::One,
                // `**/**` matches what `**` does: keep one.
                "**" if segs.last() == Some(&Seg::Any) => continue,
                "**" => Seg::Any,
                _ if s.contains('*') => {
                    return Err(invalid(format!(
                        "segment {} ({s:?}) mixes '*' with other characters; a wildcard must be a whole segment",
                        i + 1
                    )));
                }
                _ => Seg::Literal(s.into()),
            });
        }
        Ok(Pattern { text: text.into(), segs: segs.into() })
    }

    /// The pattern as written.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Pattern;
    ///
    /// assert_eq!(Pattern::parse("shop/**")?.as_str(), "shop/**");
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True if the pattern has no wildcard (it names exactly one topic).
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Pattern;
    ///
    /// assert!(Pattern::parse("shop/orders")?.is_literal());
    /// assert!(!Pattern::parse("shop/*")?.is_literal());
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_literal(&self) -> bool {
        self.segs.iter().all(|s| matches!(s, Seg::Literal(_)))
    }

    fn starts_with_wildcard(&self) -> bool {
        !matches!(self.segs[0], Seg::Literal(_))
    }

    /// True if `topic` (a valid topic name) matches this pattern.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Pattern;
    ///
    /// let any = Pattern::parse("shop/**")?;
    /// assert!(any.matches("shop") && any.matches("shop/eu/orders"));
    /// assert!(!Pattern::parse("shop/*")?.matches("shop/eu/orders")); // `*` is one segment
    /// // A pattern starting with a wildcard leaves the broker's `$` topics alone.
    /// assert!(!Pattern::parse("**")?.matches("$dlq/billing"));
    /// assert!(Pattern::parse("$dlq/*")?.matches("$dlq/billing"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn matches(&self, topic: &str) -> bool {
        if topic.starts_with(RESERVED_PREFIX) && self.starts_with_wildcard() {
            return false;
        }
        let parts: Vec<&str> = topic.split('/').collect();
        glob(&self.segs, &parts)
    }
}

/// Segment-wise glob match. `**` is handled by remembering the most recent
/// one and letting it absorb one more segment on a mismatch, the classic
/// linear-backtracking wildcard match.
fn glob(pat: &[Seg], parts: &[&str]) -> bool {
    let (mut p, mut t) = (0, 0);
    // (pattern index after the last `**`, topic index it is matched up to)
    let mut star: Option<(usize, usize)> = None;
    while t < parts.len() {
        match pat.get(p) {
            Some(Seg::Any) => {
                star = Some((p + 1, t));
                p += 1;
            }
            Some(Seg::One) => {
                p += 1;
                t += 1;
            }
            Some(Seg::Literal(l)) if **l == *parts[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|s| *s == Seg::Any)
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.text)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An index from patterns to values (subscriptions), answering "which
/// patterns match this topic?" by walking a trie of pattern segments instead
/// of testing every pattern.
#[derive(Debug)]
pub(crate) struct PatternIndex<V> {
    root: Node<V>,
    len: usize,
}

#[derive(Debug)]
struct Node<V> {
    literal: HashMap<Box<str>, Node<V>>,
    one: Option<Box<Node<V>>>,
    any: Option<Box<Node<V>>>,
    /// Values whose pattern ends here, with the pattern (for the `$` rule).
    values: Vec<(u64, V, bool)>,
}

impl<V> Default for Node<V> {
    fn default() -> Self {
        Node { literal: HashMap::new(), one: None, any: None, values: Vec::new() }
    }
}

impl<V> Node<V> {
    fn is_empty(&self) -> bool {
        self.values.is_empty() && self.literal.is_empty() && self.one.is_none() && self.any.is_none()
    }
}

impl<V: Clone> Default for PatternIndex<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> PatternIndex<V> {
    pub(crate) fn new() -> Self {
        PatternIndex { root: Node::default(), len: 0 }
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `value` under `pattern`, identified by `id` for removal.
    pub(crate) fn insert(&mut self, pattern: &Pattern, id: u64, value: V) {
        let mut node = &mut self.root;
        for seg in pattern.segs.iter() {
            node = match seg {
                Seg::Literal(l) => node.literal.entry(l.clone()).or_default(),
                Seg::One => node.one.get_or_insert_with(Box::default),
                Seg::Any => node.any.get_or_insert_with(Box::default),
            };
        }
        node.values.push((id, value, pattern.starts_with_wildcard()));
        self.len += 1;
    }

    /// Removes the entry `id` under `pattern`; returns whether it was there.
    pub(crate) fn remove(&mut self, pattern: &Pattern, id: u64) -> bool {
        fn go<V>(node: &mut Node<V>, segs: &[Seg], id: u64) -> bool {
            let Some((first, rest)) = segs.split_first() else {
                let before = node.values.len();
                node.values.retain(|(i, _, _)| *i != id);
                return node.values.len() != before;
            };
            match first {
                Seg::Literal(l) => match node.literal.get_mut(l) {
                    Some(child) => {
                        let removed = go(child, rest, id);
                        if child.is_empty() {
                            node.literal.remove(l);
                        }
                        removed
                    }
                    None => false,
                },
                Seg::One | Seg::Any => {
                    let slot = if *first == Seg::One { &mut node.one } else { &mut node.any };
                    match slot {
                        Some(child) => {
                            let removed = go(child, rest, id);
                            if child.is_empty() {
                                *slot = None;
                            }
                            removed
                        }
                        None => false,
                    }
                }
            }
        }
        let removed = go(&mut self.root, &pattern.segs, id);
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// Every value whose pattern matches `topic`, each once.
    pub(crate) fn matches(&self, topic: &str) -> Vec<V> {
        // No pattern, nothing to walk: a topic created while no pattern
        // subscription is open (the usual case when topics are made in
        // bulk) skips splitting its name and building the walk's visited
        // set, a fair share of what a create costs (the `create CPU`
        // column of `rill-bench --scenario scale` measures it).
        if self.root.is_empty() {
            return Vec::new();
        }
        self.matches_counting(topic).0
    }

    /// [`PatternIndex::matches`], and how many (node, segment) pairs the walk
    /// visited: at most `nodes * (segments + 1)` (the fuzz target checks it).
    pub(crate) fn matches_counting(&self, topic: &str) -> (Vec<V>, usize) {
        let mut walk = Walk {
            parts: topic.split('/').collect(),
            reserved: topic.starts_with(RESERVED_PREFIX),
            visited: HashSet::new(),
            found: Vec::new(),
        };
        walk.visit(&self.root, 0);
        let visits = walk.visited.len();
        let mut found = walk.found;
        found.sort_unstable_by_key(|(id, _)| *id);
        found.dedup_by_key(|(id, _)| *id);
        (found.into_iter().map(|(_, v)| v).collect(), visits)
    }

    /// Nodes of the trie, the root included.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn node_count(&self) -> usize {
        fn count<V>(n: &Node<V>) -> usize {
            1 + n.literal.values().map(count).sum::<usize>()
                + n.one.as_deref().map_or(0, count)
                + n.any.as_deref().map_or(0, count)
        }
        count(&self.root)
    }
}

/// One walk of the trie for one topic (see "The cost of matching").
struct Walk<'t, V> {
    parts: Vec<&'t str>,
    reserved: bool,
    /// (node address, index of the next topic segment) pairs already visited.
    visited: HashSet<(*const (), usize)>,
    found: Vec<(u64, V)>,
}

impl<V: Clone> Walk<'_, V> {
    /// Collects the values of every pattern under `node` that matches the
    /// topic's segments from `next` on.
    fn visit(&mut self, node: &Node<V>, next: usize) {
        if !self.visited.insert((std::ptr::from_ref(node).cast(), next)) {
            return;
        }
        if let Some(any) = &node.any {
            // `**` absorbs zero or more of the remaining segments.
            for resume in next..=self.parts.len() {
                self.visit(any, resume);
            }
        }
        let Some(first) = self.parts.get(next) else {
            let reserved = self.reserved;
            self.found.extend(
                node.values
                    .iter()
                    .filter(|(_, _, wild_first)| !(reserved && *wild_first))
                    .map(|(id, v, _)| (*id, v.clone())),
            );
            return;
        };
        if let Some(child) = node.literal.get(*first) {
            self.visit(child, next + 1);
        }
        if let Some(one) = &node.one {
            self.visit(one, next + 1);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_the_rules() {
        for ok in ["a", "sports/cricket", "a/b/c/d", "with space/ünïcode", "$dlq/x"] {
            validate_topic(ok).unwrap();
        }
        let long = "x".repeat(256);
        for (bad, says) in [
            ("", "empty"),
            ("/a", "segment 1 is empty"),
            ("a/", "segment 2 is empty"),
            ("a//b", "segment 2 is empty"),
            ("a/*", "'*'"),
            ("a\0b", "NUL"),
            (long.as_str(), "256 bytes"),
        ] {
            let err = validate_topic(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        assert_eq!(validate_topic(&"x".repeat(255)), Ok(()));
        let err = validate_user_topic("$dlq/mine").unwrap_err().to_string();
        assert!(err.contains("reserved"), "{err}");
    }

    #[test]
    fn patterns_reject_partial_wildcards() {
        for bad in ["a*", "a/b*c", "***", "", "a//b", "/"] {
            assert!(matches!(Pattern::parse(bad), Err(Error::InvalidPattern { .. })), "{bad:?}");
        }
        assert!(Pattern::parse("a/*").unwrap().matches("a/b"));
        assert!(Pattern::parse("exact/name").unwrap().is_literal());
    }

    /// (pattern, topic, matches?)
    const TABLE: &[(&str, &str, bool)] = &[
        ("sports/**", "sports", true),
        ("sports/**", "sports/cricket", true),
        ("sports/**", "sports/cricket/live", true),
        ("sports/**", "sportscar", false),
        ("sports/**", "news/sports", false),
        ("sports/*", "sports/cricket", true),
        ("sports/*", "sports", false),
        ("sports/*", "sports/cricket/live", false),
        ("a/**/z", "a/z", true),
        ("a/**/z", "a/b/z", true),
        ("a/**/z", "a/b/c/z", true),
        ("a/**/z", "a/b/c", false),
        ("a/**/z", "a/z/y", false),
        ("a/**/z", "a/z/z", true),
        ("**", "anything/at/all", true),
        ("**", "x", true),
        ("**/z", "z", true),
        ("**/z", "a/b/z", true),
        ("**/z", "a/b/zz", false),
        ("*/*", "a/b", true),
        ("*/*", "a", false),
        ("*/b/**", "a/b", true),
        ("*/b/**", "a/c", false),
        ("a/**/**/b", "a/b", true),
        ("a/**/b/**/c", "a/x/b/y/c", true),
        ("a/**/b/**/c", "a/x/y/c", false),
        ("a/*/**", "a", false),
        ("a/*/**", "a/b/c/d", true),
        ("exact", "exact", true),
        ("exact", "exact/no", false),
        // The broker's own topics are not matched by a leading wildcard.
        ("**", "$dlq/orders", false),
        ("*/orders", "$dlq/orders", false),
        ("$dlq/*", "$dlq/orders", true),
        ("$dlq/**", "$dlq/orders", true),
    ];

    #[test]
    fn wildcard_table() {
        for &(pattern, topic, expect) in TABLE {
            let p = Pattern::parse(pattern).unwrap();
            assert_eq!(p.matches(topic), expect, "{pattern} vs {topic}");
        }
    }

    #[test]
    fn index_agrees_with_direct_matching() {
        let mut index = PatternIndex::new();
        let patterns: Vec<Pattern> = TABLE.iter().map(|(p, _, _)| Pattern::parse(p).unwrap()).collect();
        for (id, p) in patterns.iter().enumerate() {
            index.insert(p, id as u64, id);
        }
        let topics: Vec<&str> = TABLE.iter().map(|(_, t, _)| *t).collect();
        for topic in topics {
            let mut expect: Vec<usize> = (0..patterns.len()).filter(|&i| patterns[i].matches(topic)).collect();
            expect.dedup();
            assert_eq!(index.matches(topic), expect, "{topic}");
        }
        for (id, p) in patterns.iter().enumerate() {
            assert!(index.remove(p, id as u64));
        }
        assert_eq!(index.len(), 0);
        assert!(index.root.is_empty(), "removal prunes the trie");
    }

    /// The plainest possible matcher, for checking the others: tries every
    /// way a `**` can absorb segments (exponential; only for small inputs).
    fn reference(pattern: &[&str], topic: &[&str]) -> bool {
        match pattern.split_first() {
            None => topic.is_empty(),
            Some((&"**", rest)) => (0..=topic.len()).any(|k| reference(rest, &topic[k..])),
            Some((&"*", rest)) => !topic.is_empty() && reference(rest, &topic[1..]),
            Some((lit, rest)) => topic.first() == Some(lit) && reference(rest, &topic[1..]),
        }
    }

    fn reference_matches(pattern: &str, topic: &str) -> bool {
        if topic.starts_with(RESERVED_PREFIX) && pattern.split('/').next().is_some_and(|s| s.starts_with('*')) {
            return false;
        }
        reference(&pattern.split('/').collect::<Vec<_>>(), &topic.split('/').collect::<Vec<_>>())
    }

    fn segment() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::prop_oneof![
            proptest::strategy::Just("a".to_owned()),
            proptest::strategy::Just("b".to_owned()),
            proptest::strategy::Just("$c".to_owned()),
        ]
    }

    fn pattern_segment() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::prop_oneof![
            segment(),
            proptest::strategy::Just("*".to_owned()),
            proptest::strategy::Just("**".to_owned())
        ]
    }

    proptest::proptest! {
        /// The trie walk and `Pattern::matches` agree with the reference
        /// matcher, for many patterns in one index at once.
        #[test]
        fn trie_and_glob_agree_with_the_reference(
            patterns in proptest::collection::vec(proptest::collection::vec(pattern_segment(), 1..8), 1..12),
            topics in proptest::collection::vec(proptest::collection::vec(segment(), 1..10), 1..8),
        ) {
            let patterns: Vec<String> = patterns.iter().map(|p| p.join("/")).collect();
            let mut index = PatternIndex::new();
            let parsed: Vec<Pattern> = patterns.iter().map(|p| Pattern::parse(p).unwrap()).collect();
            for (id, p) in parsed.iter().enumerate() {
                index.insert(p, id as u64, id);
            }
            for topic in topics.iter().map(|t| t.join("/")) {
                let expect: Vec<usize> =
                    (0..patterns.len()).filter(|&i| reference_matches(&patterns[i], &topic)).collect();
                for (i, p) in parsed.iter().enumerate() {
                    proptest::prop_assert_eq!(p.matches(&topic), expect.contains(&i), "{} vs {}", p, topic);
                }
                proptest::prop_assert_eq!(index.matches(&topic), expect, "{}", topic);
            }
        }
    }

    /// Issue 14 #2: 24 `**` and a 40-segment topic that almost matches used
    /// to take exponential time (it did not finish); each (trie node, segment)
    /// pair is now visited once. No timing threshold: before the fix this test
    /// does not complete.
    #[test]
    fn many_double_wildcards_match_in_polynomial_time() {
        let pattern = vec!["**/a"; 24].join("/") + "/b";
        let p = Pattern::parse(&pattern).unwrap();
        let mut index = PatternIndex::new();
        index.insert(&p, 1, ());
        // 40 segments: 39 `a` and a last one that is not `b`, so every split fails.
        let topic = vec!["a"; 39].join("/") + "/c";
        assert!(index.matches(&topic).is_empty());
        assert!(!p.matches(&topic));
        let hit = vec!["a"; 39].join("/") + "/b";
        assert_eq!(index.matches(&hit).len(), 1, "24 `a`s among 39, then b");
        assert!(p.matches(&hit));
        // Consecutive `**` collapse: a long run is one wildcard.
        let run = Pattern::parse(&(vec!["**"; 30].join("/") + "/x")).unwrap();
        assert_eq!(run.segs.len(), 2);
        assert!(run.matches("x") && run.matches("a/b/x") && !run.matches("a/b"));
    }

    /// `matches` answers an index with no pattern without walking it: empty
    /// from the start, emptied by removals, and not empty while a pattern
    /// (even one held only by the root's `**` child) is left.
    #[test]
    fn an_index_without_patterns_matches_nothing_and_one_with_them_still_walks() {
        let mut index = PatternIndex::new();
        assert!(index.matches("a/b").is_empty());
        let any = Pattern::parse("**").unwrap();
        let literal = Pattern::parse("a/b").unwrap();
        index.insert(&any, 1, 'x');
        index.insert(&literal, 2, 'y');
        assert_eq!(index.matches("a/b"), ['x', 'y']);
        assert!(index.remove(&literal, 2));
        assert_eq!(index.matches("a/b"), ['x'], "the root's `**` alone still matches");
        assert!(index.remove(&any, 1));
        assert!(index.root.is_empty());
        assert!(index.matches("a/b").is_empty());
        index.insert(&literal, 3, 'z');
        assert_eq!(index.matches("a/b"), ['z']);
    }

    #[test]
    fn pattern_size_is_bounded_with_a_reason() {
        let too_many = vec!["a"; MAX_PATTERN_SEGMENTS + 1].join("/");
        let err = Pattern::parse(&too_many).unwrap_err().to_string();
        assert!(err.contains("65 segments; at most 64"), "{err}");
        Pattern::parse(&vec!["a"; MAX_PATTERN_SEGMENTS].join("/")).unwrap();
        let wild = vec!["**"; MAX_PATTERN_ANY + 1].join("/");
        let err = Pattern::parse(&wild).unwrap_err().to_string();
        assert!(err.contains("33 '**' segments; at most 32"), "{err}");
        Pattern::parse(&vec!["**/a"; MAX_PATTERN_ANY].join("/")).unwrap();
        let err = Pattern::parse(&"a/".repeat(200)).unwrap_err().to_string();
        assert!(err.contains("at most 255"), "{err}");
    }
}
