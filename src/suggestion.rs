//! "Did you mean": the closest of a few known words to what an operator typed.

/// Most edits between a typed word and a known one for it to be suggested: enough for a slip of a
/// key or two (`needs-attention`, `oncall`), not so many that an unrelated word is offered.
pub const EDITS_MAX: usize = 2;

/// The known word closest to `typed`, if one is within [`EDITS_MAX`] edits once case and `-`, ` `
/// versus `_` are ignored (those count as no edit).
pub fn closest<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['-', ' '], "_");
    let typed = norm(typed);
    known
        .into_iter()
        .map(|k| (edits(&typed, &norm(k)), k))
        .filter(|(d, _)| *d <= EDITS_MAX)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// ` (did you mean `WORD`?)` for `typed`, or nothing.
pub fn hint<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(typed, known).map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"))
}

/// Levenshtein distance over characters (the words are a few dozen characters at most).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_word_is_suggested_and_a_far_one_is_not() {
        let states = ["executing", "unknown", "needs_attention"];
        assert_eq!(closest("needs-attention", states), Some("needs_attention"));
        assert_eq!(closest("NEEDS ATTENTION", states), Some("needs_attention"));
        assert_eq!(closest("unknwn", states), Some("unknown"));
        assert_eq!(closest("paid", states), None);
        let roles = ["service", "assistant", "on_call"];
        assert_eq!(closest("oncall", roles), Some("on_call"));
        assert_eq!(hint("oncall", roles), " (did you mean `on_call`?)");
        assert_eq!(hint("admin", roles), "");
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("", "ab"), 2);
    }
}
