//! Rewriting a GGUF's Q4_1 tensors as Q8_0.
//!
//! Our forward pass computes in Q8_0 (`super::q8`) and requantizes any other type as it loads;
//! rewriting the shipped Q4_1 file once keeps that work out of every load, for 50% more bytes
//! on disk. Q4_1 values dequantized and quantized again as Q8_0 lose next to nothing (8 bits
//! per weight for what were 4).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};

use super::LlmError;

/// llama.cpp's `LLAMA_FTYPE_MOSTLY_Q8_0`, for `general.file_type`.
const FTYPE_MOSTLY_Q8_0: u32 = 7;

/// Writes `src` to `dst` with every Q4_1 tensor as Q8_0 and every other tensor and all the
/// metadata as they are, except two keys that would be false: `general.file_type` (now
/// Q8_0 when no tensor is left in another quantized type) and `general.alignment` (the
/// writer aligns to 32 bytes, the default). Written to a temporary file beside `dst` and
/// renamed into place, so `dst` is either the old file or the whole new one.
pub fn requantize(src: &Path, dst: &Path) -> Result<(), LlmError> {
    let (mut reader, content) = super::open_gguf(src)?;
    let read_err = |e: candle_core::Error| LlmError::Load { file: src.to_path_buf(), message: e.to_string() };
    let mut infos: Vec<(&String, &gguf_file::TensorInfo)> = content.tensor_infos.iter().collect();
    // The source's order, for a file that diffs well against it.
    infos.sort_by_key(|(_, info)| info.offset);
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(infos.len());
    let mut converted = 0;
    for (name, info) in infos {
        let t = info
            .read(&mut reader, content.tensor_data_offset, &Device::Cpu)
            .map_err(|e| LlmError::Load { file: src.to_path_buf(), message: format!("tensor {name}: {e}") })?;
        let t = if t.dtype() == GgmlDType::Q4_1 {
            converted += 1;
            QTensor::quantize(&t.dequantize(&Device::Cpu).map_err(read_err)?, GgmlDType::Q8_0).map_err(read_err)?
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let quantized_other =
        tensors.iter().any(|(_, t)| !matches!(t.dtype(), GgmlDType::Q8_0 | GgmlDType::F32 | GgmlDType::F16));
    let file_type = Value::U32(FTYPE_MOSTLY_Q8_0);
    let mut metadata: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.alignment")
        .map(|(k, v)| match k.as_str() {
            "general.file_type" if converted > 0 && !quantized_other => (k.as_str(), &file_type),
            _ => (k.as_str(), v),
        })
        .collect();
    metadata.sort_by_key(|(k, _)| *k);

    let name = dst.file_name().ok_or_else(|| write_err(dst, &"not a file path"))?.to_string_lossy();
    // Unique per process and call: two rewrites at once each write their own file.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dst.with_file_name(format!(".{name}.tmp-{}-{call}", std::process::id()));
    let written = (|| -> Result<(), LlmError> {
        let file = File::create(&tmp).map_err(|e| write_err(&tmp, &e))?;
        let mut w = BufWriter::new(file);
        let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
        gguf_file::write(&mut w, &metadata, &refs).map_err(|e| write_err(&tmp, &e))?;
        w.flush().map_err(|e| write_err(&tmp, &e))?;
        w.get_ref().sync_all().map_err(|e| write_err(&tmp, &e))?;
        std::fs::rename(&tmp, dst).map_err(|e| write_err(dst, &e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    let (src, dst, tensors) = (src.display(), dst.display(), tensors.len());
    tracing::info!(%src, %dst, converted, tensors, "requantized Q4_1 to Q8_0");
    Ok(())
}

fn write_err(file: &Path, e: &dyn std::fmt::Display) -> LlmError {
    LlmError::Write { file: file.to_path_buf(), message: e.to_string() }
}

/// GGUF `general.file_type` of a file whose weights are mostly Q4_1.
const MOSTLY_Q4_1: u32 = 3;

/// The file to run for `src`: a Q4_1 model is rewritten once as Q8_0 beside it (the type the
/// forward pass computes in, so loads need not convert it) and the rewrite is reused; any
/// other file is run as it is. A rewrite that cannot be written (a read-only directory) falls
/// back to `src`, with a warning.
pub fn runnable(src: &Path) -> Result<PathBuf, LlmError> {
    // Only the fast path (llama) computes in Q8_0; candle's models read Q4_1 as it is.
    let info = super::inspect(src)?;
    if info.file_type != Some(MOSTLY_Q4_1) || info.architecture.as_deref() != Some("llama") {
        return Ok(src.to_path_buf());
    }
    let name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dst = src.with_file_name(if name.contains("Q4_1") {
        name.replace("Q4_1", "Q8_0")
    } else {
        format!("{}.Q8_0.gguf", name.trim_end_matches(".gguf"))
    });
    if dst.exists() {
        return Ok(dst);
    }
    tracing::info!(from = %src.display(), to = %dst.display(), "rewriting Q4_1 weights as Q8_0 (once)");
    match requantize(src, &dst) {
        Ok(()) => Ok(dst),
        Err(e @ LlmError::Write { .. }) => {
            tracing::warn!(error = %e, "running the Q4_1 file as it is (slower)");
            Ok(src.to_path_buf())
        }
        Err(e) => Err(e),
    }
}
