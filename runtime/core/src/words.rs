//! A text's words: the one way the fleet cuts a text into words ([`split`]), the compounds
//! ([`words`]), and those that say nothing about what a text is about, for the topics of study
//! questions, of user profiles, of what consolidation finds shared, of what a reply answers, of
//! what memory recalls and adapters fit. What counts as a word beyond that (a least length, stop
//! words, lower case) is each reader's filter.

/// Lowercase; see [`is_stop_word`].
const STOP_WORDS: &[&str] = &[
    "about",
    "across",
    "after",
    "again",
    "all",
    "also",
    "and",
    "answer",
    "any",
    "anyone",
    "anything",
    "are",
    "asked",
    "been",
    "being",
    "but",
    "can",
    "could",
    "deferred",
    "did",
    "does",
    "doing",
    "done",
    "each",
    "everyone",
    "explain",
    "for",
    "from",
    "get",
    "going",
    "got",
    "had",
    "has",
    "have",
    "her",
    "here",
    "him",
    "his",
    "how",
    "into",
    "its",
    "just",
    "know",
    "let",
    "like",
    "made",
    "make",
    "may",
    "maybe",
    "more",
    "most",
    "much",
    "need",
    "new",
    "not",
    "now",
    "okay",
    "old",
    "one",
    "only",
    "other",
    "our",
    "out",
    "over",
    "please",
    "question",
    "questions",
    "really",
    "say",
    "see",
    "she",
    "should",
    "some",
    "someone",
    "something",
    "still",
    "such",
    "sure",
    "tell",
    "than",
    "thank",
    "thanks",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "think",
    "this",
    "those",
    "today",
    "too",
    "two",
    "under",
    "use",
    "very",
    "want",
    "was",
    "way",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "why",
    "will",
    "with",
    "would",
    "yeah",
    "yes",
    "you",
    "your",
    "yours",
];

/// Whether `w` (lowercase) says nothing about a topic.
pub fn is_stop_word(w: &str) -> bool {
    STOP_WORDS.binary_search(&w).is_ok()
}

/// A text's words in order, as written: its runs of letters and digits (`"I'm  here!"`: `I`, `m`,
/// `here`). Readers lower-case the ones they keep.
#[inline]
pub fn split(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty())
}

/// Whether `c` is part of a compound word: a letter, a digit, `_` or `-` (`on-call`, `db_1`).
/// What [`words`] splits at first; the gate's keyword scan splits at it too, in its own loop (an
/// iterator of the words cost the gate a sixth of its throughput).
#[inline]
pub fn in_compound(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// A text's [`split`] words, and the compounds they make: a compound joined by `_` or `-`
/// (`statement_timeout`, `db-1`, `on-call`) is a word before its parts (a path's parts are words
/// of their own).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !in_compound(c)).map(|w| w.trim_matches(['_', '-'])).filter(|w| !w.is_empty()).flat_map(|w| {
        let parts: Vec<String> = split(w).map(str::to_lowercase).collect();
        let whole = (parts.len() > 1).then(|| w.to_lowercase());
        whole.into_iter().chain(parts)
    })
}

/// The words that say what a text is about: [`words`] of three characters or more that are not
/// stop words, in order, each once (one word of each [`stem`]).
pub fn content_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for w in words(text) {
        if w.chars().count() >= 3 && !is_stop_word(&w) {
            let s = stem(&w).to_string();
            if !seen.contains(&s) {
                seen.push(s);
                out.push(w);
            }
        }
    }
    out
}

/// The stems of a text's [`content_words`], to match words of one topic.
pub fn stems(text: &str) -> std::collections::HashSet<String> {
    content_words(text).iter().map(|w| stem(w).to_string()).collect()
}

/// A word without the endings that do not change what it is about (`deploys`, `deployed`,
/// `deploying`: `deploy`), so that words of one topic match; short words stay whole.
pub fn stem(w: &str) -> &str {
    for end in ["ing", "ed", "es", "s"] {
        if let Some(s) = w.strip_suffix(end)
            && s.chars().count() >= 4
            && !s.ends_with('s')
        {
            return s;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_words_are_stemmed_lower_cased_and_leave_stop_words_out() {
        assert_eq!(
            content_words("What did Bob say about the deploys? He deployed db_1 via src/net/retry.rs"),
            ["bob", "deploys", "db_1", "via", "src", "net", "retry"]
        );
        assert_eq!(
            words("statement_timeout of db-1, on-call").collect::<Vec<_>>(),
            ["statement_timeout", "statement", "timeout", "of", "db-1", "db", "1", "on-call", "on", "call"]
        );
        assert!(stems("deployed to staging").contains("deploy"));
        assert_eq!(stem("timeouts"), "timeout");
        assert_eq!(stem("class"), "class", "a double s is not a plural");
        assert_eq!(stem("bus"), "bus", "short words stay whole");
    }

    #[test]
    fn the_list_is_sorted_so_the_search_finds_every_word() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(STOP_WORDS.iter().all(|w| is_stop_word(w)));
        assert!(is_stop_word("across") && is_stop_word("question") && !is_stop_word("rollout"));
    }
}
