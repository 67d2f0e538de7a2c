use super::*;

const DAY: i64 = 86_400_000_000;
/// 8 May 2023, 13:56 UTC.
const MAY_8: i64 = 1_683_554_160_000_000;

fn said(seq: u64, from: &str, text: &str, at_us: i64) -> Said {
    Said {
        seq,
        event_id: format!("e{seq}"),
        room: "talk".into(),
        from: from.into(),
        text: text.into(),
        at_us,
        taken_us: at_us,
        importance: 0.5,
        embedded: true,
        observed: false,
        recalled: 0,
        last_recalled_us: 0,
    }
}

#[test]
fn a_statement_becomes_a_fact_about_its_speaker_in_the_third_person_with_dates() {
    let turns = [
        said(1, "melanie", "Hey Caroline! How have you been?", MAY_8),
        said(2, "caroline", "I went to a LGBTQ support group yesterday and it was so powerful.", MAY_8 + 30_000_000),
        said(3, "melanie", "Wow, your courage inspires me. We should paint together next month!", MAY_8 + 60_000_000),
    ];
    let got = observe(&turns);
    let facts: Vec<(&str, &str, &[u64])> = got
        .iter()
        .filter(|o| o.kind == ObservationKind::Fact)
        .map(|o| (o.about.as_str(), o.text.as_str(), o.sources.as_slice()))
        .collect();
    assert_eq!(
        facts,
        [
            (
                "caroline",
                "Caroline went to a LGBTQ support group 7 May 2023 and it was so powerful. (said by Caroline on 8 May 2023)",
                &[2][..]
            ),
            (
                "melanie",
                "Wow, Caroline's courage inspires Melanie. Melanie and Caroline should paint together June 2023! (said by Melanie on 8 May 2023)",
                &[3][..]
            ),
        ],
        "a greeting that only asks says nothing: no fact"
    );
    assert!(got.iter().all(|o| o.by == BY));
    assert_eq!(got.iter().find(|o| o.sources == [2]).map(|o| o.id), Some(Observation::id_of(ObservationKind::Fact, 2)));
}

#[test]
fn each_session_of_a_room_gets_a_summary_linked_to_all_its_messages() {
    let later = MAY_8 + 14 * DAY;
    let turns = [
        said(1, "caroline", "The adoption agency called about the interview", MAY_8),
        said(2, "melanie", "An adoption interview, that is big news", MAY_8 + 30_000_000),
        // Two weeks later: another session.
        said(5, "melanie", "We went camping at the lake with the kids", later),
        said(6, "caroline", "Camping sounds lovely, which lake?", later + 30_000_000),
        said(7, "melanie", "The lake near the mountains, camping there every summer", later + 60_000_000),
    ];
    let summaries: Vec<Observation> =
        observe(&turns).into_iter().filter(|o| o.kind == ObservationKind::Summary).collect();
    assert_eq!(summaries.len(), 2, "{summaries:?}");
    assert_eq!(summaries[0].sources, [1, 2]);
    assert!(
        summaries[0].text.starts_with("On 8 May 2023 in #talk, Caroline and Melanie talked about adoption"),
        "{}",
        summaries[0].text
    );
    assert_eq!(summaries[1].sources, [5, 6, 7]);
    assert!(summaries[1].text.contains("camping, lake"), "the commonest words first: {}", summaries[1].text);
    assert_eq!(summaries[1].id, Observation::id_of(ObservationKind::Summary, 5));
    assert_eq!(summaries[1].at_us, later + 60_000_000, "when its last message was said");
}

#[test]
fn a_weekday_last_or_next_is_the_date_before_or_after() {
    // 8 May 2023 was a Monday.
    let said = |text: &str| resolve(text, "Bob", None, MAY_8);
    assert_eq!(said("I ran last Sunday!"), "Bob ran 7 May 2023!");
    assert_eq!(said("since last monday"), "since 1 May 2023");
    assert_eq!(said("see you next Monday."), "see you 15 May 2023.");
    assert_eq!(said("next friday"), "12 May 2023");
}

#[test]
fn names_read_as_people_write_them() {
    assert_eq!(display("caroline"), "Caroline");
    assert_eq!(display("mary-ann"), "Mary Ann");
    assert_eq!(day(MAY_8), "8 May 2023");
}

#[test]
fn the_model_s_lines_join_the_fact_of_the_message_they_came_from_when_the_conversation_grounds_them() {
    let turns = [
        said(1, "melanie", "Hey Caroline! How have you been?", MAY_8),
        said(2, "caroline", "I went to a LGBTQ support group yesterday and it was so powerful.", MAY_8 + 30_000_000),
        said(3, "melanie", "Ok", MAY_8 + 60_000_000),
        said(4, "melanie", "I am painting a sunset with my kids this weekend.", MAY_8 + 90_000_000),
    ];
    let pieces = by_model::pieces(&turns);
    assert_eq!(pieces.len(), 1, "one session, one piece");
    let asked = by_model::request(&pieces[0]);
    let prompt = &asked.messages[1].content;
    assert!(prompt.starts_with("Conversation in #talk on 8 May 2023:\nMelanie: Hey Caroline!"), "{prompt}");

    let answer = "1. Caroline went to an LGBTQ support group.\n\
                  - Melanie is painting a sunset with her kids.\n\
                  Melanie: Ok\n\
                  Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n\
                  3. Melanie is a doctor who lives in Paris with Sarah.\n\
                  - Caroline went to an LGBTQ support group.";
    let facts = by_model::facts(&pieces[0], answer);
    assert_eq!(
        facts,
        [
            (2, "Caroline went to an LGBTQ support group.".to_string()),
            (4, "Melanie is painting a sunset with her kids.".to_string()),
        ],
        "numbering gone; a copy of a message, a line of too few words, one the conversation does not ground and \
         one said twice are left out"
    );

    let mut made = observe(&turns);
    let rules = made.len();
    by_model::add(&mut made, &pieces[0], facts);
    assert_eq!(made.len(), rules, "each line joins its message's fact: one fact per message still");
    let fact = made.iter().find(|o| o.id == Observation::id_of(ObservationKind::Fact, 2)).unwrap();
    assert!(fact.text.ends_with("Caroline went to an LGBTQ support group."), "{}", fact.text);
    assert_eq!((fact.by.as_str(), fact.sources.as_slice()), (by_model::BY, &[2][..]));

    // A message the rules made nothing of gets a fact of its own, linked to it.
    let mut made = Vec::new();
    by_model::add(&mut made, &pieces[0], vec![(3, "Melanie agreed".into())]);
    assert_eq!(
        (made[0].text.as_str(), made[0].sources.as_slice(), made[0].about.as_str()),
        ("Melanie agreed (said by Melanie on 8 May 2023)", &[3][..], "melanie")
    );
}

#[test]
fn the_model_reads_a_long_session_in_pieces() {
    let turns: Vec<Said> = (0..50)
        .map(|i| said(i, if i % 2 == 0 { "a" } else { "b" }, "we talked about boats", MAY_8 + i as i64))
        .collect();
    let sizes: Vec<usize> = by_model::pieces(&turns).iter().map(Vec::len).collect();
    assert_eq!(sizes, [by_model::PIECE_MESSAGES, by_model::PIECE_MESSAGES, 2]);
    let later = said(50, "a", "and boats again", MAY_8 + 2 * DAY);
    let sizes: Vec<usize> = by_model::pieces(&[turns[0].clone(), later]).iter().map(Vec::len).collect();
    assert_eq!(sizes, [1, 1], "a piece never spans two sessions");
}
