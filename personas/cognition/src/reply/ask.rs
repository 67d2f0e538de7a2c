//! What a message asks, read from its words: what one person said about a topic, a summary of
//! a discussion, who or when, where or how in code, a greeting or thanks, another question, or
//! a statement. The reply is built for what was asked ([`super::grounded`]).

use mindfleet_core::words::{content_words, is_stop_word, stem, words};

/// What a message asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// "what did bob say about the migration": `who`'s own lines on `topic`.
    SaidBy { who: String, topic: Vec<String> },
    /// "summarize the discussion about the staging deploy": the lines on `topic`, in order.
    Summary { topic: Vec<String> },
    /// "who said we should roll back": the person behind the lines on `topic`.
    Who { topic: Vec<String> },
    /// "when did we move the release": when the lines on `topic` were said.
    When { topic: Vec<String> },
    /// "where is the token checked", "how does the retry back off", or any question in a code
    /// or docs room: what the index found on `topic`.
    Code { topic: Vec<String> },
    /// Thanks, a greeting, a goodbye: no question.
    Social(Social),
    /// Any other question.
    Question { topic: Vec<String> },
    /// A report or a request that is not a question ("disk usage on db-1 is at 93%").
    Statement { topic: Vec<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Social {
    Thanks,
    Greeting,
    Goodbye,
}

/// Words that say how something was said, not what about: left out of a topic.
const TELLING: &[&str] = &[
    "announce",
    "answer",
    "ask",
    "asked",
    "discuss",
    "discussed",
    "discussion",
    "happen",
    "happened",
    "mention",
    "mentioned",
    "propose",
    "proposed",
    "recap",
    "said",
    "says",
    "summarise",
    "summarize",
    "summary",
    "suggest",
    "suggested",
    "talk",
    "talked",
    "think",
    "thought",
    "told",
    "wrote",
    "write",
    "look",
    "check",
    "idea",
    "first",
    "quick",
    "help",
    "anybody",
    "everybody",
    "team",
    "guy",
    "folk",
    "earlier",
    "yesterday",
    "before",
    "last",
    "give",
    "good",
    "best",
    "tip",
    "tips",
    "mean",
    "means",
    "now",
    "news",
    "update",
    "updates",
    "status",
    "thing",
];

/// Verbs that follow "did NAME" when the question is about what NAME said.
const SAID_VERBS: &[&str] = &[
    "say", "said", "mention", "suggest", "propose", "think", "write", "tell", "report", "decide", "want", "ask", "do",
    "change", "fix",
];

impl Ask {
    /// What `text` asks, in a room of `domain`; `me`: the persona's own name (not a topic).
    pub fn of(text: &str, domain: &str, me: &str) -> Ask {
        let all: Vec<String> = words(text).collect();
        // Mentions say who is asked, not what about.
        let mentioned: Vec<String> = text
            .split_whitespace()
            .filter_map(|w| w.strip_prefix('@'))
            .flat_map(|w| words(w).collect::<Vec<_>>())
            .collect();
        let plain: Vec<&str> =
            all.iter().map(String::as_str).filter(|w| !mentioned.iter().any(|m| m == w) && *w != me).collect();
        let topic = |skip: &[&str]| -> Vec<String> {
            content_words(&plain.join(" "))
                .into_iter()
                .filter(|w| !TELLING.iter().any(|t| stem(t) == stem(w)) && !skip.contains(&w.as_str()))
                .collect()
        };
        let question = text.trim_end().ends_with('?')
            || plain.first().is_some_and(|w| {
                matches!(
                    *w,
                    "what"
                        | "who"
                        | "when"
                        | "where"
                        | "why"
                        | "how"
                        | "which"
                        | "can"
                        | "could"
                        | "would"
                        | "is"
                        | "are"
                        | "does"
                        | "do"
                        | "did"
                        | "should"
                        | "any"
                )
            });
        if let Some(social) = social(&plain) {
            return Ask::Social(social);
        }
        let has = |w: &str| plain.contains(&w);
        // "what did bob say", "what has bob said", "did carol mention", "bob's idea about"
        for (i, w) in plain.iter().enumerate() {
            if matches!(*w, "did" | "has" | "had" | "does")
                && let (Some(name), Some(verb)) = (plain.get(i + 1), plain.get(i + 2))
                && SAID_VERBS.iter().any(|v| stem(v) == stem(verb))
                && !is_stop_word(name)
                && !matches!(*name, "we" | "i" | "they" | "he" | "she" | "it" | "you" | "anyone" | "people")
            {
                let who = name.to_string();
                return Ask::SaidBy { topic: topic(&[who.as_str()]), who };
            }
        }
        if ["summarize", "summarise", "summary", "recap", "discuss", "discussed", "discussion"].iter().any(|w| has(w)) {
            return Ask::Summary { topic: topic(&[]) };
        }
        // "who said we should roll back", "when did alice mention the outage": about a line;
        // "who is on call", "when is the release" are questions like any other.
        let telling = plain.iter().any(|w| SAID_VERBS.iter().any(|v| stem(v) == stem(w)) || *w == "said");
        if plain.first() == Some(&"who") && telling {
            return Ask::Who { topic: topic(&[]) };
        }
        if plain.first() == Some(&"when") && telling {
            return Ask::When { topic: topic(&[]) };
        }
        let code_words = ["where", "how", "which", "function", "file", "handled", "defined", "implemented"];
        if matches!(domain, "code" | "docs") || (question && has("where") && has("code")) {
            return Ask::Code { topic: topic(&code_words) };
        }
        if question { Ask::Question { topic: topic(&[]) } } else { Ask::Statement { topic: topic(&[]) } }
    }

    /// The words of what is asked about (none for social messages).
    pub fn topic(&self) -> &[String] {
        match self {
            Ask::SaidBy { topic, .. }
            | Ask::Summary { topic }
            | Ask::Who { topic }
            | Ask::When { topic }
            | Ask::Code { topic }
            | Ask::Question { topic }
            | Ask::Statement { topic } => topic,
            Ask::Social(_) => &[],
        }
    }

    /// Whether the answer comes from what was said in the room (conversation memory).
    pub fn about_conversation(&self) -> bool {
        matches!(self, Ask::SaidBy { .. } | Ask::Summary { .. } | Ask::Who { .. } | Ask::When { .. })
    }

    /// Whether the runtime answers it exactly, quoting what was found as it was said or
    /// written: questions about the conversation, and about code. A model only phrases the
    /// other answers.
    pub fn exact(&self) -> bool {
        self.about_conversation() || matches!(self, Ask::Code { .. })
    }
}

/// Thanks, a greeting or a goodbye: a short message made of such words and little else.
fn social(plain: &[&str]) -> Option<Social> {
    if plain.len() > 6 {
        return None;
    }
    let any = |ws: &[&str]| plain.iter().any(|w| ws.contains(w));
    if any(&["thanks", "thank", "thx", "cheers", "ty"]) {
        Some(Social::Thanks)
    } else if any(&["bye", "goodbye", "night", "later", "weekend", "tomorrow"]) && !any(&["what", "when", "how"]) {
        Some(Social::Goodbye)
    } else if plain
        .iter()
        .take(2)
        .any(|w| ["hi", "hello", "hey", "morning", "evening", "afternoon", "welcome"].contains(w))
    {
        Some(Social::Greeting)
    } else {
        None
    }
}
