//! Internals the fuzz targets in `fuzz/` check against references. Built only
//! with the `fuzzing` feature; not part of rill's API.

use crate::broker::Pattern;
use crate::broker::names::PatternIndex;

/// Indexes `patterns` in the broker's pattern trie and matches `topic`
/// against them: the indexes of the matching patterns (ascending), how many
/// (trie node, segment) pairs the walk visited, and how many nodes the trie
/// has.
pub fn index_matches(patterns: &[Pattern], topic: &str) -> (Vec<usize>, usize, usize) {
    let mut index = PatternIndex::new();
    for (i, p) in patterns.iter().enumerate() {
        index.insert(p, i as u64, i);
    }
    let (found, visits) = index.matches_counting(topic);
    (found, visits, index.node_count())
}

/// Checks a topic name the way the broker does before creating a topic.
pub fn validate_topic(name: &str) -> crate::error::Result<()> {
    crate::broker::names::validate_topic(name)
}
