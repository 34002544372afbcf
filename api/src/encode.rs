//! Result encodings: streamed JSON array, NDJSON, CSV and Arrow IPC; Parquet is built
//! whole (its footer needs every row group).

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::json::writer::{JsonArray, LineDelimited, WriterBuilder};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};

use lambdafusion::{Error, Result};

/// A result encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFormat {
    /// A JSON array of row objects.
    Json,
    /// One JSON object per line.
    Ndjson,
    /// CSV with a header line.
    Csv,
    /// Arrow IPC stream.
    Arrow,
    /// A Parquet file.
    Parquet,
}

impl ResultFormat {
    /// Parses a `format=` value.
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "ndjson" | "jsonl" => Ok(Self::Ndjson),
            "csv" => Ok(Self::Csv),
            "arrow" | "ipc" => Ok(Self::Arrow),
            "parquet" => Ok(Self::Parquet),
            other => Err(Error::InvalidInput(format!(
                "unknown result format {other:?}: use json, ndjson, csv, arrow or parquet"
            ))),
        }
    }

    /// The HTTP content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Ndjson => "application/x-ndjson",
            Self::Csv => "text/csv; charset=utf-8",
            Self::Arrow => "application/vnd.apache.arrow.stream",
            Self::Parquet => "application/vnd.apache.parquet",
        }
    }
}

/// A `Write` whose bytes can be taken out between batches.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    fn take(&self) -> Bytes {
        Bytes::from(std::mem::take(&mut *self.0.lock().expect("buffer lock")))
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes a result stream as an HTTP body in `format`.
///
/// Long because it is one arm per format, each streaming its own framing.
pub async fn encode(
    format: ResultFormat,
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
) -> Result<Body> {
    let batches = stream.map_err(Error::from);
    Ok(match format {
        ResultFormat::Json => {
            let mut first = true;
            let body = batches
                .map(move |batch| {
                    let batch = batch?;
                    let mut out = Vec::new();
                    if batch.num_rows() > 0 {
                        let array = json_array(&batch)?;
                        // "[{...},{...}]" -> "{...},{...}", joined across batches.
                        let inner = &array[1..array.len() - 1];
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        out.extend_from_slice(inner);
                    }
                    Ok::<_, Error>(Bytes::from(out))
                })
                .chain(futures::stream::once(async {
                    Ok(Bytes::from_static(b"]"))
                }));
            let body = futures::stream::once(async { Ok(Bytes::from_static(b"[")) }).chain(body);
            Body::from_stream(body)
        }
        ResultFormat::Ndjson => Body::from_stream(batches.map(|batch| {
            let batch = batch?;
            let mut writer = WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, LineDelimited>(Vec::new());
            writer.write(&batch)?;
            writer.finish()?;
            Ok::<_, Error>(Bytes::from(writer.into_inner()))
        })),
        ResultFormat::Csv => {
            // The header goes out with the first batch, or alone at the end if there
            // was none: an empty result still names its columns.
            let header = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let pending = header.clone();
            let csv = move |batch: &RecordBatch, with_header: bool| -> Result<Bytes> {
                let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(with_header)
                    .build(Vec::new());
                writer.write(batch)?;
                Ok(Bytes::from(writer.into_inner()))
            };
            let body = batches
                .map(move |batch| {
                    let batch = batch?;
                    let first = header.swap(false, std::sync::atomic::Ordering::Relaxed);
                    csv(&batch, first)
                })
                .chain(futures::stream::once(async move {
                    if pending.load(std::sync::atomic::Ordering::Relaxed) {
                        csv(&RecordBatch::new_empty(schema), true)
                    } else {
                        Ok(Bytes::new())
                    }
                }));
            Body::from_stream(body)
        }
        ResultFormat::Arrow => {
            let buf = SharedBuf::default();
            let writer = StreamWriter::try_new(buf.clone(), &schema)?;
            let writer = Arc::new(Mutex::new(Some(writer)));
            let schema_bytes = buf.take();
            let (w, b) = (writer.clone(), buf.clone());
            let body = batches
                .map(move |batch| {
                    let batch = batch?;
                    if let Some(writer) = w.lock().expect("writer lock").as_mut() {
                        writer.write(&batch)?;
                    }
                    Ok::<_, Error>(b.take())
                })
                .chain(futures::stream::once(async move {
                    if let Some(mut writer) = writer.lock().expect("writer lock").take() {
                        writer.finish()?;
                    }
                    Ok::<_, Error>(buf.take())
                }));
            Body::from_stream(futures::stream::once(async { Ok(schema_bytes) }).chain(body))
        }
        ResultFormat::Parquet => {
            let batches: Vec<RecordBatch> = batches.try_collect().await?;
            let mut writer = ArrowWriter::try_new(Vec::new(), schema, None)
                .map_err(|e| Error::Internal(format!("parquet writer: {e}")))?;
            for b in &batches {
                writer
                    .write(b)
                    .map_err(|e| Error::Internal(format!("parquet writer: {e}")))?;
            }
            let bytes = writer
                .into_inner()
                .map_err(|e| Error::Internal(format!("parquet writer: {e}")))?;
            Body::from(bytes)
        }
    })
}

fn json_array(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    Ok(writer.into_inner())
}
