use std::collections::BTreeMap;

use super::*;

fn reference(id: &str, tags: &[&str], path: &Path) -> Reference {
    Reference {
        id: id.into(),
        name: format!("{id} guide"),
        description: format!("how to use {id}"),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        path: path.to_path_buf(),
        contents: BTreeMap::new(),
        mode: RefMode::Selectable,
    }
}

#[test]
fn discovery_follows_ids_and_relative_links_breadth_first_and_stops_at_a_cycle_and_the_depth() {
    let root = tempfile::tempdir().unwrap();
    let mk = |name: &str, text: &str| {
        let d = root.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("README.md"), text).unwrap();
        d
    };
    let a = mk("a", "Start here, then read [the b guide](../b/README.md#intro) and https://example.com/c.");
    let b = mk("b", "B builds on @c.");
    let c = mk("c", "C goes back to @a, a cycle, and on to @d.");
    let d = mk("d", "The end.");
    let catalog = Catalog {
        refs: vec![reference("a", &[], &a), reference("b", &[], &b), reference("c", &[], &c), reference("d", &[], &d)],
    };
    let found = catalog.discover(&["a".into()], 5);
    let got: Vec<(&str, &str, f32)> = found.iter().map(|m| (m.id.as_str(), m.matched[0].as_str(), m.score)).collect();
    assert_eq!(got, [("b", "a", 1.0), ("c", "b", 2.0), ("d", "c", 3.0)]);
    assert_eq!(catalog.discover(&["a".into()], 2).len(), 2, "two links deep at most");
    assert!(catalog.discover(&["d".into()], 5).is_empty());
}

#[test]
fn an_excerpt_is_the_paragraph_sharing_most_words_and_reads_only_authorised_files() {
    let root = tempfile::tempdir().unwrap();
    let guide = root.path().join("guide");
    std::fs::create_dir_all(&guide).unwrap();
    std::fs::write(
        guide.join("a.md"),
        "# Retries\n\nRetry idempotent calls only.\n\nBack off exponentially with jitter\nbetween attempts.\n",
    )
    .unwrap();
    let outside = root.path().join("secret.md");
    std::fs::write(&outside, "the jitter secrets").unwrap();
    std::os::unix::fs::symlink(&outside, guide.join("z.md")).unwrap();
    let r = reference("retry", &[], &guide);

    let mut auth = Authorised::default();
    let (got, refused) = excerpt(&r, "how much jitter between attempts?", &auth);
    assert_eq!(got, None, "nothing is read before the reference is selected");
    assert_eq!(refused, ["a.md", "z.md"]);

    auth.allow(&guide);
    let (got, refused) = excerpt(&r, "how much jitter between attempts?", &auth);
    let got = got.unwrap();
    assert_eq!((got.file.as_str(), got.start_line, got.end_line), ("a.md", 5, 6));
    assert_eq!(got.text, "Back off exponentially with jitter\nbetween attempts.");
    assert_eq!(refused, ["z.md"], "a link out of the reference is not followed");
    assert!(!auth.allows(&guide.join("../secret.md")), "nor is `..`");

    // Nothing in common: the first paragraph.
    let (got, _) = excerpt(&r, "lunch?", &auth);
    assert_eq!(got.unwrap().text, "# Retries");
    // A reference that is one file is named by its file name.
    let one = reference("one", &[], &guide.join("a.md"));
    auth.allow(&one.path);
    assert_eq!(excerpt(&one, "idempotent", &auth).0.unwrap().file, "a.md");
}
