//! Topic names and subscription patterns: parsing, `Pattern::matches`, and
//! the broker's pattern trie, each checked against a plain reference matcher.
//!
//! Input: the topic on the first line, then up to 32 patterns, one a line.
//! Checks: errors are the right variants; both matchers agree with the
//! reference; and the trie walk's work is bounded: it visits at most
//! `nodes * (segments + 1)` (node, segment) pairs, whatever the patterns (the
//! work bound stands in for a time limit per input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill::{Error, Pattern};

/// Does `pattern` match `topic`? A table over (pattern segment, topic
/// segment) positions, written for clarity rather than speed.
fn reference(pattern: &str, topic: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let t: Vec<&str> = topic.split('/').collect();
    if topic.starts_with('$') && (p[0] == "*" || p[0] == "**") {
        return false;
    }
    // m[i][j]: p[i..] matches t[j..].
    let mut m = vec![vec![false; t.len() + 1]; p.len() + 1];
    m[p.len()][t.len()] = true;
    for i in (0..p.len()).rev() {
        for j in (0..=t.len()).rev() {
            m[i][j] = match p[i] {
                "**" => m[i + 1][j] || (j < t.len() && m[i][j + 1]),
                "*" => j < t.len() && m[i + 1][j + 1],
                lit => j < t.len() && t[j] == lit && m[i + 1][j + 1],
            };
        }
    }
    m[0][0]
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let topic = lines.next().unwrap_or_default();
    let topic_ok = match rill::fuzzing::validate_topic(topic) {
        Ok(()) => true,
        Err(Error::InvalidTopic { .. }) => false,
        Err(e) => panic!("a bad topic must be InvalidTopic, got {e:?}"),
    };
    let mut patterns = Vec::new();
    for line in lines.take(32) {
        match Pattern::parse(line) {
            Ok(p) => {
                assert_eq!(p.as_str(), line);
                patterns.push(p);
            }
            Err(Error::InvalidPattern { .. }) => {}
            Err(e) => panic!("a bad pattern must be InvalidPattern, got {e:?}"),
        }
    }
    if !topic_ok {
        return;
    }
    let expect: Vec<usize> = (0..patterns.len()).filter(|&i| reference(patterns[i].as_str(), topic)).collect();
    for (i, p) in patterns.iter().enumerate() {
        assert_eq!(p.matches(topic), expect.contains(&i), "{p} vs {topic}");
    }
    let (found, visits, nodes) = rill::fuzzing::index_matches(&patterns, topic);
    assert_eq!(found, expect, "the trie vs the reference for {topic}");
    let segments = topic.split('/').count();
    assert!(visits <= nodes * (segments + 1), "{visits} visits for {nodes} nodes and {segments} segments");
});
