//! The embedder against reference vectors from sentence-transformers (an independent
//! implementation of the same model), on the real model files.

use mindfleet_core::embedding::cosine;
use mindfleet_models::embed::{EmbedError, Embedder};
use mindfleet_models::fetch::MINILM;
use serde_json::Value;

use crate::util::pulled;

fn reference() -> Vec<(String, usize, Vec<f32>)> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/minilm_reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["max_seq_length"], 256);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let e = i["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            (i["text"].as_str().unwrap().to_string(), i["tokens"].as_u64().unwrap() as usize, e)
        })
        .collect()
}

#[test]
fn embeddings_match_sentence_transformers_alone_and_in_a_batch() {
    let e = Embedder::load(&pulled().join(MINILM.name)).unwrap();
    assert_eq!((e.dimensions(), e.window()), (384, 256));
    let items = reference();
    let texts: Vec<&str> = items.iter().map(|(t, _, _)| t.as_str()).collect();
    let batch = e.embed(&texts).unwrap();
    for ((text, tokens, want), got) in items.iter().zip(&batch) {
        assert_eq!(got.tokens, *tokens, "{text:?}");
        assert_eq!(got.truncated_from, None, "{text:?}");
        let c = cosine(&got.vector, want);
        assert!(c > 0.999, "{text:?}: cosine {c} to the reference");
        let alone = &e.embed(&[text.as_str()]).unwrap()[0];
        assert!(cosine(&alone.vector, &got.vector) > 0.9999, "{text:?}: padding changed it");
    }
    let norm: f32 = batch[0].vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    // A meaning test: eating food is close to eating bread, far from riding a horse.
    let (food, bread, horse) = (&batch[0].vector, &batch[1].vector, &batch[2].vector);
    assert!(cosine(food, bread) > cosine(food, horse) + 0.3, "{} vs {}", cosine(food, bread), cosine(food, horse));
}

#[test]
fn a_text_longer_than_the_window_is_cut_and_says_from_how_many_tokens() {
    let e = Embedder::load(&pulled().join(MINILM.name)).unwrap();
    let long = "word ".repeat(400);
    let got = &e.embed(&[long.as_str()]).unwrap()[0];
    assert_eq!(got.tokens, 256);
    assert_eq!(got.truncated_from, Some(402));
}

#[test]
fn a_model_dir_without_weights_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(pulled().join(MINILM.name).join("config.json"), dir.path().join("config.json")).unwrap();
    let e = Embedder::load(dir.path()).err().expect("no weights");
    assert!(matches!(e, EmbedError::Load { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors: missing"), "{e}");
}

mod worker {
    use std::path::Path;
    use std::time::Duration;

    use mindfleet_actors::embed::worker::{EmbedArgs, spawn};
    use mindfleet_core::embedding::cosine;
    use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, EmbedReply, EmbedStats, LongText, Urgency};
    use mindfleet_models::embed::Embedder;
    use mindfleet_models::fetch::MINILM;
    use ractor::{ActorRef, call};

    use crate::util::{poll, pulled};

    fn args(model_dir: &Path, cache: Option<&Path>) -> EmbedArgs {
        EmbedArgs {
            model_dir: model_dir.to_path_buf(),
            cache: cache.map(Path::to_path_buf),
            max_batch: 32,
            max_wait: Duration::from_millis(2),
        }
    }

    async fn embed(w: &ActorRef<EmbedMsg>, texts: &[impl AsRef<str>], long: LongText) -> EmbedReply {
        let texts = texts.iter().map(|t| t.as_ref().to_string()).collect();
        call!(w, |reply| EmbedMsg::Embed { texts, long, urgency: Urgency::Normal, reply }).expect("worker answers")
    }

    async fn stats(w: &ActorRef<EmbedMsg>) -> EmbedStats {
        call!(w, EmbedMsg::Stats).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_are_answered_in_shared_batches_with_the_models_vectors() {
        let dir = pulled().join(MINILM.name);
        let w = spawn(args(&dir, None), None).await.unwrap();
        let texts: Vec<String> =
            (0..64).map(|i| format!("persona {i} remembers the release notes of version {i}")).collect();
        // Sent while the model loads, so they are queued together.
        let calls = texts.iter().map(|t| embed(&w, std::slice::from_ref(t), LongText::Truncate));
        let answers = futures::future::join_all(calls).await;
        let model = Embedder::load(&dir).unwrap();
        let direct = model.embed(&texts.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        for ((text, answer), want) in texts.iter().zip(answers).zip(direct) {
            let got = answer.unwrap();
            assert_eq!(got.len(), 1);
            assert!(!got[0].cached);
            assert!(cosine(got[0].vector(), &want.vector) > 0.9999, "{text:?}");
            assert_eq!((got[0].pieces[0].start, got[0].pieces[0].end), (0, text.len() as u32));
        }
        let s = stats(&w).await;
        assert_eq!((s.status.as_str(), s.requests, s.texts), ("ready", 64, 64));
        assert!(s.batches < 64 && s.mean_batch > 1.0, "not coalesced: {s:?}");
        assert_eq!((s.model.dimensions, s.model.window), (384, 256));
        assert!(s.p99_ms >= s.p50_ms && s.p50_ms > 0.0, "{s:?}");
        w.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_goes_ahead_of_a_bulk_backlog_and_a_repeated_text_is_embedded_once() {
        let w = spawn(args(&pulled().join(MINILM.name), None), None).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Eight bulk requests of 32 texts, each text twice, then one query; sent while the model
        // loads, so they are all queued at once.
        for r in 0..8 {
            let distinct: Vec<String> = (0..16).map(|i| format!("backlog {r}: message {i} of the replay")).collect();
            let texts: Vec<String> = distinct.iter().chain(&distinct).cloned().collect();
            let (w, tx) = (w.clone(), tx.clone());
            tokio::spawn(async move {
                let got = call!(w, |reply| EmbedMsg::Embed {
                    texts,
                    long: LongText::Truncate,
                    urgency: Urgency::Bulk,
                    reply
                })
                .unwrap()
                .unwrap();
                assert!((0..16).all(|i| got[i].pieces == got[i + 16].pieces), "a copy has the same vector");
                tx.send(format!("bulk {r}")).unwrap();
            });
        }
        let (w2, tx2) = (w.clone(), tx.clone());
        tokio::spawn(async move {
            embed(&w2, &["what did we decide about the release?"], LongText::Truncate).await.unwrap();
            tx2.send("query".to_string()).unwrap();
        });
        drop(tx);
        let mut order = Vec::new();
        while let Some(done) = rx.recv().await {
            order.push(done);
        }
        assert_eq!(order.len(), 9, "{order:?}");
        let query = order.iter().position(|d| d == "query").unwrap();
        // At most the batch the model was running when the query came in goes first.
        assert!(query <= 2, "the query waited for the backlog: {order:?}");
        let s = stats(&w).await;
        assert_eq!((s.requests, s.texts), (9, 8 * 32 + 1));
        let model_inputs = (s.mean_batch * s.batches as f64).round() as u64;
        assert_eq!(model_inputs, 8 * 16 + 1, "each distinct text once: {s:?}");
        w.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_past_its_deadline_is_answered_late_without_the_model_and_fails_no_one_else() {
        let w = spawn(args(&pulled().join(MINILM.name), None), None).await.unwrap();
        embed(&w, &["load the model"], LongText::Truncate).await.unwrap();
        let inputs = |s: EmbedStats| (s.mean_batch * s.batches as f64).round() as u64;
        let before = inputs(stats(&w).await);
        let ask = |text: &str, urgency| {
            let (w, texts) = (w.clone(), vec![text.to_string()]);
            tokio::spawn(async move {
                call!(w, |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency, reply }).unwrap()
            })
        };
        // Past its deadline before the model could take it: answered, not run.
        let late = ask("nobody waits for this any more", Urgency::Before(std::time::Instant::now())).await.unwrap();
        assert_eq!(late.unwrap_err(), EmbedFailure::Late);
        assert_eq!(inputs(stats(&w).await), before, "the model ran a late text");
        // The same text asked for in time, right behind a late copy, is answered.
        let late = ask("asked twice", Urgency::Before(std::time::Instant::now()));
        let in_time = ask("asked twice", Urgency::Normal);
        assert_eq!(late.await.unwrap().unwrap_err(), EmbedFailure::Late);
        assert_eq!(in_time.await.unwrap().unwrap()[0].pieces[0].vector.len(), 384);
        // And a request with a deadline it meets is answered like any other.
        let soon = std::time::Instant::now() + std::time::Duration::from_secs(30);
        assert!(ask("in good time", Urgency::Before(soon)).await.unwrap().is_ok());
        // Behind 512 queued texts, a query that may wait 20 ms is refused at once, by the
        // model's pace, not left to wait in vain.
        let (w2, backlog) = (w.clone(), (0..512).map(|i| format!("queued text number {i}")).collect::<Vec<_>>());
        let backlog = tokio::spawn(async move { embed(&w2, &backlog, LongText::Truncate).await.unwrap() });
        poll("the backlog to be queued", || async { (stats(&w).await.in_flight == 1).then_some(()) }).await;
        let soon = std::time::Instant::now() + std::time::Duration::from_millis(20);
        assert_eq!(ask("a hurried query", Urgency::Before(soon)).await.unwrap().unwrap_err(), EmbedFailure::Late);
        assert!(!backlog.is_finished(), "refused while the backlog still ran");
        assert_eq!(backlog.await.unwrap().len(), 512);
        let s = stats(&w).await;
        assert!(s.late == 3 && s.inputs_per_s > 0.0, "{s:?}");
        w.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cached_text_is_not_embedded_again_and_is_answered_after_a_restart_even_with_broken_weights() {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("minilm");
        std::fs::create_dir(&model).unwrap();
        for f in MINILM.files {
            std::fs::copy(pulled().join(MINILM.name).join(f.name), model.join(f.name)).unwrap();
        }
        let cache = tmp.path().join("embeddings.redb");
        let w = spawn(args(&model, Some(&cache)), None).await.unwrap();
        let first = embed(&w, &["the index is rebuilt nightly", "a second text"], LongText::Truncate).await.unwrap();
        let again = embed(&w, &["the index is rebuilt nightly"], LongText::Truncate).await.unwrap();
        assert!(!first[0].cached && again[0].cached);
        assert_eq!(first[0].pieces, again[0].pieces);
        let s = stats(&w).await;
        assert_eq!((s.cache_hits, s.cache_misses, s.cache_entries), (1, 2, Some(2)), "{s:?}");
        assert_eq!(s.batches, 1);
        w.stop_and_wait(None, None).await.unwrap();

        // Corrupt the weights' header (same size, so the same model fingerprint): the worker
        // runs degraded, naming the file, still answers what is cached and refuses the rest.
        let weights = model.join("model.safetensors");
        let mut bytes = std::fs::read(&weights).unwrap();
        bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&weights, bytes).unwrap();
        let w = spawn(args(&model, Some(&cache)), None).await.unwrap();
        let s = poll("degraded", || async { Some(stats(&w).await).filter(|s| s.status != "loading") }).await;
        assert_eq!(s.status, "degraded");
        assert!(s.error.as_deref().unwrap().contains("model.safetensors"), "{s:?}");
        let cached = embed(&w, &["the index is rebuilt nightly"], LongText::Truncate).await.unwrap();
        assert_eq!(cached[0].pieces, first[0].pieces);
        let err = embed(&w, &["never seen"], LongText::Truncate).await.unwrap_err();
        assert!(matches!(&err, EmbedFailure::Degraded(m) if m.contains("model.safetensors")), "{err:?}");
        w.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_text_is_split_into_window_sized_pieces_or_cut_with_a_report() {
        let w = spawn(args(&pulled().join(MINILM.name), None), None).await.unwrap();
        let long: String = (0..300).map(|i| format!("sentence{i} about the scheduler. ")).collect();
        let cut = embed(&w, &[long.as_str()], LongText::Truncate).await.unwrap();
        let piece = &cut[0].pieces[0];
        assert_eq!(cut[0].pieces.len(), 1);
        assert_eq!(piece.tokens, 256);
        assert!(piece.truncated_from.unwrap() > 1000, "{:?}", piece.truncated_from);

        let split = embed(&w, &[long.as_str()], LongText::Split).await.unwrap();
        let pieces = &split[0].pieces;
        assert!(pieces.len() >= 4, "{}", pieces.len());
        let mut at = 0;
        for p in pieces {
            assert!(p.tokens <= 256 && p.truncated_from.is_none(), "{p:?}");
            assert!(long[at as usize..p.start as usize].trim().is_empty(), "a gap with text in it");
            at = p.end;
        }
        assert_eq!(at as usize, long.trim_end().len());
        // A short text split is one piece, the same as embedding it whole.
        let short = embed(&w, &["short text"], LongText::Split).await.unwrap();
        assert_eq!(short[0].pieces.len(), 1);
        w.stop_and_wait(None, None).await.unwrap();
    }
}

mod fleet {
    use mindfleet::tree::RenderTree;
    use mindfleet_core::embedding::{EmbedMsg, LongText, Urgency};
    use ractor::call;

    use crate::util::{TRIO, chat, config, decision, dump, fleet_toml, poll, pulled};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_fleet_runs_one_embedding_worker_with_its_cache_in_the_data_dir_and_shows_it_in_the_dump() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = config(tmp.path(), &fleet_toml(TRIO));
        cfg.models.dir = pulled();
        let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
        let d = poll("embedding checked", || async {
            Some(dump(&fleet).await).filter(|d| d.embedding.status != "loading")
        })
        .await;
        // The files are checked at start; the weights load with the first request.
        assert_eq!(d.embedding.status, "idle", "{:?}", d.embedding);
        let worker = fleet.embedding.clone();
        let texts = vec!["the fleet's shared worker".to_string()];
        let got =
            call!(worker, |reply| EmbedMsg::Embed { texts, long: LongText::Truncate, urgency: Urgency::Normal, reply })
                .unwrap()
                .unwrap();
        assert_eq!(got[0].vector().len(), 384);
        let d = dump(&fleet).await;
        assert_eq!((d.embedding.status.as_str(), d.embedding.model.dimensions), ("ready", 384), "{:?}", d.embedding);
        assert_eq!((d.embedding.requests, d.embedding.cache_entries), (1, Some(1)));
        assert!(
            d.render_tree().contains("EmbeddingWorker [ready]  all-minilm-l6-v2, requests 1"),
            "{}",
            d.render_tree()
        );
        fleet.shutdown(std::time::Duration::from_secs(5)).await;
        assert!(tmp.path().join("embeddings.redb").exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_embed_command_asks_the_running_fleet_over_its_admin_api() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = config(tmp.path(), &fleet_toml(TRIO));
        cfg.models.dir = pulled();
        let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
        let admin = fleet.addr.to_string();
        let run = |args: Vec<String>| {
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(args).output().unwrap()
            })
        };
        let args = ["embed", "--json", "--admin", &admin, "A man is eating food."].map(String::from).to_vec();
        let out = run(args).await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((v["model"].as_str(), v["dimensions"].as_u64()), (Some("all-minilm-l6-v2"), Some(384)));
        // The fleet's worker answered it, and cached it.
        let d = dump(&fleet).await;
        assert_eq!((d.embedding.requests, d.embedding.cache_entries), (1, Some(1)));

        // A body the route does not know is refused, naming what is wrong.
        let url = format!("http://{admin}/ai/embedding/generate");
        let r = reqwest::Client::new().post(&url).body(r#"{"txt": "x"}"#).send().await.unwrap();
        assert_eq!(r.status(), 400);
        assert!(r.text().await.unwrap().contains("txt"));
        fleet.shutdown(std::time::Duration::from_secs(5)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_its_model_the_fleet_runs_degraded_and_says_so_in_the_dump() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = config(tmp.path(), &fleet_toml(TRIO));
        cfg.models.embedding = Some(tmp.path().join("no-such-model"));
        let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
        let d = poll("embedding settled", || async {
            Some(dump(&fleet).await).filter(|d| d.embedding.status != "loading")
        })
        .await;
        assert_eq!(d.embedding.status, "degraded");
        let error = d.embedding.error.as_deref().unwrap();
        assert!(error.contains("no-such-model") && error.contains("config.json"), "{error}");
        assert!(d.render_tree().contains("EmbeddingWorker [degraded]"), "{}", d.render_tree());
        // The personas go on deciding.
        let ack = fleet.inject(chat("general", "ann", "@helper are you there?")).await.unwrap();
        decision(&fleet, "helper", &ack.event_id).await;
        fleet.shutdown(std::time::Duration::from_secs(5)).await;
    }
}

#[test]
fn the_embed_command_prints_the_vector_model_and_dimensions() {
    pulled();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["embed", "--json", "A man is eating food."])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["model"].as_str(), v["dimensions"].as_u64()), (Some(MINILM.name), Some(384)));
    let got: Vec<f32> = v["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let (_, _, want) = &reference()[0];
    assert!(cosine(&got, want) > 0.999);
}
