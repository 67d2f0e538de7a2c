//! The context budget: a prompt and the tokens to generate after it must fit the context.
//!
//! Policy when they do not, in order:
//! 1. The system message (the first, when its role is `system`) and the last user message are
//!    kept whole. If they alone do not fit, the request fails with
//!    [`LlmError::ContextOverflow`]: nothing the persona was asked is cut.
//! 2. The other messages go oldest first, while more than one of them is left.
//! 3. If the prompt is still too long, the last of them (the longest left, as it is the only
//!    one) keeps its beginning and its end, with `…` for the middle that is cut; when less than
//!    [`MIN_KEPT`] tokens of it would be left, it goes too.
//!
//! Every trim is logged with `tracing::warn` and reported in [`Trim`].

use super::tokenizer::Written;
use super::{ChatMessage, GgufTokenizer, LlmError, Prompt, Trim};

/// A cut message keeps at least this many tokens of its turn, or is dropped.
pub(crate) const MIN_KEPT: usize = 16;

const CUT_MARK: &str = "…";

/// Ids of the prompt for `messages` that leave room for `reserve` tokens within `context`; an
/// assistant turn the model wrote (in `written`) in the ids it wrote it in.
pub(crate) fn fit(
    tok: &GgufTokenizer,
    written: &Written,
    messages: &[ChatMessage],
    reserve: usize,
    context: usize,
) -> Result<Prompt, LlmError> {
    if tok.renders_template() {
        return fit_rendered(tok, messages, reserve, context);
    }
    let mut turns: Vec<Vec<u32>> = messages.iter().map(|m| tok.turn_ids_as(m, written)).collect::<Result<_, _>>()?;
    // The template's default system turn depends only on the first message, which is either
    // kept (a system message) or never a system message whatever goes.
    let fixed = tok.default_system_ids(messages)?.len() + tok.generation_prompt_ids()?.len();
    let total = |turns: &[Vec<u32>], keep: &[bool]| -> usize {
        fixed + turns.iter().zip(keep).filter(|(_, k)| **k).map(|(t, _)| t.len()).sum::<usize>()
    };
    let mut keep = vec![true; messages.len()];
    let tokens_before = total(&turns, &keep);
    if tokens_before + reserve <= context {
        return Ok(Prompt { ids: tok.encode_chat_as(messages, written)?, trimmed: None });
    }

    let system = messages.first().filter(|m| m.role == "system").map(|_| 0);
    let last_user = messages.iter().rposition(|m| m.role == "user").or(messages.len().checked_sub(1));
    let protected = |i: usize| Some(i) == system || Some(i) == last_user;
    let needed = fixed + (0..messages.len()).filter(|i| protected(*i)).map(|i| turns[i].len()).sum::<usize>();
    if needed + reserve > context {
        return Err(LlmError::ContextOverflow { needed, max_tokens: reserve, context });
    }

    let others: Vec<usize> = (0..messages.len()).filter(|i| !protected(*i)).collect();
    let mut dropped = 0;
    for &i in &others[..others.len().saturating_sub(1)] {
        if total(&turns, &keep) + reserve <= context {
            break;
        }
        keep[i] = false;
        dropped += 1;
    }
    let mut cut: Option<(usize, String)> = None;
    let mut cut_tokens = 0;
    let over = total(&turns, &keep) + reserve;
    // Over the budget here means every other message but the last has gone (the kept ones
    // alone fit), so the last of them is the one to cut.
    if let (true, Some(&last)) = (over > context, others.last()) {
        let room = turns[last].len().saturating_sub(over - context);
        match cut_middle(tok, &messages[last], room)? {
            Some((content, ids)) => {
                cut_tokens = turns[last].len() - ids.len();
                cut = Some((last, content));
                turns[last] = ids;
            }
            None => {
                keep[last] = false;
                dropped += 1;
            }
        }
    }

    let kept: Vec<ChatMessage> = (0..messages.len())
        .filter(|i| keep[*i])
        .map(|i| match &cut {
            Some((at, content)) if *at == i => ChatMessage { role: messages[i].role.clone(), content: content.clone() },
            _ => messages[i].clone(),
        })
        .collect();
    let ids = tok.encode_chat_as(&kept, written)?;
    debug_assert_eq!(ids.len(), total(&turns, &keep), "turn ids add up to the prompt's");
    Ok(trimmed(ids, Trim { dropped_messages: dropped, cut_tokens, tokens_before, tokens_after: 0 }, reserve, context))
}

/// [`fit`] for a template that is rendered whole ([`GgufTokenizer::renders_template`]): the same
/// policy, each trial measured by rendering the messages kept and tokenizing the prompt.
fn fit_rendered(
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
    reserve: usize,
    context: usize,
) -> Result<Prompt, LlmError> {
    let ids = tok.encode_chat(messages)?;
    let tokens_before = ids.len();
    if tokens_before + reserve <= context {
        return Ok(Prompt { ids, trimmed: None });
    }
    let system = messages.first().filter(|m| m.role == "system").map(|_| 0);
    let last_user = messages.iter().rposition(|m| m.role == "user").or(messages.len().checked_sub(1));
    let protected = |i: usize| Some(i) == system || Some(i) == last_user;
    let kept = |keep: &[bool], cut: Option<(usize, &str)>| -> Vec<ChatMessage> {
        (0..messages.len())
            .filter(|i| keep[*i])
            .map(|i| match cut {
                Some((at, content)) if at == i => {
                    ChatMessage { role: messages[i].role.clone(), content: content.into() }
                }
                _ => messages[i].clone(),
            })
            .collect()
    };
    let mut keep: Vec<bool> = (0..messages.len()).map(protected).collect();
    let needed = tok.encode_chat(&kept(&keep, None))?.len();
    if needed + reserve > context {
        return Err(LlmError::ContextOverflow { needed, max_tokens: reserve, context });
    }
    keep.iter_mut().for_each(|k| *k = true);
    let others: Vec<usize> = (0..messages.len()).filter(|i| !protected(*i)).collect();
    let mut dropped = 0;
    let mut ids = ids;
    for &i in &others[..others.len().saturating_sub(1)] {
        if ids.len() + reserve <= context {
            break;
        }
        keep[i] = false;
        dropped += 1;
        ids = tok.encode_chat(&kept(&keep, None))?;
    }
    let mut cut_tokens = 0;
    if let (true, Some(&last)) = (ids.len() + reserve > context, others.last()) {
        // The most characters of the last other message kept whose prompt fits, by bisection.
        let chars: Vec<char> = messages[last].content.chars().collect();
        let cut = |n: usize| -> String {
            let mut s: String = chars[..n.div_ceil(2)].iter().collect();
            s.push_str(CUT_MARK);
            s.extend(&chars[chars.len() - n / 2..]);
            s
        };
        let (mut lo, mut hi, mut best) = (0, chars.len(), None);
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let content = cut(mid);
            let trial = tok.encode_chat(&kept(&keep, Some((last, &content))))?;
            if trial.len() + reserve <= context {
                best = Some((content, trial));
                lo = mid + 1;
            } else if mid == 0 {
                break;
            } else {
                hi = mid - 1;
            }
        }
        let whole = tok.encode_plain(&messages[last].content)?.len();
        match best {
            Some((content, trial)) if tok.encode_plain(&content)?.len() >= MIN_KEPT => {
                cut_tokens = whole.saturating_sub(tok.encode_plain(&content)?.len());
                ids = trial;
            }
            _ => {
                keep[last] = false;
                dropped += 1;
                ids = tok.encode_chat(&kept(&keep, None))?;
            }
        }
    }
    Ok(trimmed(ids, Trim { dropped_messages: dropped, cut_tokens, tokens_before, tokens_after: 0 }, reserve, context))
}

/// `message` with the middle of its content replaced by `…` so that its turn takes at most
/// `room` tokens, keeping as much as fits, half from each end; `None` when less than
/// [`MIN_KEPT`] tokens would be left.
fn cut_middle(tok: &GgufTokenizer, message: &ChatMessage, room: usize) -> Result<Option<(String, Vec<u32>)>, LlmError> {
    if room < MIN_KEPT {
        return Ok(None);
    }
    let chars: Vec<char> = message.content.chars().collect();
    let cut = |keep: usize| -> String {
        let head = keep.div_ceil(2);
        let tail = keep / 2;
        let mut s: String = chars[..head].iter().collect();
        s.push_str(CUT_MARK);
        s.extend(&chars[chars.len() - tail..]);
        s
    };
    // The largest number of characters kept whose turn fits, by bisection: token counts grow
    // with it (but for the odd merge across the cut). A token spans rarely more than 32
    // characters, which bounds the search for a long message.
    let (mut lo, mut hi) = (0, chars.len().min(room * 32));
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let content = cut(mid);
        let ids = tok.turn_ids(&message.role, &content)?;
        if ids.len() <= room {
            best = Some((content, ids));
            lo = mid + 1;
        } else if mid == 0 {
            break;
        } else {
            hi = mid - 1;
        }
    }
    Ok(best.filter(|(_, ids)| ids.len() >= MIN_KEPT))
}

/// The prompt of `ids` with what was trimmed to fit (`trim`, its `tokens_after` set here),
/// warned of.
fn trimmed(ids: Vec<u32>, mut trim: Trim, reserve: usize, context: usize) -> Prompt {
    trim.tokens_after = ids.len();
    tracing::warn!(
        dropped = trim.dropped_messages,
        cut_tokens = trim.cut_tokens,
        tokens_before = trim.tokens_before,
        tokens_after = trim.tokens_after,
        max_tokens = reserve,
        context,
        "prompt trimmed to fit the context"
    );
    Prompt { ids, trimmed: Some(trim) }
}
