//! The shuffle object layout.
//!
//! ```text
//! [slice 0: Arrow IPC stream][slice 1]...[slice n-1]
//! [end of slice 0: u64 LE]...[end of slice n-1: u64 LE][n: u32 LE][MAGIC: 8 bytes]
//! ```
//!
//! An empty slice has zero bytes (its end equals the previous end). Each non-empty slice
//! is a complete IPC stream (schema, batches, end-of-stream marker), LZ4-compressed, so
//! a reader decodes it alone from one ranged read. The footer makes the object
//! self-describing; readers normally take the ends from the completion record instead.

use std::io::{Cursor, Write};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::BatchCoalescer;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::CompressionType;
use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::{SpillFile, SpillWriter};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use crate::{Error, Result};

/// Trailer magic of a shuffle object.
pub const MAGIC: &[u8; 8] = b"LFSHUF01";

/// IPC options used for every slice.
pub fn ipc_options() -> Result<IpcWriteOptions> {
    Ok(IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?)
}

/// `batch` with its string and binary view columns compacted. A view array that was
/// filtered, joined or hash-partitioned still points into every data buffer of the batch
/// it came from, and IPC writes those buffers whole: 455 rows partitioned out of an
/// 8,192-row batch would carry all 8,192 rows' strings (TPC-H q21 wrote 1.3 GiB for
/// 190 MB of rows). Compacting copies just the strings the rows use.
pub fn compact_views(batch: &RecordBatch) -> Result<RecordBatch> {
    use datafusion::arrow::array::{Array, ArrayRef, AsArray};
    use datafusion::arrow::datatypes::DataType;
    let wasteful = |a: &ArrayRef| match a.data_type() {
        DataType::Utf8View => {
            let v = a.as_string_view();
            v.data_buffers().iter().map(|b| b.len()).sum::<usize>()
                > v.total_buffer_bytes_used() * 2
        }
        DataType::BinaryView => {
            let v = a.as_binary_view();
            v.data_buffers().iter().map(|b| b.len()).sum::<usize>()
                > v.total_buffer_bytes_used() * 2
        }
        _ => false,
    };
    if !batch.columns().iter().any(wasteful) {
        return Ok(batch.clone());
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|a| -> ArrayRef {
            match a.data_type() {
                DataType::Utf8View if wasteful(a) => std::sync::Arc::new(a.as_string_view().gc()),
                DataType::BinaryView if wasteful(a) => std::sync::Arc::new(a.as_binary_view().gc()),
                _ => a.clone(),
            }
        })
        .collect();
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// Where one slice's IPC bytes go: memory, and — once the object spills — a local file
/// that the bytes held in memory are appended to.
#[derive(Default)]
struct SliceSink {
    memory: Vec<u8>,
    spill: Option<(Arc<dyn SpillFile>, Box<dyn SpillWriter>)>,
    spilled: u64,
}

impl Write for SliceSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.memory.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Most rows the builder holds unencoded, over all its slices: a slice's rows are
/// gathered into batches of up to [`BATCH_ROWS`], fewer when the slices are many.
const PENDING_ROWS: usize = 1 << 20;

/// Rows of the batches a slice is encoded in (DataFusion's default batch size).
const BATCH_ROWS: usize = 8192;

/// Builds one shuffle object: slices are opened lazily, so a slice that never gets a row
/// costs zero bytes. Rows hash-partitioned out of a batch come a few at a time (an
/// 8,192-row batch split 64 ways gives 128-row pieces); each slice gathers them into
/// batches of up to [`BATCH_ROWS`] rows before encoding them, so its reader gets whole
/// batches and the IPC stream carries one message (and one LZ4 frame per buffer) per
/// batch, not per piece. Encoded slices stay in memory until [`ObjectBuilder::spill`]
/// moves them to local files (the writer spills when its memory pool says no), so a
/// task's output may be any size its disk holds.
pub struct ObjectBuilder {
    schema: SchemaRef,
    options: IpcWriteOptions,
    slices: Vec<Option<StreamWriter<SliceSink>>>,
    /// Each slice's rows not yet encoded, gathered into batches.
    pending: Vec<Option<BatchCoalescer>>,
    /// Rows of the batches a slice is encoded in.
    batch_rows: usize,
    rows: Vec<u64>,
}

impl ObjectBuilder {
    /// A builder for `slices` output partitions of `schema`.
    pub fn new(schema: SchemaRef, slices: usize) -> Result<Self> {
        Ok(Self {
            schema,
            options: ipc_options()?,
            slices: (0..slices).map(|_| None).collect(),
            pending: (0..slices).map(|_| None).collect(),
            batch_rows: (PENDING_ROWS / slices.max(1)).clamp(1, BATCH_ROWS),
            rows: vec![0; slices],
        })
    }

    /// Appends `batch` to slice `slice`, in order. Empty batches are skipped.
    pub fn append(&mut self, slice: usize, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.rows[slice] += batch.num_rows() as u64;
        let pending = self.pending[slice].get_or_insert_with(|| {
            // A batch already half a batch long is encoded as it is, not copied.
            BatchCoalescer::new(self.schema.clone(), self.batch_rows)
                .with_biggest_coalesce_batch_size(Some(self.batch_rows / 2))
        });
        pending.push_batch(batch.clone())?;
        self.encode_completed(slice)
    }

    /// Encodes the batches slice `slice` has completed.
    fn encode_completed(&mut self, slice: usize) -> Result<()> {
        let Some(pending) = &mut self.pending[slice] else {
            return Ok(());
        };
        while let Some(batch) = pending.next_completed_batch() {
            let writer = match &mut self.slices[slice] {
                Some(w) => w,
                empty => empty.insert(StreamWriter::try_new_with_options(
                    SliceSink::default(),
                    &self.schema,
                    self.options.clone(),
                )?),
            };
            writer.write(&compact_views(&batch)?)?;
        }
        Ok(())
    }

    /// Encodes every slice's rows gathered so far, however few, and lets go of the
    /// buffers that gathered them.
    fn encode_pending(&mut self) -> Result<()> {
        for slice in 0..self.pending.len() {
            if let Some(pending) = &mut self.pending[slice] {
                pending.finish_buffered_batch()?;
                self.encode_completed(slice)?;
                self.pending[slice] = None;
            }
        }
        Ok(())
    }

    /// Rows appended so far, per slice.
    pub fn rows(&self) -> &[u64] {
        &self.rows
    }

    /// Bytes held in memory: encoded, and rows gathered but not yet encoded.
    pub fn buffered(&self) -> usize {
        let encoded: usize = self
            .slices
            .iter()
            .flatten()
            .map(|w| w.get_ref().memory.len())
            .sum();
        encoded
            + self
                .pending
                .iter()
                .flatten()
                .map(|p| p.size())
                .sum::<usize>()
    }

    /// Encodes every slice's gathered rows and moves every slice's bytes held in memory to
    /// the end of that slice's local file (created by `disk` on first use); returns the
    /// bytes moved.
    pub fn spill(&mut self, disk: &Arc<DiskManager>) -> Result<u64> {
        self.encode_pending()?;
        let mut moved = 0u64;
        for writer in self.slices.iter_mut().flatten() {
            let sink = writer.get_mut();
            if sink.memory.is_empty() {
                continue;
            }
            let (_, file) = match &mut sink.spill {
                Some(spill) => spill,
                empty => {
                    let file = disk.create_tmp_file("shuffle writer slice")?;
                    let writer = file.open_writer()?;
                    empty.insert((file, writer))
                }
            };
            file.write_all(&sink.memory)
                .map_err(|e| Error::Internal(format!("cannot spill a shuffle slice: {e}")))?;
            moved += sink.memory.len() as u64;
            sink.spilled += sink.memory.len() as u64;
            sink.memory = Vec::new();
        }
        Ok(moved)
    }

    /// Finishes every slice: the object's pieces in order and the slice end offsets.
    pub fn finish(mut self) -> Result<FinishedObject> {
        self.encode_pending()?;
        let mut pieces = Vec::with_capacity(self.slices.len() + 1);
        let mut ends = Vec::with_capacity(self.slices.len());
        let mut offset = 0u64;
        for slice in self.slices {
            if let Some(writer) = slice {
                let mut sink = writer.into_inner()?;
                if let Some((file, mut writer)) = sink.spill.take() {
                    writer.finish()?;
                    drop(writer);
                    pieces.push(Piece::Spilled(file, sink.spilled));
                }
                offset += sink.spilled + sink.memory.len() as u64;
                if !sink.memory.is_empty() {
                    pieces.push(Piece::Memory(Bytes::from(sink.memory)));
                }
            }
            ends.push(offset);
        }
        pieces.push(Piece::Memory(Bytes::from(encode_footer(&ends))));
        Ok(FinishedObject { pieces, ends })
    }
}

/// Feeds `pieces` to `multipart` in order, waiting while parts are in flight.
async fn put_pieces(pieces: Vec<Piece>, multipart: &mut WriteMultipart) -> Result<()> {
    for piece in pieces {
        match piece {
            Piece::Memory(bytes) => {
                multipart.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                multipart.put(bytes);
            }
            Piece::Spilled(file, _) => {
                let mut chunks = file.read_stream()?;
                while let Some(chunk) = chunks.next().await {
                    multipart.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                    multipart.put(chunk?);
                }
            }
        }
    }
    Ok(())
}

/// Part size of the multipart upload of a spilled object (S3 wants at least 5 MiB).
const PART_BYTES: usize = 8 * 1024 * 1024;

/// Parts of a spilled object uploading at once.
const PARTS_IN_FLIGHT: usize = 2;

/// A part of a finished shuffle object.
enum Piece {
    /// Bytes held in memory.
    Memory(Bytes),
    /// A local file of this many bytes.
    Spilled(Arc<dyn SpillFile>, u64),
}

/// A finished shuffle object, ready to upload.
pub struct FinishedObject {
    pieces: Vec<Piece>,
    /// End offset of each slice.
    pub ends: Vec<u64>,
}

impl FinishedObject {
    /// Object size in bytes, footer included.
    pub fn bytes(&self) -> u64 {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Memory(b) => b.len() as u64,
                Piece::Spilled(_, n) => *n,
            })
            .sum()
    }

    /// Whether part of it lives in local files.
    pub fn spilled(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Spilled(..)))
    }

    /// Uploads the object to `path`: one PUT when it is all in memory; otherwise a
    /// multipart upload streamed from its files, holding a few parts in memory at a time
    /// (aborted if any part fails).
    pub async fn upload(self, store: &Arc<dyn ObjectStore>, path: &Path) -> Result<()> {
        if !self.spilled() {
            let chunks = self.pieces.into_iter().filter_map(|p| match p {
                Piece::Memory(b) => Some(b),
                Piece::Spilled(..) => None,
            });
            store.put(path, PutPayload::from_iter(chunks)).await?;
            return Ok(());
        }
        let upload = store.put_multipart(path).await?;
        let mut multipart = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        match put_pieces(self.pieces, &mut multipart).await {
            Ok(()) => {
                multipart.finish().await?;
                Ok(())
            }
            Err(e) => {
                let _ = multipart.abort().await;
                Err(e)
            }
        }
    }
}

/// The index footer for `ends`.
pub fn encode_footer(ends: &[u64]) -> Vec<u8> {
    let mut footer = Vec::with_capacity(ends.len() * 8 + 12);
    for end in ends {
        footer.extend_from_slice(&end.to_le_bytes());
    }
    footer.extend_from_slice(&(ends.len() as u32).to_le_bytes());
    footer.extend_from_slice(MAGIC);
    footer
}

/// Reads the index of a shuffle object from its footer (two ranged reads). A damaged
/// object (its footer listing more slices than it holds, or ends out of order or past
/// its data) is an error naming it.
pub async fn read_index(store: &dyn ObjectStore, path: &Path) -> Result<Vec<u64>> {
    let (tail, _) = get_suffix(store, path, 12).await?;
    if tail.len() < 12 || &tail[4..] != MAGIC {
        return Err(Error::Internal(format!(
            "{path} is not a shuffle object (bad magic)"
        )));
    }
    let count = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) as usize;
    let footer_len = 12 + count as u64 * 8;
    let (footer, size) = get_suffix(store, path, footer_len).await?;
    // A suffix longer than the object is the whole object: a footer claiming more
    // slices than the object can hold is a damaged object.
    if (footer.len() as u64) < footer_len || size < footer_len {
        return Err(Error::Internal(format!(
            "{path} is damaged: its footer lists {count} slices, more than its {size} bytes hold"
        )));
    }
    let ends: Vec<u64> = footer[..count * 8]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let data = size - footer_len;
    if !ends.windows(2).all(|w| w[0] <= w[1]) || ends.last().is_some_and(|&end| end > data) {
        return Err(Error::Internal(format!(
            "{path} is damaged: its slice ends are out of order or past its {data} bytes of data"
        )));
    }
    Ok(ends)
}

/// The last `n` bytes of an object (all of it if shorter), and its size.
async fn get_suffix(store: &dyn ObjectStore, path: &Path, n: u64) -> Result<(Bytes, u64)> {
    let options = GetOptions {
        range: Some(GetRange::Suffix(n)),
        ..Default::default()
    };
    let result = store.get_opts(path, options).await?;
    let size = result.meta.size;
    Ok((result.bytes().await?, size))
}

/// Decodes one slice into batches: a complete IPC stream, or several back to back (a
/// combined slice holds each producer's stream in turn).
pub fn decode_slice(bytes: Bytes) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let mut reader = StreamReader::try_new(Cursor::new(bytes.slice(at..)), None)?;
        for batch in reader.by_ref() {
            batches.push(batch?);
        }
        let used = reader.get_ref().position() as usize;
        if used == 0 {
            return Err(Error::Internal(
                "a shuffle slice holds an empty IPC stream".into(),
            ));
        }
        at += used;
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use object_store::memory::InMemory;

    use super::*;

    /// The `id` column of `batches`, in order.
    fn ids(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.values().to_vec()
            })
            .collect()
    }

    /// The bytes of an object built in memory.
    fn in_memory(object: FinishedObject) -> Vec<u8> {
        let mut bytes = Vec::new();
        for p in object.pieces {
            if let Piece::Memory(b) = p {
                bytes.extend_from_slice(&b);
            }
        }
        bytes
    }

    fn batch(schema: &SchemaRef, from: i64, n: usize) -> RecordBatch {
        let ids: Int64Array = (from..from + n as i64).collect();
        let names: StringArray = (0..n)
            .map(|i| Some(format!("row-{}", from + i as i64)))
            .collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).unwrap()
    }

    /// A few rows taken out of a large string-view batch are written with their own
    /// strings only, not with every buffer of the batch they came from.
    #[test]
    fn view_columns_are_compacted_before_writing() {
        use datafusion::arrow::array::{Array, StringViewArray, UInt32Array};
        use datafusion::arrow::compute::take;
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let strings: StringViewArray = (0..8192)
            .map(|i| Some(format!("a string long enough to leave the view {i:06}")))
            .collect();
        let picked = take(&strings, &UInt32Array::from(vec![1, 500, 4000]), None).unwrap();
        let small = RecordBatch::try_new(schema.clone(), vec![picked]).unwrap();
        let encoded = |b: &RecordBatch| {
            let mut builder = ObjectBuilder::new(schema.clone(), 1).unwrap();
            builder.append(0, b).unwrap();
            builder.finish().unwrap().ends[0]
        };
        let compacted = compact_views(&small).unwrap();
        assert_eq!(
            compacted.column(0).as_ref(),
            small.column(0).as_ref(),
            "same values"
        );
        assert!(
            encoded(&small) < 2_000,
            "{} bytes for 3 rows",
            encoded(&small)
        );
        let whole = RecordBatch::try_new(schema.clone(), vec![Arc::new(strings)]).unwrap();
        assert!(encoded(&whole) > 20_000, "the full batch keeps its strings");
        let _ = small.column(0).len();
    }

    #[tokio::test]
    async fn slices_round_trip_and_empty_slices_take_no_bytes() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let mut builder = ObjectBuilder::new(schema.clone(), 4).unwrap();
        builder.append(0, &batch(&schema, 0, 10)).unwrap();
        builder.append(2, &batch(&schema, 100, 5)).unwrap();
        builder.append(2, &batch(&schema, 200, 0)).unwrap();
        builder.append(2, &batch(&schema, 300, 7)).unwrap();
        assert_eq!(builder.rows(), &[10, 0, 12, 0]);
        let object = builder.finish().unwrap();
        let ends = object.ends.clone();
        assert_eq!(ends.len(), 4);
        assert_eq!(ends[0], ends[1], "slice 1 is empty");
        assert_eq!(ends[2], ends[3], "slice 3 is empty");

        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("t/obj");
        object.upload(&store, &path).await.unwrap();
        assert_eq!(read_index(store.as_ref(), &path).await.unwrap(), ends);

        let slice2 = store.get_range(&path, ends[1]..ends[2]).await.unwrap();
        let batches = decode_slice(slice2).unwrap();
        let ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(ids, (100..105).chain(300..307).collect::<Vec<_>>());
    }

    /// A slice made of several IPC streams back to back (what a combining task writes)
    /// decodes to every stream's batches in order.
    #[test]
    fn streams_back_to_back_decode_as_one_slice() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let encode = |from: i64, n: usize| {
            let mut builder = ObjectBuilder::new(schema.clone(), 1).unwrap();
            builder.append(0, &batch(&schema, from, n)).unwrap();
            builder.append(0, &batch(&schema, from + 1000, 2)).unwrap();
            let object = builder.finish().unwrap();
            let end = object.ends[0] as usize;
            let mut bytes = in_memory(object);
            bytes.truncate(end);
            bytes
        };
        let mut joined = encode(0, 3);
        joined.extend(encode(50, 4));
        let batches = decode_slice(Bytes::from(joined)).unwrap();
        // Each stream's two appends were gathered into one batch.
        let rows: Vec<usize> = batches.iter().map(|b| b.num_rows()).collect();
        assert_eq!(rows, vec![5, 6]);
        assert_eq!(
            ids(&batches),
            vec![0, 1, 2, 1000, 1001, 50, 51, 52, 53, 1050, 1051]
        );
        assert!(decode_slice(Bytes::new()).unwrap().is_empty());
        assert!(decode_slice(Bytes::from_static(b"not ipc")).is_err());
    }

    /// Pieces of hash-partitioned batches are gathered into whole batches per slice, in
    /// order: 8,192 rows with a few slices, fewer with very many (at most about a
    /// million rows held unencoded over all slices).
    #[test]
    fn a_slice_gathers_its_pieces_into_whole_batches() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        for (slices, expected) in [(4, vec![4000]), (1000, vec![1048, 1048, 1048, 856])] {
            let mut builder = ObjectBuilder::new(schema.clone(), slices).unwrap();
            for i in 0..40 {
                builder
                    .append(slices - 1, &batch(&schema, i * 100, 100))
                    .unwrap();
                builder.append(0, &batch(&schema, 0, 1)).unwrap();
            }
            assert!(builder.buffered() > 0);
            let object = builder.finish().unwrap();
            let at = object.ends[slices - 2] as usize..object.ends[slices - 1] as usize;
            let bytes = in_memory(object);
            let batches = decode_slice(Bytes::from(bytes).slice(at)).unwrap();
            let rows: Vec<usize> = batches.iter().map(|b| b.num_rows()).collect();
            assert_eq!(rows, expected, "{slices} slices");
            assert_eq!(ids(&batches), (0..4000).collect::<Vec<i64>>());
        }
    }

    /// A truncated or damaged object is an error that names it (a footer listing more
    /// slices than the object holds used to panic the task).
    #[tokio::test]
    async fn a_damaged_object_is_an_error_naming_it() {
        use object_store::ObjectStoreExt;
        let store = object_store::memory::InMemory::new();
        let path = Path::from("jobs/x/damaged");
        let mut footer = encode_footer(&[10, 20]);
        // Claims a million slices.
        let at = footer.len() - 12;
        footer[at..at + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        store.put(&path, footer.clone().into()).await.unwrap();
        let e = read_index(&store, &path).await.unwrap_err().to_string();
        assert!(e.contains("jobs/x/damaged") && e.contains("damaged"), "{e}");
        // Ends past the data it holds.
        store
            .put(&path, encode_footer(&[10, 20]).into())
            .await
            .unwrap();
        let e = read_index(&store, &path).await.unwrap_err().to_string();
        assert!(e.contains("past"), "{e}");
        // Ends out of order.
        let mut object = vec![0u8; 30];
        object.extend(encode_footer(&[20, 10]));
        store.put(&path, object.into()).await.unwrap();
        let e = read_index(&store, &path).await.unwrap_err().to_string();
        assert!(e.contains("out of order"), "{e}");
        // A sound one reads back.
        let mut object = vec![0u8; 30];
        object.extend(encode_footer(&[10, 30]));
        store.put(&path, object.into()).await.unwrap();
        assert_eq!(read_index(&store, &path).await.unwrap(), vec![10, 30]);
    }

    /// Spilling moves the slices to local files without changing a row of the object:
    /// the spilled object, uploaded in parts from its files, holds the rows of the one
    /// built in memory in the same order (in batches cut where it spilled), and nothing
    /// is held in memory after a spill.
    #[tokio::test]
    async fn a_spilled_object_uploads_in_parts_and_equals_the_one_in_memory() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let disk = Arc::new(DiskManager::builder().build().unwrap());
        let build = |spill: bool| {
            let mut builder = ObjectBuilder::new(schema.clone(), 3).unwrap();
            let mut moved = 0;
            for i in 0..120 {
                builder
                    .append(i % 3, &batch(&schema, i as i64 * 10_000, 10_000))
                    .unwrap();
                if spill && i % 7 == 0 {
                    moved += builder.spill(&disk).unwrap();
                    assert_eq!(builder.buffered(), 0);
                }
            }
            (builder, moved)
        };
        let (memory, _) = build(false);
        let (spilled, moved) = build(true);
        assert!(moved > 0);
        let (memory, spilled) = (memory.finish().unwrap(), spilled.finish().unwrap());
        assert!(spilled.spilled() && !memory.spilled());
        assert!(
            spilled.bytes() > PART_BYTES as u64,
            "several parts: {} bytes",
            spilled.bytes()
        );
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (a, b) = (Path::from("t/memory"), Path::from("t/spilled"));
        memory.upload(&store, &a).await.unwrap();
        spilled.upload(&store, &b).await.unwrap();
        let get = |p: Path| {
            let store = store.clone();
            async move { store.get(&p).await.unwrap().bytes().await.unwrap() }
        };
        let (a_bytes, b_bytes) = (get(a.clone()).await, get(b.clone()).await);
        let (a_ends, b_ends) = (
            read_index(store.as_ref(), &a).await.unwrap(),
            read_index(store.as_ref(), &b).await.unwrap(),
        );
        assert_eq!(b_ends.len(), 3);
        let rows = |bytes: &Bytes, ends: &[u64], slice: usize| {
            let start = if slice == 0 {
                0
            } else {
                ends[slice - 1] as usize
            };
            let batches = decode_slice(bytes.slice(start..ends[slice] as usize)).unwrap();
            datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap()
        };
        for slice in 0..3 {
            let (m, s) = (
                rows(&a_bytes, &a_ends, slice),
                rows(&b_bytes, &b_ends, slice),
            );
            assert_eq!(m.num_rows(), 40 * 10_000);
            assert_eq!(m, s, "slice {slice}: the same rows in the same order");
        }
    }
}
