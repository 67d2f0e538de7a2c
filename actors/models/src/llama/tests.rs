//! The text stream on hand-made bytes (the model's own behaviour is tested in `tests/llm.rs`).

use super::TextStream;

fn feed(stops: &[&str], tokens: &[&[u8]]) -> (Vec<String>, Option<usize>, String) {
    let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
    let mut stream = TextStream::new(&stops);
    let mut pieces = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let (piece, stopped) = stream.push(t);
        pieces.push(piece);
        if stopped {
            return (pieces, Some(i), String::new());
        }
    }
    let rest = stream.finish();
    (pieces, None, rest)
}

#[test]
fn a_character_split_across_tokens_comes_out_whole_with_the_token_that_ends_it() {
    let rocket = "🚀".as_bytes();
    let (pieces, stop, rest) = feed(&[], &[b"go ", &rocket[..1], &rocket[1..3], &rocket[3..], b"!"]);
    assert_eq!(pieces, ["go ", "", "", "🚀", "!"]);
    assert_eq!((stop, rest.as_str()), (None, ""));
}

#[test]
fn invalid_bytes_become_one_replacement_each_and_a_cut_character_at_the_end_is_dropped() {
    let (pieces, _, rest) = feed(&[], &[b"a\xffb", "é".as_bytes(), &"日".as_bytes()[..2]]);
    assert_eq!(pieces, ["a\u{fffd}b", "é", ""]);
    assert_eq!(rest, "");
}

#[test]
fn text_that_may_begin_a_stop_string_is_held_until_it_does_not() {
    let (pieces, stop, rest) = feed(&["\n\nUser:"], &[b"Hi", b"\n", b"\nU", b"ser", b" is", b" here"]);
    assert_eq!(pieces, ["Hi", "", "", "", "\n\nUser is", " here"]);
    assert_eq!((stop, rest.as_str()), (None, ""));
}

#[test]
fn a_stop_string_across_tokens_ends_the_text_before_it() {
    let (pieces, stop, _) = feed(&["END", "\n\n"], &[b"one E", b"N", b"D two"]);
    assert_eq!(pieces, ["one ", "", ""]);
    assert_eq!(stop, Some(2));
    // The earliest of two stop strings wins, and held text before it is given out.
    let (pieces, stop, _) = feed(&["END", "\n\n"], &[b"a\n", b"\nEND"]);
    assert_eq!(pieces, ["a", ""]);
    assert_eq!(stop, Some(1));
}

#[test]
fn held_text_that_never_became_a_stop_string_is_given_out_at_the_end() {
    let (pieces, stop, rest) = feed(&["STOP"], &[b"full ", b"ST"]);
    assert_eq!(pieces, ["full ", ""]);
    assert_eq!((stop, rest.as_str()), (None, "ST"));
}

#[test]
fn overlapping_prefixes_keep_every_possible_start() {
    // "aab": after "aa" + "a" the first "a" can be given out, the last two may still begin it.
    let (pieces, stop, _) = feed(&["aab"], &[b"aa", b"a", b"b"]);
    assert_eq!(pieces, ["", "a", ""]);
    assert_eq!(stop, Some(2));
}

#[test]
fn an_llm_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<super::Llm>();
}
